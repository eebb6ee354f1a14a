/* The scheduler alone, over a scripted provider (gw-fixture.h): fairness
 * between users, placement on the cheapest fitting offer, a job's life from
 * launch to running, preemption with and without notice, process retries,
 * launches that fail, are refused or are never answered, cancellation, and
 * cost accrued in the provider's hours and written through the ledger.
 * Nothing runs but the loop; no test waits for more than the time it
 * measures. */
#include "gw-fixture.h"
#include "harness.h"

#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MS SL_US_PER_MS

static json_t *opts(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *o = json_vpack_ex(NULL, 0, fmt, ap);
  va_end(ap);
  return o;
}

static bool contains(const char *s, const char *part) {
  return s && strstr(s, part);
}

/* ---- fairness ---- */

/* Two users, one slot: once the first job is placed, the queue serves the
 * user after the one served last, so alice's three jobs and bob's two run
 * a1 b1 a2 b2 a3, each on a new instance (the other user's idle one shut
 * down for it). */
static void test_fairness(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  cfg.max_instances = 1;
  struct fx *f = fx_new(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t a1 = fx_submit(f, "alice", "s", "train", NULL);
  int64_t a2 = fx_submit(f, "alice", "s", "train", NULL);
  int64_t a3 = fx_submit(f, "alice", "s", "train", NULL);
  int64_t b1 = fx_submit(f, "bob", "s", "train", NULL);
  int64_t b2 = fx_submit(f, "bob", "s", "train", NULL);
  CHECK(a1 > 0 && b2 > 0);
  int64_t want[5] = {a1, b1, a2, b2, a3};
  for (int k = 0; k < 5; k++) {
    char inst[GW_INSTANCE_ID_MAX] = "";
    fx_settle(f);
    const struct fx_bus_rec *p = fx_bus_last(f, GW_BUS_PLACED, 0);
    CHECK(p != NULL);
    if (!p)
      break;
    CHECK_INT(p->job, want[k]);
    CHECK_INT(fx_bus_count(f, GW_BUS_PLACED, 0), k + 1);
    int64_t job = p->job;
    CHECK(fx_run_job(f, job, inst));
    /* one slot, and the users take turns: each turn shuts the other user's
     * idle instance down (never reused across users) and starts its own */
    char want_inst[16];
    snprintf(want_inst, sizeof want_inst, "f-%d", k + 1);
    CHECK_STR(inst, want_inst);
    fx_done(f, inst, job, "succeeded", 0);
    CHECK_INT(fx_job_state(f, job), GW_JOB_SUCCEEDED);
  }
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 5);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 4);
  CHECK_INT(gw_queue_len(f->queue), 0);
  fx_free(f);
}

/* ---- placement ---- */

struct want_launch {
  const char *options;          /* JSON text */
  const char *type;             /* NULL: the job fails, no type fits */
  bool spot;
  double max_price;
  const char *why;              /* a job that fails: what its reason names */
};

/* Room for another user's job is made one idle worker at a time: while a
 * provider refuses it for capacity, the next is shut down only once the
 * provider says the first has gone. */
static void test_make_room(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  struct fx *f = fx_new(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->terminated_on_terminate = false;
  char i1[GW_INSTANCE_ID_MAX] = "", i2[GW_INSTANCE_ID_MAX] = "";
  int64_t a1 = fx_submit(f, "alice", "s", "train", NULL), a2 = fx_submit(f, "alice", "s", "train", NULL);
  CHECK(fx_run_job(f, a1, i1) && fx_run_job(f, a2, i2));
  fx_done(f, i1, a1, "succeeded", 0);
  fx_done(f, i2, a2, "succeeded", 0);
  enum fp_launch_mode mode = f->fp->mode;
  f->fp->mode = FP_REFUSE;
  int64_t b = fx_submit(f, "bob", "s", "train", NULL);
  for (int k = 0; k < 3; k++) { /* passes while the first is still going */
    gw_sched_kick(f->sched);
    fx_settle(f);
  }
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 1);
  CHECK(fx_inst(f, i1) == NULL && fx_inst(f, i2) != NULL); /* the one idle longest */
  CHECK_INT(fx_job_state(f, b), GW_JOB_QUEUED);
  fp_terminated(f->fp, i1, false); /* gone, and bob's launch still refused: the next one */
  fx_settle(f);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 2);
  CHECK(fx_inst(f, i2) == NULL);
  f->fp->mode = mode; /* capacity back: bob's own instance */
  gw_sched_kick(f->sched);
  fx_settle(f);
  CHECK(fx_job(f, b)->instance[0] && strcmp(fx_job(f, b)->instance, i1) && strcmp(fx_job(f, b)->instance, i2));
  fx_free(f);
}

