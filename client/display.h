/* The live display of one gateway job (DESIGN.md §4).
 *
 * A display folds the job's events (protocols.md §1 "events") into what a
 * person wants to see: progress, ETA, loss curve, throughput, the device it
 * trains on (GPU model, count, utilisation and memory, or CPU threads),
 * placement, cost and savings, and a timeline. It renders a MIME bundle (text/plain,
 * text/html, image/svg+xml, application/vnd.vegalite.v5+json) and decides
 * when an update may go out (at most one per JK_DISPLAY_MIN_INTERVAL_US; the
 * caller flushes the final state regardless). It sends nothing itself. */
#ifndef JK_DISPLAY_H
#define JK_DISPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JK_DISPLAY_MIN_INTERVAL_US (250 * 1000) /* 4 updates per second */
#define JK_DISPLAY_MAX_POINTS 500               /* per series, in rendered charts */

struct jk_display;

struct jk_point {
  double step, value;
};

/* job and kind ("train", "eval", "sample", "run") are copied. NULL on OOM. */
struct jk_display *jk_display_new(const char *job, const char *kind);
struct jk_display *jk_display_free(struct jk_display *d);

/* The model's name, where the caller knows it before the job's summary
 * comes (a cell's statement names it; the summary follows the events
 * already logged), so that lines such as "restored m from its checkpoint"
 * name it. */
void jk_display_set_model(struct jk_display *d, const char *model);
/* The job's kind, for a display made before it was known (%attach): the
 * events before the summary are told as that kind's. */
void jk_display_set_kind(struct jk_display *d, const char *kind);
/* Folds a job summary (the "job" of an attach reply; borrowed) in. */
void jk_display_summary(struct jk_display *d, const json_t *job);
/* Folds one event (borrowed) in. Events at or below the last seq seen are
 * ignored. Returns 1 when it was new, 0 when ignored, negative when not an
 * event of this job. */
int jk_display_event(struct jk_display *d, const json_t *event);
/* Folds a session notice (borrowed; protocols.md §1 "session notices") into
 * the timeline: an idle warning or shutdown of the notebook. Returns 1 when
 * it was shown, 0 for a notice kind it does not show. */
int jk_display_notice(struct jk_display *d, const json_t *notice);

/* ---- what the job did --------------------------------------------------- */
const char *jk_display_id(const struct jk_display *d);      /* "spotlab-J000003" */
const char *jk_display_job(const struct jk_display *d);
const char *jk_display_state(const struct jk_display *d);   /* "" until known */
const char *jk_display_reason(const struct jk_display *d);  /* "" when none */
/* Succeeded, failed or cancelled. */
bool jk_display_finished(const struct jk_display *d);
int64_t jk_display_last_seq(const struct jk_display *d);
int64_t jk_display_step(const struct jk_display *d);
/* Fraction done in [0,1], or -1 when steps are unknown. */
double jk_display_fraction(const struct jk_display *d);
/* The result event's eval_loss, when one came (ret written only then). */
bool jk_display_eval_result(const struct jk_display *d, double *ret_loss);

/* ---- throttling --------------------------------------------------------- */
/* Whether something changed since the last jk_display_sent(). */
bool jk_display_dirty(const struct jk_display *d);
/* Whether an update may go out at now_us: dirty, and the first one or at
 * least JK_DISPLAY_MIN_INTERVAL_US after the previous. */
bool jk_display_due(const struct jk_display *d, int64_t now_us);
/* When the next update may go out (monotonic µs), INT64_MAX when clean. */
int64_t jk_display_next_us(const struct jk_display *d);
/* Records that the current state went out at now_us. */
void jk_display_sent(struct jk_display *d, int64_t now_us);
/* Whether anything was ever sent (display_data, then update_display_data). */
bool jk_display_shown(const struct jk_display *d);

/* ---- rendering (each returns owned output, NULL on OOM) ------------------ */
json_t *jk_display_bundle(const struct jk_display *d);
char *jk_display_text(const struct jk_display *d);
/* One line for terminals, at most width columns: state, bar, step, ETA, loss. */
char *jk_display_line(const struct jk_display *d, int width);
char *jk_display_html(const struct jk_display *d);
char *jk_display_svg(const struct jk_display *d);
json_t *jk_display_vegalite(const struct jk_display *d);
/* The loss series (borrowed arrays valid until the next event). */
const struct jk_point *jk_display_series(const struct jk_display *d, bool eval, size_t *ret_n);

/* ---- helpers (exposed for tests) ---------------------------------------- */
/* Text made safe for HTML and XML: & < > " ' escaped, control characters
 * other than tab and newline replaced by U+FFFD. Owned. */
char *jk_xml_escape(const char *s);
/* Takes html (owned; NULL passes through) and returns it with every '$'
 * written as &#36; (owned), so a Markdown or MathJax pass over the rendered
 * text cannot take prices for math delimiters. NULL on OOM. */
char *jk_html_no_math(char *html);
/* Reduces n points to at most max (>= 2) into out (room for max): the first
 * and last stay exact, the rest are bucket means. Returns the count. */
size_t jk_downsample(const struct jk_point *in, size_t n, struct jk_point *out, size_t max);

#endif
