/* spotlab-train's runs: the training loop, evaluation and sampling.
 *
 * State that must survive a restart lives in struct tc_ckpt_meta (step, RNG
 * states, data position) plus the model's buffers; everything the loop
 * consumes comes from there, so a run resumed from a checkpoint replays the
 * same batches and produces bit-identical numbers; the meta also carries
 * the run's identity, which a resume keeps (train_ident.c decides which run
 * a start continues). Metrics are JSON lines written under a mutex because
 * the checkpoint writer thread reports too. What depends on the data kind
 * (loading, batches, evaluation) is in train_loop_data.c (train_loop_int.h
 * between the two). */
#include "train_loop_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_json.h"
#include "sl_time.h"
#include "tc_ckpt.h"
#include "tc_data.h"
#include "tc_model.h"
#include "tc_ops.h"
#include "tc_rdv.h"
#include "tc_writer.h"
#include "train.h"
#include "train_dev.h"
#include "train_ident.h"

static volatile sig_atomic_t g_term, g_ckpt;

static void on_signal(int sig) {
  if (sig == SIGTERM || sig == SIGINT) g_term = 1;
  else if (sig == SIGUSR1) g_ckpt = 1;
}

/* ---- metrics ---- */

static int metrics_open(struct metrics *mt, const char *spec) {
  pthread_mutex_init(&mt->mu, NULL);
  if (!spec) {
    mt->f = stdout;
    return 0;
  }
  if (!strncmp(spec, "fd:", 3)) {
    char *end;
    long fd = strtol(spec + 3, &end, 10);
    if (*end || fd < 0 || fcntl((int)fd, F_GETFD) < 0) return -EBADF;
    mt->f = fd == 1 ? stdout : fdopen((int)fd, "w");
  } else {
    mt->f = fopen(spec, "a");
  }
  return mt->f ? 0 : -errno;
}

static void metrics_close(struct metrics *mt) {
  if (mt->f && mt->f != stdout) fclose(mt->f);
  else if (mt->f) fflush(mt->f);
  pthread_mutex_destroy(&mt->mu);
}

/* A string for the metrics file: s itself when it is UTF-8, else a copy with
 * every byte that is not ASCII as '?' (a path or message from the system).
 * jansson escapes the rest, so every line is one valid JSON object. */
static json_t *jstr(const char *s) {
  if (!s) return json_null();
  size_t n = strlen(s);
  json_t *v = sl_json_utf8_ok(s, n) ? json_stringn(s, n) : NULL;
  if (v) return v;
  char *t = strdup(s);
  if (!t) return NULL;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)t[i] >= 0x80) t[i] = '?';
  v = json_stringn(t, n);
  free(t);
  return v;
}

/* Writes obj (taken) as one line. Reals with nine significant digits: a
 * float's, what the training core measures in. */
static void emit(struct metrics *mt, json_t *obj) {
  char *line = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(obj);
  pthread_mutex_lock(&mt->mu);
  if (line) {
    fputs(line, mt->f);
    fputc('\n', mt->f);
  } else {
    fputs("{\"event\":\"warning\",\"error\":\"out of memory writing a metrics line\"}\n", mt->f);
  }
  fflush(mt->f);
  pthread_mutex_unlock(&mt->mu);
  free(line);
}

/* ---- shared run state ---- */

static int fail(struct run *R, int err, const char *text) {
  fprintf(stderr, "spotlab-train: %s\n", text);
  if (R->mt.f) emit(&R->mt, json_pack("{s:s, s:o, s:s}", "event", "error", "error", jstr(text),
                                      "code", sl_errname(err)));
  return 1;
}

static void free_run(struct run *R) {
  R->writer = tc_ckpt_writer_free(R->writer);
  tc_dev_free(R->dev);
  tc_model_free(R->model);
  tc_text_free(R->text);
  tc_images_free(R->train);
  tc_images_free(R->test);
  free(R->perm);
  free(R->tokens);
  free(R->targets);
  free(R->inputs);
  if (R->dump_batches) fclose(R->dump_batches);
  metrics_close(&R->mt);
}

/* ---- checkpoints ---- */