static void test_placement(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  cfg.max_instances = 64;
  struct fx *f = fx_new(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT; /* launches stay pending: only the choice matters */
  const struct want_launch cases[] = {
    {"{}", "t.small", true, 0, NULL},                           /* cheapest: small spot 0.30 */
    {"{\"gpus\": 2}", "t.big", true, 0, NULL},                  /* only big has 2+ GPUs */
    {"{\"spot\": \"no\"}", "t.small", false, 0, NULL},          /* small on-demand 1.00 */
    {"{\"spot\": false}", "t.small", false, 0, NULL},           /* the same as a boolean */
    {"{\"spot\": \"yes\", \"gpus\": 4}", "t.big", true, 0, NULL},
    {"{\"instance\": \"t.big\"}", "t.big", true, 0, NULL},      /* named type */
    {"{\"instance\": [\"t.big\"], \"spot\": \"no\"}", "t.big", false, 0, NULL},
    {"{\"max_price\": 0.5}", "t.small", true, 0.5, NULL},       /* 0.30 spot fits under 0.5 */
    {"{\"max_price\": 0.5, \"spot\": \"no\"}", NULL, false, 0, /* on-demand 1.00 > 0.5 */
     "max_price=0.5: below every such offer (the cheapest: t.small on-demand at $1.0000/h)"},
    {"{\"gpus\": 8}", NULL, false, 0, /* no type has 8 GPUs */
     "gpus=8: no such instance type has that many (the most: 4, on t.big)"},
    {"{\"gpus\": 4, \"max_price\": 1.0}", NULL, false, 0, /* big spot 1.20 > 1.0 */
     "max_price=1: below every such offer (the cheapest: t.big spot at $1.2000/h)"},
    {"{\"instance\": \"t.huge\"}", NULL, false, 0, /* not in the catalog */
     "instance=t.huge: no such type is offered (offered: t.small, t.big)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    json_t *o = json_loads(cases[i].options, 0, NULL);
    size_t before = fp_count(f->fp, FP_CALL_LAUNCH, NULL);
    int64_t id = fx_submit(f, "alice", "s", "train", o);
    CHECK(id > 0);
    fx_settle(f);
    if (cases[i].type) {
      CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), before + 1);
      const struct fp_call *c = fp_last(f->fp, FP_CALL_LAUNCH);
      if (!c)
        continue;
      CHECK_STR(c->type, cases[i].type);
      CHECK_INT(c->spot, cases[i].spot);
      CHECK_NEAR(c->max_price, cases[i].max_price, 1e-9);
      CHECK_INT(c->job, id);
      CHECK_INT(fx_job_state(f, id), GW_JOB_PROVISIONING);
      struct gw_inst *in = fx_inst(f, c->id);
      CHECK(in != NULL);
      if (in) {
        CHECK_STR(in->row.state, "launching");
        CHECK_STR(in->row.type, cases[i].type);
        CHECK_INT(in->row.job, id);
      }
    } else {
      if (fp_count(f->fp, FP_CALL_LAUNCH, NULL) != before)
        fprintf(stderr, "case %zu (%s) launched\n", i, cases[i].options);
      CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), before);
      CHECK_INT(fx_job_state(f, id), GW_JOB_FAILED);
      const char *reason = fx_state_reason(f, id, GW_JOB_FAILED);
      if (!contains(reason, cases[i].why))
        fprintf(stderr, "case %zu: reason \"%s\", expected \"%s\"\n", i, reason ? reason : "(none)",
                cases[i].why);
      CHECK(contains(reason, cases[i].why));
      CHECK(fx_job(f, id) == NULL);
    }
  }
  CHECK_INT(gw_queue_len(f->queue), 0);
  fx_free(f);
}

/* ---- a job's life ---- */

