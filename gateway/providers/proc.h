/* The local provider's processes, seen through /proc: a worker runs in a
 * session and process group of its own (sid = pgid = pid), and its recorded
 * start time guards against a reused pid being mistaken for it. */
#ifndef GW_PROC_H
#define GW_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* Start time (clock ticks since boot, field 22 of /proc/PID/stat) and state
 * letter of pid. -ESRCH when there is no such process. */
int gw_proc_stat(pid_t pid, unsigned long long *ret_ticks, char *ret_state);
/* True while pid exists with that start time and is not a zombie. Reaps pid
 * when it is an exited child of this process; a child that exited but
 * cannot be reaped yet is still alive, so that a later call reaps it. */
bool gw_proc_alive(pid_t pid, unsigned long long start_ticks);
/* Sends sig to the process group led by leader (spawned by gw_proc_spawn);
 * nothing once the group is gone. */
void gw_proc_signal_group(pid_t leader, int sig);
/* SIGKILL to the group led by leader and to every process of its session:
 * a worker's jobs run in groups of their own, which outlive a dead worker
 * but stay in its session. */
void gw_proc_kill_session(pid_t leader);
/* Starts argv[0] in a new session, cwd dir, stdin /dev/null, stdout and
 * stderr appended to log_path (0600), signals at their defaults and no other
 * descriptor inherited. 0 and *ret_pid, or -errno. */
int gw_proc_spawn(char *const argv[], const char *dir, const char *log_path, pid_t *ret_pid);
/* The first process whose command line holds the two arguments flag value
 * in a row ("--config" PATH), or 0. */
pid_t gw_proc_find_by_args(const char *flag, const char *value);

#endif
