/* The local provider's instance records: state_dir/instances/ID/instance.json,
 * written before an instance's worker starts (pid 0) and again on every
 * change, read back by a new provider on the same state_dir (and by every
 * list()) to adopt the instances a previous gateway left running
 * (docs/internals/local-provider.md, "Gateway restarts"). A record whose
 * process is gone is adopted as gone, so the timer reports it terminated; a
 * record that does not parse is moved aside and its worker stopped. */
#include "local_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "imds.h"
#include "sl_err.h"
#include "sl_file.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define RECORD_MAX_BYTES (64 * 1024)
#define LOG_KEEP_S (7 * 24 * 3600) /* a gone instance's worker.log is kept this long */
#define TOPIC "gateway.local"

struct gw_local_inst *gw_local_find(struct gw_local *l, const char *id) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->inst[i]->id, id) == 0)
      return l->inst[i];
  return NULL;
}

static bool valid_id(const char *id) {
  size_t n = strlen(id);
  if (n < 3 || n >= GW_INSTANCE_ID_MAX || id[0] == '.')
    return false;
  for (const char *p = id; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
      return false;
  return true;
}

static int read_json(const char *path, json_t **ret, char *why, size_t why_size) {
  return sl_json_read_object(path, RECORD_MAX_BYTES, 16, ret, why, why_size);
}

/* state_dir/instances/ID[/file] into buf. */
void gw_local_inst_path(const struct gw_local *l, const char *id, const char *file, char *buf,
                      size_t size) {
  snprintf(buf, size, "%s/instances/%s%s%s", l->state_dir, id, file ? "/" : "", file ? file : "");
}

int gw_local_save_record(struct gw_local *l, const struct gw_local_inst *in) {
  char path[4200];
  gw_local_inst_path(l, in->id, "instance.json", path, sizeof path);
  json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s,s:b,s:f,s:i,s:I,s:I}", "instance", in->id,
                        "pid", (json_int_t)in->pid, "start_ticks", (json_int_t)in->start_ticks,
                        "type", in->type, "zone", in->zone, "spot", in->spot,
                        "price_usd_per_hour", in->price_usd_per_hour, "metadata_port",
                        in->port, "launched_us", (json_int_t)in->launched_real_us,
                        "deadline_us", (json_int_t)in->deadline_real_us);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  int r = text ? sl_file_write_atomic(path, text, strlen(text), 0600) : -ENOMEM;
  free(text);
  json_decref(o);
  if (r < 0)
    sl_warn(TOPIC, "cannot save %s: %s", path, sl_strerror(r));
  return r;
}

/* Removes the tree at path, saying so when it cannot. */
static void remove_tree(const char *path) {
  int r = sl_file_remove_tree(path);
  if (r < 0)
    sl_warn(TOPIC, "cannot remove all of %s: %s", path, sl_strerror(r));
}

/* What a gone instance leaves, but its worker.log: worker.json (its key
 * pair) and work/ (its jobs' folders, their local checkpoints, the data
 * files it fetched), which would otherwise pile up under state_dir/instances
 * for every instance ever started. The folder itself goes once its log, and
 * a record moved aside, are LOG_KEEP_S old (or it has none). */
static bool absent_or_old(const struct gw_local *l, const char *id, const char *file) {
  char path[4200];
  struct stat st;
  gw_local_inst_path(l, id, file, path, sizeof path);
  return stat(path, &st) < 0 || time(NULL) - st.st_mtime > LOG_KEEP_S;
}

static void clean_folder(const struct gw_local *l, const char *id, bool whole_when_old) {
  char path[4200];
  gw_local_inst_path(l, id, "worker.json", path, sizeof path);
  unlink(path);
  gw_local_inst_path(l, id, "work", path, sizeof path);
  remove_tree(path);
  if (whole_when_old && absent_or_old(l, id, "worker.log") &&
      absent_or_old(l, id, "instance.json.bad")) {
    gw_local_inst_path(l, id, NULL, path, sizeof path);
    remove_tree(path);
  }
}

void gw_local_remove_record(struct gw_local *l, const char *id) {
  char path[4200];
  gw_local_inst_path(l, id, "instance.json", path, sizeof path);
  unlink(path);
  clean_folder(l, id, false);
}

struct gw_local_inst *gw_local_inst_free(struct gw_local_inst *in) {
  if (in) {
    gw_imds_free(in->imds);
    free(in);
  }
  return NULL;
}


/* A record this provider cannot use goes aside (ID/instance.json.bad, for
 * the admin to read), and its worker, found by its config path, is stopped
 * with everything it started: no instance may run that the provider does not
 * list. Its gateway takes an instance it no longer sees for gone and runs
 * its jobs elsewhere; left running, the worker would go on training one of
 * them beside the new attempt. The folder is then a gone instance's, kept a
 * week from the move for its log and the record. */
static void set_aside(struct gw_local *l, const char *id, const char *path, const char *why) {
  char aside[4300], cfg[4200];
  snprintf(aside, sizeof aside, "%s.bad", path);
  sl_warn(TOPIC, "%s: %s; moved aside to %s", path, why, aside);
  if (rename(path, aside) < 0)
    sl_warn(TOPIC, "cannot move %s aside: %s", path, strerror(errno));
  else
    utimensat(AT_FDCWD, aside, NULL, 0); /* kept a week from now, with the folder */
  gw_local_inst_path(l, id, "worker.json", cfg, sizeof cfg);
  pid_t pid = gw_proc_find_by_args("--config", cfg);
  if (pid > 1) {
    sl_warn(TOPIC, "%s: its worker (pid %d) is stopped: an instance without a usable record"
                   " cannot be followed", id, (int)pid);
    gw_proc_kill_session(pid);
  }
}

