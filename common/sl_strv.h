/* A growing NULL-terminated array of owned strings (lists of keys). */
#ifndef SL_STRV_H
#define SL_STRV_H

#include <stddef.h>

struct sl_strv {
  char **v;        /* NULL-terminated once anything was added; NULL while empty */
  size_t n, cap;
};

/* Appends a copy of s: 0, SL_ELIMIT past max strings, -ENOMEM. */
int sl_strv_add(struct sl_strv *l, const char *s, size_t max);
/* v as an owned array that holds at least the terminating NULL (an empty
 * list too); the list is emptied. NULL when out of memory (the list is freed). */
char **sl_strv_take(struct sl_strv *l);
/* Frees an array of sl_strv_take (or the list's own); returns NULL. */
char **sl_strv_free(char **v);

/* Appends item to the text list in buf (size bytes, NUL-terminated), after
 * ", " unless buf is empty: "a, b, c" for a message. What does not fit is
 * cut. */
void sl_strv_join(char *buf, size_t size, const char *item);

#endif
