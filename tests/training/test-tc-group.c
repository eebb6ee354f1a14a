/* CPU ranks joined by gloo (tc_group), as real processes on loopback:
 * three ranks sum float buffers bit for bit in rank order (checked against
 * the same additions done locally, on data where another order gives other
 * bits), sum doubles, broadcast and meet at a barrier; a rank that dies makes
 * the others fail with a reason within the timeout; a rank whose death gloo
 * misses (its gloo connections kept open, its rendezvous connection closed)
 * is still reported gone, not as a timeout; a rank that never comes makes
 * rank 0 give up at its deadline naming it. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tc_group.h"
#include "tc_rdv.h"
#include "tc_rng.h"

enum { W = 3, N = 100003 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Rank k's values: wide range of magnitudes, so the order of additions shows. */
static void values(float *x, int k) {
  struct tc_rng r;
  tc_rng_seed(&r, 77, (uint64_t)k + 10);
  for (int i = 0; i < N; i++) x[i] = tc_rng_normal(&r) * (float)(1 << (i % 7 * 3));
}

/* A free port for the rendezvous: bind port 0, read it, let it go. */
static void pick_spec(char *spec, size_t size) {
  char err[256];
  int fd = -1;
  if (tc_rdv_listen("tcp://127.0.0.1:0", &fd, err, sizeof err) < 0) abort();
  snprintf(spec, size, "tcp://127.0.0.1:%d", tc_rdv_port(fd));
  close(fd);
}

/* One rank's part of the good run; its exit status counts its failures. */
static int good_rank(const char *spec, int rank) {
  char err[1024] = "";
  struct tc_group *g = NULL;
  int bad = 0;
  if (tc_group_new(spec, rank, W, 10000, &g, err, sizeof err) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return 100;
  }
  float *x = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
  float *other = malloc(sizeof(float) * N), *t = malloc(sizeof(float) * N);
  values(x, rank);
  values(want, 0);
  values(other, 2);
  for (int k = 1; k < W; k++) {
    values(t, k);
    for (int i = 0; i < N; i++) want[i] = want[i] + t[i];
  }
  values(t, 0); /* x_0 + (x_1 + x_2): differs somewhere, so the check can fail */
  float *x1 = malloc(sizeof(float) * N);
  values(x1, 1);
  int order_shows = 0;
  for (int i = 0; i < N; i++) order_shows |= (t[i] + (x1[i] + other[i])) != want[i];
  free(x1);
  bad += !order_shows;
  if (tc_group_sum_f32(g, x, N) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, tc_group_error(g));
    bad += 10;
  } else {
    bad += memcmp(x, want, sizeof(float) * N) != 0;
  }
  /* again, to reuse the buffers, with a size that does not divide by W */
  values(x, rank);
  bad += tc_group_sum_f32(g, x, 7) < 0 || memcmp(x, want, sizeof(float) * 7) != 0;
  double d[3] = {rank + 0.1, rank * 1e-17, -1.0};
  bad += tc_group_sum_f64(g, d, 3) < 0 || d[0] != (0.1 + 1.1) + 2.1 || d[1] != (0.0 + 1e-17) + 2e-17 ||
         d[2] != -3.0;
  char msg[32] = "";
  if (rank == 0) snprintf(msg, sizeof msg, "from rank zero");
  bad += tc_group_broadcast(g, msg, sizeof msg) < 0 || strcmp(msg, "from rank zero") != 0;
  bad += tc_group_barrier(g) < 0;
  free(x);
  free(want);
  free(other);
  free(t);
  tc_group_free(g);
  return bad;
}

/* The dying-rank runs' pipe: ranks 0 and 1 write a byte each once their
 * barrier returned, and rank 2 reads both before it dies or stalls. Its own
 * barrier returning does not mean theirs did: killed at once, it could cut
 * their barrier short, and the test would see that barrier fail instead of
 * the next collective. */
static int passed[2] = {-1, -1};

/* Rank 2 closes its connection to the rendezvous (the one whose peer port is
 * spec's) and nothing else: what rank 0 sees of a process whose death its
 * gloo connection did not show. */
static int close_rendezvous_connection(const char *spec) {
  int port = atoi(strrchr(spec, ':') + 1);
  for (int fd = 3; fd < 1024; fd++) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
        ntohs(a.sin_port) == port)
      return close(fd);
  }
  return -1;
}

/* 1: rank 2 vanishes as gloo cannot see it (close_rendezvous_connection,
 * then silence); rank 0 must report it gone once gloo's wait times out. */
static int vanish;

/* Rank 2 dies (timeout_ms > 0) or stalls (timeout_ms < 0, for |timeout_ms|)
 * after every rank joined; the others' next collective must fail within the
 * timeout with a reason (a timeout for the stalled one). Exit 0 if it did. */
