/* Worker agent.
 *
 * The only owner of the DEALER socket. Registration is soft state: the agent
 * sends register until a "registered" reply arrives, again whenever the
 * gateway answers a heartbeat with "reregister" (it restarted and does not
 * know us), again after SILENT_INTERVALS heartbeats of silence, and once
 * the link is back after the connection dropped (a socket monitor tells).
 * The gateway answers a heartbeat with what it recorded of the jobs it
 * names, so an idle worker's get no answer: its register after that silence
 * only asks for word from the gateway (the orphan timeout counts from the
 * last), and it stays registered. While
 * not registered, step metrics wait in their job's resend ring, messages
 * that must arrive wait in the outbox, and a job whose child ended holds its
 * done (until shortly before the exit deadline): the gateway may have lost
 * what was in flight, "registered" says from which step to send again (which
 * needs the job still there), and a checkpoint must not reach the gateway
 * before the steps it covers, or a resume from it would skip steps the
 * gateway never recorded. A job that ended stays, with its done, until the
 * gateway answers done_recorded: after "registered" (or a "resend" asking
 * for step metrics the done named and the gateway lacks) its step metrics
 * go again, then its done. Messages
 * that must not be lost (checkpoint, done, result, notice) that cannot be
 * queued on the socket wait in a bounded outbox, in order; others are dropped
 * when the socket is full. Once a notice or shutdown arrives no new job is
 * started, and the loop ends when every job has sent done, or at the notice
 * deadline, whichever is first. The instance's GPUs are read once, at
 * start, and go out in every register; while a job trains on GPUs they are
 * sampled every GPU_SAMPLE_US and the sample rides on its step metrics. */
#include "agent.h"

#include "conf.h"
#include "config.h" /* the build's: SPOTLAB_VERSION */
#include "gpuinfo.h"
#include "job.h"
#include "link.h"
#include "notice.h"
#include "presign.h"
#include "sl_digest.h"
#include "sl_err.h"
#include "sl_frame.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define TOPIC "worker"
#define MAX_JOBS 16
#define OUTBOX_MAX 1024
#define END_ACK_WAIT_US (2 * SL_US_PER_S) /* a stopping worker's wait for done_recorded */
#define SILENT_INTERVALS 10
#define DATA_FORGET_MAX 1024 /* hashes in a data_forget, and copies named in a register */
#define FIXED_ITEMS 6 /* socket, signals, notices, link monitor, presigner's link monitor and socket */
#define POLL_MAX (FIXED_ITEMS + MAX_JOBS * WK_STREAM_N)
#define END_HOLD_US (200 * SL_US_PER_MS) /* a held done goes out this long before exit_by */
#define GPU_SAMPLE_US (5 * SL_US_PER_S)

#define CUDA_CHECK_MS (30 * 1000) /* spotlab-train --check-cuda, once at start */

struct wk_agent {
  const struct wk_config *cfg;
  struct wk_job_env env;
  void *zctx;
  struct wk_link *link; /* the DEALER to the gateway */
  struct wk_store *store;
  struct wk_presigner *presigner; /* s3:// store: URLs from the gateway */
  struct sl_s3_signer signer;     /* the presigner's, for the store and the jobs' orphan URLs */
  struct wk_notice_watcher *watcher;
  struct wk_nvml *nvml;         /* NULL: no NVIDIA driver (gpus.reason says why) */
  struct wk_gpu_inventory gpus;
  int64_t next_gpu_sample_us;
  struct wk_job *jobs[MAX_JOBS];
  size_t njobs;
  char *outbox[OUTBOX_MAX];
  size_t outbox_n;
  bool registered, stopping;
  bool register_unread; /* a register went out on this connection since the socket was last read */
  bool resending; /* step metrics sent again go ahead of the held outbox */
  bool metrics_behind; /* the socket refused a step metric: the next "recorded" brings it again */
  int64_t acks_until_us; /* stopping: ended jobs wait this long for done_recorded */
  int64_t heartbeat_us, next_heartbeat_us, register_sent_us, last_heard_us;
  int64_t last_contact_us; /* the gateway's last message (orphan_timeout_ms) */
  bool noticed;
  struct wk_notice notice; /* the notice the jobs leave for, when noticed: said in each register */
  bool at_risk; /* a rebalance recommendation its jobs went on through: said in each register */
  struct wk_notice held_notice; /* taken by the pump: reported, its jobs' part still to do */
  bool notice_held;
  bool stop_held;  /* SIGINT taken by the pump: the jobs stop after the call */
  int signal_fd;   /* the signal pipe's read end, or -1 */
  bool orphaned; /* stopped for orphan_timeout_ms without word: nothing waits for the gateway */
  int64_t exit_by_us; /* monotonic; INT64_MAX = none */
};

/* ---- sending ---- */

static int send_text(struct wk_agent *a, const char *text) {
  int r = zmq_send(wk_link_socket(a->link), text, strlen(text), ZMQ_DONTWAIT);
  return r < 0 ? sl_err_from_zmq(zmq_errno()) : 0;
}

