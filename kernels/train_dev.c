/* Device dispatch and data parallelism for spotlab-train (see train_dev.h).
 *
 * Invariant: every rank makes the same sequence of collective calls. The
 * loop guarantees it by running the same steps on every rank and deciding to
 * stop or checkpoint only through tc_dev_agree. With one process and no
 * --nccl, nothing here changes a number: the CPU path is called exactly as
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
#include "tc_rdv.h"
#if TC_HAVE_CUDA
#include "tc_cuda.h"
#include "tc_nccl.h"
#endif

struct tc_dev {
  struct tc_model *host;
  int rank, world, batch, local_batch, cuda_device, bf16;
#if TC_HAVE_CUDA
  struct tc_cuda_model *cm;
  struct tc_nccl *nc;
  float *logits; /* host copy for sampling */
  size_t logits_rows;
#endif
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

int tc_dev_distributed(const struct tc_dev *d) {
#if TC_HAVE_CUDA
  return d->nc != NULL;
#else
  (void)d;
  return 0;
#endif
}

#if TC_HAVE_CUDA
/* Gets rank 0's NCCL id to this rank by the route the options chose. */
static int exchange_id(const struct tc_dev_opts *o, struct tc_launch *l, uint8_t *id, char *err,
                       size_t es) {
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
      r = tc_rdv_pipe_recv(l->fds[0], id, o->rdv_timeout_ms);
      close(l->fds[0]);
      if (r < 0) snprintf(err, es, "rank %d: no NCCL id from rank 0: %s", l->rank, strerror(-r));
      return r;
    }
    if ((r = tc_nccl_unique_id(id)) < 0) return snprintf(err, es, "ncclGetUniqueId failed"), r;
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
      return tc_rdv_fetch(o->rendezvous, l->rank, l->world, id, o->rdv_timeout_ms, err, es);
    int fd = -1;
    if ((r = tc_rdv_listen(o->rendezvous, &fd, err, es)) < 0) return r;
    if ((r = tc_nccl_unique_id(id)) == 0)
      r = tc_rdv_serve(fd, l->world, id, o->rdv_timeout_ms, err, es);
    else
      snprintf(err, es, "ncclGetUniqueId failed");
    close(fd);
    return r;
  }
  r = tc_nccl_unique_id(id); /* --nccl with one rank */
  if (r < 0) snprintf(err, es, "ncclGetUniqueId failed");
  return r;
}
#endif

