/* Following a notebook that is renamed or moved while its session is named
 * after its path: the Jupyter server asked again, and a record of the
 * session each kernel id followed last (rename.c). */
#ifndef JK_RENAME_H
#define JK_RENAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JK_RENAME_EVERY_US (5ll * 1000 * 1000) /* at most one question to the server this often */

struct jk_rename;

/* Asks the server whose runtime file is server_file about kernel_id (both
 * copied). NULL when either is NULL or empty, or on OOM. */
struct jk_rename *jk_rename_new(const char *server_file, const char *kernel_id);
/* Waits for a question under way (the program's deadline), then frees. */
struct jk_rename *jk_rename_free(struct jk_rename *r);
/* At the end of a cell: asks again, on a thread, unless a question is under
 * way or (unless now) the last one went less than JK_RENAME_EVERY_US ago.
 * NULL is a no-op. */
void jk_rename_check(struct jk_rename *r, bool now);
/* Monotonic µs of the loop's next look at a question under way, or INT64_MAX. */
int64_t jk_rename_wake_at_us(const struct jk_rename *r);
/* 1 and the notebook's path into ret once a question got an answer; 0
 * otherwise (none yet, none under way, or no answer: logged). */
int jk_rename_poll(struct jk_rename *r, char *ret, size_t size);

/* The session the kernel kernel_id followed last ($SPOTLAB_HOME/kernels/ID)
 * into ret: 0, or negative (-ENOENT: none recorded). */
int jk_rename_recorded(const char *kernel_id, char *ret, size_t size);
/* Records that kernel_id follows notebook; removes records a month old. */
int jk_rename_record(const char *kernel_id, const char *notebook);

#endif
