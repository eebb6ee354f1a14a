/* The rendezvous without NCCL, gloo or a GPU: hex form, address parsing,
 * the TCP hand-out of the NCCL id between processes on loopback (right and
 * wrong world sizes, a duplicate rank, nobody listening), the all-to-all
 * exchange of slots that gloo's addresses travel in (the same cases), its
 * connections kept as signs of life (a stopped rank's open, a killed one's
 * closed), the local address, and the pipe hand-off to forked ranks. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sl_err.h"
#include "tc_rdv.h"

static void fill(uint8_t *id, int seed) {
  for (int i = 0; i < TC_RDV_ID_BYTES; i++) id[i] = (uint8_t)(i * 37 + seed);
}

/* Child: fetch as `rank` of `world`; exit 0 if the result is `expect`
 * (0 = the id from fill(.., 9), else that negative error). */
static pid_t fetcher(const char *spec, int rank, int world, int expect) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  uint8_t id[TC_RDV_ID_BYTES], want[TC_RDV_ID_BYTES];
  char err[512] = "";
  fill(want, 9);
  int r = tc_rdv_fetch(spec, rank, world, id, 5000, err, sizeof err);
  if (r != expect) fprintf(stderr, "rank %d: got %d (%s), expected %d\n", rank, r, err, expect);
  _exit(r == expect && (r != 0 || memcmp(id, want, sizeof id) == 0) ? 0 : 1);
}

enum { SLOT = 40 };

/* Slot k of rank i's table: its bytes say who made it for whom. */
static void fill_slots(uint8_t *t, int rank, int world) {
  for (int k = 0; k < world; k++)
    for (int b = 0; b < SLOT; b++) t[k * SLOT + b] = (uint8_t)(rank * 16 + k + b * 3);
}

/* Child: exchange as `rank` of `world` (telling the server `claim` as the
 * world size); exit 0 if the result is `expect` and, on success, slot i is
 * rank i's slot for us. */
static pid_t exchanger(const char *spec, int rank, int world, int claim, int expect,
                       int timeout_ms) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  uint8_t mine[8 * SLOT], got[8 * SLOT], want[8 * SLOT];
  char err[512] = "";
  fill_slots(mine, rank, claim);
  int r = tc_rdv_exchange_fetch(spec, rank, claim, SLOT, mine, got, NULL, timeout_ms, err,
                                sizeof err);
  if (r != expect) fprintf(stderr, "rank %d: got %d (%s), expected %d\n", rank, r, err, expect);
  int ok = r == expect;
  for (int i = 0; ok && r == 0 && i < world; i++) {
    fill_slots(want, i, world);
    ok = memcmp(got + i * SLOT, want + rank * SLOT, SLOT) == 0;
  }
  _exit(ok ? 0 : 1);
}

/* Child: exchange as `rank` of 3 keeping the connection to rank 0, which
 * must be seen open; then stop until continued, and exit 0 once rank 0's
 * end is seen closed (within 5 s). */
static pid_t keeper(const char *spec, int rank) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  uint8_t mine[3 * SLOT], got[3 * SLOT];
  char err[512] = "";
  int fd = -1;
  fill_slots(mine, rank, 3);
  if (tc_rdv_exchange_fetch(spec, rank, 3, SLOT, mine, got, &fd, 5000, err, sizeof err) != 0 ||
      fd < 0 || tc_rdv_peer_gone(fd))
    _exit(1);
  raise(SIGSTOP);
  for (int i = 0; i < 500; i++) {
    if (tc_rdv_peer_gone(fd)) _exit(0);
    usleep(10000);
  }
  _exit(2);
}

/* Polls peer_gone for up to 5 s: a closed connection is seen at once on
 * loopback, but nothing here depends on that. */
static int seen_gone(int fd) {
  for (int i = 0; i < 500; i++) {
    if (tc_rdv_peer_gone(fd)) return 1;
    usleep(10000);
  }
  return 0;
}

