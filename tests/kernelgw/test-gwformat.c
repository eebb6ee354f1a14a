/* Plain-text renderings of gateway replies (client/gwformat.c): %status
 * lists every worker with its fields, and a worker whose GPUs disagree
 * with its instance type gets its warning on a line of its own, whole;
 * %instances shows the placement ranking best first with its reasons, as
 * text and as an HTML table (escaped), and a reply without a ranking as
 * one row per type; spotlab data's table of stored files. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gwformat.h"
#include "sl_json.h"
#include "sl_time.h"
#include "harness.h"

static void test_status_gpus(void) {
  const char *warning = "g5.12xlarge has 4 x A10G in the catalog, but its worker found no GPU (no NVIDIA driver "
                        "library (libnvidia-ml.so.1: cannot open shared object file: No such file or directory))";
  json_t *reply = json_pack(
      "{s:{s:s}, s:[{s:s, s:s, s:i, s:s, s:i}, {s:s, s:s, s:i, s:s}], s:{}, s:{}}", "gateway", "version", "0.1.0",
      "workers", "instance", "i-aaa", "type", "g5.xlarge", "gpus", 1, "gpu_model", "NVIDIA A10G", "gpu_memory_mib",
      22731, "instance", "i-bbb", "type", "g5.12xlarge", "gpus", 0, "gpu_warning", warning, "idle", "budget");
  char *text = jk_format_status(reply);
  CHECK(text && strstr(text, "workers    2:\n"));
  CHECK(text && strstr(text, "  i-aaa                g5.xlarge in -"));
  CHECK(text && strstr(text, "gpus=1, gpu_model=NVIDIA A10G, gpu_memory_mib=22731\n"));
  CHECK(text && strstr(text, "  i-bbb                g5.12xlarge in -"));
  char line[600];
  snprintf(line, sizeof line, "    warning: %s\n", warning);
  CHECK(text && strstr(text, line));
  CHECK(text && !strstr(text, "gpu_warning="));
  CHECK(text && !strstr(text, "at risk"));
  free(text);
  /* a worker that went on through a rebalance recommendation */
  json_object_set_new(json_array_get(json_object_get(reply, "workers"), 0), "at_risk", json_true());
  text = jk_format_status(reply);
  CHECK(text && strstr(text, "    at risk: a rebalance recommendation came; it gets no new job\n"));
  CHECK(text && !strstr(text, "at_risk="));
  free(text);
  json_decref(reply);
}

/* %status reads as a person expects: aligned labels, times as "ago",
 * spans in minutes, money in dollars, no raw microsecond timestamps. */
static void test_status_readable(void) {
  long long now = (long long)sl_time_real_us();
  json_t *reply = json_pack(
      "{s:{s:s, s:i, s:I, s:s, s:s, s:b, s:i, s:i, s:i},"
      " s:[{s:s, s:s, s:s, s:b, s:f, s:s, s:s, s:I}],"
      " s:{s:f, s:f, s:f}, s:{s:f, s:f, s:b}}",
      "gateway", "version", "0.3.0", "pid", 4242, "started_us", (json_int_t)(now - 180 * 1000000LL), "listen",
      "ipc:///tmp/gw.sock", "provider", "local", "embedded", 1, "workers", 4, "queued", 0, "live_jobs", 1,
      "workers", "instance", "local-1", "type", "cpu.small", "zone", "local-a", "spot", 1,
      "price_usd_per_hour", 0.1912, "state", "busy", "job", "J000001", "launched_us",
      (json_int_t)(now - 7200 * 1000000LL),
      "idle", "notebook_timeout_s", 1800.0, "worker_timeout_s", 600.0, "warn_before_s", 300.0,
      "budget", "monthly_usd", 100.0, "spent_usd", 1.5, "hard_cap", 0);
  char *text = jk_format_status(reply);
  CHECK(text && strstr(text, "gateway    version 0.3.0, pid 4242, started 3 min ago\n"));
  CHECK(text && strstr(text, "jobs       1 running, 0 queued\n"));
  CHECK(text && strstr(text, "  local-1              cpu.small in local-a, spot $0.1912/h, busy with J000001, "
                             "launched 2 h 00 min ago\n"));
  CHECK(text && strstr(text, "idle       a notebook idle for 30 min stops its workers (warned 5 min before); "
                             "a worker with no job stops after 10 min\n"));
  CHECK(text && strstr(text, "budget     $1.5000 spent this month of $100.0000\n"));
  CHECK(text && !strstr(text, "_us") && !strstr(text, "=") && !strstr(text, "state_dir"));
  free(text);
  json_decref(reply);
}

