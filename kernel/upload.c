/* A job statement's data file, uploaded to the gateway before it takes the
 * job, for workers that cannot read the notebook machine's files (an EC2
 * instance): docs/internals/protocols.md §1, data.have and data.put.
 *
 * A submit reply that asks for the file ({"upload":{"path","chunk_bytes"}})
 * starts it: the file is opened and hashed (SHA-256, a slice of at most
 * HASH_SLICE_BYTES or HASH_SLICE_US a turn of the loop, so that an interrupt
 * is heard while a large file is read), and data.have tells the gateway
 * what the kernel has. Each reply names the
 * gateway's state: `receiving` wants the bytes from its "offset". Several
 * data.put requests are in flight, each the chunk after the one before, so
 * that a distant gateway costs a round trip per window of chunks, not per
 * chunk; the gateway takes them in order. The window starts at
 * WINDOW_FIRST and grows by one with each put answered within GROW_US of
 * being sent, up to WINDOW_MAX; a put answered later than SHRINK_US halves
 * it (down to one), so that on a slow link the chunks queued behind each
 * other stay far from the request timeout. A reply whose offset is
 * the end of its own chunk lets the next one go; any other offset (the
 * gateway restarted, or holds more than was sent) forgets the puts still in
 * flight (the gateway writes none of them but at the offset it wants) and
 * sends again from exactly there;
 * `checking` and `publishing` are polled with data.have on the interpreter's
 * timer, POLL_FIRST_US after the reply, then twice as long each time up to
 * POLL_US (a file store publishes in a few milliseconds, S3 in seconds; the
 * kernel keeps serving meanwhile), and `ready`
 * submits the statement's request again, naming in data_files every file
 * the statement uploaded so far (path, sha256, size). A data set folder
 * (fashion_mnist("FOLDER")) is its files, one upload each: the gateway
 * answers each submit with the next one it lacks. A reply that asks for a
 * file already uploaded fails the statement rather than loop. The cell says "uploading NAME (SIZE) ..." once, before the
 * first byte goes; a file the gateway already holds says nothing. An upload
 * of PROGRESS_MIN_BYTES or more also shows how far it is, in a display
 * updated in place at most once a PROGRESS_US (front ends without display
 * updates show the first and the last).
 *
 * Invariants: requests in flight (data.have, a submit, or up to the
 * window's data.put, the oldest being the statement's gw_req) or a poll
 * due, never both; the puts in flight are in the order of their offsets,
 * without gaps, and each keeps a copy of its chunk (WINDOW_MAX chunks in
 * memory at most, in the gateway client); the chunks come from the file
 * descriptor that was hashed, and a file found shorter or changed on the
 * way fails the statement ("changed while it was uploaded"), as does the
 * gateway's SL_ECHECKSUM. The kernel uploads only the file the statement's
 * data definition names (or a file of its data set folder that
 * spotlab-train reads), whatever path the gateway asks for. The upload
 * belongs to the statement's follow (jobs_int.h): an interrupt or the end of
 * the cell frees it, and nothing is sent afterwards. Polling, and the number
 * of chunks the gateway may ask for, are bounded, so a gateway that never
 * gets done cannot keep a cell waiting forever without being told so. */
#include "upload.h"

#include "jobs_int.h"
#include "khash.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sl_err.h"
#include "sl_file.h"
#include "sl_ident.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define POLL_FIRST_US (5 * SL_US_PER_MS)
/* Hashing goes on for at most this many bytes or this long a turn, so the
 * kernel answers interrupts and requests while a large file is read. */
#define HASH_SLICE_BYTES (64ll << 20)
#define HASH_SLICE_US (50 * SL_US_PER_MS)
#define POLL_US (200 * SL_US_PER_MS)
#define POLL_MAX_US (3600 * SL_US_PER_S) /* checking or publishing longer: the cell fails */
#define DEFAULT_CHUNK_BYTES (512u << 10)
/* A chunk is data.put's second frame, at most the gateway's 1 MiB. */
#define MAX_CHUNK_BYTES (1024u << 10)
#define PROGRESS_MIN_BYTES (16ll << 20)
#define PROGRESS_US (1 * SL_US_PER_S)
/* data.put requests in flight: at most 8 MiB of 1 MiB chunks, a round
 * trip's worth at 80 ms and 100 MiB/s. */