static void test_lifecycle(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t id = fx_submit(f, "alice", "nb", "train", opts("{s:i}", "steps", 100));
  CHECK_INT(fx_job_state(f, id), GW_JOB_QUEUED);
  CHECK_INT(gw_queue_len(f->queue), 1);
  fx_settle(f);
  /* launch requested: instance launching, job provisioning, not placed */
  struct gw_inst *in = fx_inst(f, "f-1");
  CHECK(in != NULL);
  if (!in) {
    fx_free(f);
    return;
  }
  CHECK_STR(in->row.state, "launching");
  CHECK_STR(in->row.provider, "fake");
  CHECK(!in->launched);
  CHECK_INT(fx_job_state(f, id), GW_JOB_PROVISIONING);
  CHECK_INT(fx_bus_count(f, GW_BUS_PLACED, id), 0);
  CHECK(fx_job_event(f, id, "placed") == NULL);
  CHECK_INT(gw_queue_len(f->queue), 0);

  /* LAUNCHED: placed, with the zone the event carried */
  fp_launched(f->fp, "f-1");
  fx_settle(f);
  const json_t *placed = fx_job_event(f, id, "placed");
  CHECK(placed != NULL);
  CHECK_STR(sl_json_get_str(placed, "instance", ""), "f-1");
  CHECK_STR(sl_json_get_str(placed, "zone", ""), "fz-1a");
  CHECK_STR(sl_json_get_str(placed, "instance_type", ""), "t.small");
  CHECK(json_is_true(json_object_get(placed, "spot")));
  CHECK_NEAR(sl_json_get_num(placed, "price_usd_per_hour", 0), 0.30, 1e-9);
  CHECK_INT(sl_json_get_int(placed, "attempt", 0), 1);
  const struct fx_bus_rec *pb = fx_bus_last(f, GW_BUS_PLACED, id);
  CHECK(pb != NULL);
  if (pb)
    CHECK_STR(pb->instance, "f-1");
  struct gw_job *j = fx_job(f, id);
  CHECK(j && !strcmp(j->zone, "fz-1a"));
  CHECK(fx_inst(f, "f-1")->launched);
  CHECK_INT(fx_to_worker_count(f, "f-1", NULL), 0); /* nobody to send to yet */

  /* register: the job is assigned to that worker */
  fx_register(f, "f-1", NULL, NULL);
  fx_settle(f);
  const json_t *reg = fx_to_worker_last(f, "f-1", "registered");
  CHECK(reg != NULL);
  CHECK_INT(json_array_size(json_object_get(reg, "jobs")), 0);
  const json_t *as = fx_to_worker_last(f, "f-1", "assign");
  CHECK(as != NULL);
  char jid[16];
  fx_jid(id, jid);
  CHECK_STR(sl_json_get_str(as, "job", ""), jid);
  CHECK_STR(sl_json_get_str(as, "kind", ""), "train");
  CHECK_INT(sl_json_get_int(as, "attempt", 0), 1);
  CHECK(json_is_null(json_object_get(as, "restore")));
  CHECK(json_is_object(json_object_get(as, "spec")));
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  in = fx_inst(f, "f-1");
  CHECK_STR(in->row.state, "busy");
  CHECK_INT(in->row.job, id);
  CHECK(fx_job_event(f, id, "resumed") == NULL); /* a first attempt resumes nothing */

  /* started, then metrics: running, the step follows */
  fx_started(f, "f-1", id);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  CHECK(contains(fx_state_reason(f, id, GW_JOB_RUNNING), "process started"));
  fx_metric(f, "f-1", id, 10, 2.5);
  const json_t *m = fx_job_event(f, id, "metric");
  CHECK(m != NULL);
  CHECK_INT(sl_json_get_int(m, "step", 0), 10);
  CHECK_NEAR(sl_json_get_num(m, "loss", 0), 2.5, 1e-9);
  CHECK_INT(sl_json_get_int(m, "steps", 0), 100);
  CHECK_INT(fx_job(f, id)->step, 10);
  /* every event on the bus has its seq, one after another */
  int64_t seq = 0;
  bool gapless = true;
  for (size_t i = 0; i < f->n_bus; i++)
    if (f->bus_log[i].kind == GW_BUS_JOB_EVENT && f->bus_log[i].job == id) {
      int64_t s = sl_json_get_int(f->bus_log[i].json, "seq", -1);
      if (seq && s != seq + 1)
        gapless = false;
      seq = s;
    }
  CHECK(gapless);
  CHECK(seq > 3);
  fx_done(f, "f-1", id, "succeeded", 0);
  CHECK_INT(fx_job_state(f, id), GW_JOB_SUCCEEDED);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "idle");
  fx_free(f);
}

/* The worker registers before the provider says the launch is done: the
 * register places the job; the LAUNCHED that follows places nothing again. */
static void test_register_before_launched(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, id), GW_JOB_PROVISIONING);
  fx_register(f, "f-1", NULL, NULL);
  fx_settle(f);
  CHECK_INT(fx_bus_count(f, GW_BUS_PLACED, id), 1);
  CHECK_INT(fx_job_events(f, id, "placed"), 1);
  CHECK_INT(fx_to_worker_count(f, "f-1", "assign"), 1);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  fp_launched(f->fp, "f-1");
  fx_settle(f);
  CHECK_INT(fx_bus_count(f, GW_BUS_PLACED, id), 1);
  CHECK_INT(fx_job_events(f, id, "placed"), 1);
  CHECK_INT(fx_to_worker_count(f, "f-1", "assign"), 1);
  CHECK_INT(fx_job(f, id)->attempt, 1);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  /* the zone the late event carries reaches the instance's row */
  CHECK_STR(fx_inst(f, "f-1")->row.zone, "fz-1a");
  fx_free(f);
}

/* ---- preemption ---- */

