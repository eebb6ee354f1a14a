/* sl_trace: the spot-traces reader takes good files with and without
 * prices, at the edges of every bound, and refuses each fault with its own
 * error and a sentence that starts with the file and names the fault,
 * leaving *ret untouched. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "sl_err.h"
#include "sl_trace.h"

static char tmpdir[] = "/tmp/spotlab-trace-XXXXXX";

static const char *write_tmp(const char *name, const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return path;
}

/* Reads text as file name; the trace (owned) or NULL. */
static struct sl_trace *read_ok(const char *name, const char *text) {
  struct sl_trace *t = NULL;
  char err[512] = "";
  int r = sl_trace_read(write_tmp(name, text), &t, err, sizeof err);
  if (r != 0)
    fprintf(stderr, "  %s: refused (%s): %s\n", name, sl_errname(r), err);
  CHECK_INT(r, 0);
  CHECK((r == 0) == (t != NULL));
  return t;
}

/* Reads the file at path expecting code and a sentence that starts with
 * "path: " and holds fault. */
static void refused_at(const char *path, int code, const char *fault) {
  static struct sl_trace untouched;
  struct sl_trace *t = &untouched;
  char err[512] = "";
  int r = sl_trace_read(path, &t, err, sizeof err);
  char prefix[300];
  snprintf(prefix, sizeof prefix, "%s: ", path);
  bool says = strncmp(err, prefix, strlen(prefix)) == 0 && strstr(err, fault) != NULL;
  if (r != code || !says)
    fprintf(stderr, "  %s: %s \"%s\", expected %s and \"%s\"\n", path, sl_errname(r), err,
            sl_errname(code), fault);
  CHECK_INT(r, code);
  CHECK(says);
  CHECK(t == &untouched);
}

static void refused(const char *name, const char *text, int code, const char *fault) {
  refused_at(write_tmp(name, text), code, fault);
}

static void good(void) {
  struct sl_trace *t = read_ok("plain.json", "{\"metadata\":{\"gap_seconds\":60},\"data\":[2,0,1]}");
  if (t) {
    CHECK(t->gap_s == 60);
    CHECK_INT(t->n, 3);
    CHECK_INT(t->capacity[0], 2);
    CHECK_INT(t->capacity[1], 0);
    CHECK_INT(t->capacity[2], 1);
    CHECK(t->price == NULL);
  }
  t = sl_trace_free(t);
  CHECK(t == NULL);

  /* prices, other members ignored, a gap that is not whole */
  t = read_ok("prices.json", "{\"metadata\":{\"gap_seconds\":1.5,\"region\":\"x\"},\"zone\":\"a\","
                             "\"data\":[1,3],\"prices\":[0.25,2]}");
  if (t) {
    CHECK(t->gap_s == 1.5);
    CHECK_INT(t->n, 2);
    CHECK_INT(t->capacity[1], 3);
    CHECK(t->price != NULL);
    if (t->price)
      CHECK(t->price[0] == 0.25 && t->price[1] == 2);
  }
  t = sl_trace_free(t);

  /* the edges of every bound are inside */
  t = read_ok("edges.json", "{\"metadata\":{\"gap_seconds\":86400},\"data\":[0,1000000],"
                            "\"prices\":[1e-300,999999.99]}");
  if (t)
    CHECK(t->gap_s == 86400 && t->capacity[1] == 1000000 && t->price[0] == 1e-300);
  t = sl_trace_free(t);
  t = read_ok("gap1.json", "{\"metadata\":{\"gap_seconds\":1},\"data\":[5]}");
  if (t)
    CHECK(t->gap_s == 1 && t->n == 1 && t->capacity[0] == 5);
  t = sl_trace_free(t);
  /* nested 8 deep, the most a trace may be */
  t = read_ok("depth8.json", "{\"metadata\":{\"gap_seconds\":60},\"data\":[1],"
                             "\"x\":[[[[[[[1]]]]]]]}");
  t = sl_trace_free(t);
  CHECK(sl_trace_free(NULL) == NULL);
}