#define WINDOW_MAX 8
#define WINDOW_FIRST 2
#define GROW_US (1 * SL_US_PER_S)
#define SHRINK_US (2 * SL_US_PER_S)

/* The bytes read from a file to hash or to send: one statement uploads
 * at a time, and the kernel has one thread. */
static unsigned char file_buf[MAX_CHUNK_BYTES];

struct jk_upload {
  char *path;
  int fd;                     /* the file hashed; -1 once the submit went again */
  struct stat st;             /* as hashed: a change on the way shows against it */
  int64_t size_bytes;
  char sha256[2 * crypto_hash_sha256_BYTES + 1];
  size_t chunk_bytes;
  int64_t have_bytes;         /* the gateway's last offset (all of it once publishing) */
  uint64_t n_puts, max_puts;  /* chunks sent, and how many the gateway may ask for */
  int64_t send_at;            /* the next chunk goes from here */
  struct {
    int64_t id, end;          /* a data.put in flight, and where its chunk ends */
    int64_t sent_us;          /* when it was sent */
  } fly[WINDOW_MAX];
  size_t n_fly, window;       /* puts in flight, and how many may be */
  int64_t poll_at_us;         /* the next data.have; INT64_MAX: none due */
  int64_t poll_wait_us;       /* the wait before it; 0: none since the last receiving */
  bool hashing;               /* the file is being hashed, a slice a turn of the loop */
  int64_t hashed;             /* bytes hashed so far */
  struct jk_hash hash;         /* while hashing */
  int64_t poll_until_us;      /* polling gives up then; 0: not polling */
  bool announced;             /* the cell's "uploading" line went out */
  bool progress_shown;        /* the progress display went out (updates follow) */
  bool progress_done;         /* and said the upload is done */
  int64_t storing_since_us;   /* the gateway first said it was publishing; 0: not yet */
  int64_t progress_at_us;     /* the next update of the progress display, at the earliest */
  json_t *done;               /* the statement's files uploaded before this one: [{path, sha256, size}] */
};

struct jk_upload *jk_upload_free(struct jk_upload *u) {
  if (!u)
    return NULL;
  if (u->fd >= 0)
    close(u->fd);
  if (u->hashing)
    jk_hash_drop(&u->hash);
  json_decref(u->done);
  free(u->path);
  free(u);
  return NULL;
}

static struct jk_upload *running_upload(const struct jk_interp *ip) {
  const struct jk_execution *x = ip->running;
  return x && x->follow ? x->follow->upload : NULL;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash && slash[1] ? slash + 1 : path;
}

enum progress { SENDING, STORING, STORED };

/* The progress display of a large upload: the bytes sent so far (the
 * gateway's offset), the gateway storing what it has, or the end; at most
 * once a PROGRESS_US but the end, said once. */
static void show_progress(struct jk_interp *ip, struct jk_upload *u, int64_t sent, enum progress phase) {
  int64_t now = sl_time_mono_us();
  if (u->size_bytes < PROGRESS_MIN_BYTES || ip->running->silent || u->progress_done ||
      (phase != STORED && now < u->progress_at_us) || (phase == STORED && !u->progress_shown))
    return;
  u->progress_at_us = now + PROGRESS_US;
  u->progress_done = phase == STORED;
  char have[32], size[32], id[64], *text = NULL;
  sl_file_size_text(sent, have, sizeof have);
  sl_file_size_text(u->size_bytes, size, sizeof size);
  snprintf(id, sizeof id, "spotlab-upload-%.16s", u->sha256);
  int n = phase == STORED ? asprintf(&text, "uploaded %s (%s)", base_name(u->path), size)
          : phase == STORING
              ? asprintf(&text, "uploading %s: %s sent; the gateway is storing it (%llds)", base_name(u->path),
                         size, (long long)((now - u->storing_since_us) / SL_US_PER_S))
              : asprintf(&text, "uploading %s: %s of %s (%d%%)", base_name(u->path), have, size,
                         (int)(100 * sent / u->size_bytes));
  json_t *bundle = n >= 0 ? json_pack("{s:s}", "text/plain", text) : NULL;
  free(n >= 0 ? text : NULL);
  if (bundle)
    ip->pub->display(ip->pub_ud, JK_PUB_RUNNING, bundle, id, u->progress_shown);
  u->progress_shown = true;
}

