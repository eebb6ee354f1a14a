/* Notebook session state in the gateway (protocols.md §1 "session state"):
 * keeps the gateway's copy of a jk_state in step with it. See session.c. */
#ifndef JK_SESSION_H
#define JK_SESSION_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "gwclient.h"
#include "state.h"

struct jk_session;

/* state and gw are borrowed for the session's life (it observes the
 * state's changes until freed); notebook is copied. NULL on OOM. */
struct jk_session *jk_session_new(struct jk_state *state, struct jk_gw *gw, const char *notebook);
struct jk_session *jk_session_free(struct jk_session *s);

/* Keeps the names no gateway has taken yet in a file of dir (created 0700;
 * one file per notebook session), so that a kernel restarted, or started
 * again after a crash, before any gateway ran still finds them: the file is
 * written whenever changes stay unsent, read back (the names as this
 * kernel's changes, to be sent) here at once, and removed once a gateway has
 * them all. dir NULL: none. 0, or negative when the file is unreadable (the
 * reason logged; the file is left alone). */
int jk_session_keep_pending(struct jk_session *s, const char *dir);
/* The session follows the notebook's path (named by the front end or its
 * server, not %session): kernel_id's record of the session it followed
 * last (rename.h) is kept, and a record of another path (a notebook
 * renamed, then its kernel restarted) moves that session to this one, as
 * jk_session_moved: 1, and that path into from (size bytes). flags: the
 * load's (jk_gw_request). 0 otherwise, or -ENOMEM. */
int jk_session_follow(struct jk_session *s, const char *kernel_id, unsigned flags, char *from, size_t size);
/* The notebook was renamed from the path from to this session's name (set
 * with jk_session_rename first): session.move asks the gateway to move what
 * it holds, before any later request, and again with later flushes until a
 * gateway was reached; names kept for the old path join this one. */
void jk_session_moved(struct jk_session *s, const char *from, unsigned flags);
/* The notebook session was renamed (%session NAME; copied). 0 or -ENOMEM. */
int jk_session_rename(struct jk_session *s, const char *notebook);
/* Sends session.set with the changed names, if any (connecting, never
 * starting a gateway). */
void jk_session_flush(struct jk_session *s);
/* At the end of a cell: jk_session_flush(), unless the gateway was found
 * down less than a retry interval ago (the changes are then kept). */
void jk_session_cell_done(struct jk_session *s);
/* Asks for session.get (at start, after %gateway). With cells_wait,
 * jk_session_loading() is true until its reply; with may_start, a stopped
 * embedded gateway is started to answer it. */
void jk_session_load(struct jk_session *s, bool cells_wait, bool may_start);
bool jk_session_loading(const struct jk_session *s);
/* Loads a session.get reply (borrowed) into the state. switched: after
 * %session NAME, stored names win over local ones and local-only names are
 * marked to join. */
void jk_session_apply(struct jk_session *s, const json_t *reply, bool switched);

enum jk_session_reply {
  JK_SESSION_OTHER,   /* not a session request's reply */
  JK_SESSION_HANDLED,
  JK_SESSION_LOADED,  /* the load at start answered (or failed): cells may run */
  JK_SESSION_REFUSED, /* the gateway refused a session.set (too large, say): the user hears why */
};
/* Handles the replies to session requests (reply and error borrowed). */
enum jk_session_reply jk_session_reply(struct jk_session *s, int64_t id, const json_t *reply,
                                       const char *error);

/* What the gateway knows of a trained model ({job, step, checkpoint}),
 * borrowed, or NULL. */
const json_t *jk_session_model(const struct jk_session *s, const char *name);
/* Replaces the models with a session.get reply's "models" (borrowed; ignored
 * unless an object). */
void jk_session_set_models(struct jk_session *s, const json_t *models);
/* Records a model trained by a job that succeeded. */
void jk_session_trained(struct jk_session *s, const char *model, const char *job, int64_t step);

#endif
