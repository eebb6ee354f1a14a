/* The worker protocol (protocols.md §2): what a worker's messages do.
 *
 * A message reaches gw_wproto_handle from an admitted instance
 * (wproto_gate.c: the ZAP check and the socket) and is checked against it:
 * a worker speaks only for its own instance and only about the job attempt
 * assigned to it, so a stale or confused worker cannot move another job. A
 * message of an unknown type is logged and answered with an `error`
 * message; it changes nothing. presign is wproto_presign.c's. */
#include "wproto.h"
#include "wproto_int.h"

#include "objstore.h"
#include "record.h"

#include "sl_err.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T "gateway.worker"
#define REREGISTER_EVERY_US (100 * SL_US_PER_MS)
#define DATA_COPIES_MAX 1024 /* of a register's "data", as in a data_forget */
#define OUTPUT_TAIL_MAX 64   /* of a done's "output_tail" (a worker sends 16 at most) */


struct gw_wproto *gw_wproto_new(const struct gw_config *cfg, struct gw_store *store,
                                struct gw_fleet *fleet, struct gw_sched *sched, void *wsock,
                                void *zap) {
  struct gw_wproto *w = calloc(1, sizeof *w);
  if (w)
    *w = (struct gw_wproto){.cfg = cfg, .store = store, .fleet = fleet, .sched = sched,
                            .wsock = wsock, .zap = zap};
  return w;
}

struct gw_wproto *gw_wproto_free(struct gw_wproto *w) {
  free(w);
  return NULL;
}

void gw_wproto_set_objstore(struct gw_wproto *w, struct gw_objstore *o) {
  w->objstore = o;
}

/* The live job a worker message refers to, only if this instance runs that
 * attempt (a gang: as one of its ranks). */
static struct gw_job *own_job(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  int64_t id = gw_job_id_parse(sl_json_get_str(body, "job", NULL));
  struct gw_job *j = id > 0 ? gw_fleet_job(g->fleet, id) : NULL;
  if (!j || gw_sched_rank(j, in) < 0)
    return NULL;
  json_t *a = json_object_get(body, "attempt");
  if (a && json_integer_value(a) != j->attempt)
    return NULL;
  return j;
}

/* The same, only from the instance that speaks for the job: a gang's rank 0
 * (spotlab-train's rank 0 alone reports steps, checkpoints and results). */
static struct gw_job *own_job_lead(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job(g, in, body);
  return j && gw_sched_rank(j, in) == 0 ? j : NULL;
}

static void on_done(struct gw_wproto *g, struct gw_inst *in, const json_t *body);

/* The register's GPU report, kept on the instance and held against its
 * type's catalog entry: a mismatch (a driver that is missing, a GPU that
 * failed, a type that is not what it claims) is logged once, shown in
 * %status and %instances (gpu_warning), and told to the job on the
 * instance as a "warning" event. A simulated provider's instances (local)
 * run on this machine, whatever their type's GPUs: nothing to compare. */
static void check_gpus(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  const json_t *report = json_object_get(body, "gpus");
  struct gw_gpus found;
  if (!report)
    return; /* a worker that does not report: nothing known */
  if (gw_gpus_parse(report, &found) < 0) {
    sl_warn(T, "%s: register with a malformed \"gpus\" report; ignored", in->row.id);
    return;
  }
  in->found_gpus = found;
  struct gw_instance_type t;
  char why[GW_GPUS_WARNING_MAX] = "";
  if (!in->prov || in->prov->simulated || gw_provider_type(in->prov, in->row.type, &t) < 0 ||
      !gw_gpus_check(&found, in->row.type, t.gpus, t.gpu_model, why, sizeof why)) {
    in->gpu_warning[0] = 0;
    return;
  }
  if (!strcmp(why, in->gpu_warning))
    return; /* told already */
  sl_utf8_copy(in->gpu_warning, sizeof in->gpu_warning, why);
  sl_warn(T, "%s: %s", in->row.id, why);
  struct gw_job *j = in->row.job ? gw_fleet_job(g->fleet, in->row.job) : NULL;
  if (j && !strcmp(j->instance, in->row.id)) {
    json_t *ev = json_pack("{s:s,s:s,s:s}", "event", "warning", "instance", in->row.id, "text", why);
    gw_sched_emit(g->sched, j, ev);
    json_decref(ev);
  }
}