static void test_preempt_with_notice(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, id, inst));
  CHECK_STR(inst, "f-1");
  fx_metric(f, "f-1", id, 40, 1.0);
  fx_checkpoint(f, "f-1", id, 40, fx_key(id, "ckpt-40"));
  fx_metric(f, "f-1", id, 45, 0.9);

  fp_notice(f->fp, "f-1", 120 * SL_US_PER_S);
  fx_settle(f);
  const json_t *n = fx_job_event(f, id, "notice");
  CHECK(n != NULL);
  CHECK_STR(sl_json_get_str(n, "instance", ""), "f-1");
  CHECK(sl_json_get_int(n, "deadline_us", 0) > sl_time_real_us());
  CHECK(fx_inst(f, "f-1")->notice);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING); /* the worker checkpoints and stops */

  fx_done(f, "f-1", id, "preempted", -1);
  const json_t *p = fx_job_event(f, id, "preempted");
  CHECK(p != NULL);
  CHECK(json_is_true(json_object_get(p, "notice")));
  CHECK_INT(sl_json_get_int(p, "step", -1), 40);
  CHECK_STR(sl_json_get_str(p, "instance", ""), "f-1");
  const struct fx_bus_rec *pb = fx_bus_last(f, GW_BUS_PREEMPTED, id);
  CHECK(pb != NULL);
  if (pb) {
    CHECK(pb->notice);
    CHECK_STR(pb->instance, "f-1");
  }
  CHECK(fx_job_was(f, id, GW_JOB_PREEMPTED));
  CHECK_INT(fx_job_state(f, id), GW_JOB_QUEUED);
  CHECK_INT(fx_job(f, id)->step, 40);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "draining");

  /* relaunched on a new instance, resumed from the checkpoint */
  fx_settle(f);
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  CHECK_STR(fx_job(f, id)->instance, "f-2");
  CHECK_INT(fx_job(f, id)->attempt, 2);
  fx_register(f, "f-2", NULL, NULL);
  fx_settle(f);
  const json_t *as = fx_to_worker_last(f, "f-2", "assign");
  CHECK(as != NULL);
  CHECK_STR(sl_json_get_str(as, "restore", ""), fx_key(id, "ckpt-40"));
  CHECK_INT(sl_json_get_int(as, "attempt", 0), 2);
  const json_t *r = fx_job_event(f, id, "resumed");
  CHECK(r != NULL);
  CHECK_INT(sl_json_get_int(r, "from_step", -1), 40);
  CHECK(json_is_number(json_object_get(r, "after_s")));
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);

  /* the old instance goes; the job on the new one does not notice */
  fp_terminated(f->fp, "f-1", true);
  fx_settle(f);
  CHECK(fx_inst(f, "f-1") == NULL);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  CHECK_INT(fx_bus_count(f, GW_BUS_PREEMPTED, id), 1);
  const struct fx_bus_rec *gone = fx_bus_last(f, GW_BUS_INSTANCE_GONE, 0);
  CHECK(gone && !strcmp(gone->instance, "f-1"));
  fx_free(f);
}

static void test_preempt_without_notice(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  CHECK(fx_run_job(f, id, NULL));
  fx_metric(f, "f-1", id, 20, 1.0);
  fx_checkpoint(f, "f-1", id, 20, fx_key(id, "ckpt-20"));
  fx_metric(f, "f-1", id, 33, 0.8);
  CHECK_INT(fx_job(f, id)->step, 33);

  fp_terminated(f->fp, "f-1", true); /* the market takes it back, no word before */
  fx_settle(f);
  const json_t *p = fx_job_event(f, id, "preempted");
  CHECK(p != NULL);
  CHECK(json_is_false(json_object_get(p, "notice")));
  CHECK_INT(sl_json_get_int(p, "step", -1), 20);
  const struct fx_bus_rec *pb = fx_bus_last(f, GW_BUS_PREEMPTED, id);
  CHECK(pb && !pb->notice);
  CHECK(contains(fx_state_reason(f, id, GW_JOB_PREEMPTED), "preempted by the market"));
  CHECK(fx_job_was(f, id, GW_JOB_QUEUED));
  CHECK(fx_inst(f, "f-1") == NULL);
  const struct fx_bus_rec *gone = fx_bus_last(f, GW_BUS_INSTANCE_GONE, 0);
  CHECK(gone && !strcmp(gone->instance, "f-1") && contains(gone->why, "market"));
  /* relaunched (same settle) and resumed from step 20, not 33 */
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  CHECK_INT(fx_job_state(f, id), GW_JOB_PROVISIONING);
  CHECK_INT(fx_job(f, id)->step, 20);
  fx_register(f, "f-2", NULL, NULL);
  fx_settle(f);
  const json_t *r = fx_job_event(f, id, "resumed");
  CHECK(r && sl_json_get_int(r, "from_step", -1) == 20);
  const json_t *as = fx_to_worker_last(f, "f-2", "assign");
  CHECK(as && !strcmp(sl_json_get_str(as, "restore", ""), fx_key(id, "ckpt-20")));
  fx_free(f);
}

/* ---- process retries ---- */

