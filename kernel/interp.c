/* The spotlab interpreter behind the message core (interp.h): its life, its
 * entry points, and the gateway client it owns.
 *
 * Without a gateway transport the interpreter runs the cell language
 * locally and answers gateway statements with GatewayUnavailable. With one,
 * it owns the gateway client (gwclient.c) and starts loading the notebook
 * session's state from it at once, in the background: cells wait for that
 * load, which is bounded by the client's hello timeout, and a missing
 * gateway only fails gateway statements. Gateway callbacks come only from
 * gateway_input() and tick(); the core dispatches queued requests after
 * each. */
#include "interp_int.h"

#include "rename.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "sl_json.h"
#include "sl_log.h"
#include "sl_path.h"

static const struct jk_exec_hooks exec_hooks = {
    .cell_started = jk_jobs_cell_started,
    .cell_finished = jk_jobs_free_follow,
    .interrupted = jk_jobs_interrupt,
};

struct jk_interp *jk_interp_new(const struct jk_publisher *pub, void *ud,
                                const struct jk_interp_config *cfg) {
  struct jk_interp *ip = calloc(1, sizeof *ip);
  if (!ip)
    return NULL;
  ip->exec_hooks = &exec_hooks;
  ip->pub = pub;
  ip->pub_ud = ud;
  ip->history = cfg->history;
  ip->kernel_id = strdup(cfg->kernel_id ? cfg->kernel_id : "kernel");
  ip->notebook = strdup(cfg->notebook ? cfg->notebook : ip->kernel_id ? ip->kernel_id : "kernel");
  ip->follows = cfg->follows && cfg->notebook;
  if (ip->follows && ip->kernel_id)
    ip->rename = jk_rename_new(cfg->server_file, ip->kernel_id);
  if (ip->rename && cfg->server_named) /* its paths are session names as they are */
    ip->rename_prefix = strdup("");
  const char *gw = getenv("SPOTLAB_GATEWAY");
  ip->gateway = gw && *gw ? strdup(gw) : NULL;
  ip->state = jk_state_new();
  if (!ip->kernel_id || !ip->notebook || !ip->state)
    return jk_spotlab_interp.free(ip);
  return ip;
}

static struct jk_interp *interp_free(struct jk_interp *ip) {
  if (!ip)
    return NULL;
  if (ip->running) {
    jk_jobs_free_follow(ip);
    jk_exec_free_running(ip);
  }
  ip->last_display = jk_display_free(ip->last_display);
  ip->session = jk_session_free(ip->session);
  ip->gw = jk_gw_free(ip->gw);
  ip->rename = jk_rename_free(ip->rename);
  ip->state = jk_state_free(ip->state);
  free(ip->kernel_id);
  free(ip->notebook);
  free(ip->rename_prefix);
  free(ip->gateway);
  free(ip->gateway_before);
  free(ip);
  return NULL;
}

/* ---- session notices ---------------------------------------------------- */

/* line kept for the start of the next cell's output */
static void keep_for_next_cell(struct jk_interp *ip, const char *line) {
  size_t have = strlen(ip->pending_notice);
  if (have + strlen(line) >= sizeof ip->pending_notice)
    have = 0; /* only the newest notices are kept */
  snprintf(ip->pending_notice + have, sizeof ip->pending_notice - have, "%s", line);
}

/* A session notice from the gateway (borrowed): a stderr line on the running
 * cell; between cells, a stderr line on the cell that ran last and an entry
 * in the last job display's timeline; kept for the start of the next cell's
 * output only when no cell ran yet. A budget's notice is news for whoever
 * runs the next cell too: between cells it is kept for it as well. */
static void notice(struct jk_interp *ip, const json_t *notice) {
  const char *event = sl_json_get_str(notice, "event", "");
  bool budget = !strcmp(event, "budget");
  if (strcmp(event, "idle") && !budget)
    return;
  const char *action = sl_json_get_str(notice, "action", "");
  char line[512];
  if (budget)
    snprintf(line, sizeof line, "spotlab: %.480s\n", sl_json_get_str(notice, "text", "budget notice"));
  else if (!strcmp(action, "warning"))
    snprintf(line, sizeof line,
             "spotlab: this notebook is idle; its workers stop in %lld s unless a cell runs\n",
             (long long)sl_json_get_int(notice, "in_s", 0));
  else if (!strcmp(action, "shutdown"))
    snprintf(line, sizeof line, "spotlab: this notebook was idle; its workers were stopped"
                                " (the next job starts new ones)\n");
  else
    return;
  if (ip->running && !ip->running->silent) {
    jk_exec_stream(ip, "stderr", line);
    if (budget)
      jk_jobs_notice_running(ip, notice);
    return;
  }
  /* Between cells: under the cell that ran last (front ends keep showing a
   * finished cell's output), and in the last job display's timeline. */
  if (ip->cell_ran && ip->pub->stream(ip->pub_ud, JK_PUB_LAST, "stderr", line) == 0) {
    jk_jobs_notice(ip, notice);
    if (!budget)
      return;
  }
  keep_for_next_cell(ip, line);
}