/* The copies of stored data files a registering worker names ("data"):
 * those deleted from the store while it was out of touch (no stored file
 * has them any more) are forgotten there too. */
static void forget_unknown_data(struct gw_wproto *g, struct gw_inst *in, const json_t *data) {
  if (!json_is_array(data) || !json_array_size(data))
    return;
  json_t *shas = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(data, i, v) {
    if (i == DATA_COPIES_MAX)
      break;
    if (sl_sha256_hex_ok(json_string_value(v)))
      json_array_append(shas, v);
  }
  json_t *gone = NULL;
  int r = gw_store_uploads_unknown(g->store, shas, &gone);
  json_decref(shas);
  if (r < 0) {
    sl_warn(T, "%s: cannot tell which of its data copies were deleted: %s", in->row.id, sl_strerror(r));
    return;
  }
  if (json_array_size(gone)) {
    sl_info(T, "%s: %zu of its data copies were deleted from the store; it forgets them", in->row.id,
            json_array_size(gone));
    json_t *m = json_pack("{s:s,s:O}", "type", "data_forget", "sha256", gone);
    gw_fleet_send(g->fleet, in, m);
    json_decref(m);
  }
  json_decref(gone);
}

static void on_notice(struct gw_wproto *g, struct gw_inst *in, const json_t *body);

static void on_register(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  bool was_registered = in->registered;
  in->registered = true;
  if (sl_json_get_bool(body, "at_risk", false)) /* a recommendation heard before a restart */
    in->at_risk = true;
  json_t *notice = json_object_get(body, "notice");
  if (json_is_object(notice) && !in->notice) { /* one its notice message did not bring (lost
                                                * with a gateway that died) */
    json_t *n = json_pack("{s:s,s:I,s:b}", "action", sl_json_get_str(notice, "action", "terminate"),
                          "deadline_us", (json_int_t)sl_json_get_int(notice, "deadline_us", 0),
                          "leaving", true);
    if (n)
      on_notice(g, in, n);
    json_decref(n);
  }
  in->register_by_mono_us = 0;
  check_gpus(g, in, body);
  struct gw_job *job = in->row.job ? gw_fleet_job(g->fleet, in->row.job) : NULL;
  bool assigned_before = gw_sched_gang_assigned(job, in);
  /* a worker that speaks was launched, whether or not its provider said so yet */
  gw_sched_launched(g->sched, in);
  /* done messages the worker sent since its last registered: one in flight
   * when a gateway died is heard here (own_job ignores those already heard) */
  size_t k;
  json_t *d;
  json_array_foreach(json_object_get(body, "ended"), k, d)
    if (json_is_object(d))
      on_done(g, in, d);
  json_t *jobs = json_object_get(body, "jobs");
  json_t *recorded = json_array(); /* what we hold of the jobs it runs */
  bool has_own = false;
  size_t i;
  json_t *v;
  json_array_foreach(jobs, i, v) {
    struct gw_job *j = own_job(g, in, v);
    if (j) {
      has_own = true;
      char id[16];
      json_array_append_new(recorded, json_pack("{s:s,s:i,s:o,s:I}", "job",
                                                gw_job_id_str(j->id, id, sizeof id), "attempt",
                                                j->attempt, "metric_step",
                                                j->metric_step >= 0 ? json_integer(j->metric_step)
                                                                    : json_null(),
                                                "checkpoint_step", (json_int_t)j->ckpt_step));
      j->wait_register_until_us = 0;
      int64_t step = sl_json_get_int(v, "step", j->step);
      if (step > j->step && gw_sched_rank(j, in) == 0)
        j->step = step;
      if (gw_sched_rank(j, in) == 0) /* its step metrics since metric_step come again, at once */
        gw_autockpt_resent_to(&j->autockpt, step);
      continue;
    }
    /* the attempt it runs is named: the job may run here again, a newer
     * attempt placed since this register was sent (one sent twice) */
    const char *jid = sl_json_get_str(v, "job", NULL);
    if (jid && gw_job_id_parse(jid) > 0) {
      json_t *c = gw_sched_cancel_msg(jid, sl_json_get_int(v, "attempt", 0));
      gw_fleet_send(g->fleet, in, c);
      json_decref(c);
    }
  }
  json_t *reply = json_pack("{s:s,s:I,s:o}", "type", "registered", "heartbeat_ms",
                            (json_int_t)g->cfg->heartbeat_ms, "jobs", recorded);
  gw_fleet_send(g->fleet, in, reply);
  json_decref(reply);
  forget_unknown_data(g, in, json_object_get(body, "data"));
  if (!was_registered)
    sl_info(T, "worker %s registered", in->row.id);
  struct gw_job *j = in->row.job ? gw_fleet_job(g->fleet, in->row.job) : NULL;
  if (j && j->gang) {
    gw_sched_gang_register(g->sched, j, in, has_own, was_registered, assigned_before);
    gw_sched_kick(g->sched);
    return;
  }
  if (j && strcmp(j->instance, in->row.id))
    j = NULL; /* placed elsewhere since (a launch a gateway died in): not this worker's */
  if (j && !has_own) {
    if (j->state == GW_JOB_PROVISIONING) {
      gw_sched_assign(g->sched, j, in);
      return;
    }
    if (j->state == GW_JOB_STARTING && was_registered && !j->wait_register_until_us) {
      gw_sched_send_assign(g->sched, j, in); /* the register crossed our assign */
      return;
    }
    /* the worker no longer has the job it ran before a gateway restart */
    gw_sched_requeue(g->sched, j, false, "the worker lost the job");
    gw_fleet_inst_set_state(g->fleet, in, "idle", 0);
  } else if (!j && strcmp(in->row.state, in->notice ? "draining" : "idle")) {
    gw_fleet_inst_set_state(g->fleet, in, in->notice ? "draining" : "idle", 0); /* noticed: going */
  }
  gw_sched_kick(g->sched);
}

