/* The kernel's execution history (history.h) on its file: what one kernel
 * adds, the next one for the notebook reads back under the session it ran
 * in, even when the file was left damaged (a last line cut short by a
 * crash or a full disk; session numbers that reached INT64_MAX). */
#include "harness.h"
#include "history.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/test-history-XXXXXX";
static char path[sizeof dir + 16];

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f)
    return;
  fputs(text, f);
  fclose(f);
}

/* Whether h's range request for session, line [line, line + 1) answers
 * exactly [session, line, input]. */
static bool holds(const struct jk_history *h, int64_t session, int64_t line, const char *input) {
  json_t *req = json_pack("{s:s,s:I,s:I,s:I}", "hist_access_type", "range", "session",
                          (json_int_t)session, "start", (json_int_t)line, "stop",
                          (json_int_t)(line + 1));
  json_t *out = jk_history_query(h, req);
  json_t *e = json_array_get(out, 0);
  const char *got = json_string_value(json_array_get(e, 2));
  bool ok = json_array_size(out) == 1 && json_integer_value(json_array_get(e, 0)) == session &&
            json_integer_value(json_array_get(e, 1)) == line && got && !strcmp(got, input);
  json_decref(out);
  json_decref(req);
  return ok;
}

/* The notebook's history as the next kernel opens it, prev (if any) closed
 * first; NULL, and a failed check, when it cannot be opened. */
static struct jk_history *next_kernel(struct jk_history *prev) {
  jk_history_free(prev);
  struct jk_history *h = jk_history_open(dir, "nb");
  CHECK(h != NULL);
  return h;
}

/* A last line cut short: the good lines are read, the next cell's line
 * stays its own. */
static void test_cut_line(void) {
  write_file("{\"session\":1,\"line\":1,\"input\":\"a = 1\"}\n"
             "{\"session\":1,\"line\":2,\"input\":\"b = ");
  struct jk_history *h = next_kernel(NULL);
  if (!h)
    return;
  CHECK_INT(jk_history_session(h), 2);
  CHECK(holds(h, 1, 1, "a = 1"));
  CHECK_INT(jk_history_add(h, 1, "c = 3"), 0);
  if (!(h = next_kernel(h)))
    return;
  CHECK_INT(jk_history_session(h), 3);
  CHECK(holds(h, 1, 1, "a = 1"));
  CHECK(holds(h, 2, 1, "c = 3"));
  jk_history_free(h);
}

/* A file whose session numbers reached INT64_MAX (damage) leaves the next
 * kernel that last number: what it adds reads back, nothing is skipped. */
static void test_last_session(void) {
  write_file("{\"session\":9223372036854775807,\"line\":1,\"input\":\"x\"}\n"
             "{\"session\":2,\"line\":1,\"input\":\"y\"}\n");
  struct jk_history *h = next_kernel(NULL);
  if (!h)
    return;
  CHECK(jk_history_session(h) == INT64_MAX);
  CHECK(holds(h, 2, 1, "y"));
  CHECK(holds(h, INT64_MAX, 1, "x"));
  CHECK_INT(jk_history_add(h, 2, "z"), 0);
  if (!(h = next_kernel(h)))
    return;
  CHECK(holds(h, INT64_MAX, 2, "z"));
  CHECK(jk_history_session(h) == INT64_MAX);
  jk_history_free(h);
}

/* The session before the last number: its kernel takes INT64_MAX, and what
 * it adds reads back (a number the reader skipped lost it once). */
static void test_next_to_last_session(void) {
  write_file("{\"session\":9223372036854775806,\"line\":1,\"input\":\"x\"}\n");
  struct jk_history *h = next_kernel(NULL);
  if (!h)
    return;
  CHECK(jk_history_session(h) == INT64_MAX);
  CHECK_INT(jk_history_add(h, 1, "y"), 0);
  if (!(h = next_kernel(h)))
    return;
  CHECK(holds(h, INT64_MAX - 1, 1, "x"));
  CHECK(holds(h, INT64_MAX, 1, "y"));
  jk_history_free(h);
}

/* A file far longer than the bound: the newest entries are kept (at least
 * three quarters of the bound), the oldest forgotten, the next session
 * numbered after the last. */
static void test_long_file(void) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f)
    return;
  for (int i = 0; i < 25000; i++)
    fprintf(f, "{\"session\":%d,\"line\":%d,\"input\":\"x = %d\"}\n", 1 + i / 100, 1 + i % 100, i);
  fclose(f);
  struct jk_history *h = next_kernel(NULL);
  if (!h)
    return;
  CHECK_INT(jk_history_session(h), 251);
  CHECK(holds(h, 250, 100, "x = 24999"));
  CHECK(holds(h, 176, 1, "x = 17500")); /* 7,500 newest kept */
  CHECK(!holds(h, 1, 1, "x = 0"));
  json_t *req = json_pack("{s:s,s:i}", "hist_access_type", "tail", "n", 20000);
  json_t *out = jk_history_query(h, req);
  CHECK(json_array_size(out) >= 7500 && json_array_size(out) <= 10000);
  json_decref(out);
  json_decref(req);
  jk_history_free(h);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  snprintf(path, sizeof path, "%s/nb.jsonl", dir);
  test_cut_line();
  test_last_session();
  test_next_to_last_session();
  test_long_file();
  unlink(path);
  rmdir(dir);
  TEST_MAIN_END();
}
