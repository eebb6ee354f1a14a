/* Project error codes.
 *
 * Functions return int: >= 0 on success, a negative value on failure. A negative
 * value is either -errno or one of the SL_E* codes below, which sit above the
 * errno range so the two never collide. The table is the single place a code is
 * declared; sl_strerror() and sl_errname() are generated from it. */
#ifndef SL_ERR_H
#define SL_ERR_H

#include <stdbool.h>
#include <stddef.h>

#define SL_ERRORS(X)                                                            \
  X(SL_EHMAC,        "message signature missing or wrong")                      \
  X(SL_EREPLAY,      "message replayed (signature seen before)")                \
  X(SL_EWIRE,        "malformed wire message")                                  \
  X(SL_ELIMIT,       "size limit exceeded")                                     \
  X(SL_EJSON,        "malformed JSON")                                          \
  X(SL_EJSONDEPTH,   "JSON nested too deeply")                                  \
  X(SL_ECONFIG,      "invalid configuration")                                   \
  X(SL_ESCHEME,      "unsupported signature scheme")                            \
  X(SL_EPARSE,       "syntax error")                                            \
  X(SL_ENAME,        "unknown name")                                            \
  X(SL_ETYPE,        "wrong type of value")                                     \
  X(SL_ENOGATEWAY,   "no gateway reachable")                                    \
  X(SL_EINTERRUPTED, "interrupted")                                             \
  X(SL_EPREEMPTED,   "instance preempted")                                      \
  X(SL_ECHECKSUM,    "checksum mismatch")                                       \
  X(SL_EFORMAT,      "unrecognised file format")                                \
  X(SL_EMISMATCH,    "incompatible configuration")                              \
  X(SL_EZMQ,         "ZeroMQ error")                                            \
  X(SL_ESQLITE,      "SQLite error")                                            \
  X(SL_ECURL,        "HTTP transfer error")                                     \
  X(SL_ECUDA,        "CUDA error")                                              \
  X(SL_ENCCL,        "NCCL error")                                              \
  X(SL_EBLAS,        "BLAS error")                                              \
  X(SL_EAUTH,        "not authenticated")                                      \
  X(SL_ESTATE,       "not allowed in the current state")                        \
  X(SL_ENOTSUP,      "not supported")                                           \
  X(SL_EGLOO,        "gloo error")

enum sl_err {
  SL_ERR_BASE_ = 10000,
#define SL_ERR_ENUM_(name, text) name##_POS_,
  SL_ERRORS(SL_ERR_ENUM_)
#undef SL_ERR_ENUM_
  SL_ERR_END_
};

#define SL_ERR_CODE_(name, text) enum { name = -(int)name##_POS_ };
SL_ERRORS(SL_ERR_CODE_)
#undef SL_ERR_CODE_

/* Text for a negative error (project code or -errno). Never NULL. */
const char *sl_strerror(int err);
/* Symbolic name ("SL_EHMAC", "ENOENT"). Never NULL. */
const char *sl_errname(int err);
/* Says why: the message into err (size bytes, cut to fit; nothing when err
 * is NULL or size 0), and returns code (0 where the caller returns its own
 * later), so a failure reads `return sl_err_say(err, size, SL_ECONFIG, ...)`. */
int sl_err_say(char *err, size_t size, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Whether err says the other end never answered (a timeout, a connection
 * refused or reset, a host not found, a transfer that broke off: sl_http's
 * and sl_s3's codes for them), as against an answer: worth another try. */
bool sl_err_unanswered(int err);

#endif
