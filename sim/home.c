/* The simulator's private gateway: a temporary SPOTLAB_HOME, a configuration
 * that replays the trace on the local provider, spotlab-gateway started in
 * it as a daemon, and on the way out the gateway and every worker it
 * launched stopped and the folder removed.
 *
 * Nothing the simulator starts outlives it: workers are found through the
 * provider's instances/ID/instance.json records (pid = process group), and
 * every wait for an exit is a pidfd poll with a deadline. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim.h"
#include "sl_file.h"
#include "sl_json.h"
#include "sl_path.h"
#include "sl_time.h"

#define PATH_MAX_SIM 1024
#define STOP_GRACE_MS 5000
#define MAX_WORKERS 64
#define LOG_TAIL_BYTES 700 /* of gateway.log, in the message of a gateway that failed to start */

struct sim_home {
  char dir[PATH_MAX_SIM];
  char config[PATH_MAX_SIM + 32];
  bool started;
};

const char *sim_home_path(const struct sim_home *h) { return h->dir; }

int sim_home_new(const char *trace_path, double time_scale, struct sim_home **ret, char *err,
                 size_t err_size) {
  char trace[PATH_MAX_SIM];
  if (!realpath(trace_path, trace)) {
    int r = -errno;
    snprintf(err, err_size, "%s: %s", trace_path, strerror(errno));
    return r;
  }
  struct sim_home *h = calloc(1, sizeof *h);
  if (!h)
    return -ENOMEM;
  const char *tmp = getenv("TMPDIR");
  snprintf(h->dir, sizeof h->dir, "%s/spotlab-sim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(h->dir)) {
    int r = -errno;
    snprintf(err, err_size, "cannot make a folder in %s: %s", tmp && *tmp ? tmp : "/tmp", strerror(errno));
    free(h);
    return r;
  }
  snprintf(h->config, sizeof h->config, "%s/sim.ini", h->dir);
  FILE *f = fopen(h->config, "w");
  if (!f) {
    int r = -errno;
    snprintf(err, err_size, "%s: %s", h->config, strerror(errno));
    sim_home_free(h);
    return r;
  }
  fprintf(f, "[provider.local]\nslots = 1\nmarket = trace:%s\ntime_scale = %.17g\n", trace, time_scale);
  if (fclose(f) != 0) {
    int r = -errno;
    snprintf(err, err_size, "%s: %s", h->config, strerror(errno));
    sim_home_free(h);
    return r;
  }
  setenv("SPOTLAB_HOME", h->dir, 1);
  setenv("SPOTLAB_CONFIG", h->config, 1);
  unsetenv("SPOTLAB_GATEWAY");
  unsetenv("SPOTLAB_TOKEN");
  /* A notice lasts 120 simulated seconds, a fraction of a wall second at a
   * high time_scale: the workers must look for it more often than once a
   * second, or every preemption becomes a hard loss. */
  char poll_ms[16];
  long ms = (long)(120.0 / time_scale * 1000.0 / 10.0);
  snprintf(poll_ms, sizeof poll_ms, "%ld", ms < 10 ? 10 : ms > 1000 ? 1000 : ms);
  setenv("SPOTLAB_NOTICE_POLL_MS", poll_ms, 1);
  *ret = h;
  return 0;
}

/* The whole lines of the last LOG_TAIL_BYTES of the file at path into buf
 * (size bytes, LOG_TAIL_BYTES + 1 at most used), without the final line
 * break; "" when it cannot be read. */