/* Where the job trains (protocols.md §2 "device"): one event per attempt,
 * its scalar fields kept for the display ("CPU, 4 threads" or "2 x NVIDIA
 * A10G, bf16"). */
static void on_device(struct gw_wproto *g, struct gw_job *j, const json_t *data) {
  json_t *ev = json_object();
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)data, k, v) {
    if (strcmp(k, "type") && strcmp(k, "job") && strcmp(k, "seq") && strcmp(k, "time_us") &&
        (json_is_string(v) || json_is_number(v) || json_is_boolean(v)))
      json_object_set(ev, k, v);
  }
  json_object_set_new(ev, "event", json_string("device"));
  gw_sched_emit(g->sched, j, ev);
  json_decref(ev);
}

static void on_metric(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job_lead(g, in, body);
  json_t *data = json_object_get(body, "data");
  if (j && json_is_object(data) && !strcmp(sl_json_get_str(data, "event", ""), "device")) {
    on_device(g, j, data);
    return;
  }
  if (!j || !json_is_object(data) || !json_is_integer(json_object_get(data, "step")) ||
      (!json_is_number(json_object_get(data, "loss")) &&
       !json_is_number(json_object_get(data, "eval_loss"))))
    return; /* training-core events other than steps and evaluations stay on the worker */
  int64_t step = json_integer_value(json_object_get(data, "step"));
  const char *event = sl_json_get_str(data, "event", NULL);
  if (event && strcmp(event, "eval")) {
    /* spotlab-train's closing `done` repeats its last step's loss: it moves
     * the job's step, and its metric event is the step's own */
    if (step > j->step)
      j->step = step;
    return;
  }
  /* a step sent again after a re-register (registered.jobs[].metric_step) */
  bool step_metric = !event;
  if (step_metric && step <= j->metric_step)
    return;
  if (step_metric)
    j->metric_step = step;
  if (j->state == GW_JOB_STARTING || j->state == GW_JOB_CHECKPOINTING)
    gw_sched_transition(g->sched, j, GW_JOB_RUNNING, j->state == GW_JOB_STARTING ? "first metric" : "");
  json_t *ev = json_object();
  const char *k;
  json_t *v;
  json_object_foreach(data, k, v) {
    if (strcmp(k, "type") && strcmp(k, "job") && strcmp(k, "seq") && strcmp(k, "time_us") &&
        strcmp(k, "event"))
      json_object_set(ev, k, v);
  }
  json_object_set_new(ev, "event", json_string("metric"));
  json_object_set_new(ev, "steps", json_integer(j->steps));
  j->step = step;
  gw_sched_emit(g->sched, j, ev);
  json_decref(ev);
  if (json_is_number(json_object_get(data, "loss"))) {
    gw_autockpt_step(&j->autockpt, j->step, sl_time_mono_us());
    gw_sched_autockpt(g->sched, j, false);
  }
}

