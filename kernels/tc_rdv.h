/* Rendezvous: how the ranks of a data-parallel run find each other. For
 * NCCL they get rank 0's 128-byte unique id; for gloo (the CPU path) they
 * swap the addresses of their connections. CPU-only (no NCCL, CUDA or gloo
 * here); ids and addresses are opaque bytes.
 *
 *  - one machine: spotlab-train --gpus N forks N-1 ranks (tc_rdv_fork) and
 *    writes the id down a pipe to each (tc_rdv_pipe_send / _recv);
 *  - across machines: rank 0 serves the id on tcp://HOST:PORT
 *    (tc_rdv_listen + tc_rdv_serve) and every other rank asks for it
 *    (tc_rdv_fetch), retrying until rank 0 is up or the deadline passes;
 *  - or the id is passed in as 256 hex digits (--nccl-id HEX, tc_rdv_unhex).
 *
 * Wire format over TCP (all sizes fixed): a rank sends "SLRDV001", rank u32,
 * world u32 (little-endian); rank 0 answers "SLRDV-OK" + the 128 id bytes, or
 * "SLRDV-NO" + 128 zero bytes when the world size differs, the rank is out of
 * range or was already served.
 *
 * The exchange (gloo): every rank has `world` slots of slot_bytes, slot k
 * meant for rank k, and needs slot r of every rank (r its own rank). A rank
 * sends "SLRDV002", rank u32, world u32, slot_bytes u32, u32 0, then its
 * world * slot_bytes; rank 0 keeps each connection open until all ranks are
 * in, then answers "SLRDV-OK" + the world slots meant for that rank, in rank
 * order. A wrong world size or slot size, an out-of-range rank or a rank
 * already connected is answered "SLRDV-NO" and does not end the wait.
 *
 * The exchange's connections may stay open afterwards, idle, as a sign of
 * life: the kernel closes a process's sockets when it exits or is killed, so
 * a closed one means that rank is gone, while a stopped or hung process
 * keeps its end open (tc_rdv_peer_gone). */
#ifndef TC_RDV_H
#define TC_RDV_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TC_RDV_ID_BYTES 128
#define TC_RDV_HEX_CHARS (2 * TC_RDV_ID_BYTES)

/* A flag (a signal handler's) that, once set, ends every wait here with
 * -ECANCELED within 100 ms and err saying "stopped"; NULL: none. */
void tc_rdv_set_stop(volatile sig_atomic_t *flag);

/* Lowercase hex of id into out (TC_RDV_HEX_CHARS + 1 bytes, NUL-terminated). */
void tc_rdv_hex(const uint8_t id[TC_RDV_ID_BYTES], char *out);
/* Exactly TC_RDV_HEX_CHARS hex digits -> id; -EINVAL otherwise (id untouched). */
int tc_rdv_unhex(const char *hex, uint8_t id[TC_RDV_ID_BYTES]);

/* Splits "tcp://HOST:PORT" ("tcp://[v6addr]:PORT" for IPv6). -EINVAL on bad syntax. */
int tc_rdv_parse(const char *spec, char *host, size_t host_size, char *port, size_t port_size);

/* Rank 0: a listening socket for spec (port 0 picks a free port); owned fd in
 * *ret_fd. tc_rdv_port gives the bound port. */
int tc_rdv_listen(const char *spec, int *ret_fd, char *err, size_t err_size);
int tc_rdv_port(int listen_fd);
/* Rank 0: answers ranks 1..world-1 once each, then returns 0; -ETIMEDOUT
 * (naming the missing ranks in err) if they have not all asked by the
 * deadline. Wrong requests are refused and do not end the wait. Borrows fd. */
int tc_rdv_serve(int listen_fd, int world, const uint8_t id[TC_RDV_ID_BYTES], int timeout_ms,
                 char *err, size_t err_size);
/* Rank > 0: asks spec for the id, retrying refused connections until the
 * deadline. SL_EMISMATCH when rank 0 refuses, -ETIMEDOUT when it never answers. */
int tc_rdv_fetch(const char *spec, int rank, int world, uint8_t id[TC_RDV_ID_BYTES],
                 int timeout_ms, char *err, size_t err_size);

/* Bounds of the exchange: a slot, and the table rank 0 holds (world² slots). */
#define TC_RDV_SLOT_MAX 4096
#define TC_RDV_EXCHANGE_MAX_BYTES (64u << 20)

/* Rank 0 of the exchange: collects every rank's slots on listen_fd (borrowed)
 * and answers each; ret_slots (world * slot_bytes) gets slot 0 of every rank.
 * With keep_fds (world entries) non-NULL, a successful exchange leaves the
 * connections open: keep_fds[k] is rank k's (keep_fds[0] = -1), the caller's
 * to close.
 * -ETIMEDOUT naming the missing ranks in err if they are not all in by the
 * deadline; -E2BIG beyond the bounds above. */
int tc_rdv_exchange_serve(int listen_fd, int world, size_t slot_bytes, const uint8_t *mine,
                          uint8_t *ret_slots, int *keep_fds, int timeout_ms, char *err,
                          size_t err_size);
/* Rank > 0: sends its slots (mine: world * slot_bytes) to spec, retrying until
 * rank 0 listens, and waits for the slots meant for it (ret_slots, slot i from
 * rank i). SL_EMISMATCH when refused, -ETIMEDOUT past the deadline. With
 * keep_fd non-NULL, *keep_fd gets the open connection to rank 0 after a
 * successful exchange (-1 otherwise), the caller's to close. */
int tc_rdv_exchange_fetch(const char *spec, int rank, int world, size_t slot_bytes,
                          const uint8_t *mine, uint8_t *ret_slots, int *keep_fd, int timeout_ms,
                          char *err, size_t err_size);
/* 1 when the other end of fd, a connection kept from the exchange, has
 * closed or reset it (that rank's process has exited), 0 while it is open
 * or fd is -1. Does not block or consume anything. */
int tc_rdv_peer_gone(int fd);
/* This machine's numeric address on the route to spec's host (which is that
 * host itself when spec names this machine): where the others reach us. */
int tc_rdv_local_host(const char *spec, char *host, size_t host_size, char *err, size_t err_size);

/* One machine: forks n-1 children with a pipe each. The parent gets
 * *ret_rank 0, the write ends in fds[1..n-1] and the pids in pids[1..n-1];
 * child r gets *ret_rank r and its read end in fds[0] (the others closed);
 * a child dies with its parent (PR_SET_PDEATHSIG SIGKILL), so no rank is left
 * waiting in a collective. */
int tc_rdv_fork(int n, int *ret_rank, int *fds, pid_t *pids);
int tc_rdv_pipe_send(int fd, const uint8_t id[TC_RDV_ID_BYTES]);
/* -ETIMEDOUT after timeout_ms; -EPIPE when the writer closed early. */
int tc_rdv_pipe_recv(int fd, uint8_t id[TC_RDV_ID_BYTES], int timeout_ms);

#endif