int tc_dev_new(const struct tc_dev_opts *o, struct tc_launch *l, struct tc_model *host,
               int batch, struct tc_dev **ret, char *err, size_t es) {
  int cuda = !strcmp(o->device, "cuda");
  if (!cuda && (l->world > 1 || o->nccl)) {
    snprintf(err, es, "data parallelism (--gpus, --world-size, --nccl) needs --device cuda");
    return -EINVAL;
  }
  if (!cuda && o->bf16) {
    snprintf(err, es, "--bf16 needs --device cuda");
    return -EINVAL;
  }
  if (batch % l->world) {
    snprintf(err, es, "--batch %d must be a multiple of the world size %d", batch, l->world);
    return -EINVAL;
  }
  struct tc_dev *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  d->host = host;
  d->rank = l->rank;
  d->world = l->world;
  d->batch = batch;
  d->local_batch = batch / l->world;
  d->bf16 = o->bf16;
  d->cuda_device = o->cuda_device >= 0 ? (int)o->cuda_device : l->forked ? l->rank : 0;
  if (!cuda) {
    *ret = d;
    return 0;
  }
#if TC_HAVE_CUDA
  int r, n = tc_cuda_device_count();
  if (n <= 0) {
    snprintf(err, es, "--device cuda: %s", n < 0 ? "the CUDA driver is not usable here"
                                                 : "no GPU found (no NVIDIA GPU or driver)");
    r = n < 0 ? n : SL_ECUDA;
    goto fail;
  }
  if (d->cuda_device >= n) {
    snprintf(err, es, "rank %d: GPU %d asked for, %d present", d->rank, d->cuda_device, n);
    r = -EINVAL;
    goto fail;
  }
  r = tc_cuda_model_new(&host->cfg, d->local_batch, d->cuda_device, o->bf16, &d->cm);
  if (r < 0) {
    snprintf(err, es, "cannot set up the model on GPU %d (%s)", d->cuda_device, sl_strerror(r));
    goto fail;
  }
  if (l->world > 1 || o->nccl) {
    uint8_t id[TC_RDV_ID_BYTES];
    if ((r = exchange_id(o, l, id, err, es)) < 0) goto fail;
    r = tc_nccl_new(id, l->rank, l->world, d->cuda_device,
                    tc_cuda_ctx_stream(tc_cuda_model_ctx(d->cm)), &d->nc);
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
#else
  free(d);
  snprintf(err, es, "--device cuda: this spotlab-train was built without CUDA (reconfigure with "
                    "-Dcuda=enabled on a machine with nvcc), use --device cpu");
  return SL_ENOTSUP;
#endif
}

struct tc_dev *tc_dev_free(struct tc_dev *d) {
  if (!d) return NULL;
#if TC_HAVE_CUDA
  tc_nccl_free(d->nc);
  tc_cuda_model_free(d->cm);
  free(d->logits);
#endif
  free(d);
  return NULL;
}

const char *tc_dev_describe(const struct tc_dev *d, char *buf, size_t size) {
#if TC_HAVE_CUDA
  if (d->cm) {
    char name[256];
    snprintf(buf, size, "cuda:%d (%s)%s, rank %d of %d%s", d->cuda_device,
             tc_cuda_device_name(name, sizeof name), d->bf16 ? " bf16" : " fp32", d->rank,
             d->world, d->nc ? " nccl" : "");
    return buf;
  }
#endif
  snprintf(buf, size, "cpu");
  (void)d;
  return buf;
}

size_t tc_dev_mem_bytes(const struct tc_dev *d) {
#if TC_HAVE_CUDA
  if (d->cm) return tc_cuda_model_mem_bytes(d->cm);
#endif
  return tc_model_mem_bytes(d->host);
}

int tc_dev_start(struct tc_dev *d, void *shared, size_t shared_bytes) {
#if TC_HAVE_CUDA
  if (d->cm) {
    int r = tc_cuda_model_put(d->cm, d->host);
    if (r < 0 || !d->nc) return r;
    size_t bytes = tc_cuda_model_n_params(d->cm) * sizeof(float);
    r = tc_nccl_broadcast(d->nc, tc_cuda_model_params(d->cm), bytes, 0);
    if (r == 0) r = tc_nccl_broadcast(d->nc, tc_cuda_model_m(d->cm), bytes, 0);
    if (r == 0) r = tc_nccl_broadcast(d->nc, tc_cuda_model_v(d->cm), bytes, 0);
    uint64_t t = tc_cuda_model_adam_t(d->cm);
    if (r == 0) r = tc_nccl_broadcast_host(d->nc, &t, sizeof t, 0);
    if (r == 0 && shared) r = tc_nccl_broadcast_host(d->nc, shared, shared_bytes, 0);
    if (r == 0) tc_cuda_model_set_adam_t(d->cm, t);
    return r;
  }
#endif
  (void)d, (void)shared, (void)shared_bytes;
  return 0;
}

#if TC_HAVE_CUDA
/* Rows [B*rank/W, B*(rank+1)/W) of b: equal slices when W divides B (every
 * training batch), possibly empty ones for a short last evaluation batch. */
static struct tc_batch slice(const struct tc_dev *d, const struct tc_batch *b) {
  struct tc_batch s = *b;
  if (d->world == 1) return s;
  int lo = (int)((int64_t)b->B * d->rank / d->world);
  int hi = (int)((int64_t)b->B * (d->rank + 1) / d->world);
  size_t row = d->host->cfg.kind == TC_MODEL_GPT ? d->host->cfg.ctx : 1;
  s.B = hi - lo;
  if (s.tokens) s.tokens += (size_t)lo * row;
  if (s.targets) s.targets += (size_t)lo * row;
  if (s.inputs) s.inputs += (size_t)lo * TC_MLP_IN;
  return s;
}
#endif

int tc_dev_forward(struct tc_dev *d, const struct tc_batch *b, double *ret_loss,
                   int64_t *ret_correct) {
#if TC_HAVE_CUDA
  if (d->cm) {
    struct tc_batch s = slice(d, b);
    double loss = 0.0;
    int64_t correct = 0;
    int r = s.B > 0 ? tc_cuda_forward(d->cm, &s, b->B, &loss, &correct) : 0;
    if (r < 0 || !b->targets || !d->nc) {
      if (r == 0 && ret_loss) *ret_loss = loss;
      if (r == 0 && ret_correct) *ret_correct = correct;
      return r;
    }
    double v[2] = {loss, (double)correct};
    if ((r = tc_nccl_allreduce_host_f64(d->nc, v, 2)) < 0) return r;
    if (ret_loss) *ret_loss = v[0];
    if (ret_correct) *ret_correct = (int64_t)v[1];
    return 0;
  }
#endif
  float loss = 0.0f;
  int r = tc_model_forward(d->host, b, &loss);
  if (r == 0 && ret_loss) *ret_loss = loss;
  if (r == 0 && ret_correct) *ret_correct = d->host->last_correct;
  return r;
}

int tc_dev_backward(struct tc_dev *d) {
#if TC_HAVE_CUDA
  if (d->cm) {
    int r = tc_cuda_backward(d->cm);
    if (r == 0 && d->nc)
      r = tc_nccl_allreduce_f32(d->nc, tc_cuda_model_grads(d->cm), tc_cuda_model_n_params(d->cm));
    return r;
  }
#endif
  return tc_model_backward(d->host);
}

int tc_dev_clip(struct tc_dev *d, float max_norm, double *ret_norm) {
#if TC_HAVE_CUDA
  if (d->cm) return tc_cuda_clip_grads(d->cm, max_norm, ret_norm);
#endif
  *ret_norm = tc_model_clip_grads(d->host, max_norm);
  return 0;
}

int tc_dev_adamw(struct tc_dev *d, const struct tc_adamw *hp, float lr) {
#if TC_HAVE_CUDA
  if (d->cm) return tc_cuda_adamw(d->cm, hp, lr);
#endif
  tc_model_adamw(d->host, hp, lr);
  return 0;
}

int tc_dev_to_host(struct tc_dev *d) {
#if TC_HAVE_CUDA
  if (d->cm) return tc_cuda_model_get(d->cm, d->host);
#endif
  (void)d;
  return 0;
}

int tc_dev_agree(struct tc_dev *d, int *flags, int n) {
#if TC_HAVE_CUDA
  if (d->nc && d->world > 1) {
    double v[16];
    if (n > 16) return -EINVAL;
    for (int i = 0; i < n; i++) v[i] = flags[i];
    int r = tc_nccl_allreduce_host_f64(d->nc, v, n);
    for (int i = 0; r == 0 && i < n; i++) flags[i] = v[i] > 0.0;
    return r;
  }
#endif
  (void)d, (void)flags, (void)n;
  return 0;
}

const float *tc_dev_logits(struct tc_dev *d, size_t rows) {
#if TC_HAVE_CUDA
  if (d->cm) {
    if (rows > d->logits_rows) {
      free(d->logits);
      d->logits = malloc(sizeof(float) * rows * d->host->cfg.vocab);
      d->logits_rows = d->logits ? rows : 0;
      if (!d->logits) return NULL;
    }
    return tc_cuda_logits(d->cm, d->logits, rows) == 0 ? d->logits : NULL;
  }
#endif
  (void)rows;
  return tc_model_logits(d->host);
}