/* The worker restored key (of step) instead of the checkpoint j was given,
 * which was gone or corrupt: a session model that still names the given one
 * names key from now on, so that the next eval or sample of it does not try
 * the bad one again (and a model whose every newer checkpoint is bad shows
 * the step it really has). */
static void model_falls_back(struct gw_wproto *g, const struct gw_job *j, const char *key, int64_t step) {
  json_t *sess = NULL;
  if (!j->model[0] || !j->ckpt_key[0] || gw_store_session_get(g->store, j->user, j->session, &sess) < 0)
    return;
  const json_t *m = json_object_get(json_object_get(sess, "models"), j->model);
  if (m && !strcmp(sl_json_get_str(m, "checkpoint", ""), j->ckpt_key) &&
      gw_store_session_model_set(g->store, j->user, j->session, j->model,
                                 gw_job_id_parse(sl_json_get_str(m, "job", "")), step, key) == 0)
    sl_info(T, "model %s of %s's session %s now names %s: %s was not usable", j->model, j->user, j->session,
            key, j->ckpt_key);
  json_decref(sess);
}

/* Whether key lies in the folder of given ("J000010/ckpt-00000400.tc"): a
 * worker falls back only to an older checkpoint beside the one it was given. */
static bool same_folder(const char *key, const char *given) {
  const char *slash = strrchr(given, '/');
  size_t n = slash ? (size_t)(slash - given) + 1 : 0;
  return n > 1 && !strncmp(key, given, n) && !strchr(key + n, '/') && !strstr(key, "..");
}

/* The job's process runs on the worker: the job is running, whether or not
 * it ever sends a metric (a %%run job sends none). */
static void on_started(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job(g, in, body);
  if (!j)
    return;
  json_t *rec = NULL;
  if (gw_sched_rank(j, in) == 0 && gw_store_record_get(g->store, j->id, &rec) == 0) {
    /* what ran the attempt (build ids) and on what data (its hash) */
    gw_record_started(rec, j->attempt, body);
    if (gw_store_record_put(g->store, j->id, rec) < 0)
      sl_warn(T, "%s: the run record of attempt %d could not be written", in->row.id, j->attempt);
  }
  json_decref(rec);
  /* the worker restored an older checkpoint than the assign's, which was
   * gone or corrupt: the job's display resumes from that step, and says why */
  const json_t *rk = json_object_get(body, "restored_key"), *rs = json_object_get(body, "restored_step");
  if (json_is_string(rk) && json_is_integer(rs) && json_integer_value(rs) >= 0 &&
      json_string_length(rk) < 256 && same_folder(json_string_value(rk), j->ckpt_key)) {
    char why[600];
    snprintf(why, sizeof why, "%s", sl_json_get_str(body, "passed_over", ""));
    json_t *ev = json_pack("{s:s,s:I,s:s,s:s}", "event", "restored", "from_step", json_integer_value(rs),
                           "checkpoint", json_string_value(rk), "passed_over", why);
    gw_sched_emit(g->sched, j, ev);
    json_decref(ev);
    model_falls_back(g, j, json_string_value(rk), json_integer_value(rs));
  }
  gw_sched_started(g->sched, j, in, sl_json_get_str(body, "rendezvous", NULL));
}

/* One line of j's output ({"stream","text","oseq"}) from its rank. The
 * job's own lines are numbered ("oseq"): one recorded already (the done
 * carries the newest again) is not recorded twice. */
