/* CPU ranks joined by gloo (see tc_group.h).
 *
 * The sum of a large buffer is a reduce-scatter then an all-gather, both
 * built from gloo's plain data movement (all-to-all, all-gather) rather than
 * gloo's own all-reduce, whose order of additions depends on the algorithm,
 * the chunking and the world size: here rank k owns elements
 * [n k / W, n (k+1) / W), receives every rank's piece of them and adds the
 * pieces in rank order. Buffers for that are kept between calls. */
#include "tc_group.h"

#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tc_gloo.h"
#include "tc_rdv.h"

struct tc_group {
  int rank, world;
  struct tc_gloo *gl;
  size_t *in_bytes, *out_bytes; /* (world) per-rank piece sizes of the last sum */
  int *live;                    /* (world) kept rendezvous connections, -1 where none */
  float *recv;                  /* world pieces of this rank's share */
  size_t recv_floats;
  char err[1024];
};

int tc_group_new(const char *rendezvous, int rank, int world, int timeout_ms,
                 struct tc_group **ret, char *err, size_t es) {
  if (world < 2 || rank < 0 || rank >= world) return -EINVAL;
  struct tc_group *g = calloc(1, sizeof *g);
  size_t table = (size_t)world * TC_GLOO_SLOT_BYTES;
  uint8_t *mine = malloc(table), *theirs = malloc(table);
  char host[NI_MAXHOST], why[512] = "";
  int r = -ENOMEM, lfd = -1;
  if (!g || !mine || !theirs) goto fail;
  g->rank = rank;
  g->world = world;
  g->in_bytes = calloc((size_t)world, sizeof(size_t));
  g->out_bytes = calloc((size_t)world, sizeof(size_t));
  if ((g->live = malloc(sizeof(int) * (size_t)world)) != NULL) /* none open: the free closes none */
    for (int k = 0; k < world; k++) g->live[k] = -1;
  if (!g->in_bytes || !g->out_bytes || !g->live) goto fail;
  if ((r = tc_rdv_local_host(rendezvous, host, sizeof host, err, es)) < 0) goto fail;
  if ((r = tc_gloo_new(rank, world, host, timeout_ms, &g->gl, why, sizeof why)) < 0) {
    snprintf(err, es, "rank %d of %d: gloo: %s", rank, world, why);
    goto fail;
  }
  if ((r = tc_gloo_addresses(g->gl, mine)) < 0) {
    snprintf(err, es, "rank %d of %d: gloo %s", rank, world, tc_gloo_error(g->gl));
    goto fail;
  }
  if (rank == 0 && (r = tc_rdv_listen(rendezvous, &lfd, why, sizeof why)) == 0)
    r = tc_rdv_exchange_serve(lfd, world, TC_GLOO_SLOT_BYTES, mine, theirs, g->live,
                              timeout_ms, why, sizeof why);
  else if (rank > 0)
    r = tc_rdv_exchange_fetch(rendezvous, rank, world, TC_GLOO_SLOT_BYTES, mine, theirs,
                              &g->live[0], timeout_ms, why, sizeof why);
  if (r < 0) {
    snprintf(err, es, "rank %d of %d: %s", rank, world, why);
    goto fail;
  }
  if ((r = tc_gloo_connect(g->gl, theirs)) < 0) {
    snprintf(err, es, "rank %d of %d: cannot connect to the other ranks within %d ms: %s", rank,
             world, timeout_ms, tc_gloo_error(g->gl));
    goto fail;
  }
  if (lfd >= 0) close(lfd);
  free(mine);
  free(theirs);
  *ret = g;
  return 0;
fail:
  if (lfd >= 0) close(lfd);
  free(mine);
  free(theirs);
  tc_group_free(g);
  return r;
}

struct tc_group *tc_group_free(struct tc_group *g) {
  if (!g) return NULL;
  tc_gloo_free(g->gl);
  if (g->live)
    for (int k = 0; k < g->world; k++)
      if (g->live[k] >= 0) close(g->live[k]);
  free(g->live);
  free(g->in_bytes);
  free(g->out_bytes);
  free(g->recv);
  free(g);
  return NULL;
}

const char *tc_group_error(const struct tc_group *g) { return g->err; }