/* %jobs and %cost list one notebook session's jobs unless asked for all. */
static void test_jobs_of_session(void) {
  json_t *jobs = json_pack("{s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}]}", "jobs", "job", "J000002", "session", "b.ipynb",
                           "state", "running", "job", "J000001", "session", "a.ipynb", "state", "succeeded");
  char *t = jk_format_jobs_of(jobs, "a.ipynb");
  CHECK(t && strstr(t, "J000001") && !strstr(t, "J000002"));
  free(t);
  t = jk_format_jobs_of(jobs, NULL);
  CHECK(t && strstr(t, "J000001") && strstr(t, "J000002"));
  free(t);
  t = jk_format_jobs_of(jobs, "c.ipynb");
  CHECK(t && strstr(t, "No jobs in this notebook session (%jobs --all"));
  free(t);
  /* a script's job has no steps: its STEP is "-", a train job's its step of steps */
  json_t *mixed = json_pack("{s:[{s:s, s:s, s:s, s:i, s:i}, {s:s, s:s, s:s, s:i, s:i}]}", "jobs", "job",
                            "J000003", "state", "running", "kind", "run", "step", 0, "steps", 0, "job",
                            "J000004", "state", "running", "kind", "train", "step", 0, "steps", 100);
  t = jk_format_jobs_of(mixed, NULL);
  CHECK(t && strstr(t, "J000003   running       run    -          -          -               -"));
  CHECK(t && strstr(t, "J000004   running       train  -          -          0/100 "));
  free(t);
  json_decref(mixed);
  json_t *cost = json_pack("{s:f, s:f, s:f, s:[{s:s, s:s, s:f}, {s:s, s:s, s:f}]}", "spent_usd", 0.5,
                           "on_demand_usd", 1.0, "saved_usd", 0.5, "jobs", "job", "J000002", "state", "running",
                           "cost_usd", 0.25, "job", "J000001", "state", "succeeded", "cost_usd", 0.25);
  t = jk_format_cost_of(cost, jobs, "b.ipynb");
  CHECK(t && strstr(t, "spent $0.5000") && strstr(t, "J000002") && !strstr(t, "J000001"));
  free(t);
  t = jk_format_cost_of(cost, jobs, NULL);
  CHECK(t && strstr(t, "J000002") && strstr(t, "J000001"));
  free(t);
  json_decref(cost);
  json_decref(jobs);
}

static json_t *market_reply(bool ranked) {
  json_t *r = json_pack(
      "{s:[{s:s, s:i, s:s, s:f, s:f, s:s, s:s, s:s, s:i}, {s:s, s:i, s:s, s:f, s:f, s:s, s:s, s:s, s:I}],"
      " s:s}",
      "types", "type", "g5.xlarge", "gpus", 1, "gpu_model", "A10G", "spot_usd_per_hour", 0.40,
      "on_demand_usd_per_hour", 1.00, "interruption", ">20%", "provider", "aws", "zone", "us-east-1a",
      "placement_score", 7, "type", "p5.48xlarge", "gpus", 8, "gpu_model", "H100", "spot_usd_per_hour",
      30.0, "on_demand_usd_per_hour", 98.0, "interruption", "<5%", "provider", "aws", "zone",
      "us-east-1b", "unavailable_until_us", (json_int_t)1, "unit", "the work of one A10G GPU-hour");
  if (ranked)
    json_object_set_new(r, "ranking", json_pack(
        "[{s:i, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:s}, {s:i, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:s},"
        " {s:i, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:s, s:b}]",
        "rank", 1, "type", "g5.xlarge", "provider", "aws", "zone", "us-east-1a", "market", "spot",
        "usd_per_hour", 0.40, "usd_per_unit", 0.4321, "efficiency", 0.93,
        "why", "0.4/h for 1 units/h, 7% lost to 0.5 interruptions/h",
        "rank", 2, "type", "g5.xlarge", "provider", "aws", "zone", "us-east-1a", "market", "on-demand",
        "usd_per_hour", 1.00, "usd_per_unit", 1.0, "efficiency", 1.0, "why", "1/h for 1 units/h",
        "rank", 3, "type", "p5.48xlarge", "provider", "aws", "zone", "us-east-1b", "market", "spot",
        "usd_per_hour", 30.0, "usd_per_unit", 10.68, "efficiency", 0.99,
        "why", "30/h for 2.81 units/h; capacity refused <here> 3 s ago", "held", 1));
  return r;
}