/* A line for the user on the running cell; between cells under the cell
 * that ran last, or at the start of the next cell's output. */
static void tell(struct jk_interp *ip, const char *line) {
  if (ip->running && !ip->running->silent)
    jk_exec_stream(ip, "stderr", line);
  else if (!ip->cell_ran || ip->pub->stream(ip->pub_ud, JK_PUB_LAST, "stderr", line) < 0)
    keep_for_next_cell(ip, line);
}

/* ---- gateway client glue ------------------------------------------------ */

static void on_gw_reply(void *ud, int64_t id, const json_t *reply, const char *error) {
  struct jk_interp *ip = ud;
  switch (jk_session_reply(ip->session, id, reply, error)) {
  case JK_SESSION_LOADED:
    jk_exec_session_ready(ip);
    break;
  case JK_SESSION_HANDLED:
    break;
  case JK_SESSION_REFUSED: {
    char line[512];
    snprintf(line, sizeof line, "spotlab: this notebook's variables were not saved in the gateway: %.400s\n",
             error ? error : "refused");
    tell(ip, line);
    break;
  }
  case JK_SESSION_OTHER:
    jk_jobs_reply(ip, id, reply, error);
    break;
  }
}

static void on_gw_event(void *ud, const json_t *event) { jk_jobs_event(ud, event); }

static void on_gw_state(void *ud, bool ready, const char *why) {
  struct jk_interp *ip = ud;
  if (ready) {
    jk_session_flush(ip->session);
    jk_jobs_reattach(ip);
  } else {
    sl_debug("kernel.gateway", "gateway not available: %s", why ? why : "?");
    jk_jobs_gateway_lost(ip, why);
  }
}

static void on_gw_notice(void *ud, const json_t *n) { notice(ud, n); }

static const struct jk_gw_handler gw_handler = {on_gw_reply, on_gw_event, on_gw_state, on_gw_notice};

/* Whether loading the session at start may start the user's own gateway: a
 * notebook with a name of its own (not the kernel id) whose user's gateway
 * kept state before (it stops when idle, and the notebook's names live
 * there). A team gateway (SPOTLAB_GATEWAY) is never started by a kernel. */
static bool restart_gateway(const struct jk_interp *ip) {
  if (ip->gateway || strcmp(ip->notebook, ip->kernel_id) == 0)
    return false;
  char home[4000], db[4100];
  struct stat st;
  return sl_spotlab_home(home, sizeof home) == 0 &&
         snprintf(db, sizeof db, "%s/gateway.db", home) < (int)sizeof db && stat(db, &st) == 0;
}

static int set_gateway(struct jk_interp *ip, const struct jk_gw_transport *t, void *tud) {
  if (ip->gw)
    return 0;
  struct jk_gw_config gcfg = {.client = "kernel", .session = ip->notebook, .may_spawn = true};
  ip->gw = jk_gw_new(t, tud, &gw_handler, ip, &gcfg);
  ip->session = ip->gw ? jk_session_new(ip->state, ip->gw, ip->notebook) : NULL;
  if (!ip->session) {
    ip->gw = jk_gw_free(ip->gw);
    return -ENOMEM;
  }
  /* names a kernel of this notebook changed while no gateway took them */
  char home[4000], dir[4100];
  if (sl_spotlab_home(home, sizeof home) == 0 && snprintf(dir, sizeof dir, "%s/pending", home) < (int)sizeof dir)
    jk_session_keep_pending(ip->session, dir);
  bool may_start = restart_gateway(ip);
  char from[4096];
  /* a notebook renamed before this kernel started: its session moves first */
  if (ip->follows && jk_session_follow(ip->session, ip->kernel_id, may_start ? JK_GW_SPAWN : 0, from,
                                       sizeof from) == 1)
    jk_history_rename(ip->history, from, ip->notebook);
  jk_session_load(ip->session, true, may_start);
  return 0;
}

static void gateway_input(struct jk_interp *ip, const char *data, size_t len) {
  if (ip->gw)
    jk_gw_input(ip->gw, data, len);
}

static int64_t wake_at_us(const struct jk_interp *ip) {
  int64_t at = jk_rename_wake_at_us(ip->rename);
  if (ip->running && ip->running->wait == JK_WAIT_SLEEP)
    at = ip->running->wake_at_us;
  if (ip->gw) {
    int64_t g = jk_gw_wake_at_us(ip->gw), j = jk_jobs_wake_at_us(ip);
    at = g < at ? g : at;
    at = j < at ? j : at;
  }
  return at;
}

