/* Gangs (nodes=N) through the scheduler and the worker protocol, over the
 * scripted provider (gw-fixture.h): all-or-none placement and its wait,
 * the two-step start (rank 0, then the others with its rendezvous), rank
 * 0 as the job's one voice, cost for every member, and the attempt's end:
 * success, a notice on one member, a loss without notice, a failure, a
 * cancel; then the gang placed whole again. */
#include "gw-fixture.h"
#include "harness.h"

#include "gang.h"
#include "sl_json.h"
#include "sl_time.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define RDV "tcp://127.0.0.1:41000"

static json_t *opts(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *o = json_vpack_ex(NULL, 0, fmt, ap);
  va_end(ap);
  return o;
}

/* The ids of job's gang members, rank order; their number. */
static int members(struct fx *f, int64_t job, char ids[][GW_INSTANCE_ID_MAX]) {
  struct gw_job *j = fx_job(f, job);
  if (!j || !j->gang)
    return 0;
  for (int r = 0; r < j->gang->n; r++)
    snprintf(ids[r], GW_INSTANCE_ID_MAX, "%s", j->gang->m[r].instance);
  return j->gang->n;
}

static void started(struct fx *f, const char *inst, int64_t job, int rank, const char *rdv) {
  char id[16];
  json_t *b = json_pack("{s:s,s:s,s:s,s:i}", "type", "started", "instance", inst, "job",
                        fx_jid(job, id), "rank", rank);
  if (rdv)
    json_object_set_new(b, "rendezvous", json_string(rdv));
  fx_worker(f, inst, b);
  json_decref(b);
}

static bool never(struct fx *f, void *data) {
  (void)f; (void)data;
  return false;
}

static const json_t *gang_of(const json_t *assign) {
  return json_object_get(assign, "gang");
}

/* Submits a nodes=n train job and brings it to running: every member
 * registers, rank 0 starts and names the rendezvous, the others start. */
static int64_t run_gang(struct fx *f, int n, char ids[][GW_INSTANCE_ID_MAX], json_t *extra) {
  json_t *o = opts("{s:i,s:i,s:i,s:s}", "nodes", n, "steps", 100, "checkpoint_every", 10, "spot", "yes");
  if (extra)
    json_object_update(o, extra);
  json_decref(extra);
  int64_t job = fx_submit(f, "alice", "s", "train", o);
  fx_settle(f);
  if (members(f, job, ids) != n)
    return -1;
  for (int r = 0; r < n; r++)
    if (!fx_inst(f, ids[r])->registered)
      fx_register(f, ids[r], NULL, NULL);
  fx_settle(f);
  started(f, ids[0], job, 0, RDV);
  for (int r = 1; r < n; r++)
    started(f, ids[r], job, r, NULL);
  fx_settle(f);
  return job;
}