static void record_output(struct gw_wproto *g, struct gw_job *j, int rank, const json_t *o) {
  const char *stream = sl_json_get_str(o, "stream", "stdout");
  const char *text = sl_json_get_str(o, "text", NULL);
  if (!text || (strcmp(stream, "stdout") && strcmp(stream, "stderr")))
    return;
  const json_t *oseq = json_object_get(o, "oseq");
  int64_t seq = json_is_integer(oseq) ? json_integer_value(oseq) : 0;
  if (rank == 0 && seq > 0) {
    if (seq <= j->output_seq)
      return;
    j->output_seq = seq;
  }
  json_t *ev = json_pack("{s:s,s:s,s:s}", "event", "output", "stream", stream, "text", text);
  if (rank > 0) /* a gang's other ranks speak too; their lines say whose they are */
    json_object_set_new(ev, "rank", json_integer(rank));
  else if (seq > 0)
    json_object_set_new(ev, "oseq", json_integer(seq));
  gw_sched_emit(g->sched, j, ev);
  json_decref(ev);
}

static void on_output(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job(g, in, body);
  if (j)
    record_output(g, j, gw_sched_rank(j, in), body);
}

/* Records the checkpoint c ({"step","key","bytes","write_ms","upload_ms"})
 * of j: its row, the job's newest checkpoint when it is, the session's
 * model and the event, in one transaction; the worker hears that it is
 * recorded only once it is written (gw_sched_emit_checkpoint). */
static void record_checkpoint(struct gw_wproto *g, struct gw_job *j, const json_t *c) {
  const char *key = sl_json_get_str(c, "key", NULL);
  struct gw_checkpoint_row ck = {.step = sl_json_get_int(c, "step", -1),
                                 .bytes = sl_json_get_int(c, "bytes", 0),
                                 .write_ms = sl_json_get_int(c, "write_ms", 0),
                                 .upload_ms = sl_json_get_int(c, "upload_ms", 0)};
  if (!key || !*key || strlen(key) >= sizeof j->ckpt_key || ck.step < 0 || strstr(key, ".."))
    return;
  char id[16];
  size_t n = strlen(gw_job_id_str(j->id, id, sizeof id));
  if (strncmp(key, id, n) || key[n] != '/') { /* a job writes under its own folder only */
    sl_warn(T, "%s: a checkpoint outside the job's folder (%.80s); not recorded", id, key);
    return;
  }
  snprintf(ck.key, sizeof ck.key, "%s", key);
  if (ck.step > j->ckpt_step)
    j->process_retries = 0; /* progress: a process that keeps dying is not stuck */
  if (ck.step >= j->ckpt_step) {
    snprintf(j->ckpt_key, sizeof j->ckpt_key, "%s", key);
    j->ckpt_step = ck.step;
  }
  json_t *ev = json_pack("{s:s,s:I,s:s,s:I,s:I,s:I,s:b}", "event", "checkpoint", "step",
                         (json_int_t)ck.step, "path", key, "bytes", (json_int_t)ck.bytes, "write_ms",
                         (json_int_t)ck.write_ms, "upload_ms", (json_int_t)ck.upload_ms, "durable", 1);
  int saved = gw_sched_emit_checkpoint(g->sched, j, ev, &ck);
  json_decref(ev);
  if (saved == 0) /* the worker may now delete its older checkpoints, as [store] keep says */
    gw_sched_checkpoint_recorded(g->sched, j, j->attempt);
  if (ck.write_ms >= 0 && ck.upload_ms >= 0) {
    gw_autockpt_write(&j->autockpt, ((double)ck.write_ms + (double)ck.upload_ms) / 1e3); /* no int overflow */
    gw_sched_autockpt(g->sched, j, true);
  }
}

static void on_checkpoint(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job_lead(g, in, body);
  int64_t step = sl_json_get_int(body, "step", -1);
  if (!j)
    return;
  if (!in->registered && step > j->step) {
    /* a worker that has not registered with this gateway yet: the step
     * metrics before this checkpoint were dropped (they come again after
     * registered), so resuming from it could skip steps nobody recorded;
     * the job keeps the checkpoint it knows (the done names it again) */
    sl_info(T, "%s: checkpoint of step %lld before register, past the recorded step %lld; not used",
            in->row.id, (long long)step, (long long)j->step);
    return;
  }
  record_checkpoint(g, j, body);
}

