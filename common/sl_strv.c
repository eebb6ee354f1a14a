/* Growing string arrays (sl_strv.h). */
#include "sl_strv.h"

#include "sl_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sl_strv_add(struct sl_strv *l, const char *s, size_t max) {
  if (l->n >= max)
    return SL_ELIMIT;
  if (l->n + 2 > l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return -ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  if (!(l->v[l->n] = strdup(s)))
    return -ENOMEM;
  l->v[++l->n] = NULL;
  return 0;
}

char **sl_strv_take(struct sl_strv *l) {
  char **v = l->v ? l->v : calloc(1, sizeof *v);
  *l = (struct sl_strv){0};
  return v;
}

char **sl_strv_free(char **v) {
  if (v) {
    for (size_t i = 0; v[i]; i++)
      free(v[i]);
    free(v);
  }
  return NULL;
}

void sl_strv_join(char *buf, size_t size, const char *item) {
  size_t used = strnlen(buf, size);
  if (used + 1 < size)
    snprintf(buf + used, size - used, "%s%s", used ? ", " : "", item);
}