static void log_tail(const char *path, char *buf, size_t size) {
  buf[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  off_t end = lseek(fd, 0, SEEK_END);
  off_t from = end > LOG_TAIL_BYTES ? end - LOG_TAIL_BYTES : 0;
  size_t want = (size_t)(end - from) < size - 1 ? (size_t)(end - from) : size - 1;
  ssize_t n = end > 0 ? pread(fd, buf, want, from) : 0;
  close(fd);
  if (n <= 0)
    return;
  buf[n] = 0;
  char *start = buf;
  if (from > 0 && (start = strchr(buf, '\n'))) /* the first line is cut: it goes */
    start++;
  else if (from > 0)
    start = buf + n;
  memmove(buf, start, strlen(start) + 1);
  size_t len = strlen(buf);
  if (len && buf[len - 1] == '\n')
    buf[len - 1] = 0;
}

int sim_home_start(struct sim_home *h, char *err, size_t err_size) {
  char gw[PATH_MAX_SIM];
  int r = sl_find_program("spotlab-gateway", gw, sizeof gw);
  if (r < 0) {
    snprintf(err, err_size, "spotlab-gateway not found");
    return r;
  }
  pid_t pid = fork();
  if (pid < 0)
    return snprintf(err, err_size, "fork: %s", strerror(errno)), -errno;
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0)
      dup2(null, STDIN_FILENO), dup2(null, STDOUT_FILENO);
    execl(gw, gw, "--embedded", "--daemon", (char *)NULL);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return snprintf(err, err_size, "waitpid: %s", strerror(errno)), -errno;
  h->started = true;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    /* the log's end goes into the message: the folder is removed on the way out */
    char path[PATH_MAX_SIM + 16], tail[LOG_TAIL_BYTES + 1];
    snprintf(path, sizeof path, "%s/gateway.log", h->dir);
    log_tail(path, tail, sizeof tail);
    snprintf(err, err_size, "spotlab-gateway --embedded --daemon failed (status %d)%s%s",
             WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), tail[0] ? "; its log ends:\n" : "",
             tail);
    return -ECHILD;
  }
  return 0;
}

/* Sends sig to each target and waits, with one deadline, until they exit. */
static void stop_pids(const pid_t *pids, int n, bool group, int sig, int grace_ms) {
  int fds[MAX_WORKERS + 1];
  for (int i = 0; i < n; i++) {
    fds[i] = (int)syscall(SYS_pidfd_open, pids[i], 0);
    kill(group ? -pids[i] : pids[i], sig);
  }
  int64_t deadline = sl_time_mono_us() + (int64_t)grace_ms * 1000;
  for (int i = 0; i < n; i++) {
    if (fds[i] < 0)
      continue;
    for (;;) {
      int64_t left = (deadline - sl_time_mono_us()) / 1000;
      struct pollfd p = {fds[i], POLLIN, 0};
      int k = poll(&p, 1, left > 0 ? (int)left : 0);
      if (k < 0 && errno == EINTR)
        continue;
      if (k == 0) {
        kill(group ? -pids[i] : pids[i], SIGKILL);
        p.revents = 0;
        poll(&p, 1, 1000);
      }
      break;
    }
    close(fds[i]);
  }
}

static int read_pid_file(const char *path, pid_t *ret) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -errno;
  int pid = 0;
  int ok = fscanf(f, "%d", &pid);
  fclose(f);
  if (ok != 1 || pid <= 1)
    return -EINVAL;
  *ret = pid;
  return 0;
}

/* Worker pids (= their process groups) from the provider's instance records. */
static int worker_pids(const char *home, pid_t *pids, int max) {
  char dir[PATH_MAX_SIM + 16];
  snprintf(dir, sizeof dir, "%s/instances", home);
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    if (e->d_name[0] == '.')
      continue;
    char path[PATH_MAX_SIM + 300];
    snprintf(path, sizeof path, "%s/%s/instance.json", dir, e->d_name);
    json_error_t je;
    json_t *rec = json_load_file(path, 0, &je);
    int64_t pid = sl_json_get_int(rec, "pid", 0);
    json_decref(rec);
    if (pid > 1 && kill((pid_t)pid, 0) == 0)
      pids[n++] = (pid_t)pid;
  }
  closedir(d);
  return n;
}

struct sim_home *sim_home_free(struct sim_home *h) {
  if (!h)
    return NULL;
  if (h->started) {
    char path[PATH_MAX_SIM + 16];
    snprintf(path, sizeof path, "%s/gateway.pid", h->dir);
    pid_t gw;
    /* The gateway first, so it launches nothing more while workers stop. */
    if (read_pid_file(path, &gw) == 0)
      stop_pids(&gw, 1, false, SIGTERM, STOP_GRACE_MS);
    pid_t pids[MAX_WORKERS];
    int n = worker_pids(h->dir, pids, MAX_WORKERS);
    stop_pids(pids, n, true, SIGTERM, STOP_GRACE_MS);
  }
  sl_file_remove_tree(h->dir);
  free(h);
  return NULL;
}
