/* Job displays: the HTML, SVG and Vega-Lite renderings and the MIME bundle.
 *
 * Invariants: every piece of text that came from the wire goes through
 * jk_xml_escape() before it lands in HTML or SVG; charts carry at most
 * JK_DISPLAY_MAX_POINTS points per series and only finite numbers; the SVG
 * is written by hand (no library) with fixed geometry.
 *
 * The HTML must read the same wherever a notebook is opened (docs/notebook.md
 * "Front ends"): its root carries the classes MathJax 2 and 3 skip and every
 * '$' is written as &#36;, so no front end typesets a price as math; and it
 * uses only what Notebook's sanitizer keeps in an untrusted notebook (it
 * drops style attributes, inline SVG and the image/svg+xml output): the bar
 * is a <progress> element and the loss curve an <img> of the SVG as a data
 * URI, which also keeps any script out of the picture. */
#include "display_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_json.h"
#include "sl_time.h"

#define SVG_W 480
#define SVG_H 240
#define PAD_L 58
#define PAD_R 14
#define PAD_T 26
#define PAD_B 40
#define TICKS 5

char *jk_xml_escape(const char *s) {
  struct jk_dbuf b = {0};
  jk_dbuf_printf(&b, "%s", "");
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
    case '&': jk_dbuf_printf(&b, "&amp;"); break;
    case '<': jk_dbuf_printf(&b, "&lt;"); break;
    case '>': jk_dbuf_printf(&b, "&gt;"); break;
    case '"': jk_dbuf_printf(&b, "&quot;"); break;
    case '\'': jk_dbuf_printf(&b, "&#39;"); break;
    default:
      if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
        jk_dbuf_printf(&b, "\xEF\xBF\xBD");
      else
        jk_dbuf_printf(&b, "%c", *p);
    }
  }
  return jk_dbuf_done(&b);
}

static void esc(struct jk_dbuf *b, const char *s) {
  char *e = jk_xml_escape(s);
  if (!e) {
    b->oom = true;
    return;
  }
  jk_dbuf_printf(b, "%s", e);
  free(e);
}

static void base64(struct jk_dbuf *b, const unsigned char *p, size_t n) {
  static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char quad[5] = {0};
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    quad[0] = abc[v >> 18 & 63];
    quad[1] = abc[v >> 12 & 63];
    quad[2] = i + 1 < n ? abc[v >> 6 & 63] : '=';
    quad[3] = i + 2 < n ? abc[v & 63] : '=';
    jk_dbuf_printf(b, "%s", quad);
  }
}

char *jk_html_no_math(char *html) {
  if (!html)
    return NULL;
  size_t n = 0;
  for (const char *p = html; *p; p++)
    n += *p == '$';
  if (!n)
    return html;
  char *out = malloc(strlen(html) + 4 * n + 1), *q = out;
  if (out) {
    for (const char *p = html; *p; p++) {
      if (*p == '$') {
        memcpy(q, "&#36;", 5);
        q += 5;
      } else {
        *q++ = *p;
      }
    }
    *q = '\0';
  }
  free(html);
  return out;
}

size_t jk_downsample(const struct jk_point *in, size_t n, struct jk_point *out, size_t max) {
  if (max < 2)
    max = 2;
  if (n <= max) {
    if (n)
      memcpy(out, in, n * sizeof *in);
    return n;
  }
  out[0] = in[0];
  size_t inner = max - 2, span = n - 2;
  for (size_t k = 0; k < inner; k++) {
    size_t a = 1 + k * span / inner, z = 1 + (k + 1) * span / inner;
    double s = 0, v = 0;
    for (size_t i = a; i < z; i++) {
      s += in[i].step;
      v += in[i].value;
    }
    out[1 + k] = (struct jk_point){s / (double)(z - a), v / (double)(z - a)};
  }
  out[max - 1] = in[n - 1];
  return max;
}

