/* s3-tool: the S3 client from the command line, for the s3 tests and
 * bench/s3. Signs with sl_s3_presign and the credentials in the environment
 * (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); region and
 * endpoint as the store finds them (AWS_REGION, AWS_ENDPOINT_URL_S3).
 *
 *   s3-tool [OPTIONS] put  s3://BUCKET/PREFIX KEY FILE
 *   s3-tool [OPTIONS] get  s3://BUCKET/PREFIX KEY FILE
 *   s3-tool [OPTIONS] head s3://BUCKET/PREFIX KEY
 *   s3-tool [OPTIONS] list s3://BUCKET/PREFIX [PREFIX]
 *   s3-tool [OPTIONS] rm   s3://BUCKET/PREFIX KEY
 *   s3-tool presign s3://BUCKET/PREFIX OP KEY [UPLOAD_ID PART SHA256 TOKEN]
 *     prints the presigned URL of OP (sl_s3_op_name), signed at
 *     $S3_TOOL_TIME (seconds since the epoch; now if unset), valid 3600 s;
 *     "-" for an argument left out
 *
 * OPTIONS: --part-mib N, --threads N, --page-keys N, --tries N,
 * --backoff-ms N (the first retry's), --timeout-ms N (a request without data),
 * --fail-after BYTES (test hook), --cancel-after-ms N (the client's cancel
 * flag is set that long after the start), --uploads 1 (each multipart
 * upload's start and end said on stderr: "upload open KEY ID", "upload
 * ended KEY ID"), --uploads 2 (the same, and the start refused: EIO).
 * On failure: "s3-tool: ERRNAME: sentence" on stderr and exit status 1. */
#include "sl_err.h"
#include "sl_s3.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int usage(void) {
  fprintf(stderr, "usage: s3-tool [--part-mib N] [--threads N] [--page-keys N] [--tries N] "
                  "[--backoff-ms N] [--fail-after BYTES] [--cancel-after-ms N] [--uploads 1|2] put|get|head|list|rm s3://BUCKET/PREFIX ...\n");
  return 2;
}

static int env_creds(struct sl_aws_creds *c) {
  const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
  const char *token = getenv("AWS_SESSION_TOKEN");
  memset(c, 0, sizeof *c);
  if (!id || !secret || strlen(id) >= sizeof c->access_key_id ||
      strlen(secret) >= sizeof c->secret_access_key || (token && strlen(token) >= sizeof c->session_token))
    return -EINVAL;
  snprintf(c->access_key_id, sizeof c->access_key_id, "%s", id);
  snprintf(c->secret_access_key, sizeof c->secret_access_key, "%s", secret);
  if (token) snprintf(c->session_token, sizeof c->session_token, "%s", token);
  return 0;
}

static int uploads_said;

static int say_upload(void *ud, const char *key, const char *upload_id, bool open) {
  (void)ud;
  fprintf(stderr, "upload %s %s %s\n", open ? "open" : "ended", key, upload_id);
  return open && uploads_said == 2 ? -EIO : 0;
}

static atomic_bool cancel;
static long cancel_after_ms;

