/* Idle shutdown alone (gw_idle_check with the time passed in), over the
 * in-process gateway of gw-fixture.h: a notebook session whose instance
 * sits without a job is warned warn_before ahead, then its instance is
 * terminated through the provider and a shutdown notice follows; a session
 * with a live job is never warned; a request from the notebook starts the
 * count again; a session with nothing to stop hears nothing. */
#include "gw-fixture.h"
#include "harness.h"

#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdlib.h>
#include <string.h>

#define S SL_US_PER_S

/* notebook_timeout 60 s, warn_before 10 s */
static struct fx *setup(void) {
  struct gw_config cfg;
  fx_config(&cfg);
  char err[128];
  if (gw_config_set(&cfg, "idle", "notebook_timeout", "60s", err, sizeof err) < 0 ||
      gw_config_set(&cfg, "idle", "warn_before", "10s", err, sizeof err) < 0) {
    fprintf(stderr, "setup: %s\n", err);
    return NULL;
  }
  struct fx *f = fx_new(&cfg);
  if (f) {
    fx_user(f, "alice", "alice-token");
    fx_user(f, "bob", "bob-token");
  }
  return f;
}

/* Runs a job of (user, session) to its end: its instance stays, idle. */
static bool idle_instance(struct fx *f, const char *user, const char *session, char *ret_inst) {
  int64_t id = fx_submit(f, user, session, "train", NULL);
  if (id < 0 || !fx_run_job(f, id, ret_inst))
    return false;
  fx_done(f, ret_inst, id, "succeeded", 0);
  struct gw_inst *in = fx_inst(f, ret_inst);
  return in && !strcmp(in->row.state, "idle") && !in->row.job;
}

/* Idle notices of (user, session) on the bus with action (NULL: any). */
static size_t notices(const struct fx *f, const char *user, const char *session,
                      const char *action) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_bus; i++) {
    const struct fx_bus_rec *r = &f->bus_log[i];
    if (r->kind == GW_BUS_NOTICE && !strcmp(r->user, user) && !strcmp(r->session, session) &&
        (!action || !strcmp(sl_json_get_str(r->json, "action", ""), action)))
      n++;
  }
  return n;
}

static void test_warn_then_stop(void) {
  struct fx *f = setup();
  CHECK(f != NULL);
  if (!f)
    return;
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(idle_instance(f, "alice", "nb", inst));
  /* the notebook's own client, and one of another session */
  CHECK(fx_hello(f, "ka", "alice-token", "nb"));
  CHECK(fx_hello(f, "kx", "alice-token", "elsewhere"));
  gw_idle_touch(f->idle, "alice", "nb");
  int64_t t0 = sl_time_mono_us();

  gw_idle_check(f->idle, t0 + 1 * S);
  gw_idle_check(f->idle, t0 + 49 * S);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 0);

  /* warn_before ahead of the timeout: a warning, nothing stopped */
  gw_idle_check(f->idle, t0 + 51 * S);
  CHECK_INT(notices(f, "alice", "nb", "warning"), 1);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 1);
  const struct fx_bus_rec *w = fx_bus_last(f, GW_BUS_NOTICE, 0);
  CHECK(w != NULL);
  if (w) {
    CHECK_STR(sl_json_get_str(w->json, "type", ""), "notice");
    CHECK_STR(sl_json_get_str(w->json, "event", ""), "idle");
    CHECK_STR(sl_json_get_str(w->json, "session", ""), "nb");
    int64_t in_s = sl_json_get_int(w->json, "in_s", -1);
    CHECK(in_s >= 9 && in_s <= 10);
  }
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 0);
  CHECK(fx_inst(f, inst) != NULL);
  /* the kernel protocol delivered it to that notebook's client only */
  CHECK_INT(fx_to_client_count(f, "ka", "notice"), 1);
  CHECK_INT(fx_to_client_count(f, "kx", "notice"), 0);
  /* warned once */
  gw_idle_check(f->idle, t0 + 55 * S);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 1);

  /* the timeout: the instance is terminated through the provider */
  gw_idle_check(f->idle, t0 + 61 * S);
  CHECK_INT(notices(f, "alice", "nb", "shutdown"), 1);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, inst), 1);
  CHECK(fx_inst(f, inst) == NULL);
  const struct fx_bus_rec *g = fx_bus_last(f, GW_BUS_INSTANCE_GONE, 0);
  CHECK(g && !strcmp(g->instance, inst));
  CHECK_INT(fx_to_worker_count(f, inst, "shutdown"), 1); /* the worker was told too */
  CHECK_INT(fx_to_client_count(f, "ka", "notice"), 2);
  const json_t *sd = fx_to_client_last(f, "ka", "notice");
  CHECK(sd && !strcmp(sl_json_get_str(sd, "action", ""), "shutdown"));
  CHECK(json_object_get(sd, "in_s") == NULL);
  /* and then quiet */
  gw_idle_check(f->idle, t0 + 600 * S);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 2);
  fx_settle(f); /* the fake's TERMINATED finds nothing left */
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 2);
  fx_free(f);
}

