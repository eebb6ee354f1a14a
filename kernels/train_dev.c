/* Device dispatch and data parallelism for spotlab-train (see train_dev.h).
 *
 * Invariant: every rank makes the same sequence of collective calls. The
 * loop guarantees it by running the same steps on every rank and deciding to
 * stop or checkpoint only through tc_dev_agree. With one process and one
 * slice, nothing here changes a number: the CPU path is called exactly as
 * before and the CUDA path sees global batch == local batch. */
#include "train_dev.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sl_err.h"
#include "tc_ops.h"
#include "tc_rdv.h"
#if TC_HAVE_GLOO
#include "tc_group.h"
#endif
#include "tc_cuda_api.h"

struct tc_dev {
  struct tc_model *host;
  struct tc_row_shape shape; /* of the host model's rows */
  int rank, world, batch, local_batch, cuda_device, bf16;
  int slices;     /* of the global batch, slices / world of them on this rank */
  float *acc;     /* CPU, several slices per rank: the sum of their gradients */
  char err[1024]; /* why the last collective failed */
#if TC_HAVE_GLOO
  struct tc_group *grp; /* CPU, world > 1 */
#endif
  const struct tc_cuda_api *cu; /* --device cuda: the backend */
  struct tc_cuda_model *cm;
  struct tc_nccl *nc;
  float *logits; /* host copy for sampling */
  size_t logits_rows;
};

int tc_launch_start(const struct tc_dev_opts *o, struct tc_launch *l, char *err, size_t es) {
  memset(l, 0, sizeof *l);
  l->world = 1;
  if (o->gpus > 1) {
    if (o->world > 1 || o->rendezvous || o->nccl_id) {
      snprintf(err, es, "--gpus forks its own ranks; use --rank/--world-size without it");
      return -EINVAL;
    }
    if (o->gpus > TC_MAX_LOCAL_GPUS) {
      snprintf(err, es, "--gpus: at most %d on one machine", TC_MAX_LOCAL_GPUS);
      return -EINVAL;
    }
    fflush(NULL); /* nothing buffered is written twice */
    int r = tc_rdv_fork((int)o->gpus, &l->rank, l->fds, l->pids);
    if (r < 0) {
      snprintf(err, es, "--gpus %ld: cannot start the ranks: %s", o->gpus, strerror(-r));
      return r;
    }
    l->world = (int)o->gpus;
    l->forked = 1;
    return 0;
  }
  if (o->world > 1) {
    if (o->rank < 0 || o->rank >= o->world) {
      snprintf(err, es, "--rank must be in [0, --world-size)");
      return -EINVAL;
    }
    if (!o->rendezvous && !o->nccl_id) {
      snprintf(err, es, "--world-size %ld needs --rendezvous tcp://HOST:PORT or --nccl-id HEX",
               o->world);
      return -EINVAL;
    }
    l->rank = (int)o->rank;
    l->world = (int)o->world;
  }
  return 0;
}