static void flush_outbox(struct wk_agent *a) {
  size_t i = 0;
  while (i < a->outbox_n && send_text(a, a->outbox[i]) == 0) free(a->outbox[i++]);
  memmove(a->outbox, a->outbox + i, (a->outbox_n - i) * sizeof *a->outbox);
  a->outbox_n -= i;
}

static bool is_step_metric(const json_t *msg) {
  const json_t *data = json_object_get(msg, "data");
  return !strcmp(sl_json_get_str(msg, "type", ""), "metric") &&
         json_is_integer(json_object_get(data, "step")) && !json_object_get(data, "event");
}

/* Takes msg. */
static void agent_send(void *ctx, json_t *msg, bool reliable) {
  struct wk_agent *a = ctx;
  bool step_metric = is_step_metric(msg);
  if ((!a->registered || (a->metrics_behind && !a->resending)) && step_metric) {
    json_decref(msg); /* kept in the job's resend ring; "registered" or "recorded" brings it out */
    return;
  }
  char *text = json_dumps(msg, JSON_COMPACT);
  json_decref(msg);
  if (!text) return;
  if (a->registered && !a->resending) flush_outbox(a);
  /* unregistered, the outbox holds back what must arrive; the rest goes past it */
  bool may_send = a->registered && !a->resending ? a->outbox_n == 0 : !reliable;
  if (may_send && send_text(a, text) == 0) {
    free(text);
    return;
  }
  if (reliable && a->outbox_n < OUTBOX_MAX) {
    a->outbox[a->outbox_n++] = text;
    return;
  }
  if (step_metric) /* a hole the gateway would not see: it goes again after "recorded" */
    a->metrics_behind = true;
  sl_debug(TOPIC, "gateway not keeping up; message dropped");
  free(text);
}

static json_t *jobs_array(const struct wk_agent *a) {
  json_t *arr = json_array();
  for (size_t i = 0; i < a->njobs; i++)
    json_array_append_new(arr, json_pack("{s:s, s:I, s:I}", "job", wk_job_id(a->jobs[i]), "attempt",
                                         (json_int_t)wk_job_attempt(a->jobs[i]), "step",
                                         (json_int_t)wk_job_step(a->jobs[i])));
  return arr;
}

static void send_register(struct wk_agent *a, int64_t now) {
  json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:b, s:s, s:o, s:o}", "type", "register", "instance",
                        a->cfg->instance, "instance_type", a->cfg->type, "zone", a->cfg->zone, "spot",
                        a->cfg->spot, "version", SPOTLAB_VERSION, "jobs", jobs_array(a), "gpus",
                        wk_gpu_inventory_json(&a->gpus));
  if (m && a->at_risk) /* so that a restarted gateway gives the instance no new job either */
    json_object_set_new(m, "at_risk", json_true());
  if (m && a->noticed) /* a notice a restarted gateway may not have heard */
    json_object_set_new(m, "notice", json_pack("{s:s, s:I}", "action", a->notice.action, "deadline_us",
                                               (json_int_t)a->notice.deadline_us));
  json_t *data = wk_data_copies(a->cfg->work_dir, DATA_FORGET_MAX);
  if (m && json_array_size(data)) /* what the gateway deleted while out of touch is forgotten */
    json_object_set(m, "data", data);
  json_decref(data);
  agent_send(a, m, false);
  a->register_sent_us = now;
  a->register_unread = true;
  sl_debug(TOPIC, "register sent");
}

static void send_heartbeat(struct wk_agent *a, int64_t now) {
  json_t *jobs = jobs_array(a);
  for (size_t i = 0; i < a->njobs; i++) /* for the gateway's energy estimate */
    wk_job_utilisation(a->jobs[i], now, json_array_get(jobs, i));
  json_t *m = json_pack("{s:s, s:s, s:o}", "type", "heartbeat", "instance", a->cfg->instance, "jobs",
                        jobs);
  agent_send(a, m, false);
  a->next_heartbeat_us = now + a->heartbeat_us;
}

static void read_link(struct wk_agent *a, int64_t now);
static bool notice_leaves(const struct wk_agent *a, const struct wk_notice *n);
static void report_notice(struct wk_agent *a, const struct wk_notice *n, bool leaving);
static void act_on_notice(struct wk_agent *a, const struct wk_notice *n);
static void read_signals(struct wk_agent *a, int fd, bool in_call);

/* While a store call holds the loop (a slow upload, S3's tries), the socket
 * is not read: what the gateway sends waits for the call's end. The gateway
 * must still hear from the worker, or it takes the instance for lost (after
 * heartbeat_timeout, or a restarted gateway after register_timeout without
 * a register). So the link is tended as in the loop; an unregistered worker
 * sends a register when a connection comes up (or register_timeout_ms after
 * its last), only one while its answer cannot be read, and heartbeats after
 * it. A heartbeat a gateway does not expect only brings a "reregister".
 * A spot notice or a SIGTERM that comes meanwhile is reported to the
 * gateway at once (an upload may take a good part of the notice's two
 * minutes), and its jobs' part follows when the call is over. */