static int exited_ok(pid_t pid) {
  int st;
  if (waitpid(pid, &st, 0) != pid) return 0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void) {
  uint8_t id[TC_RDV_ID_BYTES], back[TC_RDV_ID_BYTES];
  char hex[TC_RDV_HEX_CHARS + 1], err[512];
  fill(id, 9);
  tc_rdv_hex(id, hex);
  CHECK_INT(strlen(hex), TC_RDV_HEX_CHARS);
  CHECK_INT(tc_rdv_unhex(hex, back), 0);
  CHECK(memcmp(id, back, sizeof id) == 0);
  hex[5] = 'g';
  CHECK_INT(tc_rdv_unhex(hex, back), -EINVAL);
  CHECK_INT(tc_rdv_unhex("abcd", back), -EINVAL);

  char host[64], port[8];
  CHECK_INT(tc_rdv_parse("tcp://10.0.0.5:29500", host, sizeof host, port, sizeof port), 0);
  CHECK_STR(host, "10.0.0.5");
  CHECK_STR(port, "29500");
  CHECK_INT(tc_rdv_parse("tcp://[::1]:7", host, sizeof host, port, sizeof port), 0);
  CHECK_STR(host, "::1");
  CHECK_INT(tc_rdv_parse("udp://h:1", host, sizeof host, port, sizeof port), -EINVAL);
  CHECK_INT(tc_rdv_parse("tcp://h", host, sizeof host, port, sizeof port), -EINVAL);
  CHECK_INT(tc_rdv_parse("tcp://h:99999", host, sizeof host, port, sizeof port), -EINVAL);
  CHECK_INT(tc_rdv_parse("tcp://h:12a", host, sizeof host, port, sizeof port), -EINVAL);

  /* world of 3 on loopback; a wrong world size and a duplicate rank are
   * refused without ending the wait */
  int lfd = -1;
  CHECK_INT(tc_rdv_listen("tcp://127.0.0.1:0", &lfd, err, sizeof err), 0);
  int p = tc_rdv_port(lfd);
  CHECK(p > 0);
  char spec[64];
  snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", p);
  pid_t wrong = fetcher(spec, 1, 4, SL_EMISMATCH);
  CHECK_INT(tc_rdv_serve(lfd, 3, id, 1500, err, sizeof err), -ETIMEDOUT); /* refuses it, waits on */
  CHECK(exited_ok(wrong));
  pid_t a = fetcher(spec, 1, 3, 0), b = fetcher(spec, 2, 3, 0);
  CHECK_INT(tc_rdv_serve(lfd, 3, id, 10000, err, sizeof err), 0);
  CHECK(exited_ok(a));
  CHECK(exited_ok(b));
  close(lfd);

  /* rank 0 waits with a deadline and names who never came */
  CHECK_INT(tc_rdv_listen("tcp://127.0.0.1:0", &lfd, err, sizeof err), 0);
  snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", tc_rdv_port(lfd));
  pid_t only = fetcher(spec, 2, 3, 0);
  int r = tc_rdv_serve(lfd, 3, id, 1500, err, sizeof err);
  CHECK_INT(r, -ETIMEDOUT);
  CHECK(strstr(err, " 1") != NULL);
  printf("serve timeout: %s\n", err);
  CHECK(exited_ok(only));
  /* a rank asking where nobody listens gives up at its deadline */
  close(lfd);
  CHECK_INT(tc_rdv_fetch(spec, 1, 2, back, 300, err, sizeof err), -ETIMEDOUT);
  printf("fetch timeout: %s\n", err);

  /* the exchange: world of 3; a wrong world size is refused without ending
   * the wait, the others get their slots from every rank in rank order */
  CHECK_INT(tc_rdv_listen("tcp://127.0.0.1:0", &lfd, err, sizeof err), 0);
  snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", tc_rdv_port(lfd));
  uint8_t mine[3 * SLOT], slots[3 * SLOT], want[3 * SLOT];
  fill_slots(mine, 0, 3);
  wrong = exchanger(spec, 1, 3, 4, SL_EMISMATCH, 5000); /* alone first: refused, the wait goes on */
  CHECK_INT(tc_rdv_exchange_serve(lfd, 3, SLOT, mine, slots, NULL, 1500, err, sizeof err), -ETIMEDOUT);
  CHECK(exited_ok(wrong));
  a = exchanger(spec, 1, 3, 3, 0, 5000);
  b = exchanger(spec, 2, 3, 3, 0, 5000);
  CHECK_INT(tc_rdv_exchange_serve(lfd, 3, SLOT, mine, slots, NULL, 10000, err, sizeof err), 0);
  for (int i = 0; i < 3; i++) {
    fill_slots(want, i, 3);
    CHECK(memcmp(slots + i * SLOT, want, SLOT) == 0);
  }
  CHECK(exited_ok(a));
  CHECK(exited_ok(b));
  /* a missing rank: rank 0 gives up at its deadline naming it; the rank that
   * came hears nothing and gives up at its own */
  only = exchanger(spec, 2, 3, 3, -ETIMEDOUT, 2000);
  r = tc_rdv_exchange_serve(lfd, 3, SLOT, mine, slots, NULL, 1500, err, sizeof err);
  CHECK_INT(r, -ETIMEDOUT);
  CHECK(strstr(err, " 1") != NULL && strstr(err, " 2") == NULL);
  printf("exchange serve timeout: %s\n", err);
  CHECK(exited_ok(only));
  close(lfd);
  CHECK_INT(tc_rdv_exchange_fetch(spec, 1, 2, SLOT, mine, slots, NULL, 300, err, sizeof err), -ETIMEDOUT);
  printf("exchange fetch timeout: %s\n", err);
  CHECK_INT(tc_rdv_exchange_serve(-1, 100000, SLOT, mine, slots, NULL, 10, err, sizeof err), -EINVAL);
  CHECK_INT(tc_rdv_exchange_serve(-1, 4096, 4096, mine, slots, NULL, 10, err, sizeof err), -E2BIG);
  /* kept connections as signs of life: a stopped rank's stays open, a
   * killed rank's closes, and a rank sees rank 0's end close */
  CHECK_INT(tc_rdv_listen("tcp://127.0.0.1:0", &lfd, err, sizeof err), 0);
  snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", tc_rdv_port(lfd));
  a = keeper(spec, 1);
  b = keeper(spec, 2);
  int keep[3] = {7, 7, 7}, st;
  CHECK_INT(tc_rdv_exchange_serve(lfd, 3, SLOT, mine, slots, keep, 10000, err, sizeof err), 0);
  close(lfd);
  CHECK_INT(keep[0], -1);
  CHECK(keep[1] >= 0 && keep[2] >= 0);
  CHECK_INT(waitpid(a, &st, WUNTRACED), a);
  CHECK(WIFSTOPPED(st));
  CHECK_INT(waitpid(b, &st, WUNTRACED), b);
  CHECK(WIFSTOPPED(st));
  CHECK_INT(tc_rdv_peer_gone(keep[1]), 0); /* stopped: still there */
  CHECK_INT(tc_rdv_peer_gone(keep[2]), 0);
  CHECK_INT(tc_rdv_peer_gone(-1), 0);
  kill(a, SIGKILL);
  CHECK_INT(waitpid(a, &st, 0), a);
  CHECK(seen_gone(keep[1]));
  CHECK_INT(tc_rdv_peer_gone(keep[2]), 0);
  close(keep[1]);
  close(keep[2]); /* rank 0 gone, as rank 2 sees it once continued */
  kill(b, SIGCONT);
  CHECK(exited_ok(b));
  /* a failed exchange keeps nothing */
  keep[0] = keep[1] = 7;
  CHECK_INT(tc_rdv_exchange_fetch(spec, 1, 2, SLOT, mine, slots, &keep[0], 300, err, sizeof err),
            -ETIMEDOUT);
  CHECK_INT(keep[0], -1);

  /* where the others reach this machine, on the route to the rendezvous host */
  char local[64];
  CHECK_INT(tc_rdv_local_host("tcp://127.0.0.1:9", local, sizeof local, err, sizeof err), 0);
  CHECK_STR(local, "127.0.0.1");

  /* forked ranks get the id down their pipe */
  int fds[4] = {-1, -1, -1, -1}, rank = -1;
  pid_t pids[4] = {0};
  fflush(NULL);
  CHECK_INT(tc_rdv_fork(4, &rank, fds, pids), 0);
  if (rank > 0) {
    uint8_t got[TC_RDV_ID_BYTES];
    int rr = tc_rdv_pipe_recv(fds[0], got, 5000);
    _exit(rr == 0 && memcmp(got, id, sizeof got) == 0 ? 0 : 10 + rank);
  }
  CHECK_INT(rank, 0);
  for (int k = 1; k < 4; k++) {
    CHECK_INT(tc_rdv_pipe_send(fds[k], id), 0);
    close(fds[k]);
  }
  for (int k = 1; k < 4; k++) CHECK(exited_ok(pids[k]));
  /* a closed pipe is an error, not a hang */
  int pp[2];
  CHECK_INT(pipe(pp), 0);
  close(pp[1]);
  CHECK_INT(tc_rdv_pipe_recv(pp[0], back, 1000), -EPIPE);
  close(pp[0]);
  TEST_MAIN_END();
}