/* The two series downsampled into caller buffers of JK_DISPLAY_MAX_POINTS. */
static void chart_points(const struct jk_display *d, struct jk_point *tr, size_t *ntr,
                         struct jk_point *ev, size_t *nev) {
  *ntr = jk_downsample(d->train.p, d->train.n, tr, JK_DISPLAY_MAX_POINTS);
  *nev = jk_downsample(d->eval.p, d->eval.n, ev, JK_DISPLAY_MAX_POINTS);
}

struct frame {
  double x0, x1, y0, y1;
};

static void bounds(const struct jk_point *a, size_t na, const struct jk_point *b, size_t nb,
                   struct frame *f) {
  f->x0 = f->y0 = INFINITY;
  f->x1 = f->y1 = -INFINITY;
  for (int s = 0; s < 2; s++) {
    const struct jk_point *p = s ? b : a;
    size_t n = s ? nb : na;
    for (size_t i = 0; i < n; i++) {
      f->x0 = fmin(f->x0, p[i].step);
      f->x1 = fmax(f->x1, p[i].step);
      f->y0 = fmin(f->y0, p[i].value);
      f->y1 = fmax(f->y1, p[i].value);
    }
  }
  if (f->x1 - f->x0 < 1)
    f->x1 = f->x0 + 1;
  double pad = (f->y1 - f->y0) * 0.05;
  if (pad <= 0)
    pad = fmax(fabs(f->y0) * 0.05, 0.5);
  f->y0 -= pad;
  f->y1 += pad;
}

static double px(const struct frame *f, double x) {
  return PAD_L + (x - f->x0) / (f->x1 - f->x0) * (SVG_W - PAD_L - PAD_R);
}

static double py(const struct frame *f, double y) {
  return SVG_H - PAD_B - (y - f->y0) / (f->y1 - f->y0) * (SVG_H - PAD_T - PAD_B);
}

static void polyline(struct jk_dbuf *b, const struct frame *f, const struct jk_point *p, size_t n,
                     const char *color, const char *cls) {
  if (!n)
    return;
  jk_dbuf_printf(b, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", cls,
                 color);
  for (size_t i = 0; i < n; i++)
    jk_dbuf_printf(b, "%s%.1f,%.1f", i ? " " : "", px(f, p[i].step), py(f, p[i].value));
  jk_dbuf_printf(b, "\"/>\n");
}

static void axes(struct jk_dbuf *b, const struct frame *f) {
  int x0 = PAD_L, x1 = SVG_W - PAD_R, y0 = SVG_H - PAD_B, y1 = PAD_T;
  jk_dbuf_printf(b, "<g stroke=\"#444\" stroke-width=\"1\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
                    "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n",
                 x0, y0, x1, y0, x0, y0, x0, y1);
  jk_dbuf_printf(b, "<g fill=\"#333\" font-size=\"10\">\n");
  for (int i = 0; i <= TICKS; i++) {
    double xv = f->x0 + (f->x1 - f->x0) * i / TICKS, yv = f->y0 + (f->y1 - f->y0) * i / TICKS;
    double x = px(f, xv), y = py(f, yv);
    jk_dbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\"/>"
                      "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n",
                   x, y0, x, y0 + 4, x, y0 + 15, xv);
    jk_dbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#444\"/>"
                      "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n",
                   x0 - 4, y, x0, y, x0 - 6, y + 3, yv);
  }
  jk_dbuf_printf(b, "</g>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">step</text>\n",
                 (x0 + x1) / 2, SVG_H - 6);
  jk_dbuf_printf(b, "<text x=\"14\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\" "
                    "transform=\"rotate(-90 14 %d)\">loss</text>\n",
                 (y0 + y1) / 2, (y0 + y1) / 2);
}

