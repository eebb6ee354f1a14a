/* libFuzzer target for the cell language: every input is parsed, asked
 * is_complete, completed at a few cursor positions and inspected; values of
 * parsed expressions are evaluated and formatted. Nothing may crash, leak or
 * hit undefined behaviour, whatever the bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct jk_value known = {.type = JK_VAL_NUM, .num = 2};

static const struct jk_value *lookup(void *userdata, const char *name) {
  (void)userdata;
  return name[0] == 'a' ? &known : NULL;
}

static void eval_and_format(const struct jk_expr *e) {
  struct jk_value v;
  char err[128];
  if (!e || jk_eval(e, lookup, NULL, &v, err, sizeof err) < 0)
    return;
  free(jk_value_format(&v));
  free(jk_value_to_text(&v));
  jk_value_done(&v);
}

static void exercise_cell(const struct jk_cell *cell) {
  for (size_t i = 0; i < cell->n; i++) {
    const struct jk_stmt *st = &cell->stmts[i];
    eval_and_format(st->expr);
    for (size_t k = 0; k < st->n_items; k++)
      eval_and_format(st->items[k]);
    for (size_t k = 0; k < st->n_opts; k++)
      eval_and_format(st->opts[k].value);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const names[] = {"m", "shakespeare", "lr"};
  const char *code = (const char *)data;
  struct jk_cell *cell = NULL;
  struct jk_parse_error err;
  if (jk_parse(code, size, &cell, &err) == 0) {
    exercise_cell(cell);
    jk_cell_free(cell);
  }
  jk_is_complete(code, size);
  size_t cps = 0;
  for (size_t i = 0; i < size; i++)
    cps += (data[i] & 0xC0) != 0x80;
  size_t cursors[] = {0, cps / 3, cps / 2, cps > 0 ? cps - 1 : 0, cps, cps + 5};
  for (size_t i = 0; i < sizeof cursors / sizeof cursors[0]; i++) {
    struct jk_completions c;
    if (jk_complete(code, size, cursors[i], names, NULL, 3, &c) == 0) {
      if (c.cursor_start > c.cursor_end || c.cursor_end > cps)
        abort();
      jk_completions_done(&c);
    }
    free(jk_inspect(code, size, cursors[i], (int)(i & 1)));
  }
  return 0;
}