static void *cancel_later(void *arg) {
  (void)arg;
  struct timespec ts = {cancel_after_ms / 1000, (cancel_after_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(&cancel, true);
  return NULL;
}

int main(int argc, char **argv) {
  struct sl_s3_opts opts = {0};
  int64_t fail_after = -1;
  pthread_t canceller;
  int i = 1;
  for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
    long long v = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--part-mib")) opts.part_bytes = (uint64_t)v << 20;
    else if (!strcmp(argv[i], "--threads")) opts.threads = (int)v;
    else if (!strcmp(argv[i], "--page-keys")) opts.list_page_keys = (int)v;
    else if (!strcmp(argv[i], "--tries")) opts.retry.max_tries = (int)v;
    else if (!strcmp(argv[i], "--backoff-ms")) opts.retry.base_backoff_ms = (int)v;
    else if (!strcmp(argv[i], "--fail-after")) fail_after = v;
    else if (!strcmp(argv[i], "--timeout-ms")) opts.timeout_ms = (int)v;
    else if (!strcmp(argv[i], "--cancel-after-ms")) cancel_after_ms = (long)v;
    else if (!strcmp(argv[i], "--uploads")) uploads_said = (int)v;
    else return usage();
  }
  if (uploads_said) opts.mpu_event = say_upload;
  if (cancel_after_ms > 0) {
    opts.cancel = &cancel;
    if (pthread_create(&canceller, NULL, cancel_later, NULL) != 0) return 1;
    pthread_detach(canceller);
  }
  if (opts.retry.max_tries || opts.retry.base_backoff_ms) {
    if (!opts.retry.max_tries) opts.retry.max_tries = 6;
    if (!opts.retry.base_backoff_ms) opts.retry.base_backoff_ms = 200;
    opts.retry.max_backoff_ms = opts.retry.base_backoff_ms * 16;
  }
  if (argc - i < 2) return usage();
  const char *cmd = argv[i], *url = argv[i + 1];
  char **args = argv + i + 2;
  int nargs = argc - i - 2;

  char err[1024] = "";
  struct sl_aws_creds creds;
  struct sl_s3_location loc;
  struct sl_s3_signer *signer = NULL;
  struct sl_s3_client *c = NULL;
  int r = env_creds(&creds);
  if (r < 0) snprintf(err, sizeof err, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set");
  if (r == 0) r = sl_s3_location_parse(url, NULL, NULL, &loc, err, sizeof err);
  if (r == 0 && !(signer = sl_s3_creds_signer_new(&loc, &creds, 0))) r = -ENOMEM;
  if (r == 0 && (r = sl_s3_client_new(signer, &opts, &c)) < 0)
    snprintf(err, sizeof err, "bad client options");
  if (r == 0 && fail_after >= 0) sl_s3_fail_next_put(c, fail_after);
  if (r < 0) {
  } else if (!strcmp(cmd, "put") && nargs == 2) {
    uint64_t n = 0;
    if ((r = sl_s3_put_file(c, args[0], args[1], &n, err, sizeof err)) == 0) printf("%llu\n", (unsigned long long)n);
  } else if (!strcmp(cmd, "get") && nargs == 2) {
    uint64_t n = 0;
    if ((r = sl_s3_get_file(c, args[0], args[1], &n, err, sizeof err)) == 0) printf("%llu\n", (unsigned long long)n);
  } else if (!strcmp(cmd, "head") && nargs == 1) {
    struct sl_s3_object o;
    if ((r = sl_s3_head(c, args[0], &o, err, sizeof err)) == 0)
      printf("%llu %s %s\n", (unsigned long long)o.bytes, o.etag, *o.sha256 ? o.sha256 : "-");
  } else if (!strcmp(cmd, "list") && nargs <= 1) {
    char **keys = NULL;
    if ((r = sl_s3_list(c, nargs ? args[0] : "", &keys, NULL, err, sizeof err)) == 0)
      for (size_t k = 0; keys[k]; k++) printf("%s\n", keys[k]);
    sl_s3_keys_free(keys);
  } else if (!strcmp(cmd, "presign") && nargs >= 2 && nargs <= 6) {
    const char *t = getenv("S3_TOOL_TIME");
#define ARG(k) (nargs > (k) && strcmp(args[k], "-") ? args[k] : NULL)
    struct sl_s3_presign_req pr = {.op = sl_s3_op_from_name(args[0]), .key = args[1],
                                   .upload_id = ARG(2), .part = ARG(3) ? atoi(args[3]) : 0,
                                   .sha256 = ARG(4), .continuation = ARG(5)};
#undef ARG
    char *buf = malloc(SL_S3_URL_MAX);
    r = buf ? sl_s3_presign(&loc, &creds, t ? atoll(t) : (int64_t)time(NULL), 3600, &pr, buf,
                            SL_S3_URL_MAX) : -ENOMEM;
    if (r == 0) printf("%s\n", buf);
    free(buf);
  } else if (!strcmp(cmd, "rm") && nargs == 1) {
    r = sl_s3_delete(c, args[0], err, sizeof err);
  } else {
    r = usage();
  }
  sl_s3_client_free(c);
  sl_s3_creds_signer_free(signer);
  explicit_bzero(&creds, sizeof creds);
  if (r == 2) return 2;
  if (r < 0) {
    fprintf(stderr, "s3-tool: %s: %s\n", sl_errname(r), *err ? err : sl_strerror(r));
    return 1;
  }
  return 0;
}
