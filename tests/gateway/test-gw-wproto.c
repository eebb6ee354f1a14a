/* The worker protocol alone (gw_wproto_handle), over the in-process
 * gateway of gw-fixture.h: a worker speaks only for its own instance and
 * about its own job attempt; messages before register ask it (once per
 * interval) to register again; register reports what the gateway holds,
 * cancels what it does not know and hears the done messages sent while
 * nobody listened; checkpoints are recorded; unknown or malformed messages
 * are answered or ignored and change nothing. */
#include "gw-fixture.h"
#include "harness.h"
#include "objstore.h"
#include "placemem.h"
#include "sched_int.h"

#include "sl_err.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool contains(const char *s, const char *part) {
  return s && strstr(s, part);
}

/* text with its "%s" (at most one) replaced by arg. */
static void subst(char *buf, size_t size, const char *text, const char *arg) {
  const char *at = strstr(text, "%s");
  if (!at)
    snprintf(buf, size, "%s", text);
  else
    snprintf(buf, size, "%.*s%s%s", (int)(at - text), text, arg, at + 2);
}

/* Two jobs, each running on its own instance: *ret_a on f-1, *ret_b on f-2. */
static struct fx *two_running(int64_t *ret_a, int64_t *ret_b) {
  struct fx *f = fx_new(NULL);
  if (!f)
    return NULL;
  *ret_a = fx_submit(f, "alice", "nb", "train", NULL);
  *ret_b = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  if (!fx_run_job(f, *ret_a, NULL) || !fx_run_job(f, *ret_b, NULL) ||
      strcmp(fx_job(f, *ret_a)->instance, "f-1") || strcmp(fx_job(f, *ret_b)->instance, "f-2")) {
    fprintf(stderr, "two_running: jobs did not start where expected\n");
    return fx_free(f);
  }
  fx_captures_clear(f);
  fx_bus_clear(f);
  return f;
}

/* One job running on f-1: *ret_id. */
static struct fx *one_running(int64_t *ret_id) {
  struct fx *f = fx_new(NULL);
  if (!f)
    return NULL;
  *ret_id = fx_submit(f, "alice", "nb", "train", NULL);
  if (!fx_run_job(f, *ret_id, NULL) || strcmp(fx_job(f, *ret_id)->instance, "f-1")) {
    fprintf(stderr, "one_running: the job did not start on f-1\n");
    return fx_free(f);
  }
  return f;
}

/* ---- who may speak about what ---- */

static void test_other_instance(void) {
  int64_t a, b;
  struct fx *f = two_running(&a, &b);
  CHECK(f != NULL);
  if (!f)
    return;
  char bid[16];
  fx_jid(b, bid);
  /* f-1's worker sends a message naming f-2 */
  fx_workerf(f, "f-1", "{s:s,s:s,s:s,s:s}", "type", "done", "instance", "f-2", "job", bid,
             "status", "succeeded");
  const json_t *e = fx_to_worker_last(f, "f-1", "error");
  CHECK(e != NULL);
  CHECK_STR(sl_json_get_str(json_object_get(e, "error"), "code", ""), sl_errname(SL_EAUTH));
  CHECK(contains(sl_json_get_str(json_object_get(e, "error"), "message", ""), "another instance"));
  CHECK_INT(fx_to_worker_count(f, "f-2", NULL), 0);
  CHECK_INT(fx_job_state(f, b), GW_JOB_RUNNING);
  CHECK_INT(f->n_bus, 0);

  /* a metric about the job of another instance, naming no instance: ignored */
  fx_metric(f, "f-1", b, 77, 1.0);
  fx_checkpoint(f, "f-1", b, 70, "ck/stolen");
  fx_done(f, "f-1", b, "failed", 1);
  CHECK_INT(fx_job(f, b)->step, 0);
  CHECK_STR(fx_job(f, b)->ckpt_key, "");
  CHECK_INT(fx_job_state(f, b), GW_JOB_RUNNING);
  CHECK_INT(f->n_bus, 0);
  /* and about an attempt of its own job that is not the current one */
  char aid[16];
  fx_jid(a, aid);
  fx_workerf(f, "f-1", "{s:s,s:s,s:i,s:{s:i,s:f}}", "type", "metric", "job", aid, "attempt", 7,
             "data", "step", 5, "loss", 1.0);
  CHECK_INT(fx_job(f, a)->step, 0);
  CHECK_INT(f->n_bus, 0);
  /* its own job, its own attempt: counted */
  fx_metric(f, "f-1", a, 5, 1.0);
  CHECK_INT(fx_job(f, a)->step, 5);
  CHECK_INT(fx_job_events(f, a, "metric"), 1);
  fx_free(f);
}

/* ---- before register ---- */

/* A job provisioning on f-1, whose worker has not registered: *ret_id. */
static struct fx *one_provisioning(int64_t *ret_id) {
  struct fx *f = fx_new(NULL);
  if (!f)
    return NULL;
  *ret_id = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  if (fx_job_state(f, *ret_id) != GW_JOB_PROVISIONING || strcmp(fx_job(f, *ret_id)->instance, "f-1")) {
    fprintf(stderr, "one_provisioning: the job is not provisioning on f-1\n");
    return fx_free(f);
  }
  return f;
}

static void test_reregister(void) {
  int64_t id;
  struct fx *f = one_provisioning(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  /* a worker that speaks before it registered: one "reregister" within the interval */
  for (int i = 0; i < 5; i++)
    fx_workerf(f, "f-1", "{s:s}", "type", "heartbeat");
  fx_metric(f, "f-1", id, 3, 1.0);
  CHECK_INT(fx_to_worker_count(f, "f-1", "reregister"), 1);
  CHECK_INT(fx_to_worker_count(f, "f-1", NULL), 1);
  CHECK(!fx_inst(f, "f-1")->registered);
  CHECK_INT(fx_job_events(f, id, "metric"), 0); /* a step metric waits for register */
  /* once the interval passed, asked again */
  fx_inst(f, "f-1")->reregister_mono_us -= 200 * SL_US_PER_MS;
  fx_workerf(f, "f-1", "{s:s}", "type", "heartbeat");
  CHECK_INT(fx_to_worker_count(f, "f-1", "reregister"), 2);
  /* register: answered, no more reregister */
  fx_register(f, "f-1", NULL, NULL);
  CHECK_INT(fx_to_worker_count(f, "f-1", "registered"), 1);
  fx_inst(f, "f-1")->reregister_mono_us -= 200 * SL_US_PER_MS;
  fx_workerf(f, "f-1", "{s:s}", "type", "heartbeat");
  CHECK_INT(fx_to_worker_count(f, "f-1", "reregister"), 2);
  fx_free(f);
}

/* A worker that has not registered with this (restarted) gateway: its step
 * metrics wait for register, so a checkpoint past the recorded steps is not
 * used (resuming there would skip steps nobody recorded); one at or before
 * them is. */
static void test_checkpoint_before_register(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_metric(f, "f-1", id, 40, 1.0);
  CHECK_INT(fx_job(f, id)->step, 40);
  fx_inst(f, "f-1")->registered = false; /* as after a gateway restart */
  fx_metric(f, "f-1", id, 80, 1.0);      /* dropped: sent again after registered */
  fx_checkpoint(f, "f-1", id, 80, fx_key(id, "ckpt-80"));
  CHECK_STR(fx_job(f, id)->ckpt_key, "");
  CHECK_INT(fx_job_events(f, id, "checkpoint"), 0);
  fx_checkpoint(f, "f-1", id, 40, fx_key(id, "ckpt-40"));
  CHECK_STR(fx_job(f, id)->ckpt_key, fx_key(id, "ckpt-40"));
  fx_free(f);
}

/* ---- register ---- */

static void test_register_ended(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_metric(f, "f-1", id, 90, 0.5);
  /* the worker lost the connection and registers again with what ended meanwhile */
  fx_inst(f, "f-1")->registered = false;
  char jid[16];
  fx_jid(id, jid);
  json_t *ended = json_pack("[{s:s,s:s,s:i,s:s,s:i}]", "type", "done", "job", jid, "attempt", 1,
                            "status", "succeeded", "step", 100);
  fx_register(f, "f-1", NULL, ended);
  json_decref(ended);
  CHECK_INT(fx_job_state(f, id), GW_JOB_SUCCEEDED);
  struct gw_job row;
  CHECK_INT(gw_store_job_get(f->store, id, &row), 0);
  CHECK_INT(row.step, 100);
  gw_job_done(&row);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "idle");
  const json_t *reg = fx_to_worker_last(f, "f-1", "registered");
  CHECK(reg && json_array_size(json_object_get(reg, "jobs")) == 0);
  /* the same done heard again (a second register) changes nothing */
  size_t events = fx_job_events(f, id, NULL);
  ended = json_pack("[{s:s,s:s,s:i,s:s}]", "type", "done", "job", jid, "attempt", 1, "status",
                    "failed");
  fx_register(f, "f-1", NULL, ended);
  json_decref(ended);
  CHECK_INT(fx_job_state(f, id), GW_JOB_SUCCEEDED);
  CHECK_INT(fx_job_events(f, id, NULL), events);
  fx_free(f);
}

