/* Processes of the local provider through /proc and posix_spawn. Nothing
 * here keeps state: the provider records pids and start times itself. */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Reads /proc/PID/FILE (pid as text) into buf; its length, or -1. */
static ssize_t read_proc(const char *pid, const char *file, char *buf, size_t size) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%.20s/%s", pid, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  return n;
}

int gw_proc_stat(pid_t pid, unsigned long long *ret_ticks, char *ret_state) {
  char id[24], buf[1024];
  snprintf(id, sizeof id, "%d", (int)pid);
  if (read_proc(id, "stat", buf, sizeof buf) < 0)
    return -ESRCH;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
  if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
    return -EIO;
  char state = p[2];
  p += 4; /* field 4 */
  for (int field = 4; field < 22 && p; field++) { /* skip fields 4..21 */
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  if (!p)
    return -EIO;
  *ret_ticks = strtoull(p, NULL, 10);
  *ret_state = state;
  return 0;
}

bool gw_proc_alive(pid_t pid, unsigned long long start_ticks) {
  if (pid <= 1)
    return false;
  int status;
  pid_t w = waitpid(pid, &status, WNOHANG);
  if (w == pid)
    return false;
  unsigned long long ticks;
  char state;
  if (gw_proc_stat(pid, &ticks, &state) < 0)
    return false;
  if (ticks != start_ticks)
    return false;
  /* A child of ours reads as a zombie a moment before waitpid can take it
   * (its other threads still exiting): it counts as alive until then, or
   * nothing would ever take it. */
  if (state == 'Z' || state == 'X')
    return w == 0;
  return true;
}

/* Spawned with POSIX_SPAWN_SETSID, a leader's group exists from the moment
 * gw_proc_spawn returns until its last member is gone: no group means no
 * leader, and its pid may already be someone else's, so nothing is sent. */
void gw_proc_signal_group(pid_t leader, int sig) {
  if (leader > 1)
    kill(-leader, sig);
}

/* Session id (field 6 of /proc/PID/stat) of pid; -1 if unknown. */
static pid_t session_of(const char *pid) {
  char buf[1024];
  if (read_proc(pid, "stat", buf, sizeof buf) < 0)
    return -1;
  char *p = strrchr(buf, ')');
  int ppid, pgrp, sid;
  if (!p || sscanf(p + 1, " %*c %d %d %d", &ppid, &pgrp, &sid) != 3)
    return -1;
  return sid;
}

void gw_proc_kill_session(pid_t leader) {
  gw_proc_signal_group(leader, SIGKILL);
  if (leader <= 1)
    return;
  DIR *d = opendir("/proc");
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && session_of(e->d_name) == leader)
      kill((pid_t)strtol(e->d_name, NULL, 10), SIGKILL);
  closedir(d);
}

int gw_proc_spawn(char *const argv[], const char *dir, const char *log_path, pid_t *ret_pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawn_file_actions_addchdir_np(&fa, dir);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                    POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  int r = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (r != 0)
    return -r;
  *ret_pid = pid;
  return 0;
}

pid_t gw_proc_find_by_args(const char *flag, const char *value) {
  DIR *d = opendir("/proc");
  pid_t found = 0;
  struct dirent *e;
  while (d && !found && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    char buf[8192];
    ssize_t n = read_proc(e->d_name, "cmdline", buf, sizeof buf);
    if (n <= 0)
      continue;
    for (char *a = buf; a < buf + n; a += strlen(a) + 1) {
      char *next = a + strlen(a) + 1;
      if (!strcmp(a, flag) && next < buf + n && !strcmp(next, value))
        found = (pid_t)strtol(e->d_name, NULL, 10);
    }
  }
  if (d)
    closedir(d);
  return found;
}