static void test_start_and_succeed(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t job = fx_submit(f, "alice", "s", "train",
                          opts("{s:i,s:i,s:s}", "nodes", 2, "steps", 100, "spot", "yes"));
  fx_settle(f);
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, ids), 2);
  /* two of the cheapest type launched together, each for the job */
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  CHECK_STR(fp_last(f->fp, FP_CALL_LAUNCH)->type, "t.small");
  CHECK_INT(fp_last(f->fp, FP_CALL_LAUNCH)->job, job);
  /* placed once both launched: one placed event naming both */
  CHECK_INT(fx_job_events(f, job, "placed"), 1);
  const json_t *pl = fx_job_event(f, job, "placed");
  CHECK_INT(sl_json_get_int(pl, "nodes", 0), 2);
  CHECK_STR(json_string_value(json_array_get(json_object_get(pl, "instances"), 1)), ids[1]);
  CHECK_STR(sl_json_get_str(pl, "instance", ""), ids[0]);
  CHECK_INT(fx_job_state(f, job), GW_JOB_PROVISIONING);
  /* rank 0 is assigned once every member has registered */
  fx_register(f, ids[0], NULL, NULL);
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[0], "assign"), 0);
  fx_register(f, ids[1], NULL, NULL);
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[0], "assign"), 1);
  CHECK_INT(fx_to_worker_count(f, ids[1], "assign"), 0);
  const json_t *g0 = gang_of(fx_to_worker_last(f, ids[0], "assign"));
  CHECK_INT(sl_json_get_int(g0, "rank", -1), 0);
  CHECK_INT(sl_json_get_int(g0, "world_size", -1), 2);
  CHECK(!json_object_get(g0, "rendezvous"));
  CHECK_INT(fx_job_state(f, job), GW_JOB_STARTING);
  /* rank 0 listens: rank 1 is assigned with its rendezvous */
  started(f, ids[0], job, 0, RDV);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_STARTING);
  CHECK_INT(fx_to_worker_count(f, ids[1], "assign"), 1);
  const json_t *a1 = fx_to_worker_last(f, ids[1], "assign");
  CHECK_INT(sl_json_get_int(gang_of(a1), "rank", -1), 1);
  CHECK_STR(sl_json_get_str(gang_of(a1), "rendezvous", ""), RDV);
  CHECK_INT(sl_json_get_int(a1, "attempt", 0), 1);
  started(f, ids[1], job, 1, NULL);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  /* rank 0 is the job's voice: rank 1's metrics and checkpoints are not the job's */
  fx_metric(f, ids[1], job, 5, 9.0);
  fx_checkpoint(f, ids[1], job, 5, "J000001/ckpt-00000005.tc");
  CHECK_INT(fx_job_events(f, job, "metric"), 0);
  CHECK_INT(fx_job_events(f, job, "checkpoint"), 0);
  fx_metric(f, ids[0], job, 1, 3.5);
  fx_checkpoint(f, ids[0], job, 1, "J000001/ckpt-00000001.tc");
  CHECK_INT(fx_job_events(f, job, "metric"), 1);
  CHECK_INT(fx_job_events(f, job, "checkpoint"), 1);
  /* output of every rank; the others' lines say whose */
  char jid[16];
  fx_workerf(f, ids[1], "{s:s,s:s,s:s,s:s,s:s}", "type", "output", "instance", ids[1], "job",
             fx_jid(job, jid), "stream", "stderr", "text", "hello from rank 1");
  CHECK_INT(sl_json_get_int(fx_job_event(f, job, "output"), "rank", -1), 1);
  /* cost accrues for both instances (spot 0.30 each, provider clock 1) */
  struct gw_job *j = fx_job(f, job);
  int64_t t0 = sl_time_mono_us();
  double c0 = j->cost_usd;
  int64_t since = j->cost_accrued_mono_us;
  fx_run_until(f, 30 * SL_US_PER_MS, never, NULL);
  /* the flush bills up to a moment between these two readings */
  double min_hours = (double)(sl_time_mono_us() - t0) / 3.6e9;
  gw_sched_flush_cost(f->sched, j, true);
  double hours = (double)(sl_time_mono_us() - since) / 3.6e9;
  CHECK(j->cost_usd - c0 <= 0.60 * hours * 1.0001 && j->cost_usd - c0 >= 0.60 * min_hours * 0.9999);
  /* rank 1 finishes first: the job waits for rank 0 */
  fx_done(f, ids[1], job, "succeeded", 0);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  CHECK_STR(fx_inst(f, ids[1])->row.state, "idle");
  fx_workerf(f, ids[0], "{s:s,s:s,s:s,s:s,s:i,s:i}", "type", "done", "instance", ids[0], "job",
             jid, "status", "succeeded", "exit_code", 0, "step", 100);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_SUCCEEDED);
  CHECK_STR(fx_inst(f, ids[0])->row.state, "idle");
  CHECK_INT(fx_to_worker_count(f, ids[0], "cancel") + fx_to_worker_count(f, ids[1], "cancel"), 0);

  /* the next gang takes both idle workers at once: no launch */
  fx_captures_clear(f);
  int64_t job2 = fx_submit(f, "alice", "s", "train", opts("{s:i,s:i}", "nodes", 2, "steps", 10));
  fx_settle(f);
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  char ids2[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job2, ids2), 2);
  CHECK_INT(fx_job_state(f, job2), GW_JOB_STARTING);
  CHECK_INT(fx_to_worker_count(f, ids2[0], "assign"), 1);
  fx_free(f);
}

/* No spot capacity: the spot gang's first launch is refused, and the same
 * pass places the gang on on-demand (spot=auto), with nothing given back.
 * Idle workers of one type in both markets then form the next gang. */