static void test_process_retries(void) {
  struct fx *f = fx_new(NULL); /* process_retries 2 */
  CHECK(f != NULL);
  if (!f)
    return;
  CHECK_INT(f->cfg.process_retries, 2);
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  CHECK(fx_run_job(f, id, NULL));
  for (int k = 1; k <= 2; k++) {
    fx_done(f, "f-1", id, "failed", 137);
    CHECK_INT(fx_job_state(f, id), GW_JOB_QUEUED);
    char want[64];
    snprintf(want, sizeof want, "signal 9 (retry %d of 2)", k);
    CHECK(contains(fx_state_reason(f, id, GW_JOB_PREEMPTED), want));
    /* the worker is fine: the same instance takes the job again */
    CHECK_STR(fx_inst(f, "f-1")->row.state, "idle");
    fx_settle(f);
    CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
    CHECK_INT(fx_job(f, id)->attempt, k + 1);
    CHECK_INT(fx_to_worker_count(f, "f-1", "assign"), k + 1);
    fx_started(f, "f-1", id);
  }
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 1);
  fx_done(f, "f-1", id, "failed", 137);
  CHECK_INT(fx_job_state(f, id), GW_JOB_FAILED);
  CHECK(contains(fx_state_reason(f, id, GW_JOB_FAILED), "exit code 137"));

  /* an exit that is not a signal fails at once */
  int64_t id2 = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, id2), GW_JOB_STARTING);
  fx_started(f, "f-1", id2);
  fx_done(f, "f-1", id2, "failed", 1);
  CHECK_INT(fx_job_state(f, id2), GW_JOB_FAILED);
  CHECK(!fx_job_was(f, id2, GW_JOB_PREEMPTED));

  /* a start its worker could not make for a reason that may pass (the
   * store or the gateway did not answer): tried again; the same refusal
   * without "retry" fails the job at once */
  int64_t id4 = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, id4), GW_JOB_STARTING);
  char jid[16];
  for (int retry = 1; retry >= 0; retry--) {
    json_t *b = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:b}", "type", "done", "instance", "f-1", "job",
                          fx_jid(id4, jid), "status", "failed", "exit_code", -1, "message",
                          "restore J/ckpt-50.tc: the gateway did not answer a presign request",
                          "retry", retry);
    fx_worker(f, "f-1", b);
    json_decref(b);
    if (retry) {
      CHECK_INT(fx_job_state(f, id4), GW_JOB_QUEUED);
      CHECK(contains(fx_state_reason(f, id4, GW_JOB_PREEMPTED),
                     "could not start the job: restore J/ckpt-50.tc: the gateway did not answer a "
                     "presign request (retry 1 of 2)"));
      /* not at once: what refused it is given 5 s */
      fx_settle(f);
      CHECK_INT(fx_job_state(f, id4), GW_JOB_QUEUED);
      CHECK_STR(fx_job(f, id4)->reason, "starting again in 5 s (the worker could not start it)");
      /* queued once, with the wait as its reason */
      CHECK_INT(fx_state_count(f, id4, GW_JOB_PREEMPTED, NULL), 1);
      CHECK_INT(fx_state_count(f, id4, GW_JOB_QUEUED, "resuming from the latest checkpoint"), 0);
      CHECK_INT(fx_state_count(f, id4, GW_JOB_QUEUED, fx_job(f, id4)->reason), 1);
      int64_t wait_us = fx_job(f, id4)->start_retry_mono_us - sl_time_mono_us();
      CHECK(wait_us > 4 * SL_US_PER_S && wait_us <= 5 * SL_US_PER_S);
      fx_job(f, id4)->start_retry_mono_us = 0; /* the 5 s have passed */
      gw_sched_kick(f->sched);
      fx_settle(f);
      CHECK_INT(fx_job_state(f, id4), GW_JOB_STARTING);
      CHECK_INT(fx_job(f, id4)->attempt, 2);
    }
  }
  CHECK_INT(fx_job_state(f, id4), GW_JOB_FAILED);
  CHECK(contains(fx_state_reason(f, id4, GW_JOB_FAILED), "presign request"));
  /* the count holds for transient refusals too: a third one fails */
  int64_t id5 = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  for (int k = 1; k <= 3; k++) {
    json_t *b = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:b}", "type", "done", "instance", "f-1", "job",
                          fx_jid(id5, jid), "status", "failed", "exit_code", -1, "message",
                          "restore J/ckpt-50.tc: S3 get: HTTP 503 SlowDown", "retry", 1);
    fx_worker(f, "f-1", b);
    json_decref(b);
    CHECK_INT(fx_job_state(f, id5), k < 3 ? GW_JOB_QUEUED : GW_JOB_FAILED);
    if (k < 3) { /* each retry waits twice as long */
      char want[80];
      snprintf(want, sizeof want, "starting again in %d s (the worker could not start it)", 5 << (k - 1));
      CHECK_STR(fx_job(f, id5)->reason, want);
      fx_job(f, id5)->start_retry_mono_us = 0;
      gw_sched_kick(f->sched);
    }
    fx_settle(f);
  }
  CHECK(contains(fx_state_reason(f, id5, GW_JOB_FAILED), "HTTP 503"));

  /* a new checkpoint between deaths resets the count */
  int64_t id3 = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  fx_started(f, "f-1", id3);
  for (int k = 0; k < 4; k++) {
    fx_checkpoint(f, "f-1", id3, 10 * (k + 1), fx_key(id3, k % 2 ? "b" : "a"));
    fx_done(f, "f-1", id3, "failed", 137);
    CHECK_INT(fx_job_state(f, id3), GW_JOB_QUEUED);
    fx_settle(f);
    fx_started(f, "f-1", id3);
  }
  CHECK_INT(fx_job_state(f, id3), GW_JOB_RUNNING);
  fx_free(f);
}