static void test_market(void) {
  json_t *reply = market_reply(true);
  char *text = jk_format_market(reply);
  CHECK(text && strstr(text, "RANK TYPE"));
  /* best first, each row with its market, cost per unit and reason */
  const char *first = text ? strstr(text, "   1 g5.xlarge        us-east-1a   spot") : NULL;
  const char *second = text ? strstr(text, "   2 g5.xlarge        us-east-1a   on-demand") : NULL;
  const char *third = text ? strstr(text, "   3 p5.48xlarge") : NULL;
  CHECK(first && second && third && first < second && second < third);
  CHECK(first && strstr(first, "0.4321") && strstr(first, "93%") && strstr(first, "7/10") &&
        strstr(first, "7% lost to 0.5 interruptions/h"));
  CHECK(third && strstr(third, "held") && strstr(third, "capacity refused <here>"));
  CHECK(text && strstr(text, "a unit is the work of one A10G GPU-hour."));
  free(text);
  char *html = jk_format_market_html(reply);
  CHECK(html && strstr(html, "<table class=\"spotlab-instances\">"));
  CHECK(html && strstr(html, "<td>1</td><td>g5.xlarge</td><td>us-east-1a</td><td>spot</td>"));
  CHECK(html && strstr(html, "capacity refused &lt;here&gt;") && !strstr(html, "<here>"));
  CHECK(html && strstr(html, "<div class=\"tex2jax_ignore mathjax_ignore\">") && !strchr(html, '$'));
  CHECK(html && strstr(html, "<th>&#36;/h</th>"));
  free(html);
  json_decref(reply);
  /* a gateway without a ranking: one row per type, no HTML */
  reply = market_reply(false);
  text = jk_format_market(reply);
  CHECK(text && strstr(text, "CAPACITY") && strstr(text, "7/10") && strstr(text, "none"));
  CHECK(text && !strstr(text, "RANK"));
  CHECK(jk_format_market_html(reply) == NULL);
  free(text);
  json_decref(reply);
}

/* A reply's text from the gateway reaches a terminal (the CLI) and a JSON
 * string (the kernel's magics): escapes become '?', and a column's width
 * that cuts a character leaves well-formed UTF-8. */
static void test_text_from_the_gateway(void) {
  json_t *reply = json_pack("{s:[{s:s, s:s, s:s, s:s, s:s}]}", "jobs", "job", "J000001", "state",
                            "failed", "kind", "train", "model",
                            "\xE3\x83\xA2\xE3\x83\x87\xE3\x83\xAB\xE3\x83\xA2\xE3\x83\x87\xE3\x83\xAB",
                            "reason", "boom \x1b[2J\x1b]0;title\x07");
  char *text = jk_format_jobs(reply);
  CHECK(text && sl_json_utf8_ok(text, strlen(text)));
  CHECK(text && !strchr(text, '\x1b') && !strchr(text, '\x07'));
  free(text);
  json_decref(reply);
  json_t *ev = json_pack("{s:s, s:s, s:i, s:I, s:s, s:s, s:s}", "type", "event", "job", "J000001", "seq", 3,
                         "time_us", (json_int_t)1000000, "event", "output", "stream", "stdout", "text",
                         "\x1b[31mred\x1b[0m \xC2\x9B" "1m");
  text = jk_format_event(ev, 0);
  CHECK(text && strstr(text, "?[31mred?[0m ?1m"));
  free(text);
  json_decref(ev);
  /* a field the gateway sends as null is left out (it was read one byte
   * past its text's end) */
  reply = json_pack("{s:{s:s}, s:[{s:s, s:s, s:n, s:i}], s:{}, s:{}}", "gateway", "version", "0.1.0",
                    "workers", "instance", "i-aaa", "type", "g5.xlarge", "spot_request", "gpus", 1, "idle",
                    "budget");
  text = jk_format_status(reply);
  CHECK(text && strstr(text, "gpus=1\n") && !strstr(text, "spot_request"));
  free(text);
  json_decref(reply);
}

/* spotlab data: a file a live job uses is starred, one being deleted says
 * so, sizes read as people write them, and the total comes last; none, and
 * a gateway that takes no uploads, say so. */