static int dying_rank(const char *spec, int rank, int arg) {
  int timeout_ms = arg < 0 ? -arg : arg;
  char err[1024] = "";
  struct tc_group *g = NULL;
  if (tc_group_new(spec, rank, W, timeout_ms, &g, err, sizeof err) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return 100;
  }
  int b = tc_group_barrier(g);
  if (rank == 2) {
    char bytes[2];
    size_t got = 0;
    close(passed[1]); /* a rank that exits without writing ends the wait */
    while (got < 2) {
      ssize_t n = read(passed[0], bytes + got, 2 - got);
      if (n <= 0)
        break;
      got += (size_t)n;
    }
  } else if (b == 0 && write(passed[1], "x", 1) != 1) {
    fprintf(stderr, "rank %d: cannot tell rank 2 it passed the barrier\n", rank);
    return 102;
  }
  if (b < 0) {
    fprintf(stderr, "rank %d: barrier: %s\n", rank, tc_group_error(g));
    return 101;
  }
  if (rank == 2 && arg > 0) raise(SIGKILL);
  if (rank == 2 && vanish && close_rendezvous_connection(spec) < 0) {
    fprintf(stderr, "rank 2: no rendezvous connection to close\n");
    return 103;
  }
  if (rank == 2) pause(); /* stalled: the parent kills it when the others are done */
  float x[1000] = {0};
  double t0 = now_s();
  int r = tc_group_sum_f32(g, x, 1000);
  double took = now_s() - t0;
  fprintf(stderr, "rank %d after rank 2 died or stalled: %d in %.2f s: %s\n", rank, r, took, tc_group_error(g));
  int ok = r < 0 && took < timeout_ms / 1000.0 + 2.0 && strstr(tc_group_error(g), "failed") &&
           (arg > 0 || (r == -ETIMEDOUT && took > timeout_ms / 1000.0 - 0.5));
  /* vanished: rank 0 knows rank 2 is gone; rank 1, without a connection to
   * rank 2 of its own, times out or sees rank 0 leave */
  if (vanish && rank == 0)
    ok = r == -ECONNRESET && took > timeout_ms / 1000.0 - 0.5 &&
         took < timeout_ms / 1000.0 + 2.0 && strstr(tc_group_error(g), "rank 2's process has exited");
  else if (vanish)
    ok = (r == -ETIMEDOUT || r == -ECONNRESET) && took < timeout_ms / 1000.0 + 2.0;
  if (arg < 0 && (rank == 1 || (rank == 0 && !vanish)))
    sleep(2); /* its connections stay until the other has timed out: each one's reason is
               * rank 2 (one gone first, the other would rightly name it; under load rank 1
               * started its sum late enough to see rank 0 leave) */
  tc_group_free(g);
  return ok ? 0 : 1;
}

/* Runs fn as ranks 0..W-1, each its own process; waits for ranks 0..W-2,
 * then (kill_last) kills rank W-1 and waits for it too. */
static void run_ranks(int (*fn)(const char *, int, int), const char *spec, int arg, int kill_last,
                      int *status) {
  pid_t pids[W];
  fflush(NULL);
  for (int k = 0; k < W; k++) {
    pids[k] = fork();
    if (pids[k] == 0) _exit(fn(spec, k, arg));
  }
  if (passed[0] >= 0) { /* the children hold the pipe now */
    close(passed[0]);
    close(passed[1]);
    passed[0] = passed[1] = -1;
  }
  for (int k = 0; k < W - 1; k++) waitpid(pids[k], &status[k], 0);
  if (kill_last) kill(pids[W - 1], SIGKILL);
  waitpid(pids[W - 1], &status[W - 1], 0);
}

static int good_adapter(const char *spec, int rank, int unused) {
  (void)unused;
  return good_rank(spec, rank);
}

int main(void) {
  char spec[64];
  int st[W];
  /* as spotlab-train does: a write to a rank that died is an error to
   * report, not a signal that kills this one without a word */
  signal(SIGPIPE, SIG_IGN);
  pick_spec(spec, sizeof spec);
  run_ranks(good_adapter, spec, 0, 0, st);
  for (int k = 0; k < W; k++) {
    CHECK(WIFEXITED(st[k]));
    CHECK_INT(WEXITSTATUS(st[k]), 0);
  }

  pick_spec(spec, sizeof spec);
  CHECK(pipe(passed) == 0);
  run_ranks(dying_rank, spec, 3000, 0, st);
  for (int k = 0; k < 2; k++) CHECK(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0);
  CHECK(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
  pick_spec(spec, sizeof spec);
  CHECK(pipe(passed) == 0);
  run_ranks(dying_rank, spec, -3000, 1, st); /* stalled rank 2 */
  for (int k = 0; k < 2; k++) CHECK(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0);
  pick_spec(spec, sizeof spec);
  CHECK(pipe(passed) == 0);
  vanish = 1;
  run_ranks(dying_rank, spec, -3000, 1, st); /* rank 2 gone, gloo not told */
  vanish = 0;
  for (int k = 0; k < 2; k++) CHECK(WIFEXITED(st[k]) && WEXITSTATUS(st[k]) == 0);

  /* rank 0 alone: gives up at the deadline and names the missing ranks */
  pick_spec(spec, sizeof spec);
  struct tc_group *g = NULL;
  char err[1024] = "";
  double t0 = now_s();
  int r = tc_group_new(spec, 0, 3, 3000, &g, err, sizeof err);
  double took = now_s() - t0;
  printf("rank 0 alone: %d in %.2f s: %s\n", r, took, err);
  CHECK_INT(r, -ETIMEDOUT);
  CHECK(took < 6.0);
  CHECK(strstr(err, " 1 2") != NULL);
  /* rank 1 alone: nobody at the rendezvous */
  r = tc_group_new(spec, 1, 2, 500, &g, err, sizeof err);
  printf("rank 1 alone: %d: %s\n", r, err);
  CHECK_INT(r, -ETIMEDOUT);
  CHECK(strstr(err, "rank 0") != NULL);
  TEST_MAIN_END();
}