/* The server's path for the notebook, as this kernel names sessions: the
 * path the server gives, after the prefix the name it started with had
 * (JPY_SESSION_NAME may be the file's full path where the server gives one
 * relative to its root), learned from the first answer unless the name was
 * the server's own. A name that is not one of those forms is not
 * followed. Differs from the session's name: the notebook was renamed, and
 * the session, with what the gateway holds of it, follows. */
static void server_path(struct jk_interp *ip, const char *path) {
  if (!ip->rename_prefix) {
    size_t n = strlen(ip->notebook), m = strlen(path);
    if (!strcmp(ip->notebook, path))
      ip->rename_prefix = strdup("");
    else if (n > m && ip->notebook[n - m - 1] == '/' && !strcmp(ip->notebook + n - m, path))
      ip->rename_prefix = strndup(ip->notebook, n - m);
    if (!ip->rename_prefix) {
      sl_info("kernel", "the Jupyter server calls the notebook %s, not %s: renames are not followed", path,
              ip->notebook);
      ip->rename = jk_rename_free(ip->rename);
    }
    return;
  }
  char *name = NULL;
  if (asprintf(&name, "%s%s", ip->rename_prefix, path) < 0)
    return;
  if (!ip->follows || !strcmp(name, ip->notebook) || !ip->session) {
    free(name);
    return;
  }
  char *old = ip->notebook;
  ip->notebook = name;
  if (jk_session_rename(ip->session, name) < 0) {
    ip->notebook = old;
    free(name);
    return;
  }
  jk_session_moved(ip->session, old, 0);
  jk_gw_set_session(ip->gw, name);
  jk_history_rename(ip->history, old, name);
  free(old);
}

static void tick(struct jk_interp *ip) {
  char path[4096];
  if (jk_rename_poll(ip->rename, path, sizeof path) == 1)
    server_path(ip, path);
  if (ip->gw) {
    jk_gw_tick(ip->gw);
    jk_jobs_tick(ip);
  }
  jk_exec_wake(ip);
}

static void other_front_end(struct jk_interp *ip) {
  if (ip->gw)
    jk_jobs_other_front_end(ip);
}

static void terminal_back(struct jk_interp *ip) {
  if (ip->running && ip->running->wait == JK_WAIT_JOB)
    jk_exec_interrupt(ip);
}

/* ---- front-end services ------------------------------------------------- */

static bool ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* Code-point index -> byte offset in UTF-8 text (clamped to len). */
static size_t cp_to_byte(const char *s, size_t len, size_t cp) {
  size_t i = 0;
  while (i < len && cp > 0) {
    i++;
    while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
      i++;
    cp--;
  }
  return i;
}

static char *inspect(struct jk_interp *ip, const char *code, size_t len, size_t cursor, int detail) {
  /* A notebook name under the cursor wins over a keyword of the same spelling. */
  size_t b = cp_to_byte(code, len, cursor), s = b, e = b;
  while (s > 0 && ident_char(code[s - 1]))
    s--;
  while (e < len && ident_char(code[e]))
    e++;
  if (e > s && e - s < 128) {
    char word[128];
    memcpy(word, code + s, e - s);
    word[e - s] = '\0';
    char *text = jk_state_describe(ip->state, word);
    if (text)
      return text;
  }
  return jk_inspect(code, len, cursor, detail);
}

static int complete(struct jk_interp *ip, const char *code, size_t len, size_t cursor,
                    struct jk_completions *ret) {
  size_t n_names = 0;
  char *kinds = NULL;
  const char **names = jk_state_names(ip->state, &n_names, &kinds);
  int r = jk_complete(code, len, cursor, names, kinds, n_names, ret);
  free(names);
  free(kinds);
  return r;
}

static enum jk_completeness is_complete(struct jk_interp *ip, const char *code, size_t len) {
  (void)ip;
  return jk_is_complete(code, len);
}

const struct jk_interp_ops jk_spotlab_interp = {
    .execute = jk_exec_execute,
    .user_expressions = jk_exec_user_expressions,
    .input_reply = jk_exec_input_reply,
    .awaits_input = jk_exec_awaits_input,
    .interrupt = jk_exec_interrupt,
    .other_front_end = other_front_end,
    .terminal_back = terminal_back,
    .complete = complete,
    .inspect = inspect,
    .is_complete = is_complete,
    .set_gateway = set_gateway,
    .gateway_input = gateway_input,
    .wake_at_us = wake_at_us,
    .tick = tick,
    .free = interp_free,
};
