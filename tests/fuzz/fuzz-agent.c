/* Fuzz target: the worker agent's loop (worker/agent.c) over what its
 * gateway sends and what its jobs print. Each input runs a real agent on a
 * thread of its own, connected over CURVE to a ROUTER this target holds as
 * the gateway, with a file:// store and a work folder in a temporary folder.
 *
 * The input: a flags byte, then sections split at "\n--\n": what the job's
 * program writes on its metrics descriptor (3), on stdout, on stderr, then
 * one JSON message from the gateway per section. Flags: bits 0-1 choose how
 * the job's program ends (exit 0, exit 1, exit 3, killed by SIGKILL); bit 2
 * sends the agent a SIGTERM (a preemption notice) after the messages.
 *
 * Every job's program is a script of this target's: it writes a file c.tc
 * in the job's checkpoint folder, then the three sections (@CKPT@ in the
 * first replaced by that folder, so that checkpoint events can name it), and
 * ends as the flags say. An assign's "script" (a run job) is
 * replaced by one that runs it, and variables of "env" named LD_* are left
 * out, so no input runs code of its own.
 *
 * The target answers the first register with "registered", then sends the
 * messages, waits (at most SETTLE_LIMIT_S) for every job that started to
 * end, then sends "shutdown", answering every register after that with
 * "registered" and every done with "done_recorded". It checks that the
 * agent stops within STOP_LIMIT_S of the shutdown and returns 0, that every
 * message it sends is a JSON object with a type, that every done names its
 * job and has a status and an exit code, and that every job that
 * was assigned (with a job id, before any shutdown among the messages) or
 * said "started" sent its done before the agent ended. */
#include "agent.h"
#include "conf.h"
#include "fuzz.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SETTLE_LIMIT_S 5 /* for the register, then for the jobs to end before the shutdown */
#define STOP_LIMIT_S 20   /* from the shutdown to the end of the agent's loop */
#define MSG_MAX 64
#define JOBS_MAX 64

struct run {
  struct wk_agent *agent;
  int signal_fd;
  int result;
  atomic_bool ended;
};

static void *agent_thread(void *p) {
  struct run *r = p;
  r->result = wk_agent_run(r->agent, r->signal_fd);
  atomic_store(&r->ended, true);
  return NULL;
}

static void write_file(const char *dir, const char *name, const uint8_t *data, size_t len, mode_t mode) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0)
    abort();
  chmod(path, mode);
}

/* The next section of [*p, end) up to "\n--\n"; *p moves past it. */
static bool next_section(const uint8_t **p, const uint8_t *end, const uint8_t **ret, size_t *ret_len) {
  if (*p > end)
    return false;
  const uint8_t *s = *p;
  const uint8_t *e = s;
  while (e + 4 <= end && memcmp(e, "\n--\n", 4))
    e++;
  if (e + 4 > end)
    e = end;
  *ret = s;
  *ret_len = (size_t)(e - s);
  *p = e + 4;
  return true;
}

/* A gateway message from the input, made safe to run: a run job's script
 * becomes ours, and LD_* variables are dropped. NULL when it is not JSON:
 * then its bytes go as they are. */