static void on_ckpt_done(void *ctx, const struct tc_ckpt_result *res) {
  struct run *R = ctx;
  snprintf(R->ckpt_error, sizeof R->ckpt_error, "%s", res->err == 0 ? "" : res->text);
  if (res->err == 0)
    emit(&R->mt, json_pack("{s:s, s:I, s:o, s:b, s:o}", "event", "checkpoint", "step",
                           (json_int_t)res->step, "path", jstr(res->path), "durable", 1,
                           "write_ms", sl_json_real(res->write_ms)));
  else
    emit(&R->mt, json_pack("{s:s, s:s, s:I, s:o, s:s}", "event", "error", "op", "checkpoint",
                           "step", (json_int_t)res->step, "error", jstr(res->text), "code",
                           sl_errname(res->err)));
}

/* A checkpoint that does not read is skipped; a training run's resume also
 * renames it out of the way, since its own checkpoint of that step would
 * otherwise replace it (eval and sample only read). */
static void on_ckpt_warn(void *ctx, const char *path, int err, const char *text) {
  struct run *R = ctx;
  char to[4200] = "";
  int r = R->set_aside_corrupt ? tc_ckpt_set_aside_corrupt(path, to, sizeof to) : 0;
  if (r < 0 && !R->aside_error[0])
    snprintf(R->aside_error, sizeof R->aside_error, "cannot rename the corrupt checkpoint %s out of the way: %s",
             path, strerror(-r));
  fprintf(stderr, "spotlab-train: warning: skipping checkpoint: %s%s%s\n", text, to[0] ? "; kept as " : "", to);
  json_t *ev = json_pack("{s:s, s:s, s:o, s:o, s:s}", "event", "warning", "op", "resume", "path", jstr(path),
                         "error", jstr(text), "code", sl_errname(err));
  if (ev && to[0]) json_object_set_new(ev, "moved_to", jstr(to));
  emit(&R->mt, ev);
}

static void checkpoint(struct run *R, uint64_t step) {
  if (!R->writer) {
    emit(&R->mt, json_pack("{s:s, s:s, s:I, s:s}", "event", "error", "op", "checkpoint", "step",
                           (json_int_t)step, "error", "no checkpoint folder (--ckpt-dir)"));
    return;
  }
  /* a step already written is not written again; one whose write failed is tried again */
  if (R->have_ckpt && R->last_ckpt_step == step && tc_ckpt_writer_wait(R->writer) == 0) return;
  int r = tc_dev_to_host(R->dev);
  if (r < 0) {
    emit(&R->mt, json_pack("{s:s, s:s, s:I, s:s, s:s}", "event", "error", "op", "checkpoint",
                           "step", (json_int_t)step, "error",
                           "cannot copy the model from the device", "code", sl_errname(r)));
    return;
  }
  struct tc_ckpt *ck = tc_ckpt_writer_acquire(R->writer);
  R->meta.step = step;
  tc_ckpt_capture(ck, R->model, &R->meta);
  tc_ckpt_writer_submit(R->writer);
  R->last_ckpt_step = step;
  R->have_ckpt = 1;
}

/* Reads pending control lines; returns 1 when a checkpoint was asked for.
 * "checkpoint_every N" sets the periodic interval in *every (0: none). */
static int poll_control(int fd, char *buf, size_t *len, size_t cap, struct metrics *mt,
                        uint64_t *every) {
  int want = 0;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  while (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP))) {
    ssize_t k = read(fd, buf + *len, cap - *len);
    if (k <= 0) return want ? 1 : (k == 0 ? -1 : 0);
    *len += (size_t)k;
    char *nl;
    while ((nl = memchr(buf, '\n', *len))) {
      *nl = 0;
      if (nl > buf && nl[-1] == '\r') nl[-1] = 0;
      char *end = NULL;
      if (!strcmp(buf, "checkpoint")) want = 1;
      else if (!strncmp(buf, "checkpoint_every ", 17)) {
        unsigned long long n = strtoull(buf + 17, &end, 10);
        if (end == buf + 17 || *end || n > 100000000ull || buf[17] == '-')
          emit(mt, json_pack("{s:s, s:s, s:s}", "event", "warning", "op", "control", "error",
                             "bad checkpoint_every"));
        else {
          *every = n;
          emit(mt, json_pack("{s:s, s:I}", "event", "checkpoint_every", "steps", (json_int_t)n));
        }
      } else if (*buf) {
        emit(mt, json_pack("{s:s, s:s, s:s}", "event", "warning", "op", "control", "error",
                           "unknown command"));
      }
      size_t used = (size_t)(nl - buf) + 1;
      memmove(buf, nl + 1, *len - used);
      *len -= used;
    }
    if (*len == cap) *len = 0; /* an over-long line is dropped */
  }
  return want;
}