static void pump(void *ctx) {
  struct wk_agent *a = ctx;
  int64_t now = sl_time_mono_us();
  read_link(a, now);
  if (wk_link_tick(a->link, now) > 0) a->registered = a->register_unread = false;
  if (!a->registered && !a->register_unread &&
      now - a->register_sent_us >= a->cfg->register_timeout_ms * SL_US_PER_MS)
    send_register(a, now);
  if ((a->registered || a->register_unread) && now >= a->next_heartbeat_us) send_heartbeat(a, now);
  /* a notice is reported now and applied once the call is over: the jobs'
   * part may make store calls of its own */
  if (a->watcher && !a->notice_held && wk_notice_watcher_take(a->watcher, &a->held_notice) == 1) {
    report_notice(a, &a->held_notice, notice_leaves(a, &a->held_notice));
    a->notice_held = true;
  }
  /* so is a SIGTERM (its deadline counts from now); a SIGINT stops the jobs
   * after the call. A signal while a notice is held waits for the loop. */
  if (a->signal_fd >= 0 && !a->notice_held)
    read_signals(a, a->signal_fd, true);
}

/* ---- gateway requests ---- */

static struct wk_job **find_job(struct wk_agent *a, const char *id) {
  for (size_t i = 0; id && i < a->njobs; i++)
    if (!strcmp(wk_job_id(a->jobs[i]), id)) return &a->jobs[i];
  return NULL;
}

/* Errors a start may meet that say nothing of the job: the store or the
 * gateway did not answer (a restart), or S3 throttled or failed on every
 * try (-EAGAIN: its 429 or 5xx). The gateway tries such a start again
 * ("retry" in done). */
static bool transient(int err) { return err == -EAGAIN || sl_err_unanswered(err); }

static void refuse(struct wk_agent *a, const json_t *m, const char *status, const char *why, int err) {
  const char *id = json_string_value(json_object_get(m, "job"));
  sl_warn(TOPIC, "assign %s refused: %s", id ? id : "(no id)", why);
  if (!id) return;
  char fixed[600]; /* a reason cut to fit its buffer still goes out: JSON holds only UTF-8 */
  json_t *d = json_pack("{s:s, s:s, s:I, s:s, s:i, s:s, s:n}", "type", "done", "job", id, "attempt",
                        (json_int_t)sl_json_get_int(m, "attempt", 1), "status", status, "exit_code", -1,
                        "message", sl_utf8_text(why, fixed, sizeof fixed), "step");
  if (d && transient(err)) json_object_set_new(d, "retry", json_true());
  if (d) agent_send(a, d, true);
}

static void remove_job(struct wk_agent *a, struct wk_job **j) {
  wk_job_free(*j);
  *j = a->jobs[--a->njobs];
}

static void on_assign(struct wk_agent *a, const json_t *m) {
  const char *id = json_string_value(json_object_get(m, "job"));
  struct wk_job **old = find_job(a, id);
  if (old && wk_job_ended(*old) && wk_job_attempt(*old) != sl_json_get_int(m, "attempt", -1)) {
    wk_job_remove_folder(*old); /* a new attempt: the gateway has the old one's end */
    remove_job(a, old);
  }
  if (find_job(a, id)) {
    sl_debug(TOPIC, "assign %s: already running", id);
    return;
  }
  if (a->stopping) return refuse(a, m, "preempted", "the instance is stopping", 0);
  if (a->njobs == MAX_JOBS) return refuse(a, m, "failed", "too many jobs on this worker", 0);
  char err[512] = "";
  struct wk_job *j;
  int r = wk_job_start(&a->env, m, &j, err, sizeof err);
  if (r < 0) return refuse(a, m, "failed", err[0] ? err : sl_strerror(r), r);
  a->jobs[a->njobs++] = j;
}

static void stop_all(struct wk_agent *a) {
  a->stopping = true;
  for (size_t i = 0; i < a->njobs; i++) wk_job_cancel(a->jobs[i]);
}

/* One entry of registered.jobs or a resend: {"job","attempt","metric_step",
 * "checkpoint_step"}, the newest step and checkpoint the gateway recorded of
 * the job; the steps after it (in flight when a gateway died, say) are sent
 * again, then a newer checkpoint's report, and then an ended job's done. */
static void resend_job(struct wk_agent *a, const json_t *v) {
  struct wk_job **j = find_job(a, json_string_value(json_object_get(v, "job")));
  json_t *step = json_object_get(v, "metric_step");
  if (!j || sl_json_get_int(v, "attempt", -1) != wk_job_attempt(*j)) return;
  a->resending = true;
  size_t n = wk_job_resend_metrics(*j, json_is_integer(step) ? json_integer_value(step) : -1);
  a->resending = false;
  if (n) sl_info(TOPIC, "%s: %zu step metrics the gateway did not record sent again", wk_job_id(*j), n);
  json_t *ckpt = json_object_get(v, "checkpoint_step"); /* after the steps it covers */
  if (json_is_integer(ckpt)) wk_job_resend_checkpoint(*j, json_integer_value(ckpt));
  if (wk_job_ended(*j)) wk_job_send_done(*j);
}