int tc_launch_finish(struct tc_launch *l, int ok) {
  if (!l->forked || l->rank != 0) return 0;
  int all_ok = 1;
  for (int r = 1; r < l->world; r++) {
    if (l->fds[r] > 0) close(l->fds[r]), l->fds[r] = -1;
    if (!ok) kill(l->pids[r], SIGKILL);
  }
  for (int r = 1; r < l->world; r++) {
    int st;
    while (waitpid(l->pids[r], &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (ok) fprintf(stderr, "spotlab-train: rank %d failed\n", r);
      all_ok = 0;
    }
  }
  return all_ok ? 0 : -ECHILD;
}

int tc_dev_rank(const struct tc_dev *d) { return d->rank; }
int tc_dev_world(const struct tc_dev *d) { return d->world; }
const char *tc_dev_error(const struct tc_dev *d) { return d->err; }

int tc_dev_distributed(const struct tc_dev *d) {
#if TC_HAVE_GLOO
  if (d->grp) return 1;
#endif
  return d->nc != NULL;
}

int tc_dev_slices(const struct tc_dev_opts *o, const struct tc_launch *l) {
  return o->grad_slices > 0 ? (int)o->grad_slices : l->world;
}

/* Gets rank 0's NCCL id to this rank by the route the options chose. */
static int exchange_id(const struct tc_cuda_api *cu, const struct tc_dev_opts *o,
                       struct tc_launch *l, uint8_t *id, char *err, size_t es) {
  int r;
  if (o->nccl_id) {
    if (tc_rdv_unhex(o->nccl_id, id) < 0) {
      snprintf(err, es, "--nccl-id: expected %d hex digits", TC_RDV_HEX_CHARS);
      return -EINVAL;
    }
    return 0;
  }
  if (l->forked) {
    if (l->rank > 0) {
      r = tc_rdv_pipe_recv(l->fds[0], id, o->timeout_ms);
      close(l->fds[0]);
      if (r < 0) snprintf(err, es, "rank %d: no NCCL id from rank 0: %s", l->rank, strerror(-r));
      return r;
    }
    if ((r = cu->nccl_unique_id(id)) < 0) return snprintf(err, es, "ncclGetUniqueId failed"), r;
    for (int k = 1; k < l->world && r == 0; k++) {
      r = tc_rdv_pipe_send(l->fds[k], id);
      close(l->fds[k]);
      l->fds[k] = -1;
    }
    if (r < 0) snprintf(err, es, "cannot pass the NCCL id to the ranks: %s", strerror(-r));
    return r;
  }
  if (l->world > 1) { /* --rendezvous */
    if (l->rank > 0)
      return tc_rdv_fetch(o->rendezvous, l->rank, l->world, id, o->timeout_ms, err, es);
    int fd = -1;
    if ((r = tc_rdv_listen(o->rendezvous, &fd, err, es)) < 0) return r;
    if ((r = cu->nccl_unique_id(id)) == 0)
      r = tc_rdv_serve(fd, l->world, id, o->timeout_ms, err, es);
    else
      snprintf(err, es, "ncclGetUniqueId failed");
    close(fd);
    return r;
  }
  r = cu->nccl_unique_id(id); /* --nccl with one rank */
  if (r < 0) snprintf(err, es, "ncclGetUniqueId failed");
  return r;
}

/* The CPU path's ranks: a gloo group when there is more than one. */
static int cpu_join(struct tc_dev *d, const struct tc_dev_opts *o, const struct tc_launch *l,
                    char *err, size_t es) {
  if (o->nccl || o->nccl_id || o->bf16) {
    snprintf(err, es, "--nccl, --nccl-id and --bf16 need --device cuda (the CPU path uses gloo)");
    return -EINVAL;
  }
  if (l->forked) {
    snprintf(err, es, "--gpus forks one rank per GPU; on the CPU start one process per rank "
                      "with --rank, --world-size and --rendezvous");
    return -EINVAL;
  }
  if (d->slices / d->world > 1 &&
      !(d->acc = malloc(sizeof(float) * d->host->n_params)))
    return -ENOMEM;
  if (l->world == 1) return 0;
#if TC_HAVE_GLOO
  if (!o->rendezvous) {
    snprintf(err, es, "--world-size %d on the CPU needs --rendezvous tcp://HOST:PORT", l->world);
    return -EINVAL;
  }
  return tc_group_new(o->rendezvous, l->rank, l->world, o->timeout_ms, &d->grp, err, es);
#else
  snprintf(err, es, "--world-size %d with --device cpu needs gloo, and this spotlab-train was "
           "built without it (install libgloo-dev and reconfigure the build)", l->world);
  return SL_ENOTSUP;
#endif
}

int tc_dev_new(const struct tc_dev_opts *o, struct tc_launch *l, struct tc_model *host,
               int batch, struct tc_dev **ret, char *err, size_t es) {
  int r, cuda = !strcmp(o->device, "cuda"), slices = tc_dev_slices(o, l);
  if (batch % l->world) {
    snprintf(err, es, "--batch %d must be a multiple of the world size %d", batch, l->world);
    return -EINVAL;
  }
  if (slices % l->world || batch % slices) {
    snprintf(err, es, "--grad-slices %d must be a multiple of the world size %d and divide "
             "--batch %d", slices, l->world, batch);
    return -EINVAL;
  }
  if (cuda && slices != l->world) {
    snprintf(err, es, "--grad-slices: the CUDA path computes one slice per rank");
    return -EINVAL;
  }
  struct tc_dev *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  d->host = host;
  tc_config_shape(&host->cfg, &d->shape);
  d->rank = l->rank;
  d->world = l->world;
  d->batch = batch;
  d->local_batch = batch / l->world;
  d->slices = slices;
  d->bf16 = o->bf16;
  d->cuda_device = o->cuda_device >= 0 ? (int)o->cuda_device : l->forked ? l->rank : 0;
  if (!cuda) {
    if ((r = cpu_join(d, o, l, err, es)) < 0) goto fail;
    *ret = d;
    return 0;
  }
  char why[900];
  if (!(d->cu = tc_cuda_load(why, sizeof why))) {
    snprintf(err, es, "--device cuda: %s", why);
    r = SL_ECUDA;
    goto fail;
  }
  int n = d->cu->device_count();
  if (n <= 0) {
    snprintf(err, es, "--device cuda: %s", n < 0 ? "the CUDA driver is not usable here"
                                                 : "no GPU found (CUDA sees no NVIDIA GPU or driver)");
    r = n < 0 ? n : SL_ECUDA;
    goto fail;
  }
  if (d->cuda_device >= n) {
    snprintf(err, es, "rank %d: GPU %d asked for, %d present", d->rank, d->cuda_device, n);
    r = -EINVAL;
    goto fail;
  }
  r = d->cu->model_new(&host->cfg, d->local_batch, d->cuda_device, o->bf16, &d->cm);
  if (r < 0) {
    snprintf(err, es, "cannot set up the model on GPU %d (%s)", d->cuda_device, sl_strerror(r));
    goto fail;
  }
  if (l->world > 1 || o->nccl) {
    uint8_t id[TC_RDV_ID_BYTES];
    if ((r = exchange_id(d->cu, o, l, id, err, es)) < 0) goto fail;
    r = d->cu->nccl_new(id, l->rank, l->world, d->cuda_device,
                        d->cu->ctx_stream(d->cu->model_ctx(d->cm)), &d->nc);
    if (r < 0) {
      snprintf(err, es, "rank %d of %d: cannot join the NCCL communicator", l->rank, l->world);
      goto fail;
    }
  }
  *ret = d;
  return 0;
fail:
  tc_dev_free(d);
  return r;
}

struct tc_dev *tc_dev_free(struct tc_dev *d) {
  if (!d) return NULL;
#if TC_HAVE_GLOO
  tc_group_free(d->grp);
#endif
  if (d->cu) {
    d->cu->nccl_free(d->nc);
    d->cu->model_free(d->cm);
  }
  free(d->logits);
  free(d->acc);
  free(d);
  return NULL;
}

const char *tc_dev_describe(const struct tc_dev *d, char *buf, size_t size) {
  if (d->cm) {
    char name[256];
    snprintf(buf, size, "cuda:%d (%s)%s, rank %d of %d%s", d->cuda_device,
             d->cu->device_name(name, sizeof name), d->bf16 ? " bf16" : " fp32", d->rank,
             d->world, d->nc ? " nccl" : "");
    return buf;
  }
  size_t off = (size_t)snprintf(buf, size, "cpu");
  if (d->world > 1 && off < size)
    off += (size_t)snprintf(buf + off, size - off, ", rank %d of %d gloo", d->rank, d->world);
  if (d->slices > 1 && off < size)
    snprintf(buf + off, size - off, ", %d gradient slices", d->slices);
  return buf;
}

size_t tc_dev_mem_bytes(const struct tc_dev *d) {
  if (d->cm) return d->cu->model_mem_bytes(d->cm);
  return tc_model_mem_bytes(d->host) + (d->acc ? sizeof(float) * d->host->n_params : 0);
}

#if TC_HAVE_GLOO
/* Keeps a failed collective's reason for tc_dev_error. */
static int coll_failed(struct tc_dev *d, int r) {
  const char *why = tc_group_error(d->grp);
  snprintf(d->err, sizeof d->err, "%s", why[0] ? why : sl_strerror(r));
  return r;
}
#endif

int tc_dev_start(struct tc_dev *d, void *shared, size_t shared_bytes) {
#if TC_HAVE_GLOO
  if (d->grp) { /* rank 0's state (fresh or resumed) to every rank */
    struct tc_model *m = d->host;
    size_t bytes = m->n_params * sizeof(float);
    int r = tc_group_broadcast(d->grp, m->params, bytes);
    if (r == 0) r = tc_group_broadcast(d->grp, m->m, bytes);
    if (r == 0) r = tc_group_broadcast(d->grp, m->v, bytes);
    if (r == 0) r = tc_group_broadcast(d->grp, &m->adam_t, sizeof m->adam_t);
    if (r == 0 && shared) r = tc_group_broadcast(d->grp, shared, shared_bytes);
    return r < 0 ? coll_failed(d, r) : 0;
  }
#endif
  if (d->cm) {
    int r = d->cu->model_put(d->cm, d->host);
    if (r < 0 || !d->nc) return r;
    size_t bytes = d->cu->model_n_params(d->cm) * sizeof(float);
    r = d->cu->nccl_broadcast(d->nc, d->cu->model_params(d->cm), bytes, 0);
    if (r == 0) r = d->cu->nccl_broadcast(d->nc, d->cu->model_m(d->cm), bytes, 0);
    if (r == 0) r = d->cu->nccl_broadcast(d->nc, d->cu->model_v(d->cm), bytes, 0);
    if (r == 0) r = d->cu->model_params_written(d->cm);
    uint64_t t = d->cu->model_adam_t(d->cm);
    if (r == 0) r = d->cu->nccl_broadcast_host(d->nc, &t, sizeof t, 0);
    if (r == 0 && shared) r = d->cu->nccl_broadcast_host(d->nc, shared, shared_bytes, 0);
    if (r == 0) d->cu->model_set_adam_t(d->cm, t);
    return r;
  }
  (void)d, (void)shared, (void)shared_bytes;
  return 0;
}

/* Slice s of S of b: rows [B s/S, B (s+1)/S), equal when S divides B (every
 * training batch), possibly empty for a short last evaluation batch. Its
 * loss and gradient are divided by the whole batch's rows. */
static struct tc_batch slice(const struct tc_dev *d, const struct tc_batch *b, int s, int S) {
  struct tc_batch p = *b;
  p.global_B = b->B;
  if (S == 1) return p;
  int lo = (int)((int64_t)b->B * s / S), hi = (int)((int64_t)b->B * (s + 1) / S);
  p.B = hi - lo;
  if (p.tokens) p.tokens += (size_t)lo * d->shape.tokens;
  if (p.targets) p.targets += (size_t)lo * d->shape.targets;
  if (p.inputs) p.inputs += (size_t)lo * d->shape.inputs;
  return p;
}

/* Sums the loss and the correct count over ranks (no-op for one process). */
static int sum_step_values(struct tc_dev *d, double *loss, int64_t *correct) {
  double v[2] = {*loss, (double)*correct};
  int r = 0;
#if TC_HAVE_GLOO
  if (d->grp && (r = tc_group_sum_f64(d->grp, v, 2)) < 0)
    return coll_failed(d, r);
#endif
  if (d->nc && (r = d->cu->nccl_allreduce_host_f64(d->nc, v, 2)) < 0) return r;
  *loss = v[0];
  *correct = (int64_t)v[1];
  return r;
}

/* The CPU path over this rank's slices of b, in slice order; with `train`
 * each slice's backward too, its gradients added to the previous slices'. */
static int cpu_slices(struct tc_dev *d, const struct tc_batch *b, int train, double *ret_loss,
                      int64_t *ret_correct) {
  struct tc_model *m = d->host;
  int per_rank = d->slices / d->world, first = d->rank * per_rank;
  double loss = 0.0;
  int64_t correct = 0;
  for (int s = first; s < first + per_rank; s++) {
    struct tc_batch p = slice(d, b, s, d->slices);
    if (p.B == 0) continue;
    int r = tc_model_forward(m, &p, NULL);
    if (r < 0) return r;
    loss = s == first ? m->last_loss : loss + m->last_loss;
    correct += m->last_correct;
    if (!train) continue;
    if ((r = tc_model_backward(m)) < 0) return r;
    if (per_rank == 1) continue;
    if (s == first) { /* the running sum keeps this slice's buffer; backward gets a fresh one */
      float *g = d->acc;
      d->acc = m->grads;
      m->grads = g;
    } else {
      tc_add(d->acc, d->acc, m->grads, m->n_params);
    }
  }
  if (train && per_rank > 1) { /* the sum back where clipping and AdamW read it */
    float *g = d->acc;
    d->acc = m->grads;
    m->grads = g;
  }
  *ret_loss = loss;
  *ret_correct = correct;
  return 0;
}

int tc_dev_forward(struct tc_dev *d, const struct tc_batch *b, double *ret_loss,
                   int64_t *ret_correct) {
  double loss = 0.0;
  int64_t correct = 0;
  int r;
  if (d->cm) {
    struct tc_batch s = slice(d, b, d->rank, d->world);
    r = s.B > 0 ? d->cu->forward(d->cm, &s, b->B, &loss, &correct) : 0;
    if (r == 0 && b->targets) r = sum_step_values(d, &loss, &correct);
    if (r == 0 && ret_loss) *ret_loss = loss;
    if (r == 0 && ret_correct) *ret_correct = correct;
    return r;
  }
  if (!b->targets) /* inference: one process, the whole batch */
    return tc_model_forward(d->host, b, NULL);
  if ((r = cpu_slices(d, b, 0, &loss, &correct)) < 0 || (r = sum_step_values(d, &loss, &correct)) < 0)
    return r;
  if (ret_loss) *ret_loss = loss;
  if (ret_correct) *ret_correct = correct;
  return 0;
}

int tc_dev_grads(struct tc_dev *d, const struct tc_batch *b, double *ret_loss) {
  double loss = 0.0;
  int64_t correct = 0;
  int r;
  if (d->cm) {
    if ((r = tc_dev_forward(d, b, &loss, NULL)) < 0 || (r = d->cu->backward(d->cm)) < 0)
      return r;
    if (d->nc && (r = d->cu->nccl_allreduce_f32(d->nc, d->cu->model_grads(d->cm),
                                                d->cu->model_n_params(d->cm))) < 0)
      return r;
    *ret_loss = loss;
    return 0;
  }
  if ((r = cpu_slices(d, b, 1, &loss, &correct)) < 0) return r;
#if TC_HAVE_GLOO
  if (d->grp && (r = tc_group_sum_f32(d->grp, d->host->grads, d->host->n_params)) < 0)
    return coll_failed(d, r);
#endif
  if ((r = sum_step_values(d, &loss, &correct)) < 0) return r;
  *ret_loss = loss;
  return 0;
}

int tc_dev_clip(struct tc_dev *d, float max_norm, double *ret_norm) {
  if (d->cm) return d->cu->clip_grads(d->cm, max_norm, ret_norm);
  *ret_norm = tc_model_clip_grads(d->host, max_norm);
  return 0;
}

int tc_dev_adamw(struct tc_dev *d, const struct tc_adamw *hp, float lr) {
  if (d->cm) return d->cu->adamw(d->cm, hp, lr);
  tc_model_adamw(d->host, hp, lr);
  return 0;
}

int tc_dev_to_host(struct tc_dev *d) {
  if (d->cm) return d->cu->model_get(d->cm, d->host);
  return 0;
}

int tc_dev_agree(struct tc_dev *d, int *flags, int n) {
  double v[16];
  int r = 0;
  if (n > 16) return -EINVAL;
  for (int i = 0; i < n; i++) v[i] = flags[i];
#if TC_HAVE_GLOO
  if (d->grp && (r = tc_group_sum_f64(d->grp, v, n)) < 0)
    return coll_failed(d, r);
#endif
  if (d->nc && d->world > 1 && (r = d->cu->nccl_allreduce_host_f64(d->nc, v, n)) < 0) return r;
  for (int i = 0; i < n; i++) flags[i] = v[i] > 0.0;
  return r;
}

const float *tc_dev_logits(struct tc_dev *d, size_t rows) {
  if (d->cm) {
    if (rows > d->logits_rows) {
      free(d->logits);
      d->logits = malloc(sizeof(float) * rows * d->shape.classes);
      d->logits_rows = d->logits ? rows : 0;
      if (!d->logits) return NULL;
    }
    return d->cu->logits(d->cm, d->logits, rows) == 0 ? d->logits : NULL;
  }
  return tc_model_logits(d->host);
}
