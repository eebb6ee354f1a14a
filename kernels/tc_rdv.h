/* Rendezvous: how the ranks of a data-parallel run get rank 0's 128-byte
 * NCCL unique id. CPU-only (no NCCL or CUDA here); the id is opaque bytes.
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
 * range or was already served. */
#ifndef TC_RDV_H
#define TC_RDV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TC_RDV_ID_BYTES 128
#define TC_RDV_HEX_CHARS (2 * TC_RDV_ID_BYTES)

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