/* ---- launches that fail, are refused, or are never answered ---- */

static void test_launch_failed_and_refused(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK(fx_inst(f, "f-1") != NULL);
  CHECK_INT(fx_job_state(f, id), GW_JOB_PROVISIONING);

  /* the launch fails, and the provider refuses the next one at once */
  f->fp->mode = FP_REFUSE;
  fp_launch_failed(f->fp, "f-1");
  fx_settle(f);
  CHECK(fx_inst(f, "f-1") == NULL);
  const struct fx_bus_rec *gone = fx_bus_last(f, GW_BUS_INSTANCE_GONE, 0);
  CHECK(gone && !strcmp(gone->instance, "f-1"));
  CHECK(contains(fx_state_reason(f, id, GW_JOB_QUEUED), "could not be launched"));
  CHECK(fp_count(f->fp, FP_CALL_LAUNCH, NULL) >= 2);
  CHECK_STR(fp_last(f->fp, FP_CALL_LAUNCH)->id, ""); /* refused: no instance */
  CHECK_INT(fx_job_state(f, id), GW_JOB_QUEUED);
  CHECK_INT(gw_queue_len(f->queue), 1);
  CHECK_INT(gw_fleet_n_insts(f->fleet), 0);
  CHECK(fx_job(f, id)->instance[0] == 0);

  /* capacity changes: the scheduler tries again at once */
  size_t tries = fp_count(f->fp, FP_CALL_LAUNCH, NULL);
  fp_capacity(f->fp);
  fx_settle(f);
  CHECK(fp_count(f->fp, FP_CALL_LAUNCH, NULL) > tries);
  CHECK_INT(fx_job_state(f, id), GW_JOB_QUEUED);
  f->fp->mode = FP_ANSWER;
  fp_capacity(f->fp);
  fx_settle(f);
  CHECK_INT(gw_queue_len(f->queue), 0);
  CHECK_STR(fx_job(f, id)->instance, "f-2");
  CHECK_INT(fx_job_events(f, id, "placed"), 1);
  CHECK_INT(fx_job(f, id)->attempt, 1);
  fx_register(f, "f-2", NULL, NULL);
  CHECK_INT(fx_job_state(f, id), GW_JOB_STARTING);
  fx_free(f);
}

static bool inst_gone(struct fx *f, void *id) {
  gw_sched_housekeeping(f->sched);
  return fx_inst(f, id) == NULL;
}

static void test_never_answered(void) {
  struct fx *f = fx_new(NULL); /* register_timeout 30 ms */
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->mode = FP_SILENT;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK(fx_inst(f, "f-1") != NULL);
  gw_sched_housekeeping(f->sched);
  CHECK(fx_inst(f, "f-1") != NULL); /* not before its time */
  int64_t by = fx_inst(f, "f-1")->register_by_mono_us;
  CHECK(by > 0);
  CHECK(fx_run_until(f, SL_US_PER_S, inst_gone, (void *)"f-1"));
  CHECK(sl_time_mono_us() > by);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, "f-1"), 1);
  CHECK(contains(fx_state_reason(f, id, GW_JOB_PREEMPTED), "did not register in time"));
  CHECK(fx_job_was(f, id, GW_JOB_QUEUED));
  const struct fx_bus_rec *gone = fx_bus_last(f, GW_BUS_INSTANCE_GONE, 0);
  CHECK(gone && !strcmp(gone->instance, "f-1"));
  fx_settle(f);
  /* requeued and launched anew */
  CHECK_INT(fp_count(f->fp, FP_CALL_LAUNCH, NULL), 2);
  CHECK_STR(fx_job(f, id)->instance, "f-2");
  CHECK_INT(fx_job_state(f, id), GW_JOB_PROVISIONING);
  /* the TERMINATED the fake sends for f-1 finds nothing to do */
  CHECK(fx_inst(f, "f-1") == NULL);
  CHECK_INT(fx_bus_count(f, GW_BUS_PREEMPTED, id), 1);
  fx_free(f);
}

