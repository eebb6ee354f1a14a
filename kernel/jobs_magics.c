/* The gateway magics (jobs_int.h): %status, %idle, %jobs, %cost, %budget,
 * %sessions, %data, %instances, %cancel, %logs and %show ask one query each and write its
 * reply as text; %attach and %rerun start following a job (jobs.c follows
 * it); the gateway parts of %session and %gateway, and show of a model
 * with what the gateway knows of its training. Each sends one request and
 * leaves the statement pending until jobs.c hands back the reply. */
#include "jobs_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gwformat.h"
#include "gwrecord.h"
#include "sl_ident.h"
#include "sl_json.h"

/* ---- replies ------------------------------------------------------------ */

enum jk_step jk_jobs_on_query(struct jk_interp *ip, const json_t *reply) {
  const char *q = ip->running->follow->query;
  char *text = NULL;
  if (strcmp(q, "status") == 0) {
    char *st = jk_format_status(reply);
    if (asprintf(&text, "%-10s %s\n%-10s %s, as user %s\n%s", "session", ip->notebook, "connected",
                 jk_gw_address(ip->gw), jk_gw_user(ip->gw) ? jk_gw_user(ip->gw) : "?", st ? st : "") < 0)
      text = NULL;
    free(st);
  } else if (strcmp(q, "idle") == 0) {
    text = jk_format_idle(reply);
  } else if (strcmp(q, "sessions") == 0) {
    text = jk_format_sessions(reply, ip->notebook);
  } else if (strcmp(q, "session.delete") == 0) {
    text = jk_format_session_deleted(reply);
  } else if (strcmp(q, "data.list") == 0) {
    text = jk_format_uploads(reply, "%data rm");
  } else if (strcmp(q, "data.delete") == 0) {
    text = jk_format_upload_deleted(reply);
  } else if (strcmp(q, "jobs") == 0) {
    text = jk_format_jobs_of(reply, ip->running->follow->all ? NULL : ip->notebook);
  } else if (strcmp(q, "logs") == 0) {
    text = jk_format_events(reply);
  } else if (strcmp(q, "budget") == 0) {
    text = jk_format_budgets(reply);
  } else if (strcmp(q, "show") == 0) {
    text = jk_format_record(json_object_get(reply, "record"));
  } else if (strcmp(q, "instances") == 0) {
    /* the ranking as a table: text/plain always, text/html beside it */
    text = jk_format_market(reply);
    char *html = text ? jk_format_market_html(reply) : NULL;
    if (html) {
      ip->pub->display(ip->pub_ud, JK_PUB_RUNNING,
                       json_pack("{s:s, s:s}", "text/plain", text, "text/html", html), NULL, false);
      free(html);
      free(text);
      return JK_STEP_DONE;
    }
  } else if (strcmp(q, "cost") == 0 && !ip->running->follow->all && !ip->running->follow->first) {
    /* the cost reply does not say whose jobs are whose: the jobs list does */
    struct jk_follow *f = ip->running->follow;
    f->first = json_incref((json_t *)reply);
    return jk_jobs_await(ip, json_pack("{s:s, s:b}", "type", "jobs", "all", 1), OP_QUERY, JK_GW_SPAWN);
  } else if (strcmp(q, "cost") == 0) {
    struct jk_follow *f = ip->running->follow;
    text = f->first ? jk_format_cost_of(f->first, reply, ip->notebook) : jk_format_cost(reply);
  } else if (strcmp(q, "cancel") == 0) {
    if (asprintf(&text, "cancel requested for %s\n", sl_json_get_str(reply, "job", "the job")) < 0)
      text = NULL;
  }
  if (!text)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  jk_exec_stream(ip, "stdout", text);
  free(text);
  return JK_STEP_DONE;
}

enum jk_step jk_jobs_on_show(struct jk_interp *ip, const json_t *reply) {
  if (reply)
    jk_session_set_models(ip->session, json_object_get(reply, "models"));
  const struct jk_stmt *s = &ip->running->cell->stmts[ip->running->pc];
  const json_t *m = jk_session_model(ip->session, s->name);
  char *extra = NULL;
  int r;
  if (json_is_object(m))
    r = asprintf(&extra, "trained: job %s, step %lld%s%s", sl_json_get_str(m, "job", "?"),
                 (long long)sl_json_get_int(m, "step", 0), json_object_get(m, "checkpoint") ? ", checkpoint " : "",
                 sl_json_get_str(m, "checkpoint", ""));
  else
    r = asprintf(&extra, "not trained yet%s", reply ? "" : " (or the gateway cannot be reached to say)");
  enum jk_step st = jk_exec_show(ip, s, r < 0 ? NULL : extra);
  free(extra);
  return st;
}