static void test_other_market(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->spot_refused = true;
  int64_t job = fx_submit(f, "alice", "s", "train", opts("{s:i,s:i}", "nodes", 2, "steps", 10));
  fx_settle(f);
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, ids), 2);
  CHECK_INT(fx_job_events(f, job, "placed"), 1);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 0);
  const struct fp_call *last = fp_last(f->fp, FP_CALL_LAUNCH);
  CHECK(last && !last->spot && last->id[0]);
  CHECK(fx_inst(f, ids[0]) && !fx_inst(f, ids[0])->row.spot &&
        fx_inst(f, ids[1]) && !fx_inst(f, ids[1])->row.spot);
  fx_free(f);

  /* one idle spot and one idle on-demand worker of one type: a gang now */
  f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t a = fx_submit(f, "alice", "s", "train", opts("{s:s}", "spot", "yes"));
  int64_t b = fx_submit(f, "alice", "s", "train", opts("{s:s}", "spot", "no"));
  fx_settle(f);
  char ia[GW_INSTANCE_ID_MAX], ib[GW_INSTANCE_ID_MAX];
  snprintf(ia, sizeof ia, "%s", fx_job(f, a)->instance);
  snprintf(ib, sizeof ib, "%s", fx_job(f, b)->instance);
  CHECK(fx_inst(f, ia) && fx_inst(f, ia)->row.spot && fx_inst(f, ib) && !fx_inst(f, ib)->row.spot);
  CHECK_STR(fx_inst(f, ia)->row.type, fx_inst(f, ib)->row.type);
  fx_register(f, ia, NULL, NULL);
  fx_register(f, ib, NULL, NULL);
  fx_settle(f);
  fx_done(f, ia, a, "succeeded", 0);
  fx_done(f, ib, b, "succeeded", 0);
  fx_settle(f);
  size_t launches = fp_count(f->fp, FP_CALL_LAUNCH, NULL);
  job = fx_submit(f, "alice", "s", "train", opts("{s:i,s:i}", "nodes", 2, "steps", 10));
  fx_settle(f);
  CHECK_INT(members(f, job, ids), 2);
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), launches);
  CHECK_STR(fx_inst(f, ia)->row.state, "busy");
  CHECK((!strcmp(ids[0], ia) && !strcmp(ids[1], ib)) || (!strcmp(ids[0], ib) && !strcmp(ids[1], ia)));
  fx_free(f);
}

/* All or none: capacity for one instance is no gang of two; the job waits
 * and says so, and is placed whole once capacity is back. */
static void test_all_or_none(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->capacity = 1;
  int64_t job = fx_submit(f, "alice", "s", "train", opts("{s:i,s:i}", "nodes", 2, "steps", 10));
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_QUEUED);
  CHECK(strstr(fx_state_reason(f, job, GW_JOB_QUEUED), "waiting for 2 instances at once") != NULL);
  CHECK_INT(fx_job_events(f, job, "placed"), 0);
  /* the one launch that went through was given back */
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 1);
  CHECK_INT(gw_fleet_n_insts(f->fleet), 0);
  /* the wait is said once, not at every retry; the provider is not asked
   * again at once (each try launches instances only to give them back) */
  size_t states = fx_job_events(f, job, "state");
  gw_sched_place(f->sched);
  fx_settle(f);
  CHECK_INT(fx_job_events(f, job, "state"), states);
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  /* its market changed: asked again now */
  f->fp->capacity = 0;
  fp_capacity(f->fp);
  fx_settle(f);
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, ids), 2);
  CHECK_INT(fx_job_events(f, job, "placed"), 1);
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 4);
  fx_free(f);

  /* more nodes than the gateway may ever run: the job fails at once */
  struct gw_config cfg;
  fx_config(&cfg);
  cfg.max_instances = 2;
  f = fx_new(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  job = fx_submit(f, "alice", "s", "train", opts("{s:i}", "nodes", 3));
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_FAILED);
  fx_free(f);
}

/* A notice on rank 1: it stops (its spotlab-train stops every rank, rank 0
 * checkpoints); the job is preempted with notice and placed again on two
 * instances, resuming from rank 0's checkpoint; rank 1's instance drains. */
