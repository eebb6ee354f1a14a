/* The store's market history: one row per chunk of an offer's ticks, its
 * capacity as one byte per tick (0 or 1) and its prices as 8-byte IEEE
 * doubles, little-endian. */
#include "store_int.h"

#include <math.h>
#include <stdlib.h>

/* far past any real history (a chunk an hour: 10^8 years); a larger number is a damaged row */
#define CHUNK_NUMBER_MAX (INT64_C(1) << 40)

static void put_le64(unsigned char *p, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(u >> (8 * i));
}

static double get_le64(const unsigned char *p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; i++)
    u |= (uint64_t)p[i] << (8 * i);
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static int put_one(struct gw_store *s, const struct gw_market_chunk *c) {
  if (c->n == 0 || c->n > GW_STORE_MARKET_CHUNK_MAX)
    return -EINVAL;
  unsigned char up[GW_STORE_MARKET_CHUNK_MAX], price[8 * GW_STORE_MARKET_CHUNK_MAX];
  for (size_t k = 0; k < c->n; k++) {
    up[k] = c->up[k] ? 1 : 0;
    put_le64(price + 8 * k, c->price[k]);
  }
  sqlite3_stmt *st = prep(s, "INSERT OR REPLACE INTO market_history(provider, type, zone, chunk,"
                             " end_us, up, price) VALUES(?,?,?,?,?,?,?)");
  if (st) {
    bind_text(st, 1, c->provider);
    bind_text(st, 2, c->type);
    bind_text(st, 3, c->zone);
    sqlite3_bind_int64(st, 4, c->chunk);
    sqlite3_bind_int64(st, 5, c->end_us);
    sqlite3_bind_blob(st, 6, up, (int)c->n, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 7, price, (int)(8 * c->n), SQLITE_TRANSIENT);
  }
  return run(s, st);
}

/* Drops the offer's rows of chunks before `before`. */
static int drop_before(struct gw_store *s, const char *provider, const char *type, const char *zone,
                       int64_t before) {
  sqlite3_stmt *st = prep(s, "DELETE FROM market_history WHERE provider=? AND type=? AND zone=?"
                             " AND chunk<?");
  if (st) {
    bind_text(st, 1, provider);
    bind_text(st, 2, type);
    bind_text(st, 3, zone);
    sqlite3_bind_int64(st, 4, before);
  }
  return run(s, st);
}

static bool same_offer(const struct gw_market_chunk *a, const struct gw_market_chunk *b) {
  return !strcmp(a->provider, b->provider) && !strcmp(a->type, b->type) &&
         !strcmp(a->zone, b->zone);
}

int gw_store_market_put(struct gw_store *s, const struct gw_market_chunk *c, size_t n,
                        int64_t keep) {
  if (!n)
    return 0;
  int r = begin(s);
  if (r < 0)
    return r;
  for (size_t i = 0; i < n; i++) {
    if ((r = put_one(s, &c[i])) < 0)
      return rollback(s, r);
    /* an offer's old rows go once, after its last chunk of the call */
    if ((i + 1 == n || !same_offer(&c[i], &c[i + 1])) &&
        (r = drop_before(s, c[i].provider, c[i].type, c[i].zone, c[i].chunk - keep)) < 0)
      return rollback(s, r);
  }
  r = commit(s);
  return r < 0 ? rollback(s, r) : 0;
}

/* The row under st in *c; c->n = 0 when its columns do not make a chunk. */
static void read_row(sqlite3_stmt *st, struct gw_market_chunk *c) {
  memset(c, 0, sizeof *c);
  col_text(st, 0, c->provider, sizeof c->provider);
  col_text(st, 1, c->type, sizeof c->type);
  col_text(st, 2, c->zone, sizeof c->zone);
  c->chunk = sqlite3_column_int64(st, 3);
  c->end_us = sqlite3_column_int64(st, 4);
  const unsigned char *up = sqlite3_column_blob(st, 5);
  size_t n = (size_t)sqlite3_column_bytes(st, 5);
  const unsigned char *price = sqlite3_column_blob(st, 6);
  size_t bytes = (size_t)sqlite3_column_bytes(st, 6);
  if (c->chunk < 0 || c->chunk > CHUNK_NUMBER_MAX) {
    c->chunk = -1; /* not even where it would go */
    return;
  }
  /* a wall clock before 1970 is a damaged row (the history's gap is taken from it) */
  if (!up || !price || n == 0 || n > GW_STORE_MARKET_CHUNK_MAX || bytes != 8 * n || c->end_us < 0)
    return;
  for (size_t k = 0; k < n; k++) {
    double p = get_le64(price + 8 * k);
    if (up[k] > 1 || !isfinite(p) || p < 0)
      return;
    c->up[k] = up[k];
    c->price[k] = p;
  }
  c->n = n;
}

int gw_store_market_each(struct gw_store *s, int (*fn)(const struct gw_market_chunk *c, void *data),
                         void *data) {
  sqlite3_stmt *st = prep(s, "SELECT provider, type, zone, chunk, end_us, up, price FROM"
                             " market_history ORDER BY provider, type, zone, chunk");
  if (!st)
    return SL_ESQLITE;
  struct gw_market_chunk *c = malloc(sizeof *c);
  int r = c ? 0 : -ENOMEM, rc = SQLITE_DONE;
  while (r >= 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    read_row(st, c);
    r = fn(c, data);
  }
  if (r >= 0 && rc != SQLITE_DONE)
    r = gw_store_db_err(s, "market history");
  sqlite3_finalize(st);
  free(c);
  return r < 0 ? r : 0;
}