static void refusals(void) {
  /* not JSON, too deep, not an object */
  refused("syntax.json", "{\"metadata\":{\"gap_seconds\":60},\n\"data\":[1,2,}", SL_EJSON,
          "line 2 column");
  refused("empty.json", "", SL_EJSON, "line 1");
  refused("deep.json", "{\"metadata\":{\"gap_seconds\":60},\"data\":[1],\"x\":[[[[[[[[1]]]]]]]]}",
          SL_EJSONDEPTH, "JSON nested deeper than 8 levels");
  refused("array.json", "[1,2,3]", SL_EFORMAT, "not a JSON object");

  /* the gap */
  const char *gap_fault = "metadata.gap_seconds missing or not in 1..86400";
  refused("nometa.json", "{\"data\":[1]}", SL_EFORMAT, gap_fault);
  refused("nogap.json", "{\"metadata\":{},\"data\":[1]}", SL_EFORMAT, gap_fault);
  refused("gap0.json", "{\"metadata\":{\"gap_seconds\":0},\"data\":[1]}", SL_EFORMAT, gap_fault);
  refused("gaphalf.json", "{\"metadata\":{\"gap_seconds\":0.5},\"data\":[1]}", SL_EFORMAT,
          gap_fault);
  refused("gapbig.json", "{\"metadata\":{\"gap_seconds\":86401},\"data\":[1]}", SL_EFORMAT,
          gap_fault);
  refused("gapstr.json", "{\"metadata\":{\"gap_seconds\":\"60\"},\"data\":[1]}", SL_EFORMAT,
          gap_fault);

  /* data */
  const char *data_fault = "\"data\" missing, empty, or longer than 10000000 ticks";
  refused("nodata.json", "{\"metadata\":{\"gap_seconds\":60}}", SL_EFORMAT, data_fault);
  refused("dataempty.json", "{\"metadata\":{\"gap_seconds\":60},\"data\":[]}", SL_EFORMAT,
          data_fault);
  refused("dataobj.json", "{\"metadata\":{\"gap_seconds\":60},\"data\":{\"0\":1}}", SL_EFORMAT,
          data_fault);
  refused("neg.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1,-1]}", SL_EFORMAT,
          "data[2] is not a whole number 0..1000000");
  refused("huge.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1000001]}", SL_EFORMAT,
          "data[0] is not a whole number 0..1000000");
  refused("string.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,\"1\"]}", SL_EFORMAT,
          "data[1] is not a whole number 0..1000000");
  /* a count written as a real is refused, whole or not */
  refused("real.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1.0]}", SL_EFORMAT,
          "data[1] is not a whole number 0..1000000");
  refused("fraction.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[0.5]}", SL_EFORMAT,
          "data[0] is not a whole number 0..1000000");

  /* prices */
  const char *prices_fault = "\"prices\" is not an array as long as \"data\"";
  refused("pshort.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1],\"prices\":[1]}",
          SL_EFORMAT, prices_fault);
  refused("pobj.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1],\"prices\":{}}", SL_EFORMAT,
          prices_fault);
  refused("pnull.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1],\"prices\":null}",
          SL_EFORMAT, prices_fault);
  refused("price0.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,1],\"prices\":[1,0]}",
          SL_EFORMAT, "prices[1] is not a positive price");
  refused("pneg.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1],\"prices\":[-0.5]}",
          SL_EFORMAT, "prices[0] is not a positive price");
  refused("pbig.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1],\"prices\":[1e6]}",
          SL_EFORMAT, "prices[0] is not a positive price");
  refused("pstr.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1],\"prices\":[\"1\"]}",
          SL_EFORMAT, "prices[0] is not a positive price");
  /* entries are checked in file order: data[1] before prices[1] */
  refused("order.json", "{\"metadata\":{\"gap_seconds\":5},\"data\":[1,-1],\"prices\":[1,0]}",
          SL_EFORMAT, "data[1] is not");

  /* the file itself */
  char path[300];
  snprintf(path, sizeof path, "%s/missing.json", tmpdir);
  refused_at(path, -ENOENT, strerror(ENOENT));
  refused_at(tmpdir, -EISDIR, strerror(EISDIR));
  /* one byte past the bound is refused before it is parsed (a sparse file
   * of zeros, which would otherwise be a JSON error) */
  snprintf(path, sizeof path, "%s/big.json", tmpdir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  CHECK_INT(ftruncate(fd, (off_t)SL_TRACE_MAX_BYTES + 1), 0);
  close(fd);
  refused_at(path, SL_ELIMIT, "larger than 67108864 bytes");
}

int main(void) {
  CHECK(mkdtemp(tmpdir) != NULL);
  good();
  refusals();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  CHECK_INT(system(cmd), 0);
  TEST_MAIN_END();
}