/* A notice its jobs leave for (leaving, the default), or a rebalance
 * recommendation they checkpoint for and go on through: the instance is
 * then only at risk, and a later notice is shown too. */
static void on_notice(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  const char *action = sl_json_get_str(body, "action", "terminate");
  bool leaving = sl_json_get_bool(body, "leaving", true);
  bool first = !in->notice && (leaving || !in->at_risk);
  if (leaving)
    in->notice = true;
  else
    in->at_risk = true;
  if (gw_sched_market_action(action))
    gw_sched_note_preempted(g->sched, in); /* the worker may hear of it before the provider */
  struct gw_job *j = in->row.job ? gw_fleet_job(g->fleet, in->row.job) : NULL;
  if (!j || !first)
    return;
  struct gw_inst *lead = leaving ? NULL : gw_fleet_inst(g->fleet, j->instance);
  if (lead && lead != in && lead->row.job == j->id) {
    /* a gang's rank above 0 takes no command: its rank 0 asks, and every rank checkpoints */
    char id[16];
    json_t *m = json_pack("{s:s,s:s}", "type", "checkpoint_now", "job", gw_job_id_str(j->id, id, sizeof id));
    gw_fleet_send(g->fleet, lead, m);
    json_decref(m);
  }
  json_t *ev = json_pack("{s:s,s:s,s:I,s:s,s:b}", "event", "notice", "action", action, "deadline_us",
                         (json_int_t)sl_json_get_int(body, "deadline_us", 0), "instance", in->row.id,
                         "leaving", leaving);
  gw_sched_emit(g->sched, j, ev);
  json_decref(ev);
}

static void on_result(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job_lead(g, in, body);
  json_t *loss = json_object_get(body, "eval_loss");
  const char *text = sl_json_get_str(body, "text", NULL);
  if (!j || (!json_is_number(loss) && !text))
    return;
  json_t *ev = json_pack("{s:s}", "event", "result");
  if (json_is_number(loss))
    json_object_set(ev, "eval_loss", loss);
  if (text)
    json_object_set_new(ev, "text", json_string(text));
  gw_sched_emit(g->sched, j, ev);
  json_decref(ev);
}

/* Tells the worker its done is recorded (it forgets the job then), unless
 * the job's newest state is still kept unwritten: the worker says it again
 * later, and is answered once it is written. */
static void ack_done(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  const char *jid = sl_json_get_str(body, "job", NULL);
  int64_t id = gw_job_id_parse(jid);
  if (id <= 0 || gw_store_keeps_job(g->store, id) || gw_store_sync(g->store) < 0)
    return; /* it keeps its done and sends it again */
  json_t *m = json_pack("{s:s,s:s,s:I}", "type", "done_recorded", "job", jid, "attempt",
                        (json_int_t)sl_json_get_int(body, "attempt", 0));
  if (m)
    gw_wproto_send_raw(g, in->rid, in->rid_len, m);
  json_decref(m);
}

/* Whether every step metric the done says its worker sent is recorded
 * ("metric_step", the newest): a job's end is recorded only after them.
 * If not, a registered worker is asked to send them again (it keeps them
 * and its done until done_recorded); an unregistered one is asked by the
 * answer to its register. The checkpoint the done names ("checkpoint",
 * the worker's newest durable one) is recorded first when it is newer than
 * the job's: one in flight when a gateway died is not lost. */
static bool has_all(struct gw_wproto *g, struct gw_inst *in, struct gw_job *j, const json_t *body) {
  json_t *ms = json_object_get(body, "metric_step");
  if (json_is_integer(ms) && json_integer_value(ms) > j->metric_step) {
    char id[16];
    sl_info(T, "%s: done of %s before its step metrics after %lld; %s", in->row.id,
            gw_job_id_str(j->id, id, sizeof id), (long long)j->metric_step,
            in->registered ? "asked for them again" : "waiting for its register");
    if (in->registered) {
      json_t *m = json_pack("{s:s,s:s,s:i,s:o}", "type", "resend", "job", id, "attempt", j->attempt,
                            "metric_step", j->metric_step >= 0 ? json_integer(j->metric_step)
                                                               : json_null());
      if (m)
        gw_wproto_send_raw(g, in->rid, in->rid_len, m);
      json_decref(m);
    }
    return false;
  }
  json_t *ck = json_object_get(body, "checkpoint");
  if (json_is_object(ck) && sl_json_get_int(ck, "step", -1) > j->ckpt_step)
    record_checkpoint(g, j, ck);
  return true;
}