/* The worker keeps its heartbeat for a while, then goes silent: once
 * heartbeat_timeout passed, the instance is shut down and its job
 * resumes elsewhere. */
struct beat {
  const char *inst;
  int64_t until;                /* heartbeats until then */
};

static bool beat_until_gone(struct fx *f, void *data) {
  struct beat *b = data;
  if (sl_time_mono_us() < b->until && fx_inst(f, b->inst))
    fx_workerf(f, b->inst, "{s:s,s:s}", "type", "heartbeat", "instance", b->inst);
  gw_sched_housekeeping(f->sched);
  return fx_inst(f, b->inst) == NULL;
}

static void test_worker_lost(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  cfg.heartbeat_timeout_us = 20 * MS;
  struct fx *f = fx_new(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t id = fx_submit(f, "alice", "nb", "train", NULL);
  CHECK(fx_run_job(f, id, NULL));
  struct beat b = {.inst = "f-1", .until = sl_time_mono_us() + 40 * MS};
  int64_t t0 = sl_time_mono_us();
  CHECK(fx_run_until(f, SL_US_PER_S, beat_until_gone, &b));
  CHECK(sl_time_mono_us() - t0 >= 40 * MS); /* not while it beat */
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, "f-1"), 1);
  CHECK_INT(fx_to_worker_count(f, "f-1", "shutdown"), 1);
  CHECK(contains(fx_state_reason(f, id, GW_JOB_PREEMPTED), "no heartbeat"));
  fx_settle(f);
  CHECK_STR(fx_job(f, id)->instance, "f-2");
  fx_free(f);
}

/* A worker with no job for worker_timeout is shut down; one with a job is not. */
static void test_idle_worker_timeout(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  cfg.worker_timeout_us = 20 * MS;
  struct fx *f = fx_new(&cfg);
  CHECK(f != NULL);
  if (!f)
    return;
  int64_t a = fx_submit(f, "alice", "nb", "train", NULL);
  int64_t b = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK(fx_run_job(f, a, NULL));
  CHECK(fx_run_job(f, b, NULL));
  fx_done(f, "f-1", a, "succeeded", 0);
  CHECK_STR(fx_inst(f, "f-1")->row.state, "idle");
  struct beat keep = {.inst = "f-1", .until = INT64_MAX};
  CHECK(fx_run_until(f, SL_US_PER_S, beat_until_gone, &keep));
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, "f-1"), 1);
  const struct fx_bus_rec *g = fx_bus_last(f, GW_BUS_INSTANCE_GONE, 0);
  CHECK(g && !strcmp(g->instance, "f-1") && contains(g->why, "idle worker"));
  CHECK(fx_inst(f, "f-2") != NULL); /* busy: kept */
  CHECK_INT(fx_job_state(f, b), GW_JOB_RUNNING);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 1);
  fx_free(f);
}

/* ---- cancel ---- */

static void test_cancel(void) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  /* queued: gone from the queue at once */
  f->fp->mode = FP_REFUSE;
  int64_t q = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, q), GW_JOB_QUEUED);
  CHECK_INT(gw_sched_cancel(f->sched, fx_job(f, q)), 0);
  CHECK_INT(fx_job_state(f, q), GW_JOB_CANCELLED);
  CHECK(fx_job(f, q) == NULL);
  CHECK_INT(gw_queue_len(f->queue), 0);

  /* running: the worker is told, and the job ends when it says so */
  f->fp->mode = FP_ANSWER;
  int64_t r = fx_submit(f, "alice", "nb", "train", NULL);
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, r, inst));
  CHECK_INT(gw_sched_cancel(f->sched, fx_job(f, r)), 0);
  const json_t *c = fx_to_worker_last(f, inst, "cancel");
  char jid[16];
  CHECK(c && !strcmp(sl_json_get_str(c, "job", ""), fx_jid(r, jid)));
  CHECK_INT(fx_job_state(f, r), GW_JOB_RUNNING);
  CHECK(fx_job(f, r)->cancel_requested);
  fx_done(f, inst, r, "cancelled", -1);
  CHECK_INT(fx_job_state(f, r), GW_JOB_CANCELLED);
  CHECK_STR(fx_inst(f, inst)->row.state, "idle");

  /* running, and the instance is lost before the worker answers: cancelled, not requeued */
  int64_t l = fx_submit(f, "alice", "nb", "train", NULL);
  fx_settle(f);
  fx_started(f, inst, l);
  CHECK_INT(fx_job_state(f, l), GW_JOB_RUNNING);
  gw_sched_cancel(f->sched, fx_job(f, l));
  fp_terminated(f->fp, inst, true);
  fx_settle(f);
  CHECK_INT(fx_job_state(f, l), GW_JOB_CANCELLED);
  CHECK(!fx_job_was(f, l, GW_JOB_QUEUED));
  CHECK_INT(fx_job_events(f, l, "preempted"), 0);
  fx_free(f);
}

/* ---- cost ---- */

