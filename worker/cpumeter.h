/* How much CPU a job's processes use: the CPU time of a process tree read
 * from /proc, and its utilisation between two samples as a fraction of the
 * machine's CPUs (for the gateway's energy estimate). */
#ifndef WK_CPUMETER_H
#define WK_CPUMETER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* CPU seconds (user + system) of pid and its descendants under proc_root
 * ("/proc"), counting the children they reaped. -ESRCH when pid is gone. */
int wk_proc_tree_cpu_s(const char *proc_root, pid_t pid, double *ret_s);

/* A utilisation meter; zero it to start. */
struct wk_cpu_meter {
  pid_t pid;
  int64_t last_us;
  double last_cpu_s;
  bool primed;
};

/* The utilisation (0..1 of ncpus CPUs) of pid's tree since the meter's
 * previous sample at now_mono_us: 0 and *ret_util, or 1 when this is the
 * first sample of pid (nothing to compare yet), or a negative error. */
int wk_cpu_meter_sample(struct wk_cpu_meter *m, const char *proc_root, pid_t pid,
                        int64_t now_mono_us, int ncpus, double *ret_util);

#endif