static void resend_metrics(struct wk_agent *a, const json_t *jobs) {
  size_t i;
  json_t *v;
  json_array_foreach(jobs, i, v) resend_job(a, v);
  /* ended jobs the gateway did not list (it ended them already): their done
   * again, for its done_recorded */
  for (size_t k = 0; k < a->njobs; k++) {
    bool listed = false;
    json_array_foreach(jobs, i, v) listed |= !strcmp(sl_json_get_str(v, "job", ""), wk_job_id(a->jobs[k]));
    if (!listed && wk_job_ended(a->jobs[k])) wk_job_send_done(a->jobs[k]);
  }
}

/* A notice or a stop the pump took during a store call waits for the loop:
 * the jobs' reading returns to it first. */
static bool held(void *ctx) {
  const struct wk_agent *a = ctx;
  return a->notice_held || a->stop_held;
}

static bool data_in_use(void *ctx, const char *sha) {
  const struct wk_agent *a = ctx;
  for (size_t k = 0; k < a->njobs; k++)
    if (!wk_job_ended(a->jobs[k]) && wk_job_uses_data(a->jobs[k], sha))
      return true;
  return false;
}

/* The gateway deleted these uploaded data files from the store: this
 * worker's copies go too, but for those a job here still reads. */
static void forget_data(struct wk_agent *a, const json_t *shas) {
  size_t i;
  const json_t *v;
  if (!json_is_array(shas) || json_array_size(shas) > DATA_FORGET_MAX) {
    sl_warn(TOPIC, "data_forget needs \"sha256\": an array of at most 1024 hashes");
    return;
  }
  json_array_foreach(shas, i, v) {
    const char *sha = json_string_value(v);
    if (!sl_sha256_hex_ok(sha)) {
      sl_warn(TOPIC, "data_forget: \"%.80s\" is no SHA-256", sha ? sha : "(not a string)");
      continue;
    }
    if (data_in_use(a, sha)) {
      sl_info(TOPIC, "the deleted data file %.12s… stays here while a job reads it", sha);
      continue;
    }
    int r = wk_data_forget(a->cfg->work_dir, sha);
    if (r < 0)
      sl_warn(TOPIC, "cannot remove the deleted data file %.12s…: %s", sha, sl_strerror(r));
    else if (r > 0)
      sl_info(TOPIC, "removed the deleted data file %.12s… (%d entries)", sha, r);
  }
}

static void on_message(struct wk_agent *a, const json_t *m, int64_t now) {
  const char *type = sl_json_get_str(m, "type", "");
  struct wk_job **j = find_job(a, json_string_value(json_object_get(m, "job")));
  a->last_heard_us = a->last_contact_us = now;
  if (!strcmp(type, "registered")) {
    int64_t hb = sl_json_get_int(m, "heartbeat_ms", a->cfg->heartbeat_ms);
    a->heartbeat_us = (hb < 10 ? 10 : hb > 600000 ? 600000 : hb) * SL_US_PER_MS;
    if (!a->registered) sl_info(TOPIC, "registered with the gateway");
    a->registered = true;
    a->next_heartbeat_us = now + a->heartbeat_us;
    a->metrics_behind = false;
    resend_metrics(a, json_object_get(m, "jobs"));
  } else if (!strcmp(type, "recorded")) {
    /* what the gateway saved; after a step metric the socket refused, the
     * ones after that step go again (live ones wait in the ring meanwhile) */
    bool behind = a->metrics_behind;
    a->metrics_behind = false;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(m, "jobs"), i, v) {
      struct wk_job **rj = find_job(a, json_string_value(json_object_get(v, "job")));
      json_t *st = json_object_get(v, "metric_step");
      if (rj && json_is_integer(st))
        wk_job_metrics_recorded(*rj, sl_json_get_int(v, "attempt", -1), json_integer_value(st));
      if (rj && behind && !wk_job_ended(*rj)) {
        a->resending = true;
        wk_job_resend_metrics(*rj, json_is_integer(st) ? json_integer_value(st) : -1);
        a->resending = false;
      }
    }
  } else if (!strcmp(type, "resend")) {
    if (a->registered) resend_job(a, m);
  } else if (!strcmp(type, "done_recorded")) {
    if (j && wk_job_done_recorded(*j, sl_json_get_int(m, "attempt", -1))) {
      wk_job_remove_folder(*j);
      remove_job(a, j);
    }
  } else if (!strcmp(type, "reregister")) {
    a->registered = false;
    send_register(a, now);
  } else if (!strcmp(type, "assign")) {
    on_assign(a, m);
  } else if (!strcmp(type, "cancel")) {
    json_t *grace = json_object_get(m, "grace_ms"); /* a gang's rank whose peer is gone: 0 */
    json_t *attempt = json_object_get(m, "attempt");
    if (j && attempt && json_integer_value(attempt) != wk_job_attempt(*j))
      j = NULL; /* an attempt that is over; the job runs here again, a newer one */
    if (j && json_is_integer(grace) && json_integer_value(grace) >= 0)
      wk_job_stop(*j, json_integer_value(grace) < a->cfg->kill_grace_ms ? json_integer_value(grace)
                                                                      : a->cfg->kill_grace_ms);
    else if (j)
      wk_job_cancel(*j);
  } else if (!strcmp(type, "checkpoint_now")) {
    if (j) wk_job_checkpoint_now(*j);
  } else if (!strcmp(type, "checkpoint_every")) {
    json_t *n = json_object_get(m, "steps");
    if (j && json_is_integer(n) && json_integer_value(n) >= 0 && json_integer_value(n) <= 100000000)
      wk_job_set_checkpoint_every(*j, json_integer_value(n));
  } else if (!strcmp(type, "checkpoint_recorded")) {
    if (j) wk_job_checkpoint_recorded(*j, sl_json_get_int(m, "attempt", -1), sl_json_get_int(m, "step", -1));
  } else if (!strcmp(type, "data_forget")) {
    forget_data(a, json_object_get(m, "sha256"));
  } else if (!strcmp(type, "shutdown")) {
    sl_info(TOPIC, "shutdown requested");
    stop_all(a);
  } else if (!strcmp(type, "error") || (!strcmp(type, "reply") && !sl_json_get_bool(m, "ok", true))) {
    sl_warn(TOPIC, "gateway error: %s", sl_json_get_str(json_object_get(m, "error"), "message", "?"));
  } else {
    sl_warn(TOPIC, "unknown message type \"%s\" from the gateway", type);
  }
}