/* A failure's message longer than a job's reason (a script's error in
 * another alphabet) is cut on a character boundary: the state event, the
 * job's summary and what clients are sent stay JSON (which holds only
 * UTF-8); cut inside a character, the failed state's event was never made. */
static void test_long_reason(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  char jid[16], msg[700] = "";
  fx_jid(id, jid);
  for (int i = 0; i < 300; i++) strcat(msg, "\xC3\xA9"); /* 255 bytes end inside one */
  size_t states = fx_job_events(f, id, "state");
  fx_workerf(f, "f-1", "{s:s,s:s,s:i,s:s,s:s,s:i}", "type", "done", "job", jid, "attempt", 1, "status",
             "failed", "message", msg, "exit_code", 1);
  CHECK_INT(fx_job_state(f, id), GW_JOB_FAILED);
  CHECK_INT(fx_job_events(f, id, "state"), states + 1);
  const json_t *ev = fx_job_event(f, id, "state");
  const char *reason = sl_json_get_str(ev, "reason", "");
  CHECK(strlen(reason) > 200 && strlen(reason) < 256 && !strncmp(reason, "\xC3\xA9", 2));
  CHECK(sl_json_utf8_ok(reason, strlen(reason)));
  fx_free(f);
}

static void test_register_jobs(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_metric(f, "f-1", id, 12, 1.0);
  char jid[16], stranger[16];
  fx_jid(id, jid);
  fx_jid(4242, stranger);
  fx_captures_clear(f);
  json_t *jobs = json_pack("[{s:s,s:i,s:i},{s:s,s:i}]", "job", jid, "attempt", 1, "step", 15,
                           "job", stranger, "attempt", 1);
  fx_register(f, "f-1", jobs, NULL);
  json_decref(jobs);
  const json_t *reg = fx_to_worker_last(f, "f-1", "registered");
  CHECK(reg != NULL);
  CHECK_INT(sl_json_get_int(reg, "heartbeat_ms", 0), f->cfg.heartbeat_ms);
  json_t *held = json_object_get(reg, "jobs");
  CHECK_INT(json_array_size(held), 1);
  json_t *h0 = json_array_get(held, 0);
  CHECK_STR(sl_json_get_str(h0, "job", ""), jid);
  CHECK_INT(sl_json_get_int(h0, "attempt", 0), 1);
  CHECK_INT(sl_json_get_int(h0, "metric_step", -1), 12);
  /* the job it does not know is cancelled on the worker; its own is not */
  CHECK_INT(fx_to_worker_count(f, "f-1", "cancel"), 1);
  CHECK_STR(sl_json_get_str(fx_to_worker_last(f, "f-1", "cancel"), "job", ""), stranger);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  CHECK_INT(fx_job(f, id)->step, 15);
  CHECK_INT(fx_to_worker_count(f, "f-1", "assign"), 0); /* it has the job: no second assign */
  /* a worker that registers without the job it should run: requeued */
  fx_register(f, "f-1", NULL, NULL);
  CHECK(fx_job_was(f, id, GW_JOB_QUEUED));
  CHECK(contains(fx_state_reason(f, id, GW_JOB_PREEMPTED), "the worker lost the job"));
  CHECK_STR(fx_inst(f, "f-1")->row.state, "idle");
  fx_settle(f);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING); /* on the same, now idle, worker */
  CHECK_INT(fx_job(f, id)->attempt, 2);
  fx_free(f);
}

/* A gateway restarted while its job was provisioning (gw_sched_load: the
 * job waits for its instance's register). The register assigns the job; a
 * second register that crossed the assign (the worker sent it before the
 * assign reached it) gets the assign again and leaves the job where it is:
 * requeued, the job would run on a second worker beside the first. */
static void test_register_crossed_after_restart(void) {
  int64_t id;
  struct fx *f = one_provisioning(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_job(f, id)->wait_register_until_us = sl_time_mono_us() + 60 * SL_US_PER_S;
  fx_register(f, "f-1", NULL, NULL);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  CHECK_INT(fx_to_worker_count(f, "f-1", "assign"), 1);
  fx_register(f, "f-1", NULL, NULL); /* sent before the assign arrived */
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  CHECK(!fx_job_was(f, id, GW_JOB_PREEMPTED));
  CHECK_INT(fx_to_worker_count(f, "f-1", "assign"), 2);
  CHECK_INT(fx_job(f, id)->attempt, 1);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "busy");
  fx_started(f, "f-1", id);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  CHECK(fx_job_event(f, id, "restored") == NULL);
  /* a started that restored an older checkpoint than the assign's (one
   * beside it): an event says which and why, for the display to resume from
   * there; one from another folder is not believed */
  char jid[16];
  snprintf(fx_job(f, id)->ckpt_key, sizeof fx_job(f, id)->ckpt_key, "%s", fx_key(id, "ckpt-00000030.tc"));
  fx_workerf(f, "f-1", "{s:s,s:s,s:s,s:s,s:i,s:s}", "type", "started", "instance", "f-1", "job",
             fx_jid(id, jid), "restored_key", "J000009/ckpt-00000020.tc", "restored_step", 20,
             "passed_over", "");
  CHECK(fx_job_event(f, id, "restored") == NULL);
  fx_workerf(f, "f-1", "{s:s,s:s,s:s,s:s,s:i,s:s}", "type", "started", "instance", "f-1", "job",
             fx_jid(id, jid), "restored_key", "J000001/ckpt-00000020.tc", "restored_step", 20,
             "passed_over", "J000001/ckpt-00000030.tc: header checksum mismatch");
  const json_t *ev = fx_job_event(f, id, "restored");
  CHECK(ev != NULL);
  CHECK_INT(sl_json_get_int(ev, "from_step", -1), 20);
  CHECK_STR(sl_json_get_str(ev, "checkpoint", ""), "J000001/ckpt-00000020.tc");
  CHECK_STR(sl_json_get_str(ev, "passed_over", ""), "J000001/ckpt-00000030.tc: header checksum mismatch");
  fx_free(f);
}

