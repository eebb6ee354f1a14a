/* spotlab-sim --batch: many policy evaluations in one process. Each line of
 * the input is one job: a JSON array of the --policy mode's options as
 * strings; each gives one line of output, in order: the report --json
 * prints, or {"exit": N, "error": "..."} with the exit status and the
 * sentence that job alone would have had. A file several jobs name is read
 * once (the traces' cache, eval.c). A tool running a grid of thousands of
 * jobs saves a process start and a trace read on each. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sim.h"

/* A job's line and its options: far beyond what 16 zones' paths need. */
#define LINE_MAX_BYTES (1 << 20)
#define ARGS_MAX 128

/* The job's options from line into argv[1..), borrowed from *ret_arr
 * (owned); the count in *ret_argc. -EINVAL with a sentence in err. */
static int parse_line(const char *line, size_t len, char **argv, int *ret_argc, json_t **ret_arr,
                      char *err, size_t err_size) {
  json_error_t jerr;
  json_t *arr = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!arr || !json_is_array(arr) || json_array_size(arr) + 1 > ARGS_MAX) {
    snprintf(err, err_size, "a line is a JSON array of at most %d strings%s%s", ARGS_MAX - 1,
             arr ? "" : ": ", arr ? "" : jerr.text);
    json_decref(arr);
    return -EINVAL;
  }
  int argc = 1;
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) {
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
      snprintf(err, err_size, "item %zu of the array is not a string", i);
      json_decref(arr);
      return -EINVAL;
    }
    argv[argc++] = (char *)json_string_value(v);
  }
  argv[0] = "spotlab-sim";
  argv[argc] = NULL;
  *ret_argc = argc;
  *ret_arr = arr;
  return 0;
}

/* What errf took as a JSON string, without the program's name and the
 * trailing newlines; bytes that are not UTF-8 (a file's, quoted by its
 * reader) become '?'. */
static json_t *reason(char *text) {
  if (!text)
    return json_string("out of memory");
  size_t n = strlen(text);
  while (n && (text[n - 1] == '\n' || text[n - 1] == ' '))
    text[--n] = '\0';
  const char *pre = "spotlab-sim: ";
  char *r = strncmp(text, pre, strlen(pre)) ? text : text + strlen(pre);
  json_t *s = json_string(r);
  if (!s) {
    for (char *p = r; *p; p++)
      *p = (unsigned char)*p < 0x80 ? *p : '?';
    s = json_string(r);
  }
  return s;
}

/* One job's line: its report or its failure on out. -ENOMEM or -EIO when
 * out cannot take it. */
static int one_job(const char *line, size_t len, struct sim_trace_cache *cache, FILE *out) {
  char *argv[ARGS_MAX + 1];
  int argc;
  json_t *arr = NULL, *report = NULL;
  char *text = NULL;
  size_t text_len = 0;
  FILE *errf = open_memstream(&text, &text_len);
  if (!errf)
    return -ENOMEM;
  char err[512];
  int status;
  if (len > LINE_MAX_BYTES) {
    fprintf(errf, "a line is at most %d bytes", LINE_MAX_BYTES);
    status = 2;
  } else if (parse_line(line, len, argv, &argc, &arr, err, sizeof err) < 0) {
    fprintf(errf, "%s", err);
    status = 2;
  } else {
    status = sim_eval_line(argc, argv, cache, errf, &report);
  }
  json_decref(arr);
  bool written = fclose(errf) == 0;
  json_t *o = status == 0 ? report
                          : json_pack("{s:i,s:o}", "exit", status, "error",
                                      reason(written ? text : NULL));
  free(text);
  return sim_put_json(o, out);
}

/* The next line of in into *buf (without its newline), its length in
 * *ret_len: at most LINE_MAX_BYTES are kept, the rest of a longer line is
 * read past and *ret_len is LINE_MAX_BYTES + 1. 0, or -1 at the end of in. */
static int read_line(FILE *in, char *buf, size_t *ret_len) {
  size_t n = 0;
  int c;
  bool any = false;
  while ((c = getc(in)) != EOF) {
    any = true;
    if (c == '\n')
      break;
    if (n < LINE_MAX_BYTES)
      buf[n] = (char)c;
    if (n <= LINE_MAX_BYTES)
      n++;
  }
  *ret_len = n;
  return any ? 0 : -1;
}

int sim_eval_batch(FILE *in, FILE *out) {
  struct sim_trace_cache *cache = sim_trace_cache_new();
  char *line = malloc(LINE_MAX_BYTES);
  if (!cache || !line) {
    fprintf(stderr, "spotlab-sim: out of memory\n");
    free(line);
    sim_trace_cache_free(cache);
    return 1;
  }
  size_t len;
  int status = 0;
  while (read_line(in, line, &len) == 0) {
    int r = one_job(line, len, cache, out);
    if (r < 0) {
      fprintf(stderr, "spotlab-sim: cannot write a job's report: %s\n", strerror(-r));
      status = 1;
      break;
    }
  }
  if (status == 0 && ferror(in)) {
    fprintf(stderr, "spotlab-sim: reading the jobs: %s\n", strerror(errno));
    status = 1;
  }
  free(line);
  sim_trace_cache_free(cache);
  return status;
}