static void read_socket(struct wk_agent *a, int64_t now) {
  for (int n = 0; n < 256; n++) {
    struct sl_msg msg;
    sl_msg_init(&msg, (struct sl_limits){8, 1u << 20, 2u << 20});
    int r = sl_zmq_recv(wk_link_socket(a->link), &msg, ZMQ_DONTWAIT);
    if (r == -EAGAIN || (r < 0 && r != SL_ELIMIT)) {
      sl_msg_done(&msg);
      return;
    }
    json_t *m = NULL;
    char why[128] = "";
    if (r == SL_ELIMIT || msg.n == 0) {
      sl_warn(TOPIC, "message from the gateway over the size limit; dropped");
    } else {
      struct sl_frame *f = &msg.frames[msg.n - 1];
      if (sl_json_parse((const char *)f->data, f->len, 32, &m, why, sizeof why) < 0 || !json_is_object(m))
        sl_warn(TOPIC, "malformed message from the gateway: %s", why[0] ? why : "not an object");
      else
        on_message(a, m, now);
    }
    json_decref(m);
    sl_msg_done(&msg);
  }
}

/* The link's events: a dropped connection may have lost messages in flight
 * (a gateway that died), and a refused one is replaced with its socket, so
 * registration starts over; once the handshake with a gateway succeeds,
 * register at once. */
static void read_link(struct wk_agent *a, int64_t now) {
  int ev = wk_link_events(a->link);
  if (ev & WK_LINK_LOST) a->register_unread = false; /* that register may be lost too */
  if ((ev & WK_LINK_LOST) && a->registered) {
    if (!(ev & WK_LINK_REFUSED)) sl_info(TOPIC, "gateway connection lost; registering again once it is back");
    a->registered = false;
  }
  if ((ev & WK_LINK_UP) && !(ev & WK_LINK_REFUSED) && !a->registered) send_register(a, now);
}

/* ---- notices and signals ---- */

/* The gateway hears of a notice at once: it may start the job's next
 * instance meanwhile. leaving: whether the jobs stop for it. */
static void report_notice(struct wk_agent *a, const struct wk_notice *n, bool leaving) {
  int64_t real = sl_time_real_us();
  a->at_risk |= !leaving;
  sl_info("worker.notice", "notice %s: deadline in %lld ms%s", n->action,
          (long long)((n->deadline_us - real) / 1000), leaving ? "" : "; checkpointing, going on");
  json_t *m = json_pack("{s:s, s:s, s:s, s:I, s:b}", "type", "notice", "instance", a->cfg->instance,
                        "action", n->action, "deadline_us", (json_int_t)n->deadline_us, "leaving",
                        leaving);
  agent_send(a, m, true);
}

/* The jobs' part: checkpoint, stop by the deadline, exit just before it. */
static void apply_notice(struct wk_agent *a, const struct wk_notice *n) {
  int64_t now = sl_time_mono_us();
  int64_t deadline = now + (n->deadline_us - sl_time_real_us());
  if (a->noticed && deadline >= a->exit_by_us) return;
  a->noticed = a->stopping = true;
  a->notice = *n;
  /* Exit a little before the deadline: the jobs get the rest. */
  int64_t margin = a->cfg->notice_margin_ms * SL_US_PER_MS;
  int64_t left = deadline - now;
  a->exit_by_us = deadline - (margin / 4 < left / 8 ? margin / 4 : left / 8);
  bool orphan = !strcmp(n->action, "orphan");
  for (size_t i = 0; i < a->njobs; i++) wk_job_notice(a->jobs[i], deadline, orphan);
}