/* An eval whose worker restored an older checkpoint than the model's
 * (gone or corrupt): the session's model names the one restored from then
 * on, so the next eval or sample does not try the bad one again. A model
 * trained anew meanwhile (another checkpoint) is left alone. */
static void test_restored_model_falls_back(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_user(f, "alice", "alice-token");
  CHECK(fx_hello(f, "ka", "alice-token", "nb") && fx_define(f, "ka"));
  CHECK_INT(gw_store_session_model_set(f->store, "alice", "nb", "m", 1, 30, "J000001/ckpt-00000030.tc"), 0);
  const json_t *r = fx_req(f, "ka", "{s:s,s:s,s:s,s:s,s:{}}", "type", "submit", "kind", "eval", "model", "m",
                           "data", "d", "options");
  int64_t id = gw_job_id_parse(sl_json_get_str(r, "job", NULL));
  char inst[32] = "", jid[16];
  CHECK(id > 0 && fx_run_job(f, id, inst));
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:s,s:i,s:s}", "type", "started", "instance", inst, "job",
             fx_jid(id, jid), "restored_key", "J000001/ckpt-00000020.tc", "restored_step", 20,
             "passed_over", "J000001/ckpt-00000030.tc: header checksum mismatch");
  json_t *sess = NULL;
  CHECK_INT(gw_store_session_get(f->store, "alice", "nb", &sess), 0);
  const json_t *m = json_object_get(json_object_get(sess, "models"), "m");
  CHECK_STR(sl_json_get_str(m, "checkpoint", ""), "J000001/ckpt-00000020.tc");
  CHECK_INT(sl_json_get_int(m, "step", -1), 20);
  CHECK_STR(sl_json_get_str(m, "job", ""), "J000001");
  json_decref(sess);
  /* trained anew meanwhile: a later fallback of an older eval leaves it */
  CHECK_INT(gw_store_session_model_set(f->store, "alice", "nb", "m", 9, 90, "J000009/ckpt-00000090.tc"), 0);
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:s,s:i,s:s}", "type", "started", "instance", inst, "job",
             fx_jid(id, jid), "restored_key", "J000001/ckpt-00000010.tc", "restored_step", 10,
             "passed_over", "J000001/ckpt-00000020.tc: gone");
  CHECK_INT(gw_store_session_get(f->store, "alice", "nb", &sess), 0);
  m = json_object_get(json_object_get(sess, "models"), "m");
  CHECK_STR(sl_json_get_str(m, "checkpoint", ""), "J000009/ckpt-00000090.tc");
  json_decref(sess);
  fx_free(f);
}

/* A worker whose job's process was killed (the done, a retry, lost with a
 * gateway that died) registers twice with the new gateway: it sends a
 * register each time its link comes up and again when one goes unanswered.
 * The first register's done re-queues the job, and the job is placed again
 * on the same worker, attempt 2. The second register still lists attempt 1.
 * The gateway cancels that attempt and names it, since the worker keeps one
 * job per id: a cancel of the job alone stopped attempt 2 on arrival and
 * ended the job as cancelled. */
static void test_register_stale_attempt(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_metric(f, "f-1", id, 40, 0.5);
  char jid[16];
  fx_jid(id, jid);
  json_t *jobs = json_pack("[{s:s,s:i,s:i}]", "job", jid, "attempt", 1, "step", 40);
  json_t *ended = json_pack("[{s:s,s:s,s:i,s:s,s:i,s:s,s:i}]", "type", "done", "job", jid, "attempt",
                            1, "status", "failed", "exit_code", 137, "message", "killed by signal 9",
                            "step", 40);
  fx_inst(f, "f-1")->registered = false;
  fx_register(f, "f-1", jobs, ended);
  CHECK(contains(fx_state_reason(f, id, GW_JOB_PREEMPTED), "killed by signal 9"));
  fx_settle(f);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  CHECK_STR(fx_job(f, id)->instance, "f-1");
  CHECK_INT(fx_job(f, id)->attempt, 2);
  fx_captures_clear(f);
  fx_register(f, "f-1", jobs, ended); /* the second, sent before the first was answered */
  json_decref(jobs);
  json_decref(ended);
  const json_t *cancel = fx_to_worker_last(f, "f-1", "cancel");
  CHECK(cancel != NULL);
  CHECK_STR(sl_json_get_str(cancel, "job", ""), jid);
  CHECK_INT(sl_json_get_int(cancel, "attempt", 0), 1);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  CHECK_INT(fx_job(f, id)->attempt, 2);
  /* attempt 2 runs and ends on its own */
  fx_started(f, "f-1", id);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  fx_workerf(f, "f-1", "{s:s,s:s,s:i,s:s,s:i}", "type", "done", "job", jid, "attempt", 2, "status",
             "succeeded", "step", 100);
  CHECK_INT(fx_job_state(f, id), GW_JOB_SUCCEEDED);
  fx_free(f);
}

/* ---- what the worker found of its GPUs ---- */

/* register from inst with gpus (a JSON text; NULL: none). */
static void register_gpus(struct fx *f, const char *inst, const char *gpus) {
  json_t *b = json_pack("{s:s,s:s,s:[],s:[]}", "type", "register", "instance", inst, "jobs", "ended");
  if (gpus)
    json_object_set_new(b, "gpus", json_loads(gpus, JSON_DECODE_ANY, NULL));
  fx_worker(f, inst, b);
  json_decref(b);
}

/* The instance's entry in a status reply (borrowed), or NULL. */
static const json_t *status_worker(struct fx *f, const char *inst) {
  const json_t *r = fx_ktype(f, "ka", "status");
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(r, "workers"), i, w) if (!strcmp(sl_json_get_str(w, "instance", ""), inst))
    return w;
  return NULL;
}