static void test_notice(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX], jid[16];
  int64_t job = run_gang(f, 2, ids, NULL);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  fx_jid(job, jid);
  fx_metric(f, ids[0], job, 37, 2.0);
  fp_notice(f->fp, ids[1], 2 * SL_US_PER_S);
  fx_settle(f);
  CHECK_INT(fx_job_events(f, job, "notice"), 1);
  CHECK_STR(sl_json_get_str(fx_job_event(f, job, "notice"), "instance", ""), ids[1]);
  fx_wnotice(f, ids[1]);
  fx_done(f, ids[1], job, "preempted", 0);
  fx_settle(f);
  /* rank 0 is told to stop, with the usual grace: it writes the checkpoint */
  const json_t *c = fx_to_worker_last(f, ids[0], "cancel");
  CHECK(c && !json_object_get(c, "grace_ms"));
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  fx_checkpoint(f, ids[0], job, 37, "J000001/ckpt-00000037.tc");
  fx_workerf(f, ids[0], "{s:s,s:s,s:s,s:s,s:i,s:i}", "type", "done", "instance", ids[0], "job",
             jid, "status", "cancelled", "exit_code", 0, "step", 37);
  fx_settle(f);
  const json_t *pre = fx_job_event(f, job, "preempted");
  CHECK(pre != NULL);
  CHECK(json_is_true(json_object_get(pre, "notice")));
  CHECK_INT(sl_json_get_int(pre, "step", -1), 37);
  CHECK_STR(sl_json_get_str(pre, "instance", ""), ids[1]);
  CHECK(fx_job_was(f, job, GW_JOB_PREEMPTED));
  CHECK_INT(fx_bus_count(f, GW_BUS_PREEMPTED, job), 1);
  /* placed again: rank 0's worker (idle) and a new instance; rank 1 drains */
  CHECK_STR(fx_inst(f, ids[1])->row.state, "draining");
  char again[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, again), 2);
  CHECK_STR(again[0], ids[0]);
  CHECK(strcmp(again[1], ids[1]) != 0);
  CHECK_INT(fx_job_events(f, job, "placed"), 2);
  fx_register(f, again[1], NULL, NULL);
  fx_settle(f);
  const json_t *a = fx_to_worker_last(f, again[0], "assign");
  CHECK_INT(sl_json_get_int(a, "attempt", 0), 2);
  CHECK_STR(sl_json_get_str(a, "restore", ""), "J000001/ckpt-00000037.tc");
  CHECK_INT(fx_job_events(f, job, "resumed"), 1);
  started(f, again[0], job, 0, RDV);
  fx_settle(f);
  a = fx_to_worker_last(f, again[1], "assign");
  CHECK_STR(sl_json_get_str(a, "restore", ""), "J000001/ckpt-00000037.tc"); /* --resume on every rank */
  CHECK_INT(sl_json_get_int(gang_of(a), "rank", -1), 1);
  fx_free(f);
}

/* A rebalance recommendation on rank 1, which its worker goes on through:
 * rank 1 takes no command, so rank 0 is asked for the checkpoint (every
 * rank takes it); the job runs on. One on rank 0: its own worker asks. */
static void test_rebalance(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX], jid[16];
  int64_t job = run_gang(f, 2, ids, NULL);
  fx_jid(job, jid);
  fx_captures_clear(f);
  fx_wrebalance(f, ids[1], false);
  fx_settle(f);
  const json_t *c = fx_to_worker_last(f, ids[0], "checkpoint_now");
  CHECK(c && !strcmp(sl_json_get_str(c, "job", ""), jid));
  CHECK(fx_to_worker_last(f, ids[1], "checkpoint_now") == NULL);
  CHECK(fx_to_worker_last(f, ids[0], "cancel") == NULL);
  CHECK_INT(fx_job_events(f, job, "notice"), 1);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  fx_captures_clear(f);
  fx_wrebalance(f, ids[0], false);
  fx_settle(f);
  CHECK(fx_to_worker_last(f, ids[0], "checkpoint_now") == NULL);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  fx_free(f);
}

/* No notice: rank 1's instance is gone. Rank 0 is stopped at once (its
 * process waits on a peer that is no more) and the job resumes from the
 * newest checkpoint, on two instances again. */