/* Keeps the reason of a failed call: what it was doing, what that means,
 * and gloo's text. gloo can report a peer that died as a timeout (a send
 * still being written when the connection fails is not woken, and waits out
 * the timeout), so a timeout is checked against the kept rendezvous
 * connections: one closed means its rank's process is gone. */
static int failed(struct tc_group *g, const char *what, int r) {
  int gone = -1;
  if (r == -ETIMEDOUT)
    for (int k = 0; k < g->world && gone < 0; k++)
      if (tc_rdv_peer_gone(g->live[k])) gone = k;
  if (gone >= 0) {
    snprintf(g->err, sizeof g->err,
             "rank %d of %d: %s failed: another rank has gone away (rank %d's process has "
             "exited; %s)",
             g->rank, g->world, what, gone, tc_gloo_error(g->gl));
    return -ECONNRESET;
  }
  const char *why = r == -ECONNRESET ? "another rank has gone away"
                    : r == -ETIMEDOUT ? "another rank stopped answering"
                                      : "gloo error";
  snprintf(g->err, sizeof g->err, "rank %d of %d: %s failed: %s (%s)", g->rank, g->world, what,
           why, tc_gloo_error(g->gl));
  return r;
}

static size_t piece_lo(size_t n, int k, int world) { return n * (size_t)k / (size_t)world; }

int tc_group_sum_f32(struct tc_group *g, float *x, size_t n) {
  int W = g->world, me = g->rank;
  size_t lo = piece_lo(n, me, W), share = piece_lo(n, me + 1, W) - lo;
  if ((size_t)W * share > g->recv_floats) {
    float *p = realloc(g->recv, sizeof(float) * (size_t)W * share);
    if (!p) return -ENOMEM;
    g->recv = p;
    g->recv_floats = (size_t)W * share;
  }
  for (int k = 0; k < W; k++) {
    g->in_bytes[k] = sizeof(float) * (piece_lo(n, k + 1, W) - piece_lo(n, k, W));
    g->out_bytes[k] = sizeof(float) * share;
  }
  int r = tc_gloo_alltoallv(g->gl, x, g->in_bytes, g->recv, g->out_bytes);
  if (r < 0) return failed(g, "the sum over ranks (all-to-all)", r);
  float *restrict dst = x + lo;
  const float *restrict src = g->recv;
  memcpy(dst, src, sizeof(float) * share);
  for (int k = 1; k < W; k++) {
    src = g->recv + (size_t)k * share;
    for (size_t i = 0; i < share; i++) dst[i] = dst[i] + src[i];
  }
  r = tc_gloo_allgatherv(g->gl, x, g->in_bytes);
  return r < 0 ? failed(g, "the sum over ranks (all-gather)", r) : 0;
}

int tc_group_sum_f64(struct tc_group *g, double *x, int n) {
  double all[TC_GROUP_SMALL * 64], *buf = all;
  if (n < 1 || n > TC_GROUP_SMALL) return -EINVAL;
  size_t bytes = sizeof(double) * (size_t)n * (size_t)g->world;
  if (bytes > sizeof all && !(buf = malloc(bytes))) return -ENOMEM;
  for (int k = 0; k < g->world; k++) g->in_bytes[k] = sizeof(double) * (size_t)n;
  memcpy(buf + (size_t)g->rank * n, x, sizeof(double) * (size_t)n);
  int r = tc_gloo_allgatherv(g->gl, buf, g->in_bytes);
  if (r == 0) {
    for (int i = 0; i < n; i++) {
      double s = buf[i];
      for (int k = 1; k < g->world; k++) s += buf[(size_t)k * n + i];
      x[i] = s;
    }
  }
  if (buf != all) free(buf);
  return r < 0 ? failed(g, "the sum of step values over ranks", r) : 0;
}

int tc_group_broadcast(struct tc_group *g, void *buf, size_t bytes) {
  int r = tc_gloo_broadcast(g->gl, buf, bytes, 0);
  return r < 0 ? failed(g, "the broadcast from rank 0", r) : 0;
}

int tc_group_barrier(struct tc_group *g) {
  int r = tc_gloo_barrier(g->gl);
  return r < 0 ? failed(g, "the barrier", r) : 0;
}