/* A rebalance recommendation says the instance is at higher risk, not that
 * it goes: unless told to move, the jobs checkpoint now and go on, and the
 * interruption notice, if one comes, finds little work to lose. */
static bool notice_leaves(const struct wk_agent *a, const struct wk_notice *n) {
  return strcmp(n->action, "rebalance") || a->cfg->move_on_rebalance;
}

/* The jobs' part of a notice reported: leave by its deadline, or checkpoint. */
static void act_on_notice(struct wk_agent *a, const struct wk_notice *n) {
  if (notice_leaves(a, n)) {
    apply_notice(a, n);
    return;
  }
  for (size_t i = 0; i < a->njobs; i++)
    wk_job_checkpoint_now(a->jobs[i]);
}

static void on_notice(struct wk_agent *a, const struct wk_notice *n) {
  report_notice(a, n, notice_leaves(a, n));
  act_on_notice(a, n);
}

/* in_call: a store call holds the loop (pump): what the jobs do waits. */
static void read_signals(struct wk_agent *a, int fd, bool in_call) {
  unsigned char sig[16];
  ssize_t k = read(fd, sig, sizeof sig);
  for (ssize_t i = 0; i < k; i++) {
    if (sig[i] == SIGTERM) {
      struct wk_notice n = {.action = "sigterm",
                            .deadline_us = sl_time_real_us() + a->cfg->sigterm_notice_ms * SL_US_PER_MS};
      if (!in_call) {
        on_notice(a, &n);
      } else if (!a->notice_held) {
        report_notice(a, &n, true);
        a->held_notice = n;
        a->notice_held = true;
      }
    } else {
      sl_info(TOPIC, "signal %d: stopping", sig[i]);
      if (in_call)
        a->stop_held = true;
      else
        stop_all(a);
    }
  }
}

/* ---- the loop ---- */

struct slot {
  size_t job;
  enum wk_stream stream;
};

static size_t build_poll(struct wk_agent *a, int signal_fd, zmq_pollitem_t *it, struct slot *slots) {
  size_t n = 0;
  for (size_t i = 0; i < a->njobs; i++) wk_job_flow(a->jobs[i], sl_time_mono_us());
  it[n++] = (zmq_pollitem_t){wk_link_socket(a->link), 0, ZMQ_POLLIN, 0};
  it[n++] = (zmq_pollitem_t){NULL, signal_fd, ZMQ_POLLIN, 0};
  it[n++] = (zmq_pollitem_t){NULL, a->watcher ? wk_notice_watcher_fd(a->watcher) : -1, ZMQ_POLLIN, 0};
  it[n++] = (zmq_pollitem_t){wk_link_monitor(a->link), 0, ZMQ_POLLIN, 0};
  /* the presigner's connection is tended here between store calls, and the
   * answers to what the jobs asked of it without waiting are read */
  it[n++] = a->presigner ? (zmq_pollitem_t){wk_presigner_monitor(a->presigner), 0, ZMQ_POLLIN, 0}
                         : (zmq_pollitem_t){NULL, -1, ZMQ_POLLIN, 0};
  it[n++] = a->presigner ? (zmq_pollitem_t){wk_presigner_socket(a->presigner), 0, ZMQ_POLLIN, 0}
                         : (zmq_pollitem_t){NULL, -1, ZMQ_POLLIN, 0};
  for (size_t i = 0; i < a->njobs; i++)
    for (int s = 0; s < WK_STREAM_N; s++) {
      int fd = wk_job_fd(a->jobs[i], (enum wk_stream)s);
      if (fd < 0) continue;
      slots[n] = (struct slot){i, (enum wk_stream)s};
      it[n++] = (zmq_pollitem_t){NULL, fd, ZMQ_POLLIN, 0};
    }
  return n;
}

/* A job that ended while the agent is not registered holds its done until
 * the agent is again, or until just before it must exit. An orphaned agent
 * holds nothing: the gateway has been silent for the orphan timeout, its
 * jobs' checkpoints are in the orphan copies, and each second the worker
 * waits is one more its instance costs before it powers off. */
static void tick_jobs(struct wk_agent *a, int64_t now) {
  bool may_end = a->registered || a->orphaned ||
                 (a->exit_by_us != INT64_MAX && now >= a->exit_by_us - END_HOLD_US);
  for (size_t i = 0; i < a->njobs; i++) wk_job_tick(a->jobs[i], now, may_end);
}

static void sample_gpus(struct wk_agent *a, int64_t now) {
  if (!a->nvml || now < a->next_gpu_sample_us) return;
  a->next_gpu_sample_us = now + GPU_SAMPLE_US;
  for (size_t i = 0; i < a->njobs; i++) {
    unsigned n;
    struct wk_gpu_usage u;
    if (wk_job_gpus(a->jobs[i], &n) && wk_gpu_usage_read(wk_nvml_source(a->nvml), 0, n, &u) == 0)
      wk_job_gpu_usage(a->jobs[i], &u);
  }
}