/* Adopts one record found on disk (after a gateway restart). A record whose
 * process is gone is adopted as gone, so the timer reports it terminated. */
static void adopt(struct gw_local *l, const char *id) {
  char path[4200], why[200];
  gw_local_inst_path(l, id, "instance.json", path, sizeof path);
  json_t *o = NULL;
  if (read_json(path, &o, why, sizeof why) < 0) {
    set_aside(l, id, path, why);
    return;
  }
  struct gw_local_inst *in = calloc(1, sizeof *in);
  const char *type = sl_json_get_str(o, "type", ""), *zone = sl_json_get_str(o, "zone", "");
  int64_t pid = sl_json_get_int(o, "pid", 0);
  bool unstarted = pid == 0;
  if (!in || strlen(id) >= sizeof in->id ||
      strcmp(sl_json_get_str(o, "instance", ""), id) != 0 || (pid <= 1 && !unstarted) ||
      pid > INT32_MAX ||
      strlen(type) >= sizeof in->type || strlen(zone) >= sizeof in->zone ||
      gw_catalog_find(l->cat, type) < 0 || l->n == GW_LOCAL_MAX_INSTANCES) {
    free(in);
    json_decref(o);
    if (l->n == GW_LOCAL_MAX_INSTANCES)
      snprintf(why, sizeof why, "one instance more than the %d the provider holds",
               GW_LOCAL_MAX_INSTANCES);
    else
      snprintf(why, sizeof why, "not a usable instance record");
    set_aside(l, id, path, why);
    return;
  }
  strcpy(in->id, id);
  strcpy(in->type, type);
  strcpy(in->zone, zone);
  in->type_idx = gw_catalog_find(l->cat, type);
  in->spot = sl_json_get_bool(o, "spot", false);
  in->pid = (pid_t)pid;
  in->start_ticks = (unsigned long long)sl_json_get_int(o, "start_ticks", 0);
  in->port = (int)sl_json_get_int(o, "metadata_port", 0);
  in->launched_real_us = sl_json_get_int(o, "launched_us", 0);
  in->price_usd_per_hour = sl_json_get_num(o, "price_usd_per_hour", 0);
  in->deadline_real_us = sl_json_get_int(o, "deadline_us", 0);
  in->notice_at_mono_us = in->rebalance_at_mono_us = INT64_MAX;
  json_decref(o);
  int64_t now = sl_time_mono_us();
  if (in->deadline_real_us > 0) {
    in->deadline_mono_us = now + (in->deadline_real_us - sl_time_real_us());
    in->by_market = true;
  }
  if (unstarted || !in->start_ticks) {
    /* saved before its worker started (the gateway died inside launch): the
     * worker may run all the same; it is found by its config path. So is
     * one recorded without its start time (0: earlier gateways read another
     * field of /proc/PID/stat): its pid alone may be anyone's by now. */
    char cfg[4200], state;
    gw_local_inst_path(l, id, "worker.json", cfg, sizeof cfg);
    in->pid = gw_proc_find_by_args("--config", cfg);
    if (in->pid > 1 && gw_proc_stat(in->pid, &in->start_ticks, &state) == 0)
      gw_local_save_record(l, in);
  }
  if (in->pid <= 1 || !gw_local_alive(in)) {
    in->gone = true;
  } else if (in->port > 0 && in->port < 65536) {
    int r = gw_imds_new(in->id, in->type, in->zone, in->port, &in->imds);
    if (r < 0)
      sl_warn(TOPIC, "%s: metadata port %d: %s", id, in->port, sl_strerror(r));
    else if (in->deadline_real_us > 0)
      gw_imds_set_notice(in->imds, "terminate", in->deadline_real_us);
  }
  l->inst[l->n++] = in;
  sl_info(TOPIC, "found instance %s (pid %d, %s)", id, (int)in->pid,
          in->gone ? "gone" : "running");
}

void gw_local_rescan(struct gw_local *l) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/instances", l->state_dir);
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!valid_id(de->d_name) || gw_local_find(l, de->d_name))
      continue;
    char rec[4200 + 300];
    snprintf(rec, sizeof rec, "%s/%s/instance.json", dir, de->d_name);
    if (access(rec, F_OK) == 0)
      adopt(l, de->d_name);
  }
  closedir(d);
}

void gw_local_sweep_folders(struct gw_local *l) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/instances", l->state_dir);
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    char rec[4200 + 300];
    snprintf(rec, sizeof rec, "%s/%s/instance.json", dir, de->d_name);
    if (!valid_id(de->d_name))
      continue;
    if (!gw_local_find(l, de->d_name) && access(rec, F_OK) < 0) {
      clean_folder(l, de->d_name, true);
      continue;
    }
    char folder[4200 + 260];
    snprintf(folder, sizeof folder, "%s/%s", dir, de->d_name);
    sl_file_sweep_temporaries(folder); /* a record's write cut short by a kill */
  }
  closedir(d);
}