static void test_register_gpus(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_user(f, "alice", "alice-token");
  CHECK(fx_hello(f, "ka", "alice-token", "nb"));
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f); /* launched on t.small: 1 x T1 in the fake's catalog */
  CHECK_STR(fx_job(f, id)->instance, "f-1");
  /* the worker finds no GPU: a warning, logged, in %status and on the job */
  register_gpus(f, "f-1", "{\"count\":0,\"model\":\"\",\"memory_mib\":0,\"driver\":\"\","
                          "\"reason\":\"no NVIDIA driver library\"}");
  const char *want = "t.small has 1 x T1 in the catalog, but its worker found no GPU (no NVIDIA driver library)";
  CHECK_STR(fx_inst(f, "f-1")->gpu_warning, want);
  CHECK_INT(fx_inst(f, "f-1")->found_gpus.count, 0);
  const json_t *ev = fx_job_event(f, id, "warning");
  CHECK(ev != NULL);
  CHECK_STR(sl_json_get_str(ev, "text", ""), want);
  CHECK_STR(sl_json_get_str(ev, "instance", ""), "f-1");
  const json_t *w = status_worker(f, "f-1");
  CHECK_STR(sl_json_get_str(w, "gpu_warning", ""), want);
  CHECK_INT(sl_json_get_int(w, "gpus", -1), 0);
  CHECK(!json_object_get(w, "gpu_model"));
  /* the same report again (a register after a reconnect): told once */
  register_gpus(f, "f-1", "{\"count\":0,\"reason\":\"no NVIDIA driver library\"}");
  CHECK_INT(fx_job_events(f, id, "warning"), 1);
  /* a report that matches clears it */
  register_gpus(f, "f-1", "{\"count\":1,\"model\":\"NVIDIA T1\",\"memory_mib\":16384,\"driver\":\"550.54.15\"}");
  CHECK_STR(fx_inst(f, "f-1")->gpu_warning, "");
  w = status_worker(f, "f-1");
  CHECK(w && !json_object_get(w, "gpu_warning"));
  CHECK_INT(sl_json_get_int(w, "gpus", -1), 1);
  CHECK_STR(sl_json_get_str(w, "gpu_model", ""), "NVIDIA T1");
  CHECK_INT(sl_json_get_int(w, "gpu_memory_mib", -1), 16384);
  CHECK_STR(sl_json_get_str(w, "gpu_driver", ""), "550.54.15");
  /* a malformed report is ignored: the last good one stays */
  register_gpus(f, "f-1", "{\"count\":\"lots\"}");
  CHECK_INT(fx_inst(f, "f-1")->found_gpus.count, 1);
  CHECK_STR(fx_inst(f, "f-1")->gpu_warning, "");
  /* a simulated provider's instances run on this machine: nothing to compare */
  f->fp->base.simulated = true;
  register_gpus(f, "f-1", "{\"count\":0,\"reason\":\"no NVIDIA driver library\"}");
  CHECK_STR(fx_inst(f, "f-1")->gpu_warning, "");
  CHECK_INT(fx_job_events(f, id, "warning"), 1);
  CHECK_INT(sl_json_get_int(status_worker(f, "f-1"), "gpus", -1), 0);
  fx_free(f);
}

/* The device a job trains on comes as a metric event and becomes a job
 * event with its scalar fields. */
static void test_device_event(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  char inst[GW_INSTANCE_ID_MAX], jid[16];
  CHECK(fx_run_job(f, id, inst));
  fx_jid(id, jid);
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:{s:s,s:s,s:i,s:i,s:s,s:i,s:s,s:{s:i}}}", "type", "metric", "instance",
             inst, "job", jid, "data", "event", "device", "device", "cuda:0 (NVIDIA T1) bf16, rank 0 of 2",
             "world_size", 2, "gpus", 2, "gpu_model", "NVIDIA T1", "memory_mib", 16384, "precision", "bf16",
             "nested", "x", 1);
  const json_t *ev = fx_job_event(f, id, "device");
  CHECK(ev != NULL);
  CHECK_STR(sl_json_get_str(ev, "device", ""), "cuda:0 (NVIDIA T1) bf16, rank 0 of 2");
  CHECK_INT(sl_json_get_int(ev, "gpus", 0), 2);
  CHECK_INT(sl_json_get_int(ev, "world_size", 0), 2);
  CHECK_STR(sl_json_get_str(ev, "gpu_model", ""), "NVIDIA T1");
  CHECK_STR(sl_json_get_str(ev, "precision", ""), "bf16");
  CHECK(!json_object_get(ev, "nested"));
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  /* about a job it does not run: ignored */
  char other[16];
  fx_jid(4242, other);
  fx_workerf(f, inst, "{s:s,s:s,s:s,s:{s:s,s:s}}", "type", "metric", "instance", inst, "job", other, "data",
             "event", "device", "device", "cpu");
  CHECK_INT(fx_job_events(f, id, "device"), 1);
  fx_free(f);
}

/* ---- checkpoints ---- */

/* fdatasync (the link wraps it): counts the flushes of the database's
 * write-ahead log, and fails them while fail_wal_sync is set. */
static int wal_syncs;
static bool fail_wal_sync;
int __real_fdatasync(int fd);
int __wrap_fdatasync(int fd);
int __wrap_fdatasync(int fd) {
  char link[64], path[600];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n > 4 && !memcmp(path + n - 4, "-wal", 4)) {
    wal_syncs++;
    if (fail_wal_sync) {
      errno = EIO;
      return -1;
    }
  }
  return __real_fdatasync(fd);
}

static void test_checkpoint(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  int syncs_before = wal_syncs;
  fx_checkpoint(f, "f-1", id, 25, fx_key(id, "ck-25"));
  const json_t *e = fx_job_event(f, id, "checkpoint");
  CHECK(e != NULL);
  CHECK_INT(sl_json_get_int(e, "step", -1), 25);
  CHECK_STR(sl_json_get_str(e, "path", ""), fx_key(id, "ck-25"));
  CHECK_INT(sl_json_get_int(e, "bytes", -1), 1000);
  CHECK(json_is_true(json_object_get(e, "durable")));
  CHECK_STR(fx_job(f, id)->ckpt_key, fx_key(id, "ck-25"));
  CHECK_INT(fx_job(f, id)->ckpt_step, 25);
  /* saved: the worker hears its resume point (it may delete older ones) */
  const json_t *ack = fx_to_worker_last(f, "f-1", "checkpoint_recorded");
  CHECK(ack != NULL);
  CHECK_INT(sl_json_get_int(ack, "step", -1), 25);
  CHECK_INT(sl_json_get_int(ack, "attempt", -1), fx_job(f, id)->attempt);
  /* what it is told is on disk (the log flushed), so that no power loss can
   * take the store back to a checkpoint it has deleted since */
  CHECK(wal_syncs > syncs_before);
  /* in the store: the job's row, and the session's model */
  struct gw_job row;
  CHECK_INT(gw_store_job_get(f->store, id, &row), 0);
  CHECK_STR(row.ckpt_key, fx_key(id, "ck-25"));
  CHECK_INT(row.ckpt_step, 25);
  gw_job_done(&row);
  json_t *sess = NULL;
  CHECK_INT(gw_store_session_get(f->store, "alice", "nb", &sess), 0);
  json_t *m = json_object_get(json_object_get(sess, "models"), "m");
  CHECK_STR(sl_json_get_str(m, "checkpoint", ""), fx_key(id, "ck-25"));
  CHECK_INT(sl_json_get_int(m, "step", -1), 25);
  json_decref(sess);
  /* an older checkpoint is recorded but does not move the job back */
  fx_checkpoint(f, "f-1", id, 10, fx_key(id, "ck-10"));
  CHECK_INT(fx_job(f, id)->ckpt_step, 25);
  CHECK_INT(sl_json_get_int(fx_to_worker_last(f, "f-1", "checkpoint_recorded"), "step", -1), 25);
  CHECK_STR(fx_job(f, id)->ckpt_key, fx_key(id, "ck-25"));
  /* a key that climbs out, an empty one, a negative step: ignored */
  size_t n = fx_job_events(f, id, "checkpoint");
  fx_checkpoint(f, "f-1", id, 30, "../../etc/passwd");
  fx_checkpoint(f, "f-1", id, 30, fx_key(id + 1, "ckpt-30")); /* another job's: its model is not this one's */
  fx_checkpoint(f, "f-1", id, 30, "ckpt-30");
  fx_checkpoint(f, "f-1", id, 30, "");
  fx_checkpoint(f, "f-1", id, -1, fx_key(id, "ck-x"));
  CHECK_INT(fx_job_events(f, id, "checkpoint"), n);
  CHECK_INT(fx_job(f, id)->ckpt_step, 25);
  /* a flush that fails: recorded, but the worker is not told (it keeps its
   * older checkpoints); the next one that is flushed tells it */
  size_t acks = fx_to_worker_count(f, "f-1", "checkpoint_recorded");
  fail_wal_sync = true;
  fx_checkpoint(f, "f-1", id, 40, fx_key(id, "ck-40"));
  fail_wal_sync = false;
  CHECK_INT(fx_job(f, id)->ckpt_step, 40);
  CHECK_INT(fx_to_worker_count(f, "f-1", "checkpoint_recorded"), acks);
  fx_checkpoint(f, "f-1", id, 50, fx_key(id, "ck-50"));
  CHECK_INT(fx_to_worker_count(f, "f-1", "checkpoint_recorded"), acks + 1);
  CHECK_INT(sl_json_get_int(fx_to_worker_last(f, "f-1", "checkpoint_recorded"), "step", -1), 50);
  fx_free(f);
}