/* Cut off from the gateway for orphan_timeout_ms: stop as at a notice (each
 * job checkpoints, to the orphan URLs it was given while the gateway
 * answered where it has them, then the worker exits; on a cloud instance
 * the user data then powers it off). */
static void tick_orphan(struct wk_agent *a, int64_t now) {
  int64_t limit = a->cfg->orphan_timeout_ms * SL_US_PER_MS;
  if (!limit || a->noticed || now - a->last_contact_us < limit) return;
  sl_warn(TOPIC, "no word from the gateway for %lld s: checkpointing and exiting",
          (long long)(a->cfg->orphan_timeout_ms / 1000));
  struct wk_notice n = {.action = "orphan",
                        .deadline_us = sl_time_real_us() + a->cfg->sigterm_notice_ms * SL_US_PER_MS};
  a->orphaned = true;
  on_notice(a, &n);
}

/* Orphan checkpoint URLs are asked for only while the gateway answers (an
 * orphan could not get them anyway), without waiting; an answer is taken
 * even once the worker is stopping. */
static void tick_reserves(struct wk_agent *a, int64_t now) {
  for (size_t i = 0; i < a->njobs; i++)
    wk_job_keep_reserve(a->jobs[i], now, a->registered && !a->stopping);
}

static void tick_registration(struct wk_agent *a, int64_t now) {
  if (!a->registered) {
    if (now - a->register_sent_us >= a->cfg->register_timeout_ms * SL_US_PER_MS) send_register(a, now);
    return;
  }
  if (now - a->last_heard_us >= SILENT_INTERVALS * a->heartbeat_us) {
    sl_debug(TOPIC, "gateway silent for %d heartbeats; registering again", SILENT_INTERVALS);
    a->registered = a->njobs == 0; /* idle: silence is what the gateway says to an idle worker */
    a->last_heard_us = now;
    send_register(a, now);
  } else if (now >= a->next_heartbeat_us) {
    send_heartbeat(a, now);
  }
}

/* Stopping: every job ended, and the gateway recorded their ends or had
 * END_ACK_WAIT_US to answer. */
static bool stopped(struct wk_agent *a, int64_t now) {
  for (size_t i = 0; i < a->njobs; i++)
    if (!wk_job_ended(a->jobs[i])) {
      a->acks_until_us = 0;
      return false;
    }
  if (!a->njobs || a->orphaned) return true; /* an orphan's acks cannot come */
  if (!a->acks_until_us) a->acks_until_us = now + END_ACK_WAIT_US;
  return now >= a->acks_until_us;
}

static int64_t poll_timeout_ms(const struct wk_agent *a, int64_t now) {
  int64_t t = a->njobs ? 20 : 500;
  int64_t due = wk_link_due_us(a->link);
  if (due != INT64_MAX && (due - now) / 1000 < t) t = due > now ? (due - now) / 1000 : 0;
  if (a->registered) {
    int64_t hb = (a->next_heartbeat_us - now) / 1000;
    if (hb < t) t = hb < 0 ? 0 : hb;
  }
  return t;
}

int wk_agent_run(struct wk_agent *a, int signal_fd) {
  zmq_pollitem_t items[POLL_MAX];
  struct slot slots[POLL_MAX];
  int64_t now = sl_time_mono_us();
  a->last_heard_us = a->last_contact_us = now;
  a->signal_fd = signal_fd;
  send_register(a, now);
  for (;;) {
    if (a->notice_held) { /* taken while a store call held the loop */
      a->notice_held = false;
      act_on_notice(a, &a->held_notice);
    }
    if (a->stop_held) {
      a->stop_held = false;
      stop_all(a);
    }
    size_t n = build_poll(a, signal_fd, items, slots);
    int r = zmq_poll(items, (int)n, (long)poll_timeout_ms(a, sl_time_mono_us()));
    if (r < 0 && zmq_errno() != EINTR) return sl_err_from_zmq(zmq_errno());
    now = sl_time_mono_us();
    a->register_unread = false; /* the socket is read below */
    if (r > 0) {
      for (size_t i = FIXED_ITEMS; i < n; i++)
        if (items[i].revents) wk_job_readable(a->jobs[slots[i].job], slots[i].stream);
      if (items[3].revents & ZMQ_POLLIN) read_link(a, now);
      if (items[0].revents & ZMQ_POLLIN) read_socket(a, now);
      if (items[1].revents) read_signals(a, signal_fd, false);
      struct wk_notice note;
      if (items[2].revents && wk_notice_watcher_take(a->watcher, &note) == 1) on_notice(a, &note);
    }
    if (wk_link_tick(a->link, now) > 0) /* a new socket after a refusal */
      a->registered = a->register_unread = false;
    if (a->presigner) {
      if (r > 0 && items[5].revents) wk_presigner_read(a->presigner);
      wk_presigner_tend(a->presigner, now, r > 0 && items[4].revents);
    }
    sample_gpus(a, now);
    tick_jobs(a, now);
    tick_registration(a, now);
    tick_orphan(a, now);
    tick_reserves(a, now);
    if (a->registered) flush_outbox(a);
    if (a->stopping && stopped(a, now)) break;
    if (now >= a->exit_by_us) {
      sl_warn(TOPIC, "notice deadline reached with %zu jobs still running", a->njobs);
      break;
    }
  }
  if (a->registered)
    flush_outbox(a);
  else if (a->outbox_n)
    /* sent now they could tell a new gateway of a checkpoint past steps it
     * never recorded; without them it resumes from the last one it knows */
    sl_warn(TOPIC, "exiting before the gateway answered: %zu messages for it dropped", a->outbox_n);
  /* Give queued messages a moment to leave, bounded by the deadline. */
  int64_t left_ms = a->exit_by_us == INT64_MAX ? 2000 : (a->exit_by_us - sl_time_mono_us()) / 1000;
  int linger = (int)(left_ms < 0 ? 0 : left_ms > 2000 ? 2000 : left_ms);
  zmq_setsockopt(wk_link_socket(a->link), ZMQ_LINGER, &linger, sizeof linger);
  return 0;
}