static void test_lost(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX], jid[16];
  int64_t job = run_gang(f, 2, ids, NULL);
  fx_jid(job, jid);
  fx_checkpoint(f, ids[0], job, 30, "J000001/ckpt-00000030.tc");
  fx_metric(f, ids[0], job, 34, 2.0);
  fp_terminated(f->fp, ids[1], true);
  fx_settle(f);
  const json_t *c = fx_to_worker_last(f, ids[0], "cancel");
  CHECK(c && sl_json_get_int(c, "grace_ms", -1) == 0);
  CHECK(!fx_inst(f, ids[1]));
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING); /* until rank 0 has stopped */
  fx_done(f, ids[0], job, "cancelled", 137);
  fx_settle(f);
  const json_t *pre = fx_job_event(f, job, "preempted");
  CHECK(pre && json_is_false(json_object_get(pre, "notice")));
  CHECK_INT(sl_json_get_int(pre, "step", -1), 30);
  CHECK_STR(sl_json_get_str(pre, "instance", ""), ids[1]);
  char again[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, again), 2);
  CHECK_STR(again[0], ids[0]); /* the surviving worker, idle again, is reused */
  fx_free(f);

  /* rank 0 fails in a collective before the provider reports the loss: it
   * is the loss, not the failure, that decides */
  f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  job = run_gang(f, 2, ids, NULL);
  fx_jid(job, jid);
  fx_workerf(f, ids[0], "{s:s,s:s,s:s,s:s,s:i,s:s}", "type", "done", "instance", ids[0], "job",
             jid, "status", "failed", "exit_code", 1, "message", "ranks could not agree on the step");
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  CHECK_INT(fx_to_worker_count(f, ids[1], "cancel"), 1);
  fp_terminated(f->fp, ids[1], true);
  fx_settle(f);
  CHECK(fx_job_was(f, job, GW_JOB_PREEMPTED));
  CHECK(!fx_job_was(f, job, GW_JOB_FAILED));
  fx_free(f);
}

/* A rank that fails on its own fails the job, naming it; a cancel ends
 * every rank. */
static void test_fail_and_cancel(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX], jid[16];
  int64_t job = run_gang(f, 3, ids, NULL);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  fx_jid(job, jid);
  fx_workerf(f, ids[2], "{s:s,s:s,s:s,s:s,s:i,s:s}", "type", "done", "instance", ids[2], "job",
             jid, "status", "failed", "exit_code", 1, "message", "out of memory");
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[0], "cancel"), 1);
  CHECK_INT(fx_to_worker_count(f, ids[1], "cancel"), 1);
  fx_done(f, ids[0], job, "cancelled", 0);
  fx_done(f, ids[1], job, "cancelled", 0);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_FAILED);
  const char *why = fx_state_reason(f, job, GW_JOB_FAILED);
  CHECK(strstr(why, "rank 2") && strstr(why, "out of memory"));
  for (int r = 0; r < 3; r++)
    CHECK_STR(fx_inst(f, ids[r])->row.state, "idle");

  job = run_gang(f, 2, ids, NULL);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  CHECK_INT(gw_sched_cancel(f->sched, fx_job(f, job)), 0);
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[0], "cancel"), 2);
  CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
  fx_done(f, ids[0], job, "cancelled", 0);
  fx_done(f, ids[1], job, "cancelled", 0);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_CANCELLED);

  /* a gang still launching is cancelled at once; its instances are free */
  f->fp->mode = FP_SILENT;
  job = fx_submit(f, "alice", "s", "train", opts("{s:i}", "nodes", 4));
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_PROVISIONING);
  CHECK_INT(gw_sched_cancel(f->sched, fx_job(f, job)), 0);
  CHECK_INT(fx_job_state(f, job), GW_JOB_CANCELLED);
  fx_free(f);
}

/* A rank whose worker could not restore the checkpoint for a reason that
 * may pass ("retry": the store did not answer) stops the gang, which is
 * placed again after a wait, within [gateway] process_retries; the same
 * refusal without the mark fails the job. */