static enum jk_step changed(struct jk_interp *ip, const struct jk_upload *u) {
  return jk_exec_fail(ip, "SubmitError", "the data file %s changed while it was uploaded; run the cell again",
                      u->path);
}

static bool same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Whether path is a file the running statement's data definition names:
 * a text("PATH") file, or one of the files spotlab-train reads in a
 * fashion_mnist("FOLDER") (sl_ident.h), as written there or the same file
 * once links are resolved. A statement without one (%rerun, whose job
 * reads its original's copy) uploads nothing: the kernel could not tell
 * which file it may send. */
static bool statement_data(const struct jk_interp *ip, const char *path) {
  const struct jk_execution *x = ip->running;
  const struct jk_stmt *s = x->pc < x->cell->n ? &x->cell->stmts[x->pc] : NULL;
  struct jk_def d;
  if (!s || !s->data || jk_state_def(ip->state, s->data, &d) < 0)
    return false;
  const char *want = json_string_value(json_array_get(json_object_get(d.spec, "args"), 0));
  const char *type = sl_json_get_str(d.spec, "type", "");
  if (!want || !*want)
    return false;
  char file[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
  if (!strcmp(type, "fashion_mnist")) {
    const char *slash = strrchr(path, '/');
    size_t i = 0;
    while (slash && i < SL_IMAGE_SET_FILES && strcmp(slash + 1, sl_image_set_files[i]))
      i++;
    size_t len = strlen(want);
    while (len > 1 && want[len - 1] == '/') /* "FOLDER/" names the same files */
      len--;
    if (!slash || i == SL_IMAGE_SET_FILES ||
        (size_t)snprintf(file, sizeof file, "%.*s/%s", (int)len, want, sl_image_set_files[i]) >= sizeof file)
      return false;
    want = file;
  } else if (strcmp(type, "text")) {
    return false;
  }
  if (strcmp(want, path) == 0)
    return true;
  return realpath(want, a) && realpath(path, b) && strcmp(a, b) == 0;
}

static enum jk_step send_have(struct jk_interp *ip, const struct jk_upload *u) {
  return jk_jobs_await(ip,
                       json_pack("{s:s, s:s, s:I}", "type", "data.have", "sha256", u->sha256, "size",
                                 (json_int_t)u->size_bytes),
                       OP_DATA, 0);
}

/* Reads n bytes at off into buf: n, fewer at the end of the file, or -errno. */
static ssize_t read_at(int fd, unsigned char *buf, size_t n, int64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + (int64_t)got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* The chunk from send_at, as a data.put's second frame, one more in
 * flight; the cell's line before the first. */
static enum jk_step send_put(struct jk_interp *ip, struct jk_upload *u) {
  int64_t offset = u->send_at;
  struct stat now;
  if (fstat(u->fd, &now) < 0 || !same_file(&now, &u->st))
    return changed(ip, u);
  int64_t left = u->size_bytes - offset;
  size_t n = left < (int64_t)u->chunk_bytes ? (size_t)left : u->chunk_bytes;
  ssize_t got = read_at(u->fd, file_buf, n, offset);
  if (got != (ssize_t)n) {
    if (got >= 0)
      return changed(ip, u);
    return jk_exec_fail(ip, "DataError", "cannot read the data file %s: %s", u->path, sl_strerror((int)got));
  }
  json_t *req = json_pack("{s:s, s:s, s:I, s:I}", "type", "data.put", "sha256", u->sha256, "size",
                          (json_int_t)u->size_bytes, "offset", (json_int_t)offset);
  if (!u->announced && !ip->running->silent) {
    char size[32], *line = NULL;
    sl_file_size_text(u->size_bytes, size, sizeof size);
    if (asprintf(&line, "uploading %s (%s) for the gateway's workers\n", base_name(u->path), size) >= 0)
      jk_exec_stream(ip, "stdout", line);
    free(line);
  }
  u->announced = true;
  show_progress(ip, u, u->have_bytes, SENDING);
  u->n_puts++;
  enum jk_step st = jk_jobs_await_data(ip, req, file_buf, n, OP_DATA, 0); /* the request keeps a copy */
  if (st != JK_STEP_WAIT)
    return st;
  u->fly[u->n_fly].id = ip->running->gw_req;
  u->fly[u->n_fly].sent_us = sl_time_mono_us();
  u->fly[u->n_fly++].end = offset + (int64_t)n;
  u->send_at = offset + (int64_t)n;
  return JK_STEP_WAIT;
}

/* Fills the window: chunks from send_at while fewer than the window are in
 * flight and the file has bytes left; the statement waits for the oldest. */
static enum jk_step send_puts(struct jk_interp *ip, struct jk_upload *u) {
  /* an empty file is one put of nothing */
  while (u->n_fly < u->window && (u->send_at < u->size_bytes || (u->size_bytes == 0 && !u->n_fly))) {
    if (u->n_puts >= u->max_puts)
      return jk_exec_fail(ip, "GatewayError", "the gateway asked for parts of %s %llu times; the upload stops",
                          u->path, (unsigned long long)u->n_puts);
    enum jk_step st = send_put(ip, u);
    if (st != JK_STEP_WAIT)
      return st;
  }
  if (u->n_fly) {
    ip->running->gw_req = u->fly[0].id;
    ip->running->gw_op = OP_DATA;
  }
  return JK_STEP_WAIT;
}

/* The puts still in flight are of no more use: their replies are ignored. */
static void forget_puts(struct jk_interp *ip, struct jk_upload *u) {
  for (size_t i = 0; i < u->n_fly; i++)
    jk_gw_forget(ip->gw, u->fly[i].id);
  u->n_fly = 0;
}

bool jk_upload_owns(const struct jk_interp *ip, int64_t id) {
  const struct jk_upload *u = running_upload(ip);
  for (size_t i = 0; u && u->fd >= 0 && i < u->n_fly; i++)
    if (u->fly[i].id == id)
      return true;
  return false;
}

/* Opens the file at path into a new upload (*ret, owned), to be hashed. */
static enum jk_step open_file(struct jk_interp *ip, const char *path, struct jk_upload **ret) {
  struct jk_upload *u = calloc(1, sizeof *u);
  if (u)
    u->fd = -1;
  if (!u || !(u->path = strdup(path))) {
    jk_upload_free(u);
    return jk_exec_fail(ip, "MemoryError", "out of memory");
  }
  int r = 0;
  u->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not hang the kernel */
  if (u->fd < 0 || fstat(u->fd, &u->st) < 0)
    r = -errno;
  else if (!S_ISREG(u->st.st_mode))
    r = S_ISDIR(u->st.st_mode) ? -EISDIR : -EINVAL;
  if (r < 0) {
    jk_upload_free(u);
    return jk_exec_fail(ip, "DataError", "cannot read the data file %s to upload it for the gateway's workers: %s",
                        path, sl_strerror(r));
  }
  u->size_bytes = (int64_t)u->st.st_size;
  u->hashing = true;
  jk_hash_init(&u->hash, true);
  u->poll_at_us = sl_time_mono_us(); /* the first slice at the next turn */
  *ret = u;
  return JK_STEP_DONE;
}

/* Hashes the next slice of the file; with the last, checks that the path
 * still names the file, unchanged, and asks the gateway (data.have). */
static enum jk_step hash_slice(struct jk_interp *ip, struct jk_upload *u) {
  int64_t until = sl_time_mono_us() + HASH_SLICE_US, slice_end = u->hashed + HASH_SLICE_BYTES;
  while (u->hashed < u->size_bytes && u->hashed < slice_end && sl_time_mono_us() < until) {
    int64_t left = u->size_bytes - u->hashed;
    ssize_t got = read_at(u->fd, file_buf, left < (int64_t)sizeof file_buf ? (size_t)left : sizeof file_buf,
                          u->hashed);
    if (got < 0)
      return jk_exec_fail(ip, "DataError", "cannot read the data file %s to upload it for the gateway's workers: %s",
                          u->path, sl_strerror((int)got));
    if (got == 0)
      return changed(ip, u); /* shorter than it was */
    jk_hash_update(&u->hash, file_buf, (size_t)got);
    u->hashed += got;
  }
  if (u->hashed < u->size_bytes) {
    u->poll_at_us = sl_time_mono_us(); /* the next slice at the next turn */
    return JK_STEP_WAIT;
  }
  jk_hash_final_hex(&u->hash, u->sha256);
  u->hashing = false;
  u->poll_at_us = INT64_MAX;
  /* the bytes hashed were the descriptor's only if the path still names it, unchanged */
  struct stat after;
  if (fstat(u->fd, &after) < 0 || !same_file(&u->st, &after) || stat(u->path, &after) < 0 ||
      !same_file(&u->st, &after))
    return changed(ip, u);
  sl_debug("kernel.upload", "%s: %lld bytes, sha256 %s", u->path, (long long)u->size_bytes, u->sha256);
  return send_have(ip, u);
}

enum jk_step jk_upload_start(struct jk_interp *ip, const json_t *ask) {
  struct jk_follow *f = ip->running->follow;
  const char *path = sl_json_get_whole_str(ask, "path", "");
  const json_t *again = f->upload && path ? sl_json_find(f->upload->done, "path", path) : NULL;
  if (again)
    return jk_exec_fail(ip, "SubmitError",
                        "the gateway asked again for the data file %s after it was uploaded (sha256 %.12s…)", path,
                        sl_json_get_str(again, "sha256", ""));
  if (f->upload && f->upload->fd >= 0)
    return jk_exec_fail(ip, "InternalError", "the gateway asked for %s while %s was being uploaded",
                        path ? path : "a file", f->upload->path);
  if (f->upload && json_array_size(f->upload->done) >= SL_IMAGE_SET_FILES)
    return jk_exec_fail(ip, "GatewayError", "the gateway asked for more data files than the statement names");
  if (!path || path[0] != '/')
    return jk_exec_fail(ip, "GatewayError", "the gateway asked for the data file without a usable path");
  if (!f->submit || !statement_data(ip, path))
    return jk_exec_fail(ip, "GatewayError",
                        "the gateway asked for %s, which is not the data file this statement names; nothing was "
                        "uploaded",
                        path);
  struct jk_upload *u = NULL;
  if (open_file(ip, path, &u) != JK_STEP_DONE)
    return JK_STEP_ERROR;
  if (f->upload) { /* the files uploaded before go on with the submit */
    u->done = f->upload->done;
    f->upload->done = NULL;
    f->upload = jk_upload_free(f->upload);
  }
  int64_t chunk = sl_json_get_int(ask, "chunk_bytes", 0);
  u->chunk_bytes = chunk <= 0 ? DEFAULT_CHUNK_BYTES : chunk > MAX_CHUNK_BYTES ? MAX_CHUNK_BYTES : (size_t)chunk;
  /* every chunk about four times (a gateway that starts over), then some */
  u->max_puts = 4 * ((uint64_t)u->size_bytes / u->chunk_bytes + 1) + 64;
  u->window = WINDOW_FIRST;
  f->upload = u;
  ip->running->gw_op = OP_DATA; /* an interrupt while hashing is one while uploading */
  return JK_STEP_WAIT;
}

/* The gateway has the file: the statement's submit again, naming it and
 * the statement's files uploaded before it. */
static enum jk_step resubmit(struct jk_interp *ip, struct jk_upload *u) {
  json_t *req = json_deep_copy(ip->running->follow->submit);
  if (!u->done)
    u->done = json_array();
  json_array_append_new(u->done, json_pack("{s:s, s:s, s:I}", "path", u->path, "sha256", u->sha256, "size",
                                           (json_int_t)u->size_bytes));
  if (req)
    json_object_set_new(req, "data_files", json_deep_copy(u->done));
  close(u->fd);
  u->fd = -1;
  u->poll_at_us = INT64_MAX;
  return jk_jobs_await(ip, req, OP_SUBMIT, JK_GW_SPAWN);
}

enum jk_step jk_upload_reply(struct jk_interp *ip, int64_t id, const json_t *reply, const char *error) {
  struct jk_upload *u = running_upload(ip);
  if (!u || u->fd < 0)
    return jk_exec_fail(ip, "InternalError", "a data reply came without an upload under way");
  int64_t end = -1; /* the end of the chunk the reply is about; -1: a data.have's */
  for (size_t i = 0; i < u->n_fly; i++)
    if (u->fly[i].id == id) {
      end = u->fly[i].end;
      int64_t took = sl_time_mono_us() - u->fly[i].sent_us;
      if (took > SHRINK_US)
        u->window = u->window > 1 ? u->window / 2 : 1;
      else if (took < GROW_US && u->window < WINDOW_MAX)
        u->window++;
      memmove(&u->fly[i], &u->fly[i + 1], (u->n_fly - i - 1) * sizeof u->fly[0]);
      u->n_fly--;
      break;
    }
  const char *state = sl_json_get_str(reply, "state", "");
  int64_t offset = sl_json_get_int(reply, "offset", -1);
  if (error || strcmp(state, "receiving") || offset != end)
    forget_puts(ip, u); /* the gateway wants something else than what follows */
  if (error) {
    const char *code = sl_json_get_str(json_object_get(reply, "error"), "code", "");
    if (strcmp(code, "SL_ECHECKSUM") == 0)
      return changed(ip, u);
    return jk_exec_fail(ip, "SubmitError", "%s", error);
  }
  if (strcmp(state, "ready") == 0) {
    show_progress(ip, u, u->size_bytes, STORED);
    return resubmit(ip, u);
  }
  if (strcmp(state, "publishing") == 0 || strcmp(state, "checking") == 0) {
    int64_t now = sl_time_mono_us();
    if (!u->poll_until_us)
      u->poll_until_us = now + POLL_MAX_US;
    else if (now >= u->poll_until_us)
      return jk_exec_fail(ip, "SubmitError", "the gateway was still %s the data file %s after an hour", state,
                          u->path);
    if (strcmp(state, "publishing") == 0) {
      u->have_bytes = u->size_bytes;
      if (!u->storing_since_us)
        u->storing_since_us = now;
      else if (now - u->storing_since_us >= PROGRESS_US) /* an S3 store takes a while */
        show_progress(ip, u, u->size_bytes, STORING);
    }
    u->poll_wait_us = !u->poll_wait_us ? POLL_FIRST_US : u->poll_wait_us * 2 > POLL_US ? POLL_US
                                                                                         : u->poll_wait_us * 2;
    u->poll_at_us = now + u->poll_wait_us;
    return JK_STEP_WAIT;
  }
  if (strcmp(state, "receiving") == 0) {
    if (offset < 0 || offset > u->size_bytes || (offset == u->size_bytes && u->size_bytes > 0))
      return jk_exec_fail(ip, "GatewayError", "the gateway asked for the bytes from %lld of %s, which has %lld",
                          (long long)offset, u->path, (long long)u->size_bytes);
    u->have_bytes = offset;
    u->poll_until_us = 0;
    u->poll_wait_us = 0;
    if (!u->n_fly) /* a data.have's reply, or the puts in flight were forgotten: from exactly there */
      u->send_at = offset;
    return send_puts(ip, u);
  }
  return jk_exec_fail(ip, "GatewayError", "the gateway answered an upload with the unknown state \"%.32s\"",
                      state);
}

int64_t jk_upload_wake_at_us(const struct jk_interp *ip) {
  const struct jk_upload *u = running_upload(ip);
  return u && !ip->running->gw_req ? u->poll_at_us : INT64_MAX;
}

void jk_upload_tick(struct jk_interp *ip) {
  struct jk_upload *u = running_upload(ip);
  if (!u || u->poll_at_us == INT64_MAX || ip->running->gw_req || ip->running->wait != JK_WAIT_GATEWAY ||
      sl_time_mono_us() < u->poll_at_us)
    return;
  u->poll_at_us = INT64_MAX;
  enum jk_step st = u->hashing ? hash_slice(ip, u) : send_have(ip, u);
  if (st != JK_STEP_WAIT)
    jk_exec_step_ended(ip, st);
}

void jk_upload_interrupted(struct jk_interp *ip) {
  struct jk_upload *u = running_upload(ip);
  if (!u) {
    jk_exec_fail(ip, "Interrupted", "interrupted while uploading the data file; no job was submitted");
    return;
  }
  forget_puts(ip, u);
  char have[32], size[32], sent[80] = "";
  sl_file_size_text(u->have_bytes, have, sizeof have);
  sl_file_size_text(u->size_bytes, size, sizeof size);
  if (u->n_puts) /* what the gateway said it has; nothing before the first put */
    snprintf(sent, sizeof sent, " (%s of %s sent)", have, size);
  jk_exec_fail(ip, "Interrupted", "interrupted while uploading %s%s; no job was submitted", u->path, sent);
}