static int open_socket(struct wk_agent *a) {
  struct wk_link_opts o = {.name = "agent", .sndhwm = 10000, .max_msg_bytes = 1 << 20, .heartbeat_ms = 2000};
  if (!(a->zctx = zmq_ctx_new())) return sl_err_from_zmq(zmq_errno());
  return wk_link_new(a->zctx, a->cfg, &o, &a->link);
}

/* The inventory, once: NVML when the driver is there, else zero GPUs and why. */
static void open_gpus(struct wk_agent *a) {
  char why[WK_GPU_REASON_MAX] = "";
  if (wk_nvml_open(&a->nvml, why, sizeof why) < 0) a->nvml = NULL;
  wk_gpu_inventory_read(wk_nvml_source(a->nvml), why, &a->gpus);
  const struct wk_gpu_inventory *g = &a->gpus;
  if (g->count)
    sl_info(TOPIC, "GPUs: %d x %s (%lld MiB each), driver %s%s%s", g->count, g->model,
            (long long)g->memory_mib, g->driver[0] ? g->driver : "?", g->reason[0] ? "; " : "", g->reason);
  else
    sl_info(TOPIC, "no GPUs: %s", g->reason);
}

int wk_agent_new(const struct wk_config *cfg, const char *train, struct wk_agent **ret) {
  struct wk_agent *a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  a->cfg = cfg;
  a->heartbeat_us = cfg->heartbeat_ms * SL_US_PER_MS;
  a->exit_by_us = INT64_MAX;
  a->signal_fd = -1;
  int r = open_socket(a);
  if (r < 0) goto fail;
  bool s3 = !strncmp(cfg->store, "s3://", 5);
  if (s3) {
    if ((r = wk_presigner_new(cfg, a->zctx, &a->presigner)) < 0) goto fail;
    a->signer = wk_presigner_signer(a->presigner);
  }
  if ((r = wk_store_open(cfg->store, s3 ? &a->signer : NULL, (uint64_t)cfg->part_bytes, &a->store)) < 0) {
    sl_err("worker.store", "store %s: %s", cfg->store, sl_strerror(r));
    goto fail;
  }
  wk_store_set_pump(a->store, pump, a);
  open_gpus(a);
  /* GPUs are used by default only when spotlab-train can train on them */
  bool train_cuda = a->gpus.count > 0 &&
                    wk_train_cuda_check(train, CUDA_CHECK_MS, a->gpus.unusable, sizeof a->gpus.unusable);
  if (a->gpus.count > 0 && !train_cuda)
    sl_warn(TOPIC, "spotlab-train cannot train on the GPUs: %s", a->gpus.unusable);
  a->env = (struct wk_job_env){.cfg = cfg, .store = a->store, .train = train, .gpus = &a->gpus,
                               .train_cuda = train_cuda, .signer = s3 ? &a->signer : NULL,
                               .send = agent_send, .ctx = a, .data_in_use = data_in_use,
                               .held = held};
  if (cfg->metadata[0]) {
    r = wk_notice_watcher_new(cfg->metadata, wk_config_metadata_kind(cfg), cfg->notice_poll_ms, &a->watcher);
    if (r < 0) {
      sl_err("worker.notice", "notice watcher: %s", sl_strerror(r));
      goto fail;
    }
  }
  *ret = a;
  return 0;
fail:
  wk_agent_free(a);
  return r;
}

struct wk_agent *wk_agent_free(struct wk_agent *a) {
  if (!a) return NULL;
  wk_notice_watcher_free(a->watcher);
  for (size_t i = 0; i < a->njobs; i++) wk_job_free(a->jobs[i]);
  for (size_t i = 0; i < a->outbox_n; i++) free(a->outbox[i]);
  wk_store_free(a->store); /* before the presigner its signer borrows */
  wk_presigner_free(a->presigner);
  wk_link_free(a->link);
  if (a->zctx) sl_zmq_ctx_term(a->zctx);
  wk_nvml_free(a->nvml);
  free(a);
  return NULL;
}