static void on_done(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  struct gw_job *j = own_job(g, in, body);
  const char *status = sl_json_get_str(body, "status", "");
  if (!j) {
    ack_done(g, in, body); /* heard before, or an attempt that is over */
    return;
  }
  if (gw_sched_rank(j, in) == 0 && !has_all(g, in, j, body))
    return;
  if (gw_sched_rank(j, in) == 0) { /* its newest output lines again: those in flight when a
                                     * gateway died are recorded before the end */
    size_t k;
    json_t *o;
    json_array_foreach(json_object_get(body, "output_tail"), k, o) {
      if (k == OUTPUT_TAIL_MAX)
        break;
      if (json_is_object(o))
        record_output(g, j, 0, o);
    }
  }
  if (j->gang) {
    gw_sched_gang_done(g->sched, j, in, body);
    ack_done(g, in, body);
    return;
  }
  int64_t step = sl_json_get_int(body, "step", j->step);
  if (step > j->step)
    j->step = step;
  json_t *result = json_object_get(body, "result");
  if (json_is_object(result)) {
    json_t *ev = json_deep_copy(result);
    json_object_set_new(ev, "event", json_string("result"));
    gw_sched_emit(g->sched, j, ev);
    json_decref(ev);
  }
  char reason[256];
  sl_utf8_copy(reason, sizeof reason, sl_json_get_str(body, "message", ""));
  if (!strcmp(status, "succeeded"))
    gw_sched_finish(g->sched, j, GW_JOB_SUCCEEDED, reason[0] ? reason : "done");
  else if (!strcmp(status, "cancelled"))
    gw_sched_worker_cancelled(g->sched, j, reason[0] ? reason : "cancelled");
  else if (!strcmp(status, "preempted"))
    gw_sched_requeue(g->sched, j, in->notice, reason[0] ? reason : "preempted");
  else if (!strcmp(status, "failed")) {
    bool transient = json_is_true(json_object_get(body, "retry"));
    if (gw_sched_retry(g->sched, j, sl_json_get_int(body, "exit_code", -1),
                       transient ? (reason[0] ? reason : "no reason given") : NULL)) {
      gw_fleet_inst_set_state(g->fleet, in, "idle", 0); /* the worker itself is fine */
    } else {
      if (!reason[0])
        snprintf(reason, sizeof reason, "exit code %lld",
                 (long long)sl_json_get_int(body, "exit_code", -1));
      gw_sched_finish(g->sched, j, GW_JOB_FAILED, reason);
    }
  } else {
    sl_warn(T, "%s: done with unknown status \"%s\" ignored", in->row.id, status);
    return;
  }
  ack_done(g, in, body);
}

/* cpu_util and gpu_util (fractions 0..1) of a heartbeat's job entry; a
 * value out of range or of the wrong type is ignored. */
static void heartbeat_util(struct gw_job *j, const json_t *v) {
  const json_t *c = json_object_get(v, "cpu_util"), *g = json_object_get(v, "gpu_util");
  if (json_is_number(c) && json_number_value(c) >= 0 && json_number_value(c) <= 1) {
    j->cpu_util = json_number_value(c);
    j->cpu_util_seen = true;
  }
  if (json_is_number(g) && json_number_value(g) >= 0 && json_number_value(g) <= 1) {
    j->gpu_util = json_number_value(g);
    j->gpu_util_seen = true;
  }
}

/* A heartbeat is answered with what is saved of its jobs ("recorded": the
 * newest step metric of each, once written, not while kept): the worker
 * keeps every step metric after it to send again, and holds its job's
 * metrics back rather than let one it still needs go. */