/* ---- a notice the worker saw itself ---- */

/* The preemptions placement remembers (in inst's type and zone, or any). */
static int market_failures(struct fx *f, const char *inst) {
  const struct gw_inst *in = inst ? fx_inst(f, inst) : NULL;
  json_t *m = gw_place_memory_json(f->sched->mem, sl_time_mono_us(), sl_time_real_us());
  size_t i;
  json_t *e;
  int n = 0;
  json_array_foreach(json_object_get(m, "failures"), i, e)
    if (!json_is_true(json_object_get(e, "capacity")) && json_is_true(json_object_get(e, "spot")) &&
        (!in || (!strcmp(sl_json_get_str(e, "type", ""), in->row.type) &&
                 !strcmp(sl_json_get_str(e, "zone", ""), in->row.zone))))
      n += (int)sl_json_get_int(e, "count", 0);
  json_decref(m);
  return n;
}

static void test_worker_notice(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_checkpoint(f, "f-1", id, 30, fx_key(id, "ckpt-30"));
  fx_wnotice(f, "f-1");
  const json_t *n = fx_job_event(f, id, "notice");
  CHECK(n != NULL);
  CHECK_STR(sl_json_get_str(n, "action", ""), "terminate");
  CHECK_STR(sl_json_get_str(n, "instance", ""), "f-1");
  CHECK(sl_json_get_int(n, "deadline_us", 0) > 0);
  fx_wnotice(f, "f-1"); /* the same notice again: one event */
  CHECK_INT(fx_job_events(f, id, "notice"), 1);
  fx_done(f, "f-1", id, "preempted", -1);
  const json_t *p = fx_job_event(f, id, "preempted");
  CHECK(p && json_is_true(json_object_get(p, "notice")));
  CHECK(p && sl_json_get_int(p, "step", -1) == 30);
  CHECK_INT(fx_job_state(f, id), GW_JOB_QUEUED);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "draining");
  /* the market took a spot instance back: placement remembers its zone,
   * though the provider has not said so yet (the job stopped first) */
  CHECK(fx_inst(f, "f-1")->row.spot);
  CHECK_INT(market_failures(f, "f-1"), 1);
  fp_terminated(f->fp, "f-1", true); /* the provider's word after it: counted once */
  fx_settle(f);
  CHECK_INT(market_failures(f, NULL), 1);
  fx_free(f);
}

/* A notice the gateway did not hear (its message lost with a gateway that
 * died): the worker's register says it, handled as the message; a second
 * register changes nothing. The preemption is one with notice. */
static void test_register_notice(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_checkpoint(f, "f-1", id, 30, fx_key(id, "ckpt-30"));
  fx_inst(f, "f-1")->registered = false; /* as after a gateway restart */
  char jid[16];
  fx_jid(id, jid);
  int64_t deadline = sl_time_real_us() + 60 * SL_US_PER_S;
  for (int k = 0; k < 2; k++)
    fx_workerf(f, "f-1", "{s:s,s:s,s:[{s:s,s:i,s:i}],s:{s:s,s:I}}", "type", "register", "instance",
               "f-1", "jobs", "job", jid, "attempt", 1, "step", 31, "notice", "action", "terminate",
               "deadline_us", (json_int_t)deadline);
  CHECK(fx_inst(f, "f-1")->notice);
  CHECK_INT(fx_job_events(f, id, "notice"), 1);
  const json_t *n = fx_job_event(f, id, "notice");
  CHECK(n && sl_json_get_int(n, "deadline_us", 0) == deadline);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  fx_done(f, "f-1", id, "preempted", -1);
  const json_t *p = fx_job_event(f, id, "preempted");
  CHECK(p && json_is_true(json_object_get(p, "notice")));
  CHECK_STR(fx_inst(f, "f-1")->row.state, "draining");
  fx_free(f);
}

/* Numbered output lines: one heard twice is recorded once, and those the
 * done carries again that were not heard (in flight when a gateway died)
 * are recorded before the job's end. */
static void test_output_tail(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  char jid[16];
  fx_jid(id, jid);
  size_t before = fx_job_events(f, id, "output");
  const char *lines[] = {"one", "two", "two"};
  for (int k = 0; k < 3; k++)
    fx_workerf(f, "f-1", "{s:s,s:s,s:i,s:s,s:s,s:i}", "type", "output", "job", jid, "attempt", 1,
               "stream", "stdout", "text", lines[k], "oseq", k < 2 ? k + 1 : 2);
  CHECK_INT(fx_job_events(f, id, "output"), before + 2);
  CHECK_INT(fx_job(f, id)->output_seq, 2);
  fx_workerf(f, "f-1", "{s:s,s:s,s:i,s:s,s:i,s:i,s:[{s:i,s:s,s:s},{s:i,s:s,s:s},{s:i,s:s,s:s}]}",
             "type", "done", "job", jid, "attempt", 1, "status", "succeeded", "exit_code", 0, "step",
             100, "output_tail", "oseq", 1, "stream", "stdout", "text", "one", "oseq", 2, "stream",
             "stdout", "text", "two", "oseq", 3, "stream", "stderr", "text", "three");
  CHECK_INT(fx_job_state(f, id), GW_JOB_SUCCEEDED);
  CHECK_INT(fx_job_events(f, id, "output"), before + 3);
  size_t at_three = 0, at_end = 0;
  for (size_t i = 0; i < f->n_bus; i++) {
    const struct fx_bus_rec *r = &f->bus_log[i];
    if (r->kind != GW_BUS_JOB_EVENT || r->job != id)
      continue;
    if (!strcmp(sl_json_get_str(r->json, "text", ""), "three"))
      at_three = i + 1;
    if (!strcmp(sl_json_get_str(r->json, "state", ""), "succeeded"))
      at_end = i + 1;
  }
  CHECK(at_three > 0 && at_end > at_three);
  const json_t *o = fx_job_event(f, id, "output");
  CHECK(o && sl_json_get_int(o, "oseq", 0) == 3 && !strcmp(sl_json_get_str(o, "stream", ""), "stderr"));
  fx_free(f);
}