enum jk_step jk_jobs_on_session(struct jk_interp *ip, const json_t *reply, const char *error) {
  char *t = NULL;
  if (error) {
    if (asprintf(&t, "notebook session: %s (not loaded from the gateway: %s; state stays in this kernel)\n",
                 ip->notebook, error) < 0)
      t = NULL;
  } else {
    jk_session_apply(ip->session, reply, true);
    if (asprintf(&t, "notebook session: %s (%zu variables, %zu models and data)\n", ip->notebook,
                 jk_state_n_vars(ip->state), jk_state_n_defs(ip->state)) < 0)
      t = NULL;
  }
  if (t)
    jk_exec_stream(ip, "stdout", t);
  free(t);
  return JK_STEP_DONE;
}

/* ---- magics ------------------------------------------------------------- */

static enum jk_step query(struct jk_interp *ip, const char *name, json_t *req) {
  struct jk_follow *f = jk_jobs_follow_new(ip);
  if (!f) {
    json_decref(req);
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  }
  snprintf(f->query, sizeof f->query, "%s", name);
  return jk_jobs_await(ip, req, OP_QUERY, JK_GW_SPAWN);
}

static bool job_arg_ok(const char *a) { return *a && strlen(a) < 24 && !strpbrk(a, " \t\"\\"); }

/* %status and %idle (the status reply), %jobs, %cost, %instances, %cancel, %logs. */
enum jk_step jk_magic_query(struct jk_interp *ip, const struct jk_stmt *s) {
  const char *m = s->name, *a = s->args ? s->args : "";
  if (strcmp(m, "status") == 0 || strcmp(m, "idle") == 0)
    return query(ip, m, json_pack("{s:s}", "type", "status"));
  if (strcmp(m, "sessions") == 0 && !*a)
    return query(ip, m, json_pack("{s:s}", "type", "sessions"));
  if (strcmp(m, "sessions") == 0) { /* %sessions rm NAME: the rest of the line, spaces and all */
    const char *name = strncmp(a, "rm ", 3) == 0 ? a + 3 : NULL;
    while (name && (*name == ' ' || *name == '\t'))
      name++;
    if (!name || !*name)
      return jk_exec_fail(ip, "ValueError", "%%sessions takes no argument or rm NAME, not '%s'", a);
    if (strcmp(name, ip->notebook) == 0)
      return jk_exec_fail(ip, "ValueError", "%s is this notebook's own session: it holds this kernel's names;"
                          " delete it from another notebook or with spotlab sessions rm", name);
    return query(ip, "session.delete", json_pack("{s:s, s:s}", "type", "session.delete", "session", name));
  }
  if (strcmp(m, "data") == 0 && !*a)
    return query(ip, "data.list", json_pack("{s:s}", "type", "data.list"));
  if (strcmp(m, "data") == 0) { /* %data rm SHA256 */
    const char *sha = strncmp(a, "rm ", 3) == 0 ? a + 3 : NULL;
    while (sha && (*sha == ' ' || *sha == '\t'))
      sha++;
    if (!sha || !*sha || strpbrk(sha, " \t"))
      return jk_exec_fail(ip, "ValueError", "%%data takes no argument or rm SHA256, not '%s'", a);
    return query(ip, "data.delete", json_pack("{s:s, s:s}", "type", "data.delete", "sha256", sha));
  }
  if (strcmp(m, "jobs") == 0 || strcmp(m, "cost") == 0) {
    bool all = strcmp(a, "--all") == 0;
    if (*a && !all)
      return jk_exec_fail(ip, "ValueError", "%%%s takes no argument or --all, not '%s'", m, a);
    enum jk_step st = query(ip, m, strcmp(m, "jobs") == 0 ? json_pack("{s:s, s:b}", "type", "jobs", "all", 1)
                                                          : json_pack("{s:s}", "type", "cost"));
    if (ip->running->follow)
      ip->running->follow->all = all;
    return st;
  }
  if (strcmp(m, "budget") == 0) {
    char err[160];
    json_t *req = jk_budget_request(a, err, sizeof err);
    return req ? query(ip, m, req) : jk_exec_fail(ip, "ValueError", "%%budget: %s", err);
  }
  if (strcmp(m, "instances") == 0) {
    json_t *opts = json_object();
    if (jk_exec_eval_options(ip, s->opts, s->n_opts, opts) != JK_STEP_DONE) {
      json_decref(opts);
      return JK_STEP_ERROR;
    }
    json_t *req = json_pack("{s:s}", "type", "market");
    json_t *gpus = json_object_get(opts, "gpus");
    json_object_set_new(req, "gpus", gpus ? json_incref(gpus) : json_integer(1));
    json_decref(opts);
    return query(ip, m, req);
  }
  if (!job_arg_ok(a))
    return jk_exec_fail(ip, "ValueError", "%%%s takes a job id such as J000012", m);
  if (strcmp(m, "cancel") == 0)
    return query(ip, m, json_pack("{s:s, s:s}", "type", "cancel", "job", a));
  if (strcmp(m, "logs") == 0)
    return query(ip, m, json_pack("{s:s, s:s, s:i, s:i}", "type", "logs", "job", a, "after", 0, "limit", 1000));
  if (strcmp(m, "show") == 0)
    return query(ip, m, json_pack("{s:s, s:s}", "type", "record", "job", a));
  return jk_exec_fail(ip, "InternalError", "%%%s is not a query", m);
}