struct wall {
  int64_t until;
};

static bool wall_passed(struct fx *f, void *data) {
  (void)f;
  return sl_time_mono_us() >= ((struct wall *)data)->until;
}

/* One job on an instance of price_usd (od_usd on demand) with the fake's
 * clock 60 times the wall's: its cost lies between what the shortest and
 * the longest interval its attempt could have lasted give. */
static void cost_case(const char *spot, double price_usd, double od_usd) {
  struct fx *f = fx_new(NULL);
  CHECK(f != NULL);
  if (!f)
    return;
  f->fp->time_scale = 60;
  f->fp->mode = FP_SILENT;
  int64_t id = fx_submit(f, "carol", "nb", "train", opts("{s:s}", "spot", spot));
  fx_settle(f);
  fp_launched(f->fp, "f-1");
  int64_t t0 = sl_time_mono_us(); /* the attempt starts in [t0, t1] */
  fx_settle(f);
  int64_t t1 = sl_time_mono_us();
  CHECK_INT(fx_bus_count(f, GW_BUS_PLACED, id), 1);
  CHECK_NEAR(fx_job(f, id)->price_usd_per_hour, price_usd, 1e-12);
  fx_register(f, "f-1", NULL, NULL);
  fx_started(f, "f-1", id);
  struct wall w = {.until = sl_time_mono_us() + 20 * MS};
  fx_run_until(f, SL_US_PER_S, wall_passed, &w);
  gw_sched_housekeeping(f->sched); /* an accrual on the way */
  CHECK(fx_bus_count(f, GW_BUS_COST, id) >= 1);
  w.until = sl_time_mono_us() + 20 * MS;
  fx_run_until(f, SL_US_PER_S, wall_passed, &w);
  int64_t t2 = sl_time_mono_us(); /* and ends in [t2, t3] */
  fx_done(f, "f-1", id, "succeeded", 0);
  int64_t t3 = sl_time_mono_us();
  CHECK(fx_bus_count(f, GW_BUS_COST, id) >= 2);

  double lo_h = (double)(t2 - t1) / 3.6e9 * 60, hi_h = (double)(t3 - t0) / 3.6e9 * 60;
  double usd = 0, od = 0, secs = 0;
  for (size_t i = 0; i < f->n_bus; i++)
    if (f->bus_log[i].kind == GW_BUS_COST && f->bus_log[i].job == id) {
      usd += f->bus_log[i].usd;
      od += f->bus_log[i].on_demand_usd;
      secs += f->bus_log[i].seconds;
    }
  fprintf(stderr, "cost (%s): %.9f usd over %.4f provider s; bounds [%.9f, %.9f]\n", spot, usd,
          secs, lo_h * price_usd, hi_h * price_usd);
  CHECK(usd >= lo_h * price_usd - 1e-12 && usd <= hi_h * price_usd + 1e-12);
  CHECK(od >= lo_h * od_usd - 1e-12 && od <= hi_h * od_usd + 1e-12);
  CHECK(secs >= lo_h * 3600 - 1e-9 && secs <= hi_h * 3600 + 1e-9);
  CHECK_NEAR(usd, secs / 3600 * price_usd, 1e-12);
  CHECK(secs >= 60 * 0.039); /* at least 40 ms of wall time, in provider seconds */
  /* the ledger wrote the same into the cost table */
  double lusd = -1, lod = -1;
  CHECK_INT(gw_ledger_totals(f->ledger, "carol", 0, &lusd, &lod), 0);
  CHECK_NEAR(lusd, usd, 1e-12);
  CHECK_NEAR(lod, od, 1e-12);
  CHECK_INT(gw_ledger_totals(f->ledger, "nobody", 0, &lusd, &lod), 0);
  CHECK_NEAR(lusd, 0, 1e-15);
  /* and the job's row holds the total */
  struct gw_job row;
  CHECK_INT(gw_store_job_get(f->store, id, &row), 0);
  CHECK_NEAR(row.cost_usd, usd, 1e-12);
  CHECK_NEAR(row.on_demand_usd, od, 1e-12);
  gw_job_done(&row);
  const json_t *ce = fx_job_event(f, id, "cost");
  CHECK(ce && fabs(sl_json_get_num(ce, "cost_usd", -1) - usd) < 1e-12);
  fx_free(f);
}

static void test_cost(void) {
  cost_case("no", 1.00, 1.00);
  cost_case("yes", 0.30, 1.00);
}

int main(void) {
  sl_log_init("test-gw-sched");
  test_fairness();
  test_make_room();
  test_placement();
  test_lifecycle();
  test_register_before_launched();
  test_preempt_with_notice();
  test_preempt_without_notice();
  test_process_retries();
  test_launch_failed_and_refused();
  test_never_answered();
  test_worker_lost();
  test_idle_worker_timeout();
  test_cancel();
  test_cost();
  TEST_MAIN_END();
}