/* A rebalance hint its worker went on through (leaving false, the default):
 * shown, the instance only at risk, not the market taking it back; the
 * interruption notice that may follow is shown too; and an instance at risk
 * is given no new job. */
static void test_worker_rebalance(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_wrebalance(f, "f-1", false);
  const json_t *n = fx_job_event(f, id, "notice");
  CHECK(n != NULL);
  CHECK_STR(sl_json_get_str(n, "action", ""), "rebalance");
  CHECK(json_is_false(json_object_get(n, "leaving")));
  CHECK(fx_inst(f, "f-1")->at_risk && !fx_inst(f, "f-1")->notice);
  CHECK_INT(market_failures(f, NULL), 0);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  fx_wrebalance(f, "f-1", false); /* said again: one event */
  CHECK_INT(fx_job_events(f, id, "notice"), 1);
  fx_wnotice(f, "f-1"); /* then the market's notice: shown as well */
  CHECK_INT(fx_job_events(f, id, "notice"), 2);
  CHECK(fx_inst(f, "f-1")->notice);
  CHECK_INT(market_failures(f, NULL), 1);
  fx_free(f);

  /* a worker told to move on it (move_on_rebalance): a notice like any other */
  f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_wrebalance(f, "f-1", true);
  n = fx_job_event(f, id, "notice");
  CHECK(n && json_is_true(json_object_get(n, "leaving")));
  CHECK(fx_inst(f, "f-1")->notice);
  CHECK_INT(market_failures(f, NULL), 0);
  fx_free(f);

  /* an idle instance at risk is not given the next job */
  f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_wrebalance(f, "f-1", false);
  fx_done(f, "f-1", id, "succeeded", 0);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "idle");
  int64_t next = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  const struct gw_job *j = fx_job(f, next);
  CHECK(j && strcmp(j->instance, "f-1"));
  fx_free(f);

  /* a gateway that restarted since hears of it in the worker's register */
  f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_done(f, "f-1", id, "succeeded", 0);
  fx_inst(f, "f-1")->registered = false; /* as after a gateway restart */
  fx_workerf(f, "f-1", "{s:s,s:s,s:[],s:[],s:b}", "type", "register", "instance", "f-1", "jobs", "ended",
             "at_risk", 1);
  CHECK(fx_inst(f, "f-1")->registered && fx_inst(f, "f-1")->at_risk);
  next = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  j = fx_job(f, next);
  CHECK(j && strcmp(j->instance, "f-1"));
  fx_free(f);
}

/* ---- a long run's step metrics ---- */

/* The stored metric events of job, counted through the store's reader. */
static size_t stored_metrics(struct fx *f, int64_t job, int64_t *ret_first_step) {
  size_t n = 0;
  int64_t after = 0;
  *ret_first_step = -1;
  for (;;) {
    json_t *evs = NULL;
    bool more = false;
    if (gw_store_events(f->store, job, after, 10000, &evs, &more) < 0)
      return 0;
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e) {
      after = sl_json_get_int(e, "seq", after);
      if (strcmp(sl_json_get_str(e, "event", ""), "metric"))
        continue;
      if (*ret_first_step < 0)
        *ret_first_step = sl_json_get_int(e, "step", -1);
      n++;
    }
    json_decref(evs);
    if (!more)
      return n;
  }
}

/* Every GW_METRICS_THIN_EVERY step metrics stored, the older ones are
 * thinned: a run of 3 × GW_METRICS_WHOLE steps keeps the newest whole and
 * about GW_METRICS_OLD older ones, its first steps among them. */
static void test_metrics_thinned(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  const int64_t steps = 3 * GW_METRICS_WHOLE;
  for (int64_t step = 1; step <= steps; step++)
    fx_metric(f, "f-1", id, step, 2.0);
  int64_t first = -1;
  size_t n = stored_metrics(f, id, &first);
  fprintf(stderr, "metrics: %lld steps reported, %zu stored, the first at step %lld\n", (long long)steps, n,
          (long long)first);
  CHECK(n < (size_t)(GW_METRICS_WHOLE + GW_METRICS_OLD + GW_METRICS_THIN_EVERY));
  CHECK(n > (size_t)GW_METRICS_WHOLE);
  CHECK(first >= 1 && first <= 16);
  CHECK_INT(fx_job(f, id)->metric_step, steps);
  fx_free(f);
}

/* A chatty job's output through the worker protocol: every
 * GW_OUTPUT_TRIM_EVERY lines stored the middle is left out, so what stays
 * is the first GW_OUTPUT_HEAD lines, one line saying how many were left
 * out, and the newest GW_OUTPUT_TAIL. */
static void test_output_trimmed(void) {
  int64_t id;
  struct fx *f = one_running(&id);
  CHECK(f != NULL);
  if (!f)
    return;
  char jid[16], text[32];
  fx_jid(id, jid);
  /* a whole number of trims, the last with lines to leave out */
  const int lines = GW_OUTPUT_TRIM_EVERY * ((GW_OUTPUT_HEAD + GW_OUTPUT_TAIL) / GW_OUTPUT_TRIM_EVERY + 3);
  for (int i = 1; i <= lines; i++) {
    snprintf(text, sizeof text, "line %d", i);
    fx_workerf(f, "f-1", "{s:s,s:s,s:s,s:s,s:s}", "type", "output", "instance", "f-1", "job", jid,
               "stream", "stdout", "text", text);
  }
  size_t n = 0, markers = 0;
  int64_t after = 0, left_out = 0;
  int first = 0, last = 0, after_marker = 0;
  for (bool more = true; more;) {
    json_t *evs = NULL;
    more = false;
    if (gw_store_events(f->store, id, after, 10000, &evs, &more) < 0)
      break;
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e) {
      after = sl_json_get_int(e, "seq", after);
      if (strcmp(sl_json_get_str(e, "event", ""), "output"))
        continue;
      n++;
      if (json_is_integer(json_object_get(e, "elided_lines"))) {
        markers++;
        left_out = sl_json_get_int(e, "elided_lines", 0);
        fprintf(stderr, "output: %s\n", sl_json_get_str(e, "text", ""));
        continue;
      }
      int k = atoi(sl_json_get_str(e, "text", "line 0") + 5);
      if (!first)
        first = k;
      if (markers && !after_marker)
        after_marker = k;
      last = k;
    }
    json_decref(evs);
  }
  fprintf(stderr, "output: %d lines sent, %zu stored\n", lines, n);
  CHECK_INT(markers, 1);
  CHECK_INT(first, 1);
  CHECK_INT(last, lines);
  CHECK_INT(n, GW_OUTPUT_HEAD + 1 + GW_OUTPUT_TAIL);
  CHECK_INT(after_marker, lines - GW_OUTPUT_TAIL + 1);
  CHECK_INT(left_out, lines - GW_OUTPUT_HEAD - GW_OUTPUT_TAIL);
  fx_free(f);
}