enum jk_step jk_magic_attach(struct jk_interp *ip, const struct jk_stmt *s) {
  const char *a = s->args ? s->args : "";
  if (!job_arg_ok(a))
    return jk_exec_fail(ip, "ValueError", "%%%s takes a job id such as J000012", s->name);
  if (!jk_jobs_follow_new(ip))
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  /* the id as the gateway writes it, which its events carry (J0000012 is J000012) */
  char id[SL_JOB_ID_MAX];
  int64_t n = sl_job_id_parse(a);
  return jk_jobs_start_follow(ip, n > 0 ? sl_job_id_str(n, id, sizeof id) : a);
}

/* %rerun JOB [force]: a rerun is submitted, then followed as a job
 * statement's job is (its kind and model come with the attach). */
enum jk_step jk_magic_rerun(struct jk_interp *ip, const struct jk_stmt *s) {
  char job[32] = "", word[16] = "", extra[2] = "";
  int n = sscanf(s->args ? s->args : "", "%31s %15s %1s", job, word, extra);
  if (n < 1 || n > 2 || !job_arg_ok(job) || (n == 2 && strcmp(word, "force") != 0))
    return jk_exec_fail(ip, "ValueError", "%%rerun takes a job id and optionally force: %%rerun J000012 [force]");
  if (!jk_jobs_follow_new(ip))
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  return jk_jobs_await(ip, json_pack("{s:s, s:s, s:b}", "type", "rerun", "job", job, "force", n == 2), OP_SUBMIT,
               JK_GW_SPAWN);
}

enum jk_step jk_jobs_session(struct jk_interp *ip) {
  jk_gw_set_session(ip->gw, ip->notebook);
  if (!jk_jobs_follow_new(ip))
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  return jk_jobs_await(ip, json_pack("{s:s}", "type", "session.get"), OP_SESSION, 0);
}

enum jk_step jk_jobs_gateway(struct jk_interp *ip, const char *address) {
  if (jk_gw_set_address(ip->gw, address) < 0)
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  jk_session_load(ip->session, false, false);
  if (!jk_jobs_follow_new(ip))
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  return jk_jobs_await(ip, json_pack("{s:s}", "type", "ping"), OP_GATEWAY, 0);
}

enum jk_step jk_jobs_show(struct jk_interp *ip, const struct jk_stmt *s) {
  if (!jk_jobs_follow_new(ip))
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  return jk_jobs_await(ip, json_pack("{s:s}", "type", "session.get"), OP_SHOW, 0);
}

/* show NAME: a model's training record comes from the gateway when there is one. */
enum jk_step jk_stmt_show(struct jk_interp *ip, const struct jk_stmt *s) {
  struct jk_def d;
  if (ip->gw && jk_state_def(ip->state, s->name, &d) == 0 && strcmp(d.kind, "model") == 0)
    return jk_jobs_show(ip, s);
  return jk_exec_show(ip, s, NULL);
}
