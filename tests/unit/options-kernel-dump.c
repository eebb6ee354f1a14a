/* Prints the cell language's view of its options as JSON, for
 * options_agree.py to hold against spotlab-train --describe-options: the
 * options of each context in order, each option's help (as inspection shows
 * it), what completion offers after each context's opening, and each
 * option's declaration. */
#include "lang.h"
#include "sl_opt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *context, *code; /* code: a line whose next word is an option */
} openings[] = {
    {"train", "train m on d "}, {"eval", "eval m on d "},       {"sample", "sample m "},
    {"%%run", "%%run "},        {"%instances", "%instances "}, {"gpt", "model q = gpt("},
    {"mlp", "model q = mlp("},
};

int main(void) {
  json_t *out = json_object(), *contexts = json_object(), *complete = json_object();
  json_t *help = json_object(), *decls = json_array();
  for (size_t k = 0; k < sizeof openings / sizeof openings[0]; k++) {
    json_t *names = json_array(), *offered = json_array();
    const char *w;
    for (size_t i = 0; (w = jk_lang_option(openings[k].context, i)); i++)
      json_array_append_new(names, json_string(w));
    json_object_set_new(contexts, openings[k].context, names);
    struct jk_completions c = {0};
    const char *code = openings[k].code;
    if (jk_complete(code, strlen(code), strlen(code), NULL, NULL, 0, &c) < 0)
      return 1;
    for (size_t i = 0; i < c.n; i++)
      json_array_append_new(offered, json_string(c.matches[i]));
    jk_completions_done(&c);
    json_object_set_new(complete, openings[k].context, offered);
  }
  enum jk_word_kind kind;
  const char *w;
  for (size_t i = 0; (w = jk_lang_word(i, &kind)); i++) {
    if (kind != JK_WORD_OPTION)
      continue;
    char *h = jk_inspect(w, strlen(w), strlen(w), 1);
    json_object_set_new(help, w, h ? json_string(h) : json_null());
    free(h);
    const struct sl_opt *o = jk_lang_option_decl(w);
    json_t *d = o ? sl_opt_describe(o, 1, NULL, 0) : NULL;
    json_array_append(decls, d ? json_array_get(d, 0) : json_null());
    json_decref(d);
  }
  json_object_set_new(out, "contexts", contexts);
  json_object_set_new(out, "complete", complete);
  json_object_set_new(out, "help", help);
  json_object_set_new(out, "declared", decls);
  char *text = json_dumps(out, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(out);
  if (!text || puts(text) < 0)
    return 1;
  free(text);
  return 0;
}