/* ---- unknown and malformed ---- */

static void test_unknown_and_malformed(void) {
  int64_t a, b;
  struct fx *f = two_running(&a, &b);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_workerf(f, "f-1", "{s:s}", "type", "teleport");
  const json_t *e = fx_to_worker_last(f, "f-1", "error");
  CHECK(e != NULL);
  CHECK_STR(sl_json_get_str(json_object_get(e, "error"), "code", ""), sl_errname(SL_EWIRE));
  CHECK(contains(sl_json_get_str(json_object_get(e, "error"), "message", ""),
                 "unknown message type \"teleport\""));
  /* no type, a type that is not a string: errors too */
  fx_workerf(f, "f-1", "{s:i}", "step", 3);
  fx_workerf(f, "f-1", "{s:i}", "type", 3);
  CHECK_INT(fx_to_worker_count(f, "f-1", "error"), 3);

  char aid[16];
  fx_jid(a, aid);
  /* fields of the wrong type, sizes and shapes: no crash, no change */
  const char *bodies[] = {
    "{\"type\":\"metric\",\"job\":12}",
    "{\"type\":\"metric\",\"job\":\"J\"}",
    "{\"type\":\"metric\",\"job\":\"J00000000000000000000001\"}",
    "{\"type\":\"metric\",\"job\":\"%s\",\"data\":[1,2]}",
    "{\"type\":\"metric\",\"job\":\"%s\",\"data\":{\"step\":\"7\",\"loss\":1}}",
    "{\"type\":\"metric\",\"job\":\"%s\",\"data\":{\"step\":7,\"loss\":\"low\"}}",
    "{\"type\":\"metric\",\"job\":\"%s\",\"attempt\":\"1\",\"data\":{\"step\":7,\"loss\":1}}",
    "{\"type\":\"started\",\"job\":null}",
    "{\"type\":\"checkpoint\",\"job\":\"%s\",\"step\":\"5\",\"key\":\"k\"}",
    "{\"type\":\"checkpoint\",\"job\":\"%s\",\"step\":5,\"key\":7}",
    "{\"type\":\"done\",\"job\":\"%s\",\"status\":7}",
    "{\"type\":\"done\",\"job\":\"%s\",\"status\":\"exploded\"}",
    "{\"type\":\"done\",\"job\":\"%s\",\"status\":[\"failed\"]}",
    "{\"type\":\"output\",\"job\":\"%s\",\"stream\":\"stdin\",\"text\":\"x\"}",
    "{\"type\":\"output\",\"job\":\"%s\",\"text\":5}",
    "{\"type\":\"result\",\"job\":\"%s\"}",
    "{\"type\":\"heartbeat\",\"jobs\":{\"a\":1}}",
    "{\"type\":\"heartbeat\",\"jobs\":[1,\"x\",null,{\"job\":5}]}",
    "{\"type\":\"notice\",\"deadline_us\":\"soon\",\"action\":5}",
    /* registers that still name the job it runs, with junk around it */
    ("{\"type\":\"register\",\"jobs\":[null,5,{\"job\":[]},{\"job\":\"%s\",\"attempt\":1}],"
     "\"ended\":\"none\"}"),
    "{\"type\":\"register\",\"jobs\":[{\"job\":\"%s\"}],\"ended\":[1,null,{\"type\":\"done\"}]}",
    "{\"type\":\"metric\",\"instance\":5}",
  };
  int64_t a_step = fx_job(f, a)->step;
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    char text[512];
    subst(text, sizeof text, bodies[i], aid);
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    CHECK(body != NULL);
    if (!body) {
      fprintf(stderr, "body %zu: %s\n", i, je.text);
      continue;
    }
    fx_worker(f, "f-1", body);
    json_decref(body);
  }
  CHECK_INT(fx_job_state(f, a), GW_JOB_RUNNING);
  if (!fx_job(f, a)) {
    fx_free(f);
    return;
  }
  CHECK_INT(fx_job(f, a)->step, a_step);
  CHECK_STR(fx_job(f, a)->ckpt_key, "");
  CHECK_INT(fx_job_events(f, a, "metric"), 0);
  CHECK_INT(fx_job_events(f, a, "checkpoint"), 0);
  CHECK_INT(fx_job_events(f, a, "output"), 0);
  CHECK_INT(fx_job_state(f, a), GW_JOB_RUNNING);
  CHECK_INT(fx_job_state(f, b), GW_JOB_RUNNING);
  CHECK(fx_inst(f, "f-1")->registered);
  /* still listening afterwards */
  fx_metric(f, "f-1", a, 8, 1.0);
  CHECK_INT(fx_job(f, a)->step, 8);
  fx_free(f);
}

/* ---- presigned URLs for an S3 store ---- */

static const json_t *presign(struct fx *f, const char *inst, const char *op, const char *key) {
  fx_workerf(f, inst, "{s:s,s:i,s:[{s:s,s:s}]}", "type", "presign", "id", 7, "requests", "op", op,
             "key", key);
  return fx_to_worker_last(f, inst, "presigned");
}

static const char *presign_error(const json_t *m) {
  return sl_json_get_str(json_object_get(m, "error"), "code", "");
}