static int write_raw(const char *path, const float *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -errno;
  size_t k = fwrite(p, sizeof(float), n, f);
  int r = fclose(f) != 0 || k != n ? -EIO : 0;
  return r;
}

static void dev_opts(const struct tc_opts *o, struct tc_dev_opts *d) {
  *d = (struct tc_dev_opts){.device = o->device, .bf16 = o->bf16, .nccl = o->nccl,
                            .gpus = o->gpus, .rank = o->rank, .world = o->world_size,
                            .cuda_device = o->cuda_device, .grad_slices = o->grad_slices,
                            .rendezvous = o->rendezvous, .nccl_id = o->nccl_id,
                            .timeout_ms = (int)(o->dist_timeout * 1000)};
}

/* A fresh start writes into a folder of its own (train_ident.c); what
 * --force-new set aside is reported. */
static int claim_folder(struct run *R, char *err, size_t es) {
  char sub[4096];
  int r = tc_ident_claim(R->o->ckpt_dir, R->meta.run_id, R->o->force_new, sub, sizeof sub, err, es);
  if (r > 0) {
    fprintf(stderr, "spotlab-train: --force-new: moved %d checkpoint files into %s\n", r, sub);
    emit(&R->mt, json_pack("{s:s, s:o, s:i}", "event", "set_aside", "path", jstr(sub), "files", r));
  }
  return r < 0 ? r : 0;
}

static int run_train(const struct tc_opts *o, struct tc_launch *launch);

/* Decides this process's rank (forking the local ranks for --gpus) before
 * any thread starts, runs the training, and lets rank 0 collect the others. */