static void svg_into(const struct jk_display *d, struct jk_dbuf *b) {
  struct jk_point *tr = malloc(2 * JK_DISPLAY_MAX_POINTS * sizeof *tr);
  if (!tr) {
    b->oom = true;
    return;
  }
  struct jk_point *ev = tr + JK_DISPLAY_MAX_POINTS;
  size_t ntr, nev;
  chart_points(d, tr, &ntr, ev, &nev);
  jk_dbuf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                    "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
                 SVG_W, SVG_H, SVG_W, SVG_H);
  jk_dbuf_printf(b, "<title>loss of ");
  esc(b, d->job);
  jk_dbuf_printf(b, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W, SVG_H);
  jk_dbuf_printf(b, "<text x=\"%d\" y=\"16\" fill=\"#333\" font-weight=\"bold\">", PAD_L);
  esc(b, d->job);
  if (d->model[0]) {
    jk_dbuf_printf(b, " ");
    esc(b, d->model);
  }
  jk_dbuf_printf(b, " loss</text>\n");
  if (!ntr && !nev) {
    jk_dbuf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\">no loss reported yet</text>\n",
                   SVG_W / 2, SVG_H / 2);
  } else {
    struct frame f;
    bounds(tr, ntr, ev, nev, &f);
    axes(b, &f);
    polyline(b, &f, tr, ntr, "#1f77b4", "train");
    polyline(b, &f, ev, nev, "#ff7f0e", "eval");
    /* evaluations are few (often one, at the end): each a dot, so that one shows */
    for (size_t i = 0; i < nev; i++)
      jk_dbuf_printf(b, "<circle class=\"eval\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#ff7f0e\"/>\n",
                     px(&f, ev[i].step), py(&f, ev[i].value));
    int lx = SVG_W - PAD_R - 150;
    jk_dbuf_printf(b, "<g font-size=\"10\"><line x1=\"%d\" y1=\"12\" x2=\"%d\" y2=\"12\" stroke=\"#1f77b4\" "
                      "stroke-width=\"2\"/><text x=\"%d\" y=\"15\">train loss</text>",
                   lx, lx + 16, lx + 20);
    if (nev)
      jk_dbuf_printf(b, "<line x1=\"%d\" y1=\"12\" x2=\"%d\" y2=\"12\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>"
                        "<text x=\"%d\" y=\"15\">eval loss</text>",
                     lx + 80, lx + 96, lx + 100);
    jk_dbuf_printf(b, "</g>\n");
  }
  jk_dbuf_printf(b, "</svg>\n");
  free(tr);
}

char *jk_display_svg(const struct jk_display *d) {
  struct jk_dbuf b = {0};
  svg_into(d, &b);
  return jk_dbuf_done(&b);
}

json_t *jk_display_vegalite(const struct jk_display *d) {
  struct jk_point *tr = malloc(2 * JK_DISPLAY_MAX_POINTS * sizeof *tr);
  if (!tr)
    return NULL;
  struct jk_point *ev = tr + JK_DISPLAY_MAX_POINTS;
  size_t ntr, nev;
  chart_points(d, tr, &ntr, ev, &nev);
  json_t *values = json_array();
  for (int s = 0; s < 2; s++) {
    const struct jk_point *p = s ? ev : tr;
    size_t n = s ? nev : ntr;
    for (size_t i = 0; i < n; i++)
      if (isfinite(p[i].step) && isfinite(p[i].value))
        json_array_append_new(values, json_pack("{s:o, s:o, s:s}", "step", sl_json_real(p[i].step), "loss",
                                                sl_json_real(p[i].value), "series", s ? "eval" : "train"));
  }
  free(tr);
  char title[96];
  snprintf(title, sizeof title, "%s loss", d->job);
  /* lines, and a dot on each evaluation (often one, which a line cannot show) */
  return json_pack("{s:s, s:s, s:i, s:i, s:{s:o}, s:{s:{s:s, s:s, s:s}, "
                   "s:{s:s, s:s, s:s, s:{s:b}}, s:{s:s, s:s, s:n}}, "
                   "s:[{s:{s:s, s:b}}, {s:{s:s, s:b}, s:[{s:s}]}]}",
                   "$schema", "https://vega.github.io/schema/vega-lite/v5.json", "title", title, "width",
                   SVG_W - PAD_L - PAD_R, "height", SVG_H - PAD_T - PAD_B, "data", "values", values,
                   "encoding", "x", "field", "step", "type", "quantitative",
                   "title", "step", "y", "field", "loss", "type", "quantitative", "title", "loss", "scale",
                   "zero", 0, "color", "field", "series", "type", "nominal", "title",
                   "layer", "mark", "type", "line", "point", 0, "mark", "type", "point", "filled", 1,
                   "transform", "filter", "datum.series == 'eval'");
}