static void test_uploads(void) {
  int64_t now = sl_time_real_us();
  json_t *reply = json_pack(
      "{s:[{s:s, s:I, s:s, s:I, s:I, s:I, s:b}, {s:s, s:I, s:s, s:I, s:I, s:I, s:b}]}", "uploads", "sha256",
      "9f86d081e8849a6c0d2a6b4b3c1f8e7d9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d", "bytes", (json_int_t)(3 << 20), "path",
      "/home/alice/corpus.txt", "last_us", (json_int_t)(now - 120 * 1000000LL), "jobs", (json_int_t)3,
      "live_jobs", (json_int_t)1, "deleting", 0, "sha256",
      "00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa00aa", "bytes", (json_int_t)512, "path",
      "/home/alice/old.txt", "last_us", (json_int_t)now, "jobs", (json_int_t)0, "live_jobs", (json_int_t)0,
      "deleting", 1);
  char *t = jk_format_uploads(reply, "spotlab data rm");
  fprintf(stderr, "%s", t);
  CHECK(strstr(t, "9f86d081e884 ") != NULL && strstr(t, "9f86d081e8849") == NULL); /* 12 digits */
  CHECK(strstr(t, "3.0 MiB") != NULL && strstr(t, "512 B") != NULL);
  CHECK(strstr(t, "    3* ") != NULL);
  CHECK(strstr(t, "2 min ago") != NULL);
  CHECK(strstr(t, "/home/alice/old.txt  (being deleted)") != NULL);
  CHECK(strstr(t, "2 files, 3.0 MiB in all") != NULL && strstr(t, "; spotlab data rm SHA256 deletes one") != NULL);
  free(t);
  json_decref(reply);
  reply = json_pack("{s:[{s:s, s:I, s:s, s:I}]}", "uploads", "sha256", "ab", "bytes", (json_int_t)3, "path", "",
                    "last_us", (json_int_t)now);
  t = jk_format_uploads(reply, "%data rm");
  CHECK(strstr(t, "(no job has named it yet)") != NULL);
  free(t);
  json_decref(reply);
  reply = json_pack("{s:[], s:b}", "uploads", "uploads_on", 0);
  t = jk_format_uploads(reply, "%data rm");
  CHECK(strstr(t, "No data file of yours is stored.") != NULL && strstr(t, "takes no uploads") != NULL);
  free(t);
  json_decref(reply);
  reply = json_pack("{s:s, s:s, s:I}", "deleted", "9f86d081e8849a6c0d2a6b4b3c1f8e7d9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d",
                    "path", "/home/alice/corpus.txt", "bytes", (json_int_t)51000);
  t = jk_format_upload_deleted(reply);
  CHECK_STR(t, "deleting /home/alice/corpus.txt (49.8 KiB, 9f86d081e884…) from the store; a job that needs it "
               "again uploads it anew\n");
  free(t);
  json_decref(reply);
  reply = json_pack("{s:s, s:s, s:I}", "deleted", "00", "path", "/p", "bytes", (json_int_t)((1 << 20) - 1));
  t = jk_format_upload_deleted(reply);
  CHECK(strstr(t, "(1.0 MiB, ") != NULL); /* not "1024.0 KiB" */
  free(t);
  json_decref(reply);
}

/* %sessions: this notebook's row is marked and the footer says what * is;
 * a notebook whose session holds nothing yet is not listed, and the footer
 * names it instead of pointing at a mark that is not there. */
static void test_sessions(void) {
  int64_t now = sl_time_real_us();
  json_t *reply = json_pack("{s:[{s:s, s:I, s:I, s:I, s:I}]}", "sessions", "name", "work/a.ipynb", "last_active_us",
                            (json_int_t)now, "vars", (json_int_t)2, "models", (json_int_t)1, "jobs", (json_int_t)3);
  char *t = jk_format_sessions(reply, "work/a.ipynb");
  CHECK(strstr(t, "* work/a.ipynb") != NULL && strstr(t, "(* this notebook's;") != NULL);
  free(t);
  t = jk_format_sessions(reply, "work/b.ipynb");
  CHECK(strchr(t, '*') == NULL && strstr(t, "(this notebook's, \"work/b.ipynb\", holds nothing yet;") != NULL);
  free(t);
  json_decref(reply);
}

int main(void) {
  test_sessions();
  test_uploads();
  test_status_gpus();
  test_status_readable();
  test_jobs_of_session();
  test_market();
  test_text_from_the_gateway();
  TEST_MAIN_END();
}