static json_t *tame(const uint8_t *data, size_t len, const char *script) {
  json_t *m = json_loadb((const char *)data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  if (!json_is_object(m))
    return m;
  json_t *spec = json_object_get(m, "spec");
  if (json_is_object(spec) && json_object_get(spec, "script"))
    json_object_set_new(spec, "script", json_string(script));
  json_t *env = json_object_get(m, "env");
  if (json_is_object(env)) {
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(env, tmp, k, v) if (!strncmp(k, "LD_", 3)) json_object_del(env, k);
  }
  return m;
}

static void send_to(void *router, const zmq_msg_t *id, const char *text, size_t len) {
  zmq_send(router, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size((zmq_msg_t *)id), ZMQ_SNDMORE);
  zmq_send(router, text, len, 0);
}

static void send_json(void *router, const zmq_msg_t *id, json_t *m) {
  char *text = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  if (!text)
    abort();
  send_to(router, id, text, strlen(text));
  free(text);
}

struct seen {
  char expected[JOBS_MAX][40]; /* jobs assigned or said started */
  size_t n_expected;
  char done[JOBS_MAX][40];
  size_t n_done;
};

static void add_id(char (*ids)[40], size_t *n, const char *id) {
  for (size_t i = 0; i < *n; i++)
    if (!strcmp(ids[i], id))
      return;
  if (*n < JOBS_MAX && strlen(id) < 40)
    strcpy(ids[(*n)++], id);
}

static bool all_done(const struct seen *seen) {
  for (size_t i = 0; i < seen->n_expected; i++) {
    bool done = false;
    for (size_t k = 0; k < seen->n_done; k++)
      done |= !strcmp(seen->expected[i], seen->done[k]);
    if (!done)
      return false;
  }
  return true;
}

/* Checks one message from the agent and answers what a gateway answers. */
static void on_agent_message(void *router, const zmq_msg_t *id, const zmq_msg_t *body, struct seen *seen) {
  json_t *m = json_loadb(zmq_msg_data((zmq_msg_t *)body), zmq_msg_size((zmq_msg_t *)body), JSON_ALLOW_NUL, NULL);
  const char *type = json_string_value(json_object_get(m, "type"));
  if (!json_is_object(m) || !type) {
    fprintf(stderr, "agent sent something that is not a typed JSON object: %.*s\n",
            (int)zmq_msg_size((zmq_msg_t *)body), (const char *)zmq_msg_data((zmq_msg_t *)body));
    abort();
  }
  const char *job = json_string_value(json_object_get(m, "job"));
  if (!strcmp(type, "register")) {
    send_json(router, id, json_pack("{s:s, s:i, s:[]}", "type", "registered", "heartbeat_ms", 200, "jobs"));
  } else if (!strcmp(type, "started")) {
    if (!job)
      abort();
    add_id(seen->expected, &seen->n_expected, job);
  } else if (!strcmp(type, "done")) {
    const char *status = json_string_value(json_object_get(m, "status"));
    if (!job || !status || !json_is_integer(json_object_get(m, "exit_code"))) {
      fprintf(stderr, "done without job, status or exit code\n");
      abort();
    }
    if (strcmp(status, "succeeded") && strcmp(status, "failed") && strcmp(status, "cancelled") &&
        strcmp(status, "preempted")) {
      fprintf(stderr, "done with status \"%s\"\n", status);
      abort();
    }
    add_id(seen->done, &seen->n_done, job);
    send_json(router, id,
              json_pack("{s:s, s:s, s:I}", "type", "done_recorded", "job", job, "attempt",
                        (json_int_t)sl_json_get_int(m, "attempt", 1)));
  }
  json_decref(m);
}

/* Reads what the agent sent until it is quiet for wait_ms; *have_id is set
 * once its routing id is known. */
static void pump(void *router, zmq_msg_t *id, bool *have_id, struct seen *seen, long wait_ms) {
  zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&it, 1, wait_ms) > 0) {
    zmq_msg_t who, body;
    zmq_msg_init(&who);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&who, router, 0) < 0 || !zmq_msg_more(&who) || zmq_msg_recv(&body, router, 0) < 0) {
      zmq_msg_close(&who);
      zmq_msg_close(&body);
      continue;
    }
    if (zmq_msg_more(&body)) {
      fprintf(stderr, "agent sent a message of more than one frame\n");
      abort();
    }
    if (!*have_id) {
      zmq_msg_copy(id, &who);
      *have_id = true;
    }
    on_agent_message(router, &who, &body, seen);
    zmq_msg_close(&who);
    zmq_msg_close(&body);
    wait_ms = 0;
  }
}

static void *zctx;
static char server_public[41], server_secret[41], client_public[41], client_secret[41];