static void html_status(const struct jk_display *d, struct jk_dbuf *b) {
  double frac = jk_display_fraction(d);
  if (frac >= 0) {
    jk_dbuf_printf(b, "<div><progress class=\"spotlab-bar\" max=\"100\" value=\"%.1f\" "
                      "style=\"width:100%%;height:14px\">%.0f%%</progress></div>\n",
                   frac * 100, frac * 100);
    double eta = jk_display_eta_s(d);
    char dur[32] = "--";
    if (eta >= 0)
      sl_time_format_duration((int64_t)(eta * 1e6), dur, sizeof dur);
    jk_dbuf_printf(b, "<div>step %lld/%lld &middot; %.0f%% &middot; ETA %s", (long long)d->step,
                   (long long)d->steps, frac * 100, dur);
  } else if (d->step > 0) {
    jk_dbuf_printf(b, "<div>step %lld", (long long)d->step);
  } else if (d->throughput > 0 || d->has_loss || d->has_eval_loss) {
    jk_dbuf_printf(b, "<div>%s", d->kind); /* no steps to show (a %%run job has none) */
  }
  if (d->throughput > 0)
    jk_dbuf_printf(b, " &middot; %.0f %s", d->throughput, d->throughput_unit);
  if (d->has_loss)
    jk_dbuf_printf(b, " &middot; loss %.4f", d->loss);
  if (d->has_eval_loss)
    jk_dbuf_printf(b, " &middot; eval loss %.4f", d->eval_loss);
  if (frac >= 0 || d->step > 0 || d->throughput > 0 || d->has_loss || d->has_eval_loss)
    jk_dbuf_printf(b, "</div>\n");
  if (d->instance_type[0]) {
    jk_dbuf_printf(b, "<div>");
    if (d->nodes > 1)
      jk_dbuf_printf(b, "%d &times; ", d->nodes);
    esc(b, d->instance_type);
    jk_dbuf_printf(b, " in ");
    esc(b, d->zone[0] ? d->zone : "?");
    jk_dbuf_printf(b, " &middot; %s $%.4f/h%s", d->spot == 0 ? "on-demand" : "spot", d->price_usd_per_hour,
                   d->nodes > 1 ? " each" : "");
    if (d->on_demand_usd_per_hour > 0 && d->spot != 0)
      jk_dbuf_printf(b, " (on-demand $%.4f/h)", d->on_demand_usd_per_hour);
    if (d->attempt > 1)
      jk_dbuf_printf(b, " &middot; attempt %d", d->attempt);
    jk_dbuf_printf(b, "</div>\n");
  }
  char device[512];
  jk_display_device_text(d, device, sizeof device);
  if (device[0]) {
    jk_dbuf_printf(b, "<div class=\"spotlab-device\">device: ");
    esc(b, device);
    jk_dbuf_printf(b, "</div>\n");
  }
  char deadline[400];
  jk_display_deadline_text(d, deadline, sizeof deadline);
  if (deadline[0]) {
    jk_dbuf_printf(b, "<div class=\"spotlab-deadline\">");
    esc(b, deadline);
    jk_dbuf_printf(b, "</div>\n");
  }
  if (d->cost_usd > 0 || d->on_demand_usd > 0) {
    jk_dbuf_printf(b, "<div>cost $%.4f", d->cost_usd);
    if (d->on_demand_usd > 0) {
      double saved = d->on_demand_usd - d->cost_usd;
      jk_dbuf_printf(b, " &middot; saved $%.4f (%.0f%%) against on-demand", saved, 100 * saved / d->on_demand_usd);
    }
    jk_dbuf_printf(b, "</div>\n");
  }
  if (d->energy_kwh > 0)
    jk_dbuf_printf(b, "<div>energy %.3g kWh &middot; %.3g g CO2e (estimate)</div>\n", d->energy_kwh,
                   d->co2e_g);
}