static void on_heartbeat(struct gw_wproto *g, struct gw_inst *in, const json_t *body) {
  size_t i;
  json_t *v;
  json_t *saved = json_array();
  json_array_foreach(json_object_get(body, "jobs"), i, v) {
    struct gw_job *j = own_job_lead(g, in, v);
    int64_t step = sl_json_get_int(v, "step", -1);
    if (j && step > j->step)
      j->step = step;
    if (j) /* the job's use of the instance since the last heartbeat, for the carbon estimate */
      heartbeat_util(j, v);
    if (j && !gw_store_keeps_job(g->store, j->id)) {
      char id[16];
      json_array_append_new(saved, json_pack("{s:s,s:i,s:o}", "job", gw_job_id_str(j->id, id, sizeof id),
                                             "attempt", j->attempt, "metric_step",
                                             j->metric_step >= 0 ? json_integer(j->metric_step)
                                                                 : json_null()));
    }
  }
  if (json_array_size(saved)) {
    json_t *m = json_pack("{s:s,s:o}", "type", "recorded", "jobs", saved);
    if (m)
      gw_wproto_send_raw(g, in->rid, in->rid_len, m);
    json_decref(m);
  } else {
    json_decref(saved);
  }
}

void gw_wproto_handle(struct gw_wproto *g, struct gw_inst *in, const uint8_t *rid, size_t rid_len,
                      const json_t *body) {
  /* the store's own connection asks for URLs and is answered there; it
   * does not move the worker's routing id */
  if (!strcmp(sl_json_get_str(body, "type", ""), "presign")) {
    in->last_seen_mono_us = sl_time_mono_us();
    gw_wproto_on_presign(g, in, rid, rid_len, body);
    return;
  }
  /* the routing id of the newest connection wins: a reconnecting worker moves */
  if (rid_len <= sizeof in->rid) {
    memcpy(in->rid, rid, rid_len);
    in->rid_len = rid_len;
  }
  in->last_seen_mono_us = sl_time_mono_us();
  const char *type = sl_json_get_str(body, "type", "");
  const char *inst = sl_json_get_str(body, "instance", NULL);
  if (inst && strcmp(inst, in->row.id)) {
    sl_warn(T, "%s: message names another instance; dropped", in->row.id);
    gw_wproto_refuse(g, in->rid, in->rid_len, SL_EAUTH, "the message names another instance");
    return;
  }
  if (!strcmp(type, "register")) {
    on_register(g, in, body);
    return;
  }
  if (!in->registered) {
    /* e.g. the gateway restarted under a running worker: ask it to register
     * again (once per REREGISTER_EVERY_US, not once per queued message). What
     * it says about its own job attempt still counts: it was sent, or queued
     * while no gateway was there, before the worker could know; a done
     * dropped here would run a finished job again. */
    int64_t now = sl_time_mono_us();
    if (now - in->reregister_mono_us >= REREGISTER_EVERY_US) {
      sl_debug(T, "%s: \"%s\" before register; asking it to register", in->row.id, type);
      json_t *m = json_pack("{s:s}", "type", "reregister");
      gw_wproto_send_raw(g, in->rid, in->rid_len, m);
      json_decref(m);
      in->reregister_mono_us = now;
    }
    if (!strcmp(type, "heartbeat"))
      return;
    /* a step metric now could pass steps lost in flight; the worker sends it
     * again after "registered" (metric_step) */
    json_t *data = json_object_get(body, "data");
    if (!strcmp(type, "metric") && !json_object_get(data, "event"))
      return;
  }
  if (!strcmp(type, "heartbeat"))
    on_heartbeat(g, in, body);
  else if (!strcmp(type, "metric"))
    on_metric(g, in, body);
  else if (!strcmp(type, "started"))
    on_started(g, in, body);
  else if (!strcmp(type, "output"))
    on_output(g, in, body);
  else if (!strcmp(type, "checkpoint"))
    on_checkpoint(g, in, body);
  else if (!strcmp(type, "notice"))
    on_notice(g, in, body);
  else if (!strcmp(type, "done"))
    on_done(g, in, body);
  else if (!strcmp(type, "result"))
    on_result(g, in, body);
  else {
    sl_warn(T, "%s: unknown message type \"%.40s\"; dropped", in->row.id, type);
    char why[96];
    snprintf(why, sizeof why, "unknown message type \"%.40s\"", type);
    gw_wproto_refuse(g, in->rid, in->rid_len, SL_EWIRE, why);
  }
}

