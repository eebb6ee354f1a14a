/* The notebook session's names: variables and model/data definitions.
 *
 * One name is at most one thing: setting a variable drops a definition of
 * the same name and the other way round. Every change is reported to the
 * observer (the session sync records it for the gateway). Bounded: past
 * MAX names a set fails with SL_ELIMIT and the state stays as it was. */
#ifndef JK_STATE_H
#define JK_STATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lang.h"

struct jk_state;

/* A model or data definition (read-only view, owned by the state). */
struct jk_def {
  const char *name;
  const char *kind;    /* "model" or "data" */
  const json_t *spec;  /* {"type":"gpt","args":[...],"options":{...}} */
};

/* Called with the name of every variable or definition set or dropped. */
typedef void (*jk_state_changed_fn)(void *userdata, const char *name);

struct jk_state *jk_state_new(void);
struct jk_state *jk_state_free(struct jk_state *st);
/* Sets the observer (NULL: none); userdata borrowed. */
void jk_state_observe(struct jk_state *st, jk_state_changed_fn fn, void *userdata);

/* Takes value (also on failure). 0, SL_ELIMIT or -ENOMEM. */
int jk_state_set_var(struct jk_state *st, const char *name, struct jk_value *value);
/* kind is "model" or "data"; takes spec (also on failure). 0, SL_ELIMIT or -ENOMEM. */
int jk_state_set_def(struct jk_state *st, const char *name, const char *kind, json_t *spec);
/* Drops every name. */
void jk_state_clear(struct jk_state *st);

/* Borrowed until the next change, or NULL. */
const struct jk_value *jk_state_var(const struct jk_state *st, const char *name);
/* Fills *ret (borrowed until the next change): 0, or -ENOENT. */
int jk_state_def(const struct jk_state *st, const char *name, struct jk_def *ret);
/* A jk_lookup_fn over the variables (userdata: the state). */
const struct jk_value *jk_state_lookup(void *st, const char *name);

size_t jk_state_n_vars(const struct jk_state *st);
size_t jk_state_n_defs(const struct jk_state *st);
/* The i-th variable's name (and value in *ret_value, may be NULL), or NULL
 * past the last. Borrowed until the next change. */
const char *jk_state_var_at(const struct jk_state *st, size_t i, const struct jk_value **ret_value);
/* The i-th definition: 0, or -ENOENT past the last. */
int jk_state_def_at(const struct jk_state *st, size_t i, struct jk_def *ret);
/* Every name, variables first: an owned array of borrowed strings (NULL and
 * *ret_n 0 when out of memory). */
const char **jk_state_names(const struct jk_state *st, size_t *ret_n, char **ret_kinds);

/* "gpt(layers=4)": a definition's spec as the language writes it. Owned. */
char *jk_state_format_spec(const json_t *spec);
/* "lr = 0.0003" or "model m = gpt(layers=4)": name as show writes it.
 * Owned, or NULL when name is unknown (or out of memory). */
char *jk_state_show(const struct jk_state *st, const char *name);
/* The inspect text of a name, owned, or NULL when name is unknown. */
char *jk_state_describe(const struct jk_state *st, const char *name);

/* A variable's value as the session store keeps it ({"t":"num","v":...});
 * NULL for a value that is not stored. Owned. */
json_t *jk_value_to_json(const struct jk_value *v);
/* The reverse, into *ret: 0, SL_ETYPE for a malformed value, or -ENOMEM. */
int jk_value_from_json(const json_t *j, struct jk_value *ret);

#endif