char *jk_display_html(const struct jk_display *d) {
  struct jk_dbuf b = {0};
  jk_dbuf_printf(&b, "<div class=\"spotlab-job tex2jax_ignore mathjax_ignore\" "
                     "style=\"font-family:sans-serif;font-size:13px;max-width:640px\">\n"
                     "<div><b>spotlab job ");
  esc(&b, d->job);
  jk_dbuf_printf(&b, "</b>");
  if (d->kind[0]) {
    jk_dbuf_printf(&b, ": ");
    esc(&b, d->kind);
  }
  if (d->model[0]) {
    jk_dbuf_printf(&b, " ");
    esc(&b, d->model);
  }
  if (d->data[0]) {
    jk_dbuf_printf(&b, " on ");
    esc(&b, d->data);
  }
  jk_dbuf_printf(&b, " &mdash; <span class=\"spotlab-state\">");
  esc(&b, d->state[0] ? d->state : "submitted");
  jk_dbuf_printf(&b, "</span>");
  if (d->reason[0]) {
    jk_dbuf_printf(&b, " (");
    esc(&b, d->reason);
    jk_dbuf_printf(&b, ")");
  }
  jk_dbuf_printf(&b, "</div>\n");
  html_status(d, &b);
  if (d->train.n || d->eval.n) {
    struct jk_dbuf svg = {0};
    svg_into(d, &svg);
    char *text = jk_dbuf_done(&svg);
    if (!text) {
      b.oom = true;
    } else {
      jk_dbuf_printf(&b, "<div><img class=\"spotlab-curve\" width=\"%d\" height=\"%d\" alt=\"loss curve of ",
                     SVG_W, SVG_H);
      esc(&b, d->job);
      jk_dbuf_printf(&b, "\" src=\"data:image/svg+xml;base64,");
      base64(&b, (const unsigned char *)text, strlen(text));
      jk_dbuf_printf(&b, "\"/></div>\n");
      free(text);
    }
  }
  if (!jk_display_finished(d) && d->job[0]) {
    jk_dbuf_printf(&b, "<div class=\"spotlab-hint\">Interrupting the cell detaches; the job keeps running. "
                       "To follow it again (also after reopening this notebook): <code>%%attach ");
    esc(&b, d->job);
    jk_dbuf_printf(&b, "</code></div>\n");
  }
  if (d->tl_n) {
    jk_dbuf_printf(&b, "<details open><summary>timeline</summary><ul style=\"margin:2px 0\">\n");
    if (d->tl_dropped)
      jk_dbuf_printf(&b, "<li>&hellip; %zu earlier events</li>\n", d->tl_dropped);
    for (size_t i = 0; i < d->tl_n; i++) {
      const struct tl_entry *e = jk_display_tl(d, i);
      char dur[32];
      sl_time_format_duration(e->time_us > d->first_us ? e->time_us - d->first_us : 0, dur, sizeof dur);
      jk_dbuf_printf(&b, "<li>+%s ", dur);
      esc(&b, e->text);
      jk_dbuf_printf(&b, "</li>\n");
    }
    jk_dbuf_printf(&b, "</ul></details>\n");
  }
  jk_dbuf_printf(&b, "</div>\n");
  return jk_html_no_math(jk_dbuf_done(&b));
}

json_t *jk_display_bundle(const struct jk_display *d) {
  char *text = jk_display_text(d), *html = jk_display_html(d);
  json_t *bundle = NULL;
  if (text && html) {
    bundle = json_pack("{s:s, s:s}", "text/plain", text, "text/html", html);
    if (bundle && (d->train.n || d->eval.n)) {
      char *svg = jk_display_svg(d);
      if (svg)
        json_object_set_new(bundle, "image/svg+xml", json_string(svg));
      free(svg);
      json_t *vl = jk_display_vegalite(d);
      if (vl)
        json_object_set_new(bundle, "application/vnd.vegalite.v5+json", vl);
    }
  }
  free(text);
  free(html);
  return bundle;
}
