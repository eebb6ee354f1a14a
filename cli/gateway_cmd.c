/* spotlab gateway stop|status: the life of the gateway the CLI talks to.
 *
 * stop asks the gateway to stop (its `shutdown` request: the embedded
 * gateway's own user, or an admin of a configured one). The gateway stops
 * its workers that run no job and exits; while a job is live it refuses,
 * unless --force, and then each job keeps running on its worker and is
 * picked up again when the gateway next starts. When the gateway runs on
 * this machine (an ipc:// or loopback address) the command waits for its
 * process to exit, so that once it returns nothing of it is left. */
#include "gateway_cmd.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "conn.h"
#include "sl_err.h"
#include "sl_json.h"
#include "sl_time.h"

#define REQUEST_TIMEOUT_MS 15000
#define EXIT_WAIT_MS 30000      /* the gateway waits up to 8 s for its workers */

/* Whether the gateway at addr runs on this machine, so its pid is ours to watch. */
static bool local_address(const char *addr) {
  return !strncmp(addr, "ipc://", 6) || !strncmp(addr, "tcp://127.", 10) ||
         !strncmp(addr, "tcp://localhost:", 16) || !strncmp(addr, "tcp://[::1]:", 12);
}

/* Waits up to timeout_ms for process pid to exit: true once it has. */
static bool wait_exit(pid_t pid, int timeout_ms) {
  int64_t until = sl_time_mono_us() + (int64_t)timeout_ms * SL_US_PER_MS;
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0)
    return errno == ESRCH;
  bool gone = false;
  for (;;) {
    int64_t left_ms = (until - sl_time_mono_us()) / SL_US_PER_MS;
    if (left_ms <= 0)
      break;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, (int)left_ms);
    if (r > 0) {
      gone = true;
      break;
    }
    if (r < 0 && errno != EINTR)
      break;
  }
  close(fd);
  return gone;
}

static int stop(struct cli_conn *conn, bool force) {
  json_t *reply = NULL;
  char err[800];
  json_t *req = json_pack("{s:s,s:b}", "type", "shutdown", "force", force);
  if (cli_request(conn, req, REQUEST_TIMEOUT_MS, &reply, err, sizeof err) < 0) {
    fprintf(stderr, "spotlab gateway stop: %s\n", err);
    return 1;
  }
  pid_t pid = (pid_t)sl_json_get_int(reply, "pid", 0);
  long long stopped = (long long)sl_json_get_int(reply, "workers_stopped", 0);
  const json_t *jobs = json_object_get(reply, "jobs");
  printf("stopping the gateway at %s (pid %d): %lld idle worker%s stopped\n", cli_address(conn),
         (int)pid, stopped, stopped == 1 ? "" : "s");
  size_t i;
  const json_t *j;
  json_array_foreach(jobs, i, j)
    printf("  job %s (%s, %s) keeps running on its worker; it is picked up when the gateway"
           " starts again\n", sl_json_get_str(j, "job", "?"), sl_json_get_str(j, "state", "?"),
           sl_json_get_str(j, "user", "?"));
  json_decref(reply);
  if (!local_address(cli_address(conn)) || pid <= 0) {
    printf("the gateway runs elsewhere: it exits once its workers are gone\n");
    return 0;
  }
  if (!wait_exit(pid, EXIT_WAIT_MS)) {
    fprintf(stderr, "spotlab gateway stop: the gateway (pid %d) has not exited after %d s\n",
            (int)pid, EXIT_WAIT_MS / 1000);
    return 1;
  }
  printf("the gateway has exited\n");
  return 0;
}

/* Says (on stdout, as text or JSON) that no gateway serves this user:
 * none answers, or one answers but refused the token (refused). */
static void say_not_serving(struct cli_conn *conn, bool json, bool refused, const char *err) {
  if (json) {
    json_t *o = json_pack("{s:b, s:s, s:s}", "running", refused, "address", cli_address(conn), "reason", err);
    if (o && refused)
      json_object_set_new(o, "token_accepted", json_false());
    char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    if (s)
      printf("%s\n", s);
    free(s);
    json_decref(o);
  } else if (refused) {
    printf("running at %s, but it refused the token (%s)\n", cli_address(conn), err);
  } else {
    printf("not running (%s)\n", err);
  }
}

static int status(struct cli_conn *conn, bool json) {
  json_t *reply = NULL;
  char err[800];
  int r = cli_request(conn, json_pack("{s:s}", "type", "status"), REQUEST_TIMEOUT_MS, &reply, err, sizeof err);
  if (r < 0) {
    say_not_serving(conn, json, r == SL_EAUTH, err);
    return 1;
  }
  const json_t *g = json_object_get(reply, "gateway"), *idle = json_object_get(reply, "idle");
  if (json) {
    char *s = json_dumps(g, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (s)
      printf("%s\n", s);
    free(s);
    json_decref(reply);
    return 0;
  }
  int64_t up_s = (sl_time_real_us() - sl_json_get_int(g, "started_us", 0)) / SL_US_PER_S;
  bool embedded = sl_json_get_bool(g, "embedded", false);
  printf("running: pid %d at %s%s, up %lldh%02lldm\n", (int)sl_json_get_int(g, "pid", 0),
         sl_json_get_str(g, "listen", "?"), embedded ? " (this user's own)" : "",
         (long long)(up_s / 3600), (long long)(up_s / 60 % 60));
  size_t workers = json_array_size(json_object_get(reply, "workers"));
  long long live = sl_json_get_int(g, "live_jobs", 0);
  printf("%zu worker%s, %lld live job%s (%lld queued)\n", workers, workers == 1 ? "" : "s", live,
         live == 1 ? "" : "s", (long long)sl_json_get_int(g, "queued", 0));
  double t = sl_json_get_num(idle, "gateway_timeout_s", -1);
  char after[32];
  if (embedded && t > 0)
    printf("stops itself after %s with no client and no job ([idle] gateway_timeout)\n",
           sl_time_format_duration((int64_t)(t * 1e6), after, sizeof after));
  else if (embedded && t == 0)
    printf("never stops itself ([idle] gateway_timeout = 0): `spotlab gateway stop` stops it\n");
  json_decref(reply);
  return 0;
}

int cli_gateway(const char *what, bool force, bool json) {
  bool is_stop = what && !strcmp(what, "stop");
  if (!what || (!is_stop && strcmp(what, "status")) || (force && !is_stop) || (json && is_stop)) {
    fprintf(stderr, "usage: spotlab gateway stop [--force] | status [--json]\n");
    return 2;
  }
  struct cli_conn *conn = cli_conn_new();
  if (!conn) {
    fprintf(stderr, "spotlab: out of memory\n");
    return 1;
  }
  int rc = is_stop ? stop(conn, force) : status(conn, json);
  cli_conn_free(conn);
  return rc;
}