static void test_refused_start(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX], jid[16];
  for (int retry = 1; retry >= 0; retry--) {
    int64_t job = run_gang(f, 2, ids, NULL);
    CHECK_INT(fx_job_state(f, job), GW_JOB_RUNNING);
    fx_jid(job, jid);
    fx_workerf(f, ids[1], "{s:s,s:s,s:s,s:s,s:i,s:s,s:b}", "type", "done", "instance", ids[1], "job",
               jid, "status", "failed", "exit_code", -1, "message",
               "restore J/ckpt-10.tc: S3 get: HTTP 503 SlowDown", "retry", retry);
    fx_settle(f);
    CHECK_INT(fx_to_worker_count(f, ids[0], "cancel"), 1);
    fx_done(f, ids[0], job, "cancelled", 0);
    fx_settle(f);
    if (!retry) {
      CHECK_INT(fx_job_state(f, job), GW_JOB_FAILED);
      CHECK(strstr(fx_state_reason(f, job, GW_JOB_FAILED), "HTTP 503") != NULL);
      break;
    }
    CHECK_INT(fx_job_state(f, job), GW_JOB_QUEUED);
    const char *why = fx_state_reason(f, job, GW_JOB_PREEMPTED);
    CHECK(why && strstr(why, "could not start the job: rank 1") && strstr(why, "HTTP 503") &&
          strstr(why, "(retry 1 of"));
    CHECK_STR(fx_job(f, job)->reason, "starting again in 5 s (the worker could not start it)");
    CHECK_INT(fx_state_count(f, job, GW_JOB_QUEUED, "resuming from the latest checkpoint"), 0);
    fx_settle(f); /* not placed again before the wait */
    CHECK_INT(fx_job_state(f, job), GW_JOB_QUEUED);
    fx_job(f, job)->start_retry_mono_us = 0; /* the 5 s have passed */
    gw_sched_kick(f->sched);
    fx_settle(f);
    CHECK(fx_job_state(f, job) != GW_JOB_QUEUED);
    CHECK_INT(fx_job(f, job)->attempt, 2);
    CHECK_INT(gw_sched_cancel(f->sched, fx_job(f, job)), 0);
    fx_settle(f);
  }
  fx_free(f);
}

/* Rank 0's worker names no rendezvous (a worker without nodes=N): the job
 * fails with a reason instead of the other ranks waiting forever. */
static void test_old_worker(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t job = fx_submit(f, "alice", "s", "train", opts("{s:i}", "nodes", 2));
  fx_settle(f);
  char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, ids), 2);
  fx_register(f, ids[0], NULL, NULL);
  fx_register(f, ids[1], NULL, NULL);
  fx_settle(f);
  fx_started(f, ids[0], job);
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[1], "assign"), 0);
  CHECK_INT(fx_to_worker_count(f, ids[0], "cancel"), 1);
  fx_done(f, ids[0], job, "cancelled", 137);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, job), GW_JOB_FAILED);
  CHECK(strstr(fx_state_reason(f, job, GW_JOB_FAILED), "rendezvous") != NULL);
  fx_free(f);
}

/* The kernel protocol refuses what cannot run: nodes out of range, nodes
 * for other kinds, a batch the ranks cannot share. */
static void test_submit_checks(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  fx_user(f, "alice", "tok-alice");
  CHECK(fx_hello(f, "k1", "tok-alice", "nb"));
  CHECK(fx_define(f, "k1"));
  const json_t *r = fx_ksubmit(f, "k1", opts("{s:i}", "nodes", 0));
  CHECK_STR(fx_err_code(r), "SL_ETYPE");
  r = fx_ksubmit(f, "k1", opts("{s:i}", "nodes", 65));
  CHECK_STR(fx_err_code(r), "SL_ETYPE");
  r = fx_ksubmit(f, "k1", opts("{s:i,s:i}", "nodes", 3, "batch", 8));
  CHECK_STR(fx_err_code(r), "SL_ECONFIG");
  CHECK(strstr(fx_err_msg(r), "multiple of nodes") != NULL);
  r = fx_req(f, "k1", "{s:s,s:s,s:s,s:s,s:{s:i}}", "type", "submit", "kind", "eval", "model", "m",
             "data", "d", "options", "nodes", 2);
  CHECK_STR(fx_err_code(r), "SL_ENOTSUP");
  r = fx_ksubmit(f, "k1", opts("{s:i,s:i}", "nodes", 2, "batch", 8));
  CHECK(fx_ok(r));
  fx_free(f);
}

/* A member's register with its GPU report (gpus.h). */
static void register_gpus(struct fx *f, const char *inst, const char *gpus) {
  json_t *b = json_pack("{s:s,s:s,s:[],s:[],s:o}", "type", "register", "instance", inst, "jobs",
                        "ended", "gpus", json_loads(gpus, 0, NULL));
  fx_worker(f, inst, b);
  json_decref(b);
}

/* Members that would train on different devices (one can use its GPU, one
 * cannot) fail a job that names neither gpus nor device at once, with why,
 * instead of ranks that cannot meet; one that names gpus, and
 * members that agree, start. */