int tc_run_train(const struct tc_opts *o) {
  struct tc_dev_opts d;
  struct tc_launch launch;
  char err[512];
  dev_opts(o, &d);
  if (tc_launch_start(&d, &launch, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab-train: %s\n", err);
    return 1;
  }
  struct tc_opts mine = *o;
  if (launch.rank > 0) { /* one voice: rank 0 reports, checkpoints and takes commands */
    mine.metrics = "/dev/null";
    mine.control = NULL;
    mine.dump_init = mine.dump_batches = NULL;
  }
  int r = run_train(&mine, &launch);
  if (tc_launch_finish(&launch, r == 0) < 0 && r == 0) r = 1;
  return r;
}

static int run_train(const struct tc_opts *o, struct tc_launch *launch) {
  struct run R = {.o = o};
  char err[8192] = "";
  int r, B = (int)o->batch;
  int cuda = !strcmp(o->device, "cuda"), rank = launch->rank;
  R.batch = B;
  tc_set_threads((int)o->threads);
  if ((r = metrics_open(&R.mt, o->metrics)) < 0) {
    fprintf(stderr, "spotlab-train: --metrics %s: %s\n", o->metrics, strerror(-r));
    return 1;
  }
  signal(SIGXFSZ, SIG_IGN); /* a too-large file is an EFBIG error, not a kill */
  signal(SIGPIPE, SIG_IGN);
  /* the loop reads the flags at each step; a write the signal comes in
   * (a metrics line while the reader is slow) goes on, or the line is lost */
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  tc_rdv_set_stop(&g_term); /* a stop while the ranks meet ends the wait */
  int ctl_fd = -1;
  if (o->control) {
    ctl_fd = atoi(o->control + 3);
    if (fcntl(ctl_fd, F_GETFD) < 0) {
      snprintf(err, sizeof err, "--control %s: not an open file descriptor", o->control);
      r = fail(&R, -EBADF, err);
      goto out;
    }
  }
  if (!(R.ops = tc_model_find(o->model))) {
    char names[128];
    snprintf(err, sizeof err, "unknown model '%s' (%s)", o->model,
             tc_model_names(names, sizeof names));
    r = fail(&R, -EINVAL, err);
    goto out;
  }
  tc_config_init(&R.cfg, R.ops);
  if ((r = R.ops->from_opts(tc_config_model(&R.cfg), o, err, sizeof err)) < 0 ||
      (r = tc_loop_load_data(&R, 1, err, sizeof err)) < 0) {
    r = fail(&R, r, err);
    goto out;
  }
  struct tc_dev_opts dopts;
  dev_opts(o, &dopts);
  int slices = tc_dev_slices(&dopts, launch);
  int rows = B % slices == 0 ? B / slices : B; /* activations for one slice */
  if (tc_config_validate(&R.cfg, err, sizeof err) < 0 ||
      !(R.model = cuda ? tc_model_new_buffers(&R.cfg) : tc_model_new(&R.cfg, rows)) ||
      tc_loop_alloc_batch(&R, B) < 0) {
    if (!err[0]) snprintf(err, sizeof err, "out of memory");
    r = fail(&R, -EINVAL, err);
    goto out;
  }
  R.meta.cfg = R.cfg;
  R.meta.world_size = (uint32_t)launch->world;
  R.meta.seed = o->seed;
  tc_rng_seed(&R.meta.rng_init, o->seed, 1);
  tc_rng_seed(&R.meta.rng_data, o->seed, 2);
  tc_rng_seed(&R.meta.rng_sample, o->seed, 3);
  if (R.text) memcpy(R.meta.symbols, R.text->symbols, R.text->vocab);
  R.meta.data_hash = tc_ident_data_hash(R.text, R.train);
  if (o->run_id) snprintf(R.meta.run_id, sizeof R.meta.run_id, "%s", o->run_id);
  else if ((r = tc_run_id_new(R.meta.run_id)) < 0) {
    r = fail(&R, r, "cannot choose a run id: no random bytes");
    goto out;
  }
  if (o->ckpt_dir && mkdir(o->ckpt_dir, 0755) < 0 && errno != EEXIST) {
    snprintf(err, sizeof err, "--ckpt-dir %s: %s", o->ckpt_dir, strerror(errno));
    r = fail(&R, -errno, err);
    goto out;
  }
  int fresh = 1;
  if (o->resume && rank == 0) {
    struct tc_ckpt *ck = NULL;
    char path[4096], which[TC_RUN_ID_MAX + 1];
    r = tc_ident_pick(o, which, err, sizeof err);
    R.set_aside_corrupt = 1;
    if (r == 0)
      r = tc_ckpt_load_newest(o->ckpt_dir, &R.cfg, which[0] ? which : NULL, on_ckpt_warn, &R,
                              &ck, path, sizeof path, err, sizeof err);
    R.set_aside_corrupt = 0;
    if (R.aside_error[0] && (r == 0 || r == -ENOENT)) { /* its step's checkpoint would replace it */
      tc_ckpt_free(ck);
      r = fail(&R, -EACCES, R.aside_error);
      goto out;
    }
    if (r == 0) {
      if (R.text && memcmp(ck->meta.symbols, R.meta.symbols, R.text->vocab) != 0)
        snprintf(err, sizeof err, "%s: checkpoint vocabulary differs from the data's", path),
            r = SL_EMISMATCH;
      if (r == 0 && !o->resume_other)
        r = tc_ident_check(o, &ck->meta, R.meta.data_hash, path, err, sizeof err);
      if (r < 0) {
        tc_ckpt_free(ck);
        r = fail(&R, r, err);
        goto out;
      }
      tc_ckpt_restore(ck, R.model);
      struct tc_ckpt_meta mine = R.meta;
      R.meta = ck->meta;
      R.meta.world_size = (uint32_t)launch->world; /* the state is the same on every rank */
      /* the run goes on under its identity; one without (an older checkpoint)
       * takes this start's, and a run continued on other data says so */
      if (!R.meta.run_id[0] || o->run_id) memcpy(R.meta.run_id, mine.run_id, sizeof mine.run_id);
      R.meta.data_hash = mine.data_hash;
      R.last_ckpt_step = ck->meta.step;
      R.have_ckpt = 1;
      fresh = 0;
      emit(&R.mt, json_pack("{s:s, s:I, s:o, s:i, s:i, s:s}", "event", "resume", "step",
                           (json_int_t)R.meta.step, "path", jstr(path), "world_size",
                           launch->world, "ckpt_world_size", (int)ck->meta.world_size,
                           "run_id", R.meta.run_id));
      if (o->resume_other && ck->meta.run_id[0] &&
          (strcmp(ck->meta.run_id, R.meta.run_id) || ck->meta.seed != o->seed ||
           ck->meta.data_hash != mine.data_hash))
        emit(&R.mt, json_pack("{s:s, s:s, s:s, s:I, s:I}", "event", "warning", "op", "resume",
                             "error", "--resume-other: continuing a checkpoint of another run",
                             "ckpt_seed", (json_int_t)ck->meta.seed, "seed", (json_int_t)o->seed));
      tc_ckpt_free(ck);
    } else if (r == -ENOENT) {
      emit(&R.mt, json_pack("{s:s, s:i, s:o, s:s}", "event", "fresh", "step", 0, "reason",
                           jstr(err), "run_id", R.meta.run_id));
    } else {
      r = fail(&R, r, err);
      goto out;
    }
  } else if (o->ckpt_dir && rank == 0 && (r = claim_folder(&R, err, sizeof err)) < 0) {
    r = fail(&R, r, err);
    goto out;
  }
  if (fresh) {
    tc_model_init(R.model, &R.meta.rng_init);
    if (o->dump_init && (r = write_raw(o->dump_init, R.model->params, R.model->n_params)) < 0) {
      snprintf(err, sizeof err, "--dump-init %s: %s", o->dump_init, strerror(-r));
      r = fail(&R, r, err);
      goto out;
    }
  }
  if (o->dump_batches && !(R.dump_batches = fopen(o->dump_batches, "wb"))) {
    snprintf(err, sizeof err, "--dump-batches %s: %s", o->dump_batches, strerror(errno));
    r = fail(&R, -errno, err);
    goto out;
  }
  if (R.train) {
    if (!(R.perm = malloc(sizeof(uint32_t) * R.train->n))) {
      r = fail(&R, -ENOMEM, "out of memory");
      goto out;
    }
  }
  {
    err[0] = 0;
    if ((r = tc_dev_new(&dopts, launch, R.model, B, &R.dev, err, sizeof err)) < 0 ||
        (r = tc_dev_start(R.dev, &R.meta, sizeof R.meta)) < 0) {
      if (r == -ECANCELED && g_term) { /* stopped before the first step: nothing new to save */
        emit(&R.mt, json_pack("{s:s, s:I, s:b}", "event", "terminated", "step",
                             (json_int_t)R.meta.step, "durable", R.meta.step > 0));
        r = 0;
        goto out;
      }
      if (!err[0] && R.dev) snprintf(err, sizeof err, "%s", tc_dev_error(R.dev));
      if (!err[0]) snprintf(err, sizeof err, "cannot start the device: %s", sl_strerror(r));
      r = fail(&R, r, err);
      goto out;
    }
    if (cuda || launch->world > 1 || slices > 1) {
      char desc[512];
      emit(&R.mt, json_pack("{s:s, s:I, s:o, s:i}", "event", "device", "step",
                           (json_int_t)R.meta.step, "device",
                           jstr(tc_dev_describe(R.dev, desc, sizeof desc)), "world_size",
                           launch->world));
    }
  }
  if (R.train) /* the permutation of the (possibly broadcast) data epoch */
    tc_images_perm(R.perm, R.train->n, R.meta.seed, R.meta.data_epoch);
  if (o->ckpt_dir && rank == 0 &&
      !(R.writer = tc_ckpt_writer_new(o->ckpt_dir, (int)o->keep, R.model->n_params,
                                      on_ckpt_done, &R))) {
    r = fail(&R, -ENOMEM, "cannot start the checkpoint writer");
    goto out;
  }
  struct tc_adamw hp = {0.9f, R.ops->adam_beta2, 1e-8f, (float)o->weight_decay};
  uint64_t total = (uint64_t)o->steps;
  size_t mem = tc_dev_mem_bytes(R.dev);
  char ctl[4096];
  size_t ctl_len = 0;
  uint64_t every = o->ckpt_every > 0 ? (uint64_t)o->ckpt_every : 0; /* the control fd may change it */
  float loss = NAN;
  double ev_loss = NAN, ev_acc = NAN;
  for (uint64_t step = R.meta.step; step < total; step++) {
    if (ctl_fd >= 0) {
      int c = poll_control(ctl_fd, ctl, &ctl_len, sizeof ctl, &R.mt, &every);
      if (c < 0) ctl_fd = -1;
      if (c > 0) g_ckpt = 1;
    }
    int flags[2] = {g_term != 0, g_ckpt != 0}; /* any rank asking stops or checkpoints all */
    if ((r = tc_dev_agree(R.dev, flags, 2)) < 0) {
      snprintf(err, sizeof err, "ranks could not agree on step %llu: %s",
               (unsigned long long)step + 1, tc_dev_error(R.dev));
      r = fail(&R, r, err);
      goto out;
    }
    if (flags[0]) {
      g_term = 1;
      break;
    }
    if (flags[1]) {
      g_ckpt = 0;
      checkpoint(&R, step);
    }
    int64_t t0 = sl_time_mono_us();
    float lr = tc_lr_at(step, (uint64_t)o->warmup, total, (float)o->lr);
    tc_loop_next_batch(&R, B);
    tc_loop_dump_batch(&R, B);
    struct tc_batch b = {.B = B, .tokens = R.tokens, .inputs = R.inputs, .targets = R.targets};
    double loss_d = NAN, gnorm = NAN;
    if ((r = tc_dev_grads(R.dev, &b, &loss_d)) < 0 ||
        (r = tc_dev_clip(R.dev, (float)o->grad_clip, &gnorm)) < 0 ||
        (r = tc_dev_adamw(R.dev, &hp, lr)) < 0) {
      snprintf(err, sizeof err, "training step %llu failed: %s", (unsigned long long)step + 1,
               tc_dev_error(R.dev)[0] ? tc_dev_error(R.dev) : sl_strerror(r));
      r = fail(&R, r, err);
      goto out;
    }
    loss = (float)loss_d;
    R.meta.step = step + 1;
    double dt = (double)(sl_time_mono_us() - t0) / 1e6;
    double rate = (double)B * R.shape.targets / (dt > 0 ? dt : 1e-9);
    int do_eval = (o->eval_every && (step + 1) % (uint64_t)o->eval_every == 0) || step + 1 == total;
    if (do_eval && (r = tc_loop_evaluate(&R, &ev_loss, &ev_acc)) < 0) {
      snprintf(err, sizeof err, "evaluation failed: %s",
               tc_dev_error(R.dev)[0] ? tc_dev_error(R.dev) : sl_strerror(r));
      r = fail(&R, r, err);
      goto out;
    }
    json_t *line = json_pack("{s:I, s:o, s:o, s:o, s:o, s:I}", "step", (json_int_t)(step + 1),
                             "loss", sl_json_real(loss), "lr", sl_json_real(lr), "grad_norm",
                             sl_json_real(gnorm), R.ops->rate_metric, sl_json_real(rate),
                             "mem_bytes", (json_int_t)mem);
    if (line && do_eval) {
      json_object_set_new(line, "eval_loss", sl_json_real(ev_loss));
      if (R.ops->counts_correct) json_object_set_new(line, "eval_accuracy", sl_json_real(ev_acc));
    }
    emit(&R.mt, line);
    if (!isfinite(loss)) {
      r = fail(&R, -EDOM, "loss is not finite; lower --lr");
      goto out;
    }
    if (every && (step + 1) % every == 0) checkpoint(&R, step + 1);
  }
  int saved = 1;
  if (R.writer) {
    checkpoint(&R, R.meta.step);
    r = tc_ckpt_writer_wait(R.writer);
    if (g_term) {
      emit(&R.mt, json_pack("{s:s, s:I, s:b}", "event", "terminated", "step",
                           (json_int_t)R.meta.step, "durable", r == 0));
      r = r == 0 ? 0 : 1;
      goto out;
    }
    saved = r == 0;
  }
  emit(&R.mt, json_pack("{s:s, s:I, s:o, s:o, s:b}", "event", "done", "step", (json_int_t)R.meta.step,
                         "loss", sl_json_real(loss), "eval_loss", sl_json_real(ev_loss), "durable", saved));
  r = 0;
  if (!saved) { /* the run is the model it leaves: one not saved is no success */
    fprintf(stderr, "spotlab-train: the final checkpoint (step %llu) is not written: %s\n",
            (unsigned long long)R.meta.step, R.ckpt_error[0] ? R.ckpt_error : "the write failed");
    r = 1;
  }
out:
  free_run(&R);
  return r;
}

/* ---- eval and sample: load the newest checkpoint, config from its header ---- */

static int load_for_inference(struct run *R, int B, int need_data, char *err, size_t es) {
  struct tc_ckpt *ck = NULL;
  char path[4096];
  int r = tc_ckpt_load_newest(R->o->ckpt_dir, NULL, NULL, on_ckpt_warn, R, &ck, path, sizeof path,
                              err, es);
  if (r < 0) return r;
  R->cfg = ck->meta.cfg;
  R->ops = tc_config_ops(&R->cfg);
  R->meta = ck->meta;
  tc_config_shape(&R->cfg, &R->shape);
  if (need_data) {
    r = tc_loop_load_data(R, 0, err, es);
    if (r == 0 && (!tc_config_equal(&R->cfg, &ck->meta.cfg) ||
                   (R->text && memcmp(R->text->symbols, ck->meta.symbols, R->text->vocab) != 0))) {
      snprintf(err, es, "%s: the model does not fit data %s (%s)", path, R->o->data,
               R->text ? "another vocabulary" : "another shape");
      r = SL_EMISMATCH;
    }
  }
  int cuda = !strcmp(R->o->device, "cuda");
  R->batch = B;
  if (r == 0 && (!(R->model = cuda ? tc_model_new_buffers(&R->cfg) : tc_model_new(&R->cfg, B)) ||
                 tc_loop_alloc_batch(R, B) < 0)) {
    snprintf(err, es, "out of memory");
    r = -ENOMEM;
  }
  if (r == 0) r = tc_ckpt_restore(ck, R->model);
  tc_ckpt_free(ck);
  if (r == 0) { /* inference runs in one process */
    err[0] = 0;
    struct tc_dev_opts d = {.device = R->o->device, .bf16 = R->o->bf16, .cuda_device = R->o->cuda_device};
    struct tc_launch one = {.world = 1};
    r = tc_dev_new(&d, &one, R->model, B, &R->dev, err, es);
    if (r == 0) r = tc_dev_start(R->dev, NULL, 0);
    if (r < 0 && !err[0]) snprintf(err, es, "cannot start the device: %s", sl_strerror(r));
  }
  return r;
}

int tc_run_eval(const struct tc_opts *o) {
  struct tc_opts oo = *o;
  struct run R = {.o = &oo};
  char err[8192] = "";
  tc_set_threads((int)o->threads);
  int r = metrics_open(&R.mt, o->metrics ? o->metrics : "fd:2");
  if (r < 0) {
    fprintf(stderr, "spotlab-train: --metrics %s: %s\n", o->metrics, strerror(-r));
    return 1;
  }
  /* the data default follows the checkpoint's model kind, not --model */
  struct tc_ckpt *probe = NULL;
  if (!o->set_data &&
      tc_ckpt_load_newest(o->ckpt_dir, NULL, NULL, NULL, NULL, &probe, NULL, 0, err, sizeof err) == 0)
    oo.data = tc_config_ops(&probe->meta.cfg)->default_data;
  tc_ckpt_free(probe);
  if ((r = load_for_inference(&R, (int)o->batch, 1, err, sizeof err)) < 0) {
    r = fail(&R, r, err);
    goto out;
  }
  double loss, acc;
  if ((r = tc_loop_evaluate(&R, &loss, &acc)) < 0) {
    r = fail(&R, r, "evaluation failed");
    goto out;
  }
  printf("eval_loss %.9g\n", loss);
  if (isfinite(acc)) printf("eval_accuracy %.9g\n", acc);
  emit(&R.mt, json_pack("{s:s, s:I, s:o, s:o}", "event", "eval", "step", (json_int_t)R.meta.step,
                         "eval_loss", sl_json_real(loss), "eval_accuracy", sl_json_real(acc)));
  r = 0;
out:
  free_run(&R);
  return r;
}

/* Picks the next id from logits (V) with temperature and top-k. */
static int pick(const float *logits, int V, double temperature, int top_k, struct tc_rng *rng) {
  int best = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  if (temperature <= 0.0) return best;
  float kth = -INFINITY;
  if (top_k > 0 && top_k < V) { /* the k-th largest logit by partial selection */
    float top[256];
    int n = 0;
    for (int i = 0; i < V; i++) {
      int j = n < top_k ? n++ : top_k - 1;
      if (i >= top_k && j == top_k - 1 && logits[i] <= top[j]) continue; /* top[] is full */
      top[j] = logits[i];
      while (j > 0 && top[j] > top[j - 1]) {
        float t = top[j];
        top[j] = top[j - 1];
        top[j - 1] = t;
        j--;
      }
    }
    kth = top[top_k - 1];
  }
  double p[256], sum = 0.0;
  for (int i = 0; i < V; i++) {
    p[i] = logits[i] >= kth ? exp((logits[i] - logits[best]) / temperature) : 0.0;
    sum += p[i];
  }
  double u = (double)tc_rng_uniform(rng) * sum;
  for (int i = 0; i < V; i++) {
    u -= p[i];
    if (u < 0.0 && p[i] > 0.0) return i;
  }
  return best;
}

int tc_run_sample(const struct tc_opts *o) {
  struct run R = {.o = o};
  char err[8192] = "";
  tc_set_threads((int)o->threads);
  int r = metrics_open(&R.mt, o->metrics ? o->metrics : "fd:2");
  int32_t *seq = NULL;
  if (r < 0) {
    fprintf(stderr, "spotlab-train: --metrics %s: %s\n", o->metrics, strerror(-r));
    return 1;
  }
  if ((r = load_for_inference(&R, 1, 0, err, sizeof err)) < 0) {
    r = fail(&R, r, err);
    goto out;
  }
  if (!R.ops->generates) {
    snprintf(err, sizeof err, "--sample needs a checkpoint of a model that generates text; "
             "this one is %s", R.ops->name);
    r = fail(&R, SL_ENOTSUP, err);
    goto out;
  }
  int16_t index[256];
  memset(index, 0xff, sizeof index);
  int T = (int)R.shape.tokens, V = (int)R.shape.classes;
  for (int i = 0; i < V; i++) index[R.meta.symbols[i]] = (int16_t)i;
  size_t plen = strlen(o->sample), n = 0;
  seq = malloc(sizeof(int32_t) * (plen + (size_t)o->tokens + 1));
  if (!seq) {
    r = fail(&R, -ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < plen; i++) {
    int id = index[(unsigned char)o->sample[i]];
    if (id < 0) {
      snprintf(err, sizeof err, "--sample: byte 0x%02x ('%c') is not in the model's vocabulary",
               (unsigned char)o->sample[i], o->sample[i] >= 32 ? o->sample[i] : '?');
      r = fail(&R, -EINVAL, err);
      goto out;
    }
    seq[n++] = id;
  }
  if (n == 0) seq[n++] = index['\n'] >= 0 ? index['\n'] : 0;
  else fputs(o->sample, stdout);
  struct tc_rng rng;
  tc_rng_seed(&rng, o->seed, 3);
  for (long k = 0; k < o->tokens; k++) {
    size_t w = n < (size_t)T ? n : (size_t)T; /* later positions do not affect earlier ones */
    memcpy(R.tokens, seq + n - w, sizeof(int32_t) * w);
    for (int i = (int)w; i < T; i++) R.tokens[i] = 0;
    struct tc_batch b = {.B = 1, .tokens = R.tokens};
    const float *all = NULL;
    if ((r = tc_dev_forward(R.dev, &b, NULL, NULL)) < 0 || !(all = tc_dev_logits(R.dev, w))) {
      r = fail(&R, r < 0 ? r : SL_ECUDA, "forward failed");
      goto out;
    }
    const float *logits = all + (w - 1) * (size_t)V;
    int id = pick(logits, V, o->temperature, (int)o->top_k, &rng);
    seq[n++] = id;
    putchar(R.meta.symbols[id]);
  }
  putchar('\n');
  r = 0;
out:
  free(seq);
  free_run(&R);
  return r;
}
