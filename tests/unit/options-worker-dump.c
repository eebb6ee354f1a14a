/* Answers, for options_agree.py, what the worker makes of job specs: reads
 * one JSON object per line, {"kind":"train","spec":{...}}, and writes one
 * per line, {"rc":0,"argv":[...]} or {"rc":-N,"err":"..."}. The instance is
 * a CPU-only one and spotlab-train has no CUDA, so device flags stay out of
 * the way. */
#include "spec.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char line[65536];
  struct wk_spec_paths p = {.train = "spotlab-train", .ckpt_dir = "ckpt", .metrics_fd = 3,
                            .control_fd = -1, .instance_type = "local.cpu"};
  while (fgets(line, sizeof line, stdin)) {
    json_error_t je;
    json_t *q = json_loads(line, 0, &je), *reply;
    enum wk_kind kind;
    if (!q || wk_spec_kind(json_string_value(json_object_get(q, "kind")), &kind) < 0) {
      fprintf(stderr, "bad query: %s", line);
      return 2;
    }
    char **argv = NULL, err[512] = "";
    int r = wk_spec_build_argv(kind, json_object_get(q, "spec"), &p, &argv, err, sizeof err);
    if (r < 0) {
      reply = json_pack("{s:i, s:s}", "rc", r, "err", err);
    } else {
      json_t *a = json_array();
      for (size_t i = 0; argv[i]; i++)
        json_array_append_new(a, json_string(argv[i]));
      reply = json_pack("{s:i, s:o}", "rc", 0, "argv", a);
      wk_argv_free(argv);
    }
    char *text = json_dumps(reply, JSON_COMPACT);
    if (!text || puts(text) < 0)
      return 1;
    free(text);
    json_decref(reply);
    json_decref(q);
  }
  return 0;
}
