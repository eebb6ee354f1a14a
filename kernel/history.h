/* Execution history per notebook session, persisted as JSON lines so a new
 * kernel for the same notebook sees earlier sessions (like IPython's history). */
#ifndef JK_HISTORY_H
#define JK_HISTORY_H

#include <jansson.h>
#include <stdint.h>

struct jk_history;

/* dir may be NULL (memory only). notebook names the file; it is sanitised.
 * Never fails for a broken or unreadable file: bad lines are skipped (logged
 * once) and history starts from what could be read. */
struct jk_history *jk_history_open(const char *dir, const char *notebook);
struct jk_history *jk_history_free(struct jk_history *h);
/* Switches to another notebook session's history (the %session magic). */
int jk_history_switch(struct jk_history *h, const char *notebook);
/* The notebook was renamed from the name from to to: its history file
 * becomes to's (unless to has one), and this history is to's from now on;
 * one without entries yet reads that file. */
int jk_history_rename(struct jk_history *h, const char *from, const char *to);
int jk_history_add(struct jk_history *h, int64_t line, const char *input);
/* Answers a history_request's content: returns an owned array of
 * [session, line, input] (or [session, line, [input, null]] with output). */
json_t *jk_history_query(const struct jk_history *h, const json_t *request);
int64_t jk_history_session(const struct jk_history *h);

#endif
