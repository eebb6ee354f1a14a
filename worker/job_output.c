/* A job's output lines (job_int.h): each goes out as an output message,
 * within the rate limit (the lines past it counted, the newest few held for
 * the end) and cut to WK_OUTPUT_LINE_MAX with a note; a sample's stdout is
 * kept as its result text, and stderr's tail as a failure's message. */
#include "job_int.h"

#include "relay.h"
#include "sl_json.h"
#include "sl_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void send_output(struct wk_job *j, enum wk_stream s, json_t *text) {
  const char *stream = s == WK_STREAM_STDOUT ? "stdout" : "stderr";
  json_t *m = wk_job_msg_new(j, "output");
  json_object_set_new(m, "stream", json_string(stream));
  json_object_set_new(m, "oseq", json_integer(++j->output_seq));
  json_object_set(m, "text", text);
  /* kept for the done: a line in flight when a gateway died comes again there */
  json_t **slot = &j->output_tail[j->output_tail_next];
  json_decref(*slot);
  *slot = json_pack("{s:I,s:s,s:O}", "oseq", (json_int_t)j->output_seq, "stream", stream, "text", text);
  j->output_tail_next = (j->output_tail_next + 1) % OUTPUT_TAIL;
  json_decref(text);
  wk_job_send(j, m, false);
}

json_t *wk_job_output_tail(const struct wk_job *j) {
  json_t *a = NULL;
  size_t bytes = 0, first = 0;
  /* the newest that fit, from the newest back */
  for (size_t k = 1; k <= OUTPUT_TAIL; k++) {
    const json_t *e = j->output_tail[(j->output_tail_next + OUTPUT_TAIL - k) % OUTPUT_TAIL];
    size_t len = e ? strlen(sl_json_get_str(e, "text", "")) : 0;
    if (!e || bytes + len > OUTPUT_TAIL_BYTES)
      break;
    bytes += len;
    first = k;
  }
  for (size_t k = first; k >= 1; k--) {
    if (!a && !(a = json_array()))
      return NULL;
    json_array_append(a, j->output_tail[(j->output_tail_next + OUTPUT_TAIL - k) % OUTPUT_TAIL]);
  }
  return a;
}

void wk_job_flush_dropped(struct wk_job *j, bool last) {
  uint64_t d = wk_relay_take_dropped(j->relay);
  size_t n = last ? j->held_n : 0;
  if (d) {
    char text[128];
    snprintf(text, sizeof text, "[spotlab-worker: %llu output lines dropped%s]", (unsigned long long)d,
             n ? "; the last of them follow" : "");
    send_output(j, WK_STREAM_STDERR, json_string(text));
  }
  for (size_t i = 0; i < n; i++) {
    const struct held_line *h = &j->held[(j->held_next + HELD_LINES - n + i) % HELD_LINES];
    send_output(j, h->stream, wk_relay_text(h->text, h->len, WK_OUTPUT_LINE_MAX));
  }
  j->held_n = 0;
}

/* A dropped line, kept among the newest HELD_LINES. */
static void hold_line(struct wk_job *j, enum wk_stream s, const char *line, size_t len) {
  struct held_line *h = &j->held[j->held_next];
  if (!h->text && !(h->text = malloc(WK_OUTPUT_LINE_MAX)))
    return;
  h->stream = s;
  h->len = len < WK_OUTPUT_LINE_MAX ? len : WK_OUTPUT_LINE_MAX;
  memcpy(h->text, line, h->len);
  j->held_next = (j->held_next + 1) % HELD_LINES;
  if (j->held_n < HELD_LINES)
    j->held_n++;
}

static void keep_result_text(struct wk_job *j, const char *line, size_t len) {
  if (!j->result_text && !(j->result_text = malloc(RESULT_TEXT_MAX + 1))) return;
  size_t room = RESULT_TEXT_MAX - j->result_len;
  if (j->result_len && room) j->result_text[j->result_len++] = '\n', room--;
  if (len > room) len = room;
  memcpy(j->result_text + j->result_len, line, len);
  j->result_len += len;
  j->result_text[j->result_len] = 0;
}

/* The last STDERR_TAIL bytes of stderr, whole lines: a failure's message. */
static void keep_stderr_tail(struct wk_job *j, const char *line, size_t len) {
  if (len > STDERR_TAIL - 1) {
    line += len - (STDERR_TAIL - 1);
    len = STDERR_TAIL - 1;
  }
  size_t need = j->tail_len + len + 1;
  if (need > STDERR_TAIL) {
    size_t drop = need - STDERR_TAIL;
    char *nl = memchr(j->tail + drop, '\n', j->tail_len - drop);
    drop = nl ? (size_t)(nl - j->tail) + 1 : j->tail_len;
    memmove(j->tail, j->tail + drop, j->tail_len - drop);
    j->tail_len -= drop;
  }
  if (j->tail_len) j->tail[j->tail_len++] = '\n';
  memcpy(j->tail + j->tail_len, line, len);
  j->tail_len += len;
}

/* A line longer than an output message takes: its start, and a note of
 * the cut (cut: longer than WK_LINE_MAX, so its length is not known). */
static json_t *cut_line(const char *line, size_t len, bool cut) {
  json_t *start = wk_relay_text(line, len, WK_OUTPUT_LINE_MAX);
  if (!cut && len <= WK_OUTPUT_LINE_MAX)
    return start;
  char note[128];
  snprintf(note, sizeof note, " [spotlab-worker: a line of %s%zu bytes, cut after its first %zu]",
           cut ? "more than " : "", len, json_string_length(start));
  size_t n = json_string_length(start), k = strlen(note);
  char *both = malloc(n + k);
  if (!both)
    return start;
  memcpy(both, json_string_value(start), n);
  memcpy(both + n, note, k);
  json_t *v = json_stringn(both, n + k);
  free(both);
  if (!v)
    return start;
  json_decref(start);
  return v;
}

void wk_job_output_line(struct wk_job *j, enum wk_stream s, const char *line, size_t len, bool cut) {
  if (s == WK_STREAM_STDOUT && j->kind == WK_KIND_SAMPLE) keep_result_text(j, line, len);
  if (s == WK_STREAM_STDERR) keep_stderr_tail(j, line, len);
  if (!wk_relay_line(j->relay, sl_time_mono_us())) {
    hold_line(j, s, line, len);
    return;
  }
  wk_job_flush_dropped(j, false);
  send_output(j, s, cut_line(line, len, cut));
}