static void test_devices_differ(void) {
  static const char *const usable = "{\"count\":1,\"model\":\"NVIDIA A10G\"}",
                           *unusable = "{\"count\":1,\"model\":\"NVIDIA A10G\",\"unusable\":"
                                       "\"cannot load the CUDA backend (libcudart.so.13: missing)\"}",
                           *none = "{\"count\":0,\"reason\":\"no NVIDIA driver library\"}";
  struct {
    const char *gpus0, *gpus1;
    json_t *extra;
    const char *why; /* NULL: rank 0 is assigned */
  } cases[] = {
      {usable, unusable, NULL, "cannot load the CUDA backend (libcudart.so.13: missing)"},
      {none, usable, NULL, "no NVIDIA driver library"},
      {usable, unusable, opts("{s:i}", "gpus", 1), NULL},
      {usable, none, opts("{s:s}", "device", "cpu"), NULL},
      {unusable, none, NULL, NULL},
      {usable, usable, NULL, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct fx *f = fx_new(NULL); /* fresh workers: none registered before */
    CHECK(f != NULL);
    if (!f)
      return;
    json_t *o = opts("{s:i,s:i,s:s}", "nodes", 2, "steps", 100, "spot", "yes");
    if (cases[i].extra)
      json_object_update(o, cases[i].extra);
    json_decref(cases[i].extra);
    int64_t job = fx_submit(f, "alice", "s", "train", o);
    fx_settle(f);
    char ids[GW_GANG_MAX][GW_INSTANCE_ID_MAX];
    CHECK_INT(members(f, job, ids), 2);
    register_gpus(f, ids[0], cases[i].gpus0);
    register_gpus(f, ids[1], cases[i].gpus1);
    fx_settle(f);
    if (!cases[i].why) {
      CHECK_INT(fx_job_state(f, job), GW_JOB_STARTING);
      CHECK_INT(fx_to_worker_count(f, ids[0], "assign"), 1);
      fx_free(f);
      continue;
    }
    CHECK_INT(fx_job_state(f, job), GW_JOB_FAILED);
    CHECK_INT(fx_to_worker_count(f, ids[0], "assign"), 0);
    const char *why = fx_state_reason(f, job, GW_JOB_FAILED);
    int gpu = strstr(cases[i].gpus0, "unusable") || !strstr(cases[i].gpus0, "\"count\":1");
    char want[4400];
    snprintf(want, sizeof want, "nodes=2: rank %d (%s) would train on its GPUs and rank %d (%s) on the CPU (%s)",
             gpu, ids[gpu], !gpu, ids[!gpu], cases[i].why);
    CHECK(why && strstr(why, want) == why && strstr(why, "name gpus=N, or device=cpu"));
    /* the instances are free for the next job */
    CHECK_STR(fx_inst(f, ids[0])->row.state, "idle");
    CHECK_STR(fx_inst(f, ids[1])->row.state, "idle");
    fx_free(f);
  }
}

/* Rank 0's worker registers last, before its provider said it launched: the
 * register assigns rank 0 once, and the same register does not take it for a
 * worker that lost its job. */
static void test_rank0_registers_before_launched(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t job = fx_submit(f, "alice", "s", "train", opts("{s:i,s:i}", "nodes", 2, "steps", 10));
  fx_settle(f);
  char ids[2][GW_INSTANCE_ID_MAX];
  CHECK_INT(members(f, job, ids), 2);
  fx_register(f, ids[1], NULL, NULL);
  fx_settle(f);
  fx_register(f, ids[0], NULL, NULL);
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[0], "assign"), 1);
  CHECK_INT(fx_job_events(f, job, "preempted"), 0);
  CHECK_INT(fx_job(f, job)->attempt, 1);
  CHECK_INT(fx_job_state(f, job), GW_JOB_STARTING);
  fp_launched(f->fp, ids[0]);
  fp_launched(f->fp, ids[1]);
  fx_settle(f);
  CHECK_INT(fx_to_worker_count(f, ids[0], "assign"), 1);
  CHECK_INT(fx_job(f, job)->attempt, 1);
  fx_free(f);
}

int main(void) {
  test_rank0_registers_before_launched();
  test_devices_differ();
  test_start_and_succeed();
  test_all_or_none();
  test_other_market();
  test_notice();
  test_rebalance();
  test_lost();
  test_fail_and_cancel();
  test_old_worker();
  test_refused_start();
  test_submit_checks();
  TEST_MAIN_END();
}