static void test_presign(void) {
  int64_t a, b;
  struct fx *f = two_running(&a, &b);
  CHECK(f != NULL);
  if (!f)
    return;
  char aid[16], bid[16], key[64];
  fx_jid(a, aid);
  fx_jid(b, bid);
  /* a folder store: nothing to sign */
  snprintf(key, sizeof key, "%s/ckpt-00000001.tc", aid);
  const json_t *m = presign(f, "f-1", "put", key);
  CHECK(m != NULL);
  CHECK_STR(presign_error(m), sl_errname(SL_ENOTSUP));

  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", 1);
  setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  struct gw_objstore *o = NULL;
  char err[256] = "";
  CHECK_INT(gw_objstore_open("s3://team-bucket/spotlab", "us-east-1", &o, err, sizeof err), 0);
  if (!o) {
    fx_free(f);
    return;
  }
  gw_wproto_set_objstore(f->wproto, o);
  /* its own job's key: a URL, answered with the request's id */
  m = presign(f, "f-1", "put", key);
  CHECK(m != NULL);
  CHECK_INT(sl_json_get_int(m, "id", 0), 7);
  const char *url = json_string_value(json_array_get(json_object_get(m, "urls"), 0));
  CHECK(url && contains(url, "/team-bucket/spotlab/") && contains(url, key) &&
        contains(url, "X-Amz-Signature="));
  /* a multipart upload's parts: the upload recorded once, so that the
   * gateway aborts it if the worker cannot finish it; its checkpoint
   * stored by the job on that instance, the row goes */
  snprintf(key, sizeof key, "%s/ckpt-00000002.tc", aid);
  fx_workerf(f, "f-1", "{s:s,s:i,s:[{s:s,s:s,s:s,s:i},{s:s,s:s,s:s,s:i}]}", "type", "presign", "id",
             10, "requests", "op", "mpu_part", "key", key, "upload_id", "up-1", "part", 1, "op",
             "mpu_part", "key", key, "upload_id", "up-1", "part", 2);
  m = fx_to_worker_last(f, "f-1", "presigned");
  CHECK(m && json_array_size(json_object_get(m, "urls")) == 2);
  json_t *rows = NULL;
  CHECK_INT(gw_store_multipart_list(f->store, "f-1", &rows), 0);
  CHECK_INT(json_array_size(rows), 1);
  CHECK_STR(sl_json_get_str(json_array_get(rows, 0), "upload_id", ""), "up-1");
  CHECK_STR(sl_json_get_str(json_array_get(rows, 0), "key", ""), key);
  json_decref(rows);
  rows = NULL;
  CHECK_INT(gw_store_multipart_list(f->store, "f-2", &rows), 0);
  CHECK_INT(json_array_size(rows), 0);
  json_decref(rows);
  rows = NULL;
  /* an upload of the same key that an instance gone since began stays */
  CHECK_INT(gw_store_multipart_seen(f->store, "f-0", key, "up-0", 1, GW_MULTIPART_PER_INSTANCE), 0);
  fx_checkpoint(f, "f-1", a, 2, key);
  CHECK_STR(fx_job(f, a)->ckpt_key, key);
  CHECK_INT(gw_store_multipart_list(f->store, NULL, &rows), 0);
  CHECK_INT(json_array_size(rows), 1);
  CHECK_STR(sl_json_get_str(json_array_get(rows, 0), "upload_id", ""), "up-0");
  json_decref(rows);
  /* a worker that begins uploads without end (a flood) is refused past the
   * bound, with no URL; the parts of one it has begun are still signed */
  char db_path[300], sql[400];
  snprintf(db_path, sizeof db_path, "%s/gateway.db", f->dir);
  sqlite3 *db = NULL;
  CHECK_INT(sqlite3_open(db_path, &db), SQLITE_OK);
  snprintf(sql, sizeof sql,
           "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %d)"
           " INSERT INTO multipart(upload_id, key, instance, seen_us)"
           " SELECT 'flood-' || i, '%s', 'f-1', 1 FROM n",
           GW_MULTIPART_PER_INSTANCE, key);
  CHECK_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  fx_workerf(f, "f-1", "{s:s,s:i,s:[{s:s,s:s,s:s,s:i}]}", "type", "presign", "id", 11, "requests",
             "op", "mpu_part", "key", key, "upload_id", "one-more", "part", 1);
  m = fx_to_worker_last(f, "f-1", "presigned");
  CHECK_STR(presign_error(m), sl_errname(SL_ELIMIT));
  CHECK(json_object_get(m, "urls") == NULL);
  fx_workerf(f, "f-1", "{s:s,s:i,s:[{s:s,s:s,s:s,s:i}]}", "type", "presign", "id", 12, "requests",
             "op", "mpu_part", "key", key, "upload_id", "flood-7", "part", 2);
  m = fx_to_worker_last(f, "f-1", "presigned");
  CHECK(m && json_array_size(json_object_get(m, "urls")) == 1);
  snprintf(key, sizeof key, "%s/ckpt-00000001.tc", aid);
  /* the other instance's job, the bundle, a climb out: refused */
  snprintf(key, sizeof key, "%s/ckpt-00000001.tc", bid);
  CHECK_STR(presign_error(presign(f, "f-1", "get", key)), sl_errname(SL_EAUTH));
  CHECK_STR(presign_error(presign(f, "f-1", "put", "_spotlab/bundle-0.tar.gz")), sl_errname(SL_EAUTH));
  snprintf(key, sizeof key, "%s/../%s/ckpt-00000001.tc", aid, bid);
  CHECK_STR(presign_error(presign(f, "f-1", "delete", key)), sl_errname(-EINVAL));
  /* the checkpoint its job restores from, though another job's: readable, no more */
  snprintf(fx_job(f, a)->ckpt_key, sizeof fx_job(f, a)->ckpt_key, "%s/ckpt-00000005.tc", bid);
  m = presign(f, "f-1", "get", fx_job(f, a)->ckpt_key);
  CHECK(m && json_array_size(json_object_get(m, "urls")) == 1);
  CHECK_STR(presign_error(presign(f, "f-1", "put", fx_job(f, a)->ckpt_key)), sl_errname(SL_EAUTH));
  CHECK_STR(presign_error(presign(f, "f-1", "delete", fx_job(f, a)->ckpt_key)), sl_errname(SL_EAUTH));
  /* ... and so are that run's older checkpoints (one to fall back to when
   * it is corrupt), listed and read, but nothing else of that job */
  snprintf(key, sizeof key, "%s/ckpt-", bid);
  m = presign(f, "f-1", "list", key);
  CHECK(m && json_array_size(json_object_get(m, "urls")) == 1);
  snprintf(key, sizeof key, "%s/ckpt-00000003.tc", bid);
  m = presign(f, "f-1", "get", key);
  CHECK(m && json_array_size(json_object_get(m, "urls")) == 1);
  CHECK_STR(presign_error(presign(f, "f-1", "put", key)), sl_errname(SL_EAUTH));
  snprintf(key, sizeof key, "%s/files/notes.txt", bid);
  CHECK_STR(presign_error(presign(f, "f-1", "get", key)), sl_errname(SL_EAUTH));
  snprintf(key, sizeof key, "%s/", bid);
  CHECK_STR(presign_error(presign(f, "f-1", "list", key)), sl_errname(SL_EAUTH));
  /* malformed requests: an answer with an error, no crash */
  CHECK_STR(presign_error(presign(f, "f-1", "teleport", aid)), sl_errname(SL_EWIRE));
  fx_workerf(f, "f-1", "{s:s,s:i,s:s}", "type", "presign", "id", 8, "requests", "all");
  CHECK_STR(presign_error(fx_to_worker_last(f, "f-1", "presigned")), sl_errname(SL_EWIRE));
  fx_workerf(f, "f-1", "{s:s,s:i,s:[{s:s,s:s,s:s}]}", "type", "presign", "id", 9, "requests", "op",
             "put", "key", "x", "sha256", "not-hex");
  CHECK_STR(presign_error(fx_to_worker_last(f, "f-1", "presigned")), sl_errname(SL_EWIRE));
  /* nothing moved */
  CHECK_INT(fx_job_state(f, a), GW_JOB_RUNNING);
  CHECK_INT(fx_job_state(f, b), GW_JOB_RUNNING);
  gw_wproto_set_objstore(f->wproto, NULL);
  gw_objstore_free(o);
  fx_free(f);
}

int main(void) {
  test_long_reason();
  sl_log_init("test-gw-wproto");
  test_other_instance();
  test_reregister();
  test_checkpoint_before_register();
  test_register_ended();
  test_register_jobs();
  test_register_crossed_after_restart();
  test_restored_model_falls_back();
  test_register_stale_attempt();
  test_register_gpus();
  test_device_event();
  test_checkpoint();
  test_worker_notice();
  test_register_notice();
  test_output_tail();
  test_worker_rebalance();
  test_metrics_thinned();
  test_output_trimmed();
  test_unknown_and_malformed();
  test_presign();
  TEST_MAIN_END();
}