static void setup_once(void) {
  if (zctx)
    return;
  setenv("SPOTLAB_QUIET", "1", 0);
  sl_log_init("fuzz-agent");
  signal(SIGPIPE, SIG_IGN);
  zctx = zmq_ctx_new();
  if (!zctx || zmq_curve_keypair(server_public, server_secret) < 0 ||
      zmq_curve_keypair(client_public, client_secret) < 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 64 * 1024)
    return 0;
  setup_once();
  const char *tmp = getenv("TMPDIR");
  char dir[256];
  snprintf(dir, sizeof dir, "%s/fuzz-agent-XXXXXX", tmp && *tmp ? tmp : "/dev/shm");
  if (!mkdtemp(dir))
    abort();

  const uint8_t *p = data + 1, *end = data + size, *sec[3 + MSG_MAX];
  size_t sec_len[3 + MSG_MAX], n_sec = 0;
  while (n_sec < 3 + MSG_MAX && next_section(&p, end, &sec[n_sec], &sec_len[n_sec]))
    n_sec++;
  static const char *names[3] = {"fd3", "out", "err"};
  for (size_t i = 0; i < 3; i++)
    write_file(dir, names[i], i < n_sec ? sec[i] : NULL, i < n_sec ? sec_len[i] : 0, 0600);
  static const char *ends[4] = {"exit 0", "exit 1", "exit 3", "kill -9 $$"};
  char program[2048], script[600];
  snprintf(program, sizeof program,
           "#!/bin/sh\n[ -d \"$SPOTLAB_CHECKPOINT_DIR\" ] && printf ckpt > \"$SPOTLAB_CHECKPOINT_DIR/c.tc\"\n"
           "sed \"s|@CKPT@|$SPOTLAB_CHECKPOINT_DIR|g\" '%s/fd3' >&3 2>/dev/null\n"
           "cat '%s/out'\ncat '%s/err' >&2\n%s\n",
           dir, dir, dir, ends[data[0] & 3]);
  write_file(dir, "train", (const uint8_t *)program, strlen(program), 0700);
  snprintf(script, sizeof script, "exec '%s/train'", dir);

  void *router = zmq_socket(zctx, ZMQ_ROUTER);
  int one = 1, zero = 0;
  zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, server_secret, 40);
  zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
  char endpoint[256];
  size_t endpoint_len = sizeof endpoint;
  if (zmq_bind(router, "tcp://127.0.0.1:*") < 0 ||
      zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_len) < 0)
    abort();

  struct wk_config cfg = {.spot = true, .heartbeat_ms = 200, .register_timeout_ms = 200,
                          .metrics_per_s = 50, .output_lines_per_s = 50, .notice_poll_ms = 1000,
                          .notice_margin_ms = 100, .sigterm_notice_ms = 2000, .kill_grace_ms = 200,
                          .run_sync_ms = 1000};
  snprintf(cfg.gateway, sizeof cfg.gateway, "%s", endpoint);
  memcpy(cfg.gateway_public, server_public, 41);
  memcpy(cfg.public_key, client_public, 41);
  memcpy(cfg.secret_key, client_secret, 41);
  snprintf(cfg.instance, sizeof cfg.instance, "i-fuzz");
  snprintf(cfg.type, sizeof cfg.type, "local.small");
  snprintf(cfg.zone, sizeof cfg.zone, "local-a");
  snprintf(cfg.work_dir, sizeof cfg.work_dir, "%s/work", dir);
  snprintf(cfg.store, sizeof cfg.store, "file://%s/store", dir);
  char train[300];
  snprintf(train, sizeof train, "%s/train", dir);
  snprintf(cfg.train, sizeof cfg.train, "%s", train);
  mkdir(cfg.work_dir, 0700);

  int sig[2];
  if (pipe(sig) < 0)
    abort();
  struct run run = {.signal_fd = sig[0]};
  if (wk_agent_new(&cfg, train, &run.agent) < 0)
    abort();
  pthread_t thread;
  if (pthread_create(&thread, NULL, agent_thread, &run) != 0)
    abort();

  zmq_msg_t id;
  zmq_msg_init(&id);
  bool have_id = false;
  struct seen seen = {0};
  int64_t limit = sl_time_mono_us() + SETTLE_LIMIT_S * SL_US_PER_S;
  while (!have_id && sl_time_mono_us() < limit)
    pump(router, &id, &have_id, &seen, 50);
  if (!have_id) {
    fprintf(stderr, "the agent never registered\n");
    abort();
  }
  bool shut = false; /* a shutdown went: the agent may end before it reads what follows */
  for (size_t i = 3; i < n_sec; i++) {
    json_t *m = tame(sec[i], sec_len[i], script);
    if (json_is_object(m)) {
      const char *type = sl_json_get_str(m, "type", "");
      const char *job = json_string_value(json_object_get(m, "job"));
      if (!strcmp(type, "assign") && job && !shut)
        add_id(seen.expected, &seen.n_expected, job); /* started or refused, it ends in a done */
      shut |= !strcmp(type, "shutdown");
      send_json(router, &id, m);
    } else {
      json_decref(m);
      send_to(router, &id, (const char *)sec[i], sec_len[i]);
    }
    pump(router, &id, &have_id, &seen, 0);
  }
  /* the jobs run to their end (a notice or the shutdown would cut them short) */
  int64_t settle = sl_time_mono_us() + SETTLE_LIMIT_S * SL_US_PER_S;
  while (!all_done(&seen) && sl_time_mono_us() < settle)
    pump(router, &id, &have_id, &seen, 10);
  if (data[0] & 4) {
    unsigned char b = SIGTERM;
    if (write(sig[1], &b, 1) != 1)
      abort();
  }
  send_json(router, &id, json_pack("{s:s}", "type", "shutdown"));
  limit = sl_time_mono_us() + STOP_LIMIT_S * SL_US_PER_S;
  while (!atomic_load(&run.ended)) {
    if (sl_time_mono_us() > limit) {
      fprintf(stderr, "the agent did not stop within %d s of the shutdown\n", STOP_LIMIT_S);
      abort();
    }
    pump(router, &id, &have_id, &seen, 10);
  }
  pthread_join(thread, NULL);
  pump(router, &id, &have_id, &seen, 0);
  wk_agent_free(run.agent); /* its socket lingers until what it queued has gone */
  pump(router, &id, &have_id, &seen, 0);
  if (run.result != 0) {
    fprintf(stderr, "wk_agent_run returned %d\n", run.result);
    abort();
  }
  if (!all_done(&seen)) {
    fprintf(stderr, "a job assigned or started never sent its done\n");
    abort();
  }
  zmq_msg_close(&id);
  zmq_close(router);
  close(sig[0]);
  close(sig[1]);
  fuzz_remove_dir(dir);
  return 0;
}