static void test_live_job(void) {
  struct fx *f = setup();
  CHECK(f != NULL);
  if (!f)
    return;
  /* a running job: its notebook is in use whatever the clock says */
  int64_t id = fx_submit(f, "alice", "busy", "train", NULL);
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(fx_run_job(f, id, inst));
  /* and an idle instance of the same session beside it */
  char spare[GW_INSTANCE_ID_MAX] = "";
  CHECK(idle_instance(f, "alice", "busy", spare));
  CHECK(strcmp(spare, inst) != 0);
  CHECK_INT(fx_job_state(f, id), GW_JOB_RUNNING);
  gw_idle_touch(f->idle, "alice", "busy");
  int64_t t0 = sl_time_mono_us();
  for (int64_t t = 30; t <= 3600; t *= 2)
    gw_idle_check(f->idle, t0 + t * S);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 0);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 0);
  CHECK(fx_inst(f, spare) != NULL);

  /* a job still waiting in the queue counts as much: bob's needs 4 GPUs, his
   * idle instance has one, and the provider has no capacity now */
  char small[GW_INSTANCE_ID_MAX] = "";
  CHECK(idle_instance(f, "bob", "q", small));
  /* on an instance of its own: alice's idle one is not another user's to reuse */
  CHECK(strcmp(small, spare) != 0);
  CHECK_STR(fx_inst(f, small)->row.user, "bob");
  CHECK_STR(fx_inst(f, spare)->row.user, "alice");
  f->fp->mode = FP_REFUSE;
  int64_t queued = fx_submit(f, "bob", "q", "train", json_pack("{s:i}", "gpus", 4));
  fx_settle(f);
  CHECK_INT(fx_job_state(f, queued), GW_JOB_QUEUED);
  gw_idle_touch(f->idle, "bob", "q");
  t0 = sl_time_mono_us();
  gw_idle_check(f->idle, t0 + 3600 * S);
  CHECK_INT(notices(f, "bob", "q", NULL), 0);
  CHECK(fx_inst(f, small) != NULL);
  /* once it is gone, the session's clock runs from the last check that saw it */
  gw_sched_cancel(f->sched, fx_job(f, queued));
  gw_idle_check(f->idle, t0 + 3600 * S + 51 * S);
  CHECK_INT(notices(f, "bob", "q", "warning"), 1);
  CHECK_INT(notices(f, "alice", "busy", NULL), 0);
  fx_free(f);
}

static void test_touch_resets(void) {
  struct fx *f = setup();
  CHECK(f != NULL);
  if (!f)
    return;
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(idle_instance(f, "alice", "nb", inst));
  gw_idle_touch(f->idle, "alice", "nb");
  int64_t t0 = sl_time_mono_us();
  gw_idle_check(f->idle, t0 + 51 * S);
  CHECK_INT(notices(f, "alice", "nb", "warning"), 1);

  /* a request from the notebook (through the kernel protocol) */
  CHECK(fx_hello(f, "ka", "alice-token", "nb"));
  CHECK(fx_ok(fx_req(f, "ka", "{s:s}", "type", "ping")));
  int64_t t1 = sl_time_mono_us();
  /* the count starts again from t1: a second warning comes at t1 + 50 s,
   * which a session still marked as warned would never get */
  gw_idle_check(f->idle, t1 + 40 * S);
  CHECK_INT(notices(f, "alice", "nb", NULL), 1);
  gw_idle_check(f->idle, t1 + 51 * S);
  CHECK_INT(notices(f, "alice", "nb", "warning"), 2);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 0);
  gw_idle_check(f->idle, t1 + 61 * S);
  CHECK_INT(notices(f, "alice", "nb", "shutdown"), 1);
  CHECK(fx_inst(f, inst) == NULL);

  /* after a shutdown, the next cell brings capacity back, and the count
   * starts over for it */
  char again[GW_INSTANCE_ID_MAX] = "";
  CHECK(idle_instance(f, "alice", "nb", again));
  gw_idle_touch(f->idle, "alice", "nb");
  int64_t t2 = sl_time_mono_us();
  gw_idle_check(f->idle, t2 + 51 * S);
  CHECK_INT(notices(f, "alice", "nb", "warning"), 3);
  gw_idle_check(f->idle, t2 + 61 * S);
  CHECK_INT(notices(f, "alice", "nb", "shutdown"), 2);
  CHECK(fx_inst(f, again) == NULL);
  fx_free(f);
}

static void test_nothing_to_stop(void) {
  struct fx *f = setup();
  CHECK(f != NULL);
  if (!f)
    return;
  /* a session that never had an instance */
  gw_idle_touch(f->idle, "alice", "empty");
  /* one whose instance belongs to another user's session of the same name */
  char inst[GW_INSTANCE_ID_MAX] = "";
  CHECK(idle_instance(f, "bob", "empty", inst));
  /* the bob session itself is not known to idle (no request came from it) */
  int64_t t0 = sl_time_mono_us();
  gw_idle_check(f->idle, t0 + 3600 * S);
  gw_idle_check(f->idle, t0 + 7200 * S);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 0);
  CHECK(fx_inst(f, inst) != NULL);
  CHECK_INT(fp_count(f->fp, FP_CALL_TERMINATE, NULL), 0);
  /* a session with no name is never tracked */
  gw_idle_touch(f->idle, "bob", "");
  gw_idle_check(f->idle, t0 + 9000 * S);
  CHECK_INT(fx_bus_count(f, GW_BUS_NOTICE, 0), 0);
  fx_free(f);
}

int main(void) {
  sl_log_init("test-gw-idle");
  test_warn_then_stop();
  test_live_job();
  test_touch_resets();
  test_nothing_to_stop();
  TEST_MAIN_END();
}
