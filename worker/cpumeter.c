/* CPU use of a process tree (cpumeter.h). Every /proc/PID/stat is read
 * once per sample to find pid's descendants; each live process counts its
 * own time and, through cutime/cstime, the children it reaped, so the sum
 * neither misses a finished child nor counts one twice. */
#include "cpumeter.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PROCS 65536

struct proc {
  pid_t pid, ppid;
  double cpu_s;
};

/* pid's stat line: its parent and its time with its reaped children's. */
static int read_stat(const char *root, pid_t pid, struct proc *ret, long hz) {
  char path[256], line[1024];
  snprintf(path, sizeof path, "%s/%d/stat", root, (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -errno;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  const char *p = strrchr(line, ')'); /* the command name may hold spaces and parentheses */
  unsigned long long ut, st;
  long long cut, cst;
  int ppid;
  if (!p || sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld", &ppid,
                   &ut, &st, &cut, &cst) != 5)
    return -EINVAL;
  *ret = (struct proc){.pid = pid, .ppid = ppid,
                       .cpu_s = (double)(ut + st) / (double)hz +
                                (double)((cut > 0 ? cut : 0) + (cst > 0 ? cst : 0)) / (double)hz};
  return 0;
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const struct proc *)a)->pid, y = ((const struct proc *)b)->pid;
  return (x > y) - (x < y);
}

int wk_proc_tree_cpu_s(const char *proc_root, pid_t pid, double *ret_s) {
  long hz = sysconf(_SC_CLK_TCK);
  DIR *d = opendir(proc_root);
  if (!d)
    return -errno;
  size_t n = 0, cap = 256;
  struct proc *ps = malloc(cap * sizeof *ps);
  struct dirent *de;
  int r = 0;
  while (ps && (de = readdir(d)) && n < MAX_PROCS) {
    if (!isdigit((unsigned char)de->d_name[0]))
      continue;
    if (n == cap) {
      struct proc *g = realloc(ps, 2 * cap * sizeof *g);
      if (!g) {
        r = -ENOMEM;
        break;
      }
      ps = g;
      cap *= 2;
    }
    if (read_stat(proc_root, (pid_t)atoi(de->d_name), &ps[n], hz > 0 ? hz : 100) == 0)
      n++; /* a process that ended meanwhile is skipped */
  }
  closedir(d);
  if (!ps)
    return -ENOMEM;
  /* mark pid's tree: a process is in it when its parent is; sorted by pid,
   * a parent is a binary search away, and each pass reaches one more level */
  qsort(ps, n, sizeof *ps, by_pid);
  char *in = calloc(n ? n : 1, 1);
  struct proc key = {.pid = pid};
  struct proc *root = n ? bsearch(&key, ps, n, sizeof *ps, by_pid) : NULL;
  bool found = root != NULL, grew = true;
  if (in && root)
    in[root - ps] = 1;
  while (in && found && grew) {
    grew = false;
    for (size_t i = 0; i < n; i++) {
      if (in[i])
        continue;
      key.pid = ps[i].ppid;
      struct proc *parent = bsearch(&key, ps, n, sizeof *ps, by_pid);
      if (parent && in[parent - ps])
        in[i] = grew = true;
    }
  }
  double sum = 0;
  for (size_t i = 0; in && i < n; i++)
    sum += in[i] ? ps[i].cpu_s : 0;
  if (!in && r == 0)
    r = -ENOMEM;
  free(in);
  free(ps);
  if (r < 0)
    return r;
  if (!found)
    return -ESRCH;
  *ret_s = sum;
  return 0;
}

int wk_cpu_meter_sample(struct wk_cpu_meter *m, const char *proc_root, pid_t pid,
                        int64_t now_mono_us, int ncpus, double *ret_util) {
  double cpu;
  int r = wk_proc_tree_cpu_s(proc_root, pid, &cpu);
  if (r < 0)
    return r;
  bool first = !m->primed || m->pid != pid || now_mono_us <= m->last_us;
  double dt = (double)(now_mono_us - m->last_us) / 1e6;
  double used = cpu - m->last_cpu_s;
  *m = (struct wk_cpu_meter){.pid = pid, .last_us = now_mono_us, .last_cpu_s = cpu, .primed = true};
  if (first)
    return 1;
  double u = used / (dt * (ncpus > 0 ? ncpus : 1));
  *ret_util = u < 0 ? 0 : u > 1 ? 1 : u;
  return 0;
}
