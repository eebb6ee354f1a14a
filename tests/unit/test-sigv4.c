/* sl_sigv4 against the AWS Signature Version 4 test suite (every case
 * under the folder given as argv[1], sub-folders included): each NAME.req is
 * parsed into a request and its canonical request, string to sign and
 * Authorization must equal NAME.creq, NAME.sts and NAME.authz. Then S3's
 * published examples (header and presigned forms), and malformed input,
 * which must end in an error with the output untouched. */
#include "harness.h"

#include "sl_err.h"
#include "sl_sigv4.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SUITE_TIME 1440938160           /* 20150830T123600Z */
/* The one case with a session token: botocore's runner signs it with this
 * token (the case's .creq shows it). */
#define SUITE_TOKEN_CASE "get-vanilla-with-session-token"
#define SUITE_TOKEN "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"

static int cases_run;

static bool starts(const char *s, const char *prefix) {
  if (s && strncmp(s, prefix, strlen(prefix)) == 0)
    return true;
  fprintf(stderr, "\"%s\" does not start with \"%s\"\n", s ? s : "(null)", prefix);
  return false;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *p = NULL;
  size_t n = 0, cap = 0;
  int ch;
  while ((ch = fgetc(f)) != EOF) {
    if (n + 2 > cap) {
      cap = cap ? cap * 2 : 1024;
      char *q = realloc(p, cap);
      if (!q) {
        free(p);
        fclose(f);
        return NULL;
      }
      p = q;
    }
    if (ch != '\r')
      p[n++] = (char)ch;
  }
  fclose(f);
  if (!p && !(p = malloc(1)))
    return NULL;
  p[n] = '\0';
  return p;
}

static void check_file(const char *what, const char *got, const char *path) {
  char *want = slurp(path);
  CHECK(want != NULL);
  if (!want || !got)
    return;
  size_t n = strlen(want);
  while (n && want[n - 1] == '\n')
    want[--n] = '\0';
  if (strcmp(got, want) != 0) {
    th_failures++;
    fprintf(stderr, "%s: %s differs\n--- got\n%s\n--- want\n%s\n---\n", path, what, got, want);
  }
  th_checks++;
  free(want);
}

/* One case: dir/NAME.req and its companions. */
static void run_case(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.req", dir, name);
  char *raw = slurp(path);
  CHECK(raw != NULL);
  if (!raw)
    return;
  cases_run++;

  struct sl_sigv4_header hdrs[SL_SIGV4_MAX_HEADERS];
  size_t n_hdrs = 0;
  char *line_end = strchr(raw, '\n');
  if (line_end)
    *line_end = '\0';
  /* Request line: METHOD SP PATH SP HTTP/1.1, the path may hold spaces. */
  char *method = raw, *sp = strchr(raw, ' '), *ver = strstr(raw, " HTTP/");
  CHECK(sp && ver && ver > sp);
  if (!sp || !ver || ver <= sp) {
    free(raw);
    return;
  }
  *sp = '\0';
  *ver = '\0';
  const char *target = sp + 1;
  char *p = line_end ? line_end + 1 : raw + strlen(raw);
  const char *body = "";
  /* Headers until an empty line; an indented line continues the previous
   * value (kept with its line break, which canonicalisation folds). */
  static char values[SL_SIGV4_MAX_HEADERS][2048];
  while (*p) {
    char *nl = strchr(p, '\n');
    if (nl)
      *nl = '\0';
    if (*p == '\0') {
      body = nl ? nl + 1 : "";
      break;
    }
    if ((*p == ' ' || *p == '\t') && n_hdrs) {
      char *v = values[n_hdrs - 1];
      size_t used = strlen(v);
      snprintf(v + used, sizeof values[0] - used, "\n%s", p);
    } else {
      char *colon = strchr(p, ':');
      CHECK(colon != NULL);
      CHECK(n_hdrs < SL_SIGV4_MAX_HEADERS);
      if (colon && n_hdrs < SL_SIGV4_MAX_HEADERS) {
        *colon = '\0';
        snprintf(values[n_hdrs], sizeof values[0], "%s", colon + 1);
        hdrs[n_hdrs].name = p;
        hdrs[n_hdrs].value = values[n_hdrs];
        n_hdrs++;
      }
    }
    if (!nl)
      break;
    p = nl + 1;
  }
  const char *host = "";
  for (size_t i = 0; i < n_hdrs; i++)
    if (strcasecmp(hdrs[i].name, "host") == 0)
      host = hdrs[i].value;
  char url[4096];
  snprintf(url, sizeof url, "https://%s%s", host, target);

  struct sl_aws_creds creds = {
    .access_key_id = "AKIDEXAMPLE",
    .secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
  };
  if (strcmp(name, SUITE_TOKEN_CASE) == 0)
    snprintf(creds.session_token, sizeof creds.session_token, "%s", SUITE_TOKEN);
  struct sl_sigv4_req req = {
    .method = method, .url = url, .headers = hdrs, .n_headers = n_hdrs,
    .body = body, .body_len = strlen(body),
    .region = "us-east-1", .service = "service", .time_unix = SUITE_TIME,
  };
  char *creq = NULL, *sts = NULL;
  struct sl_sigv4_signed sig;
  int r1 = sl_sigv4_canonical_request(&req, &creds, &creq);
  int r2 = sl_sigv4_string_to_sign(&req, &creds, &sts);
  int r3 = sl_sigv4_sign(&req, &creds, &sig);
  if (r1 || r2 || r3)
    fprintf(stderr, "%s: %s %s %s\n", name, sl_errname(r1), sl_errname(r2), sl_errname(r3));
  CHECK_INT(r1, 0);
  CHECK_INT(r2, 0);
  CHECK_INT(r3, 0);
  snprintf(path, sizeof path, "%s/%s.creq", dir, name);
  check_file("canonical request", creq, path);
  snprintf(path, sizeof path, "%s/%s.sts", dir, name);
  check_file("string to sign", sts, path);
  snprintf(path, sizeof path, "%s/%s.authz", dir, name);
  check_file("Authorization", r3 ? NULL : sig.authorization, path);
  if (!r3)
    CHECK_STR(sig.amz_date, "20150830T123600Z");
  free(creq);
  free(sts);
  free(raw);
}

/* Every folder that holds FOLDER_NAME.req is a case. */
static void walk(const char *dir, int depth) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  const char *base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  char path[4096];
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0)
      continue;
    if (S_ISDIR(st.st_mode) && depth < 4) {
      walk(path, depth + 1);
    } else if (S_ISREG(st.st_mode)) {
      size_t n = strlen(e->d_name);
      if (n > 4 && strcmp(e->d_name + n - 4, ".req") == 0 &&
          strncmp(e->d_name, base, n - 4) == 0 && strlen(base) == n - 4)
        run_case(dir, base);
    }
  }
  closedir(d);
}

/* ---- S3's published examples (the S3 API reference, SigV4 section) ---- */

static const struct sl_aws_creds s3_creds = {
  .access_key_id = "AKIAIOSFODNN7EXAMPLE",
  .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};
#define S3_TIME 1369353600               /* 20130524T000000Z */

static void test_s3_examples(void) {
  struct sl_sigv4_header range = {"Range", "bytes=0-9"};
  struct sl_sigv4_req get = {
    .method = "GET", .url = "https://examplebucket.s3.amazonaws.com/test.txt",
    .headers = &range, .n_headers = 1, .region = "us-east-1", .service = "s3",
    .time_unix = S3_TIME, .s3 = true,
  };
  struct sl_sigv4_signed sig;
  CHECK_INT(sl_sigv4_sign(&get, &s3_creds, &sig), 0);
  CHECK_STR(sig.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK_STR(sig.content_sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK_STR(sig.amz_date, "20130524T000000Z");

  struct sl_sigv4_req pre = {
    .method = "GET", .url = "https://examplebucket.s3.amazonaws.com/test.txt",
    .region = "us-east-1", .service = "s3", .time_unix = S3_TIME, .s3 = true,
  };
  char url[2048];
  CHECK_INT(sl_sigv4_presign(&pre, &s3_creds, 86400, url, sizeof url), 0);
  CHECK_STR(url, "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                 "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
                 "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
                 "&X-Amz-Signature="
                 "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");

  /* A session token rides in the query, and the URL's own query stays as sent. */
  struct sl_aws_creds tok = s3_creds;
  snprintf(tok.session_token, sizeof tok.session_token, "FQoG/token+x=");
  pre.url = "https://examplebucket.s3.amazonaws.com/a%20b?partNumber=2&uploadId=x%2By";
  CHECK_INT(sl_sigv4_presign(&pre, &tok, 60, url, sizeof url), 0);
  CHECK(starts(url, "https://examplebucket.s3.amazonaws.com/a%20b?partNumber=2&uploadId=x%2By&"));
  CHECK(strstr(url, "&X-Amz-Security-Token=FQoG%2Ftoken%2Bx%3D&X-Amz-Signature=") != NULL);
  /* Too small a buffer: SL_ELIMIT, nothing written. */
  char small[64] = "untouched";
  CHECK_INT(sl_sigv4_presign(&pre, &tok, 60, small, sizeof small), SL_ELIMIT);
  CHECK_STR(small, "untouched");

  /* S3 signs its path as sent; other services normalise and encode it once more. */
  struct sl_sigv4_req odd = {
    .method = "GET", .url = "https://b.s3.amazonaws.com/a/./b//c%2Fd", .region = "us-east-1",
    .service = "s3", .time_unix = S3_TIME, .s3 = true,
  };
  char *creq = NULL;
  CHECK_INT(sl_sigv4_canonical_request(&odd, &s3_creds, &creq), 0);
  CHECK(starts(creq, "GET\n/a/./b//c%2Fd\n\n"));
  free(creq);
  creq = NULL;
  odd.s3 = false;
  odd.service = "ec2";
  CHECK_INT(sl_sigv4_canonical_request(&odd, &s3_creds, &creq), 0);
  CHECK(starts(creq, "GET\n/a/b/c%252Fd\n\n"));
  free(creq);

  /* UNSIGNED-PAYLOAD asked for in the header form goes into x-amz-content-sha256. */
  get.payload_sha256 = SL_SIGV4_UNSIGNED_PAYLOAD;
  CHECK_INT(sl_sigv4_sign(&get, &s3_creds, &sig), 0);
  CHECK_STR(sig.content_sha256, "UNSIGNED-PAYLOAD");
}

static void test_encode(void) {
  char buf[64];
  CHECK_INT(sl_aws_uri_encode("a b/c~d*é", true, buf, sizeof buf), 0);
  CHECK_STR(buf, "a%20b/c~d%2A%C3%A9");
  CHECK_INT(sl_aws_uri_encode("a/b", false, buf, sizeof buf), 0);
  CHECK_STR(buf, "a%2Fb");
  CHECK_INT(sl_aws_uri_encode("////", false, buf, 12), SL_ELIMIT);
  CHECK_INT(sl_aws_uri_encode("////", false, buf, 13), 0);
  char hex[65];
  sl_sha256_hex("abc", 3, hex);
  CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* Query parameters: decoded then re-encoded, so spellings of one value agree. */
static void test_query_forms(void) {
  struct sl_sigv4_req a = {
    .method = "GET", .url = "https://h.example/?b=%7e%2a&a=x+y&a=&c", .region = "us-east-1",
    .service = "ec2", .time_unix = S3_TIME,
  };
  char *creq = NULL;
  CHECK_INT(sl_sigv4_canonical_request(&a, &s3_creds, &creq), 0);
  CHECK(starts(creq, "GET\n/\na=&a=x%2By&b=~%2A&c=\n"));
  free(creq);
  /* Empty pieces count, as botocore counts them; presigning keeps them. */
  a.url = "https://h.example/p?a=1&&b=2&";
  creq = NULL;
  CHECK_INT(sl_sigv4_canonical_request(&a, &s3_creds, &creq), 0);
  CHECK(starts(creq, "GET\n/p\n=&=&a=1&b=2\n"));
  free(creq);
  char url[1024];
  CHECK_INT(sl_sigv4_presign(&a, &s3_creds, 60, url, sizeof url), 0);
  CHECK(starts(url, "https://h.example/p?a=1&&b=2&&X-Amz-Algorithm=AWS4-HMAC-SHA256&"));
}

/* ---- malformed input ---- */

/* sl_sigv4_sign's result; the canonical request must fail alike, unless
 * only the Authorization header overflows (auth_only). */
static int sign_err_(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds,
                     bool auth_only) {
  struct sl_sigv4_signed sig;
  memset(&sig, 'x', sizeof sig);
  sig.authorization[sizeof sig.authorization - 1] = '\0';
  int r = sl_sigv4_sign(req, creds, &sig);
  if (r < 0) {
    /* written only on success */
    CHECK(sig.authorization[0] == 'x' && sig.amz_date[0] == 'x');
  }
  char *s = NULL;
  int r2 = sl_sigv4_canonical_request(req, creds, &s);
  CHECK_INT(r2, auth_only ? 0 : r);
  free(s);
  return r;
}

static int sign_err(const struct sl_sigv4_req *req, const struct sl_aws_creds *creds) {
  return sign_err_(req, creds, false);
}

static void test_malformed(void) {
  struct sl_sigv4_req base = {
    .method = "GET", .url = "https://h.example/", .region = "us-east-1", .service = "ec2",
    .time_unix = S3_TIME,
  };
  struct sl_sigv4_req r = base;
  CHECK_INT(sign_err(&r, &s3_creds), 0);
  CHECK_INT(sl_sigv4_sign(NULL, &s3_creds, NULL), -EINVAL);

  static const char *const bad_urls[] = {
    "", "h.example/", "ftp://h.example/", "https://", "https:///p", "https://u:p@h.example/",
    "https://h.example:0/", "https://h.example:65536/", "https://h.example:12a/",
    "https://h.example:/", "https://[::1/", "https://[]/", "https://h example/", "https://h.example/a\nb",
    "https://h.example/?a=%zz", "https://h.example/?a=%4", "https://h.example/?%", "https://h\x01/",
  };
  for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
    r.url = bad_urls[i];
    int e = sign_err(&r, &s3_creds);
    if (e != -EINVAL)
      fprintf(stderr, "url \"%s\": %s\n", bad_urls[i], sl_errname(e));
    CHECK_INT(e, -EINVAL);
  }
  r.url = NULL;
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);

  /* Good URLs of odd shapes. */
  r.url = "https://[::1]:8443/x#frag";
  CHECK_INT(sign_err(&r, &s3_creds), 0);
  r.url = "HTTP://H.Example:80";
  char *creq = NULL;
  CHECK_INT(sl_sigv4_canonical_request(&r, &s3_creds, &creq), 0);
  CHECK(creq && strstr(creq, "\nhost:h.example\n") != NULL);
  free(creq);

  /* A URL past SL_SIGV4_URL_MAX. */
  char *huge = malloc(SL_SIGV4_URL_MAX + 64);
  CHECK(huge != NULL);
  if (huge) {
    memcpy(huge, "https://h.example/", 18);
    memset(huge + 18, 'a', SL_SIGV4_URL_MAX + 40);
    huge[SL_SIGV4_URL_MAX + 58] = '\0';
    r.url = huge;
    CHECK_INT(sign_err(&r, &s3_creds), SL_ELIMIT);
    /* Too many query parameters. */
    size_t n = 18;
    huge[n++] = '?';
    for (int i = 0; i < SL_SIGV4_QUERY_MAX + 1; i++)
      n += (size_t)snprintf(huge + n, 16, "p%d=1&", i);
    huge[n] = '\0';
    CHECK_INT(sign_err(&r, &s3_creds), SL_ELIMIT);
    free(huge);
  }

  /* Method, region, service. */
  r = base;
  r.method = "get";
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r.method = "";
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r = base;
  r.region = "us-east-1/x";
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r.region = NULL;
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r = base;
  r.service = "";
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r = base;
  r.time_unix = -1;
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r = base;
  r.payload_sha256 = "nothex";
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r = base;
  r.body_len = 4;
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);

  /* Credentials. */
  struct sl_aws_creds c = s3_creds;
  r = base;
  snprintf(c.access_key_id, sizeof c.access_key_id, "AKID/x");
  CHECK_INT(sign_err(&r, &c), -EINVAL);
  c = s3_creds;
  c.secret_access_key[0] = '\0';
  CHECK_INT(sign_err(&r, &c), -EINVAL);
  c = s3_creds;
  memset(c.access_key_id, 'A', sizeof c.access_key_id); /* no NUL */
  CHECK_INT(sign_err(&r, &c), -EINVAL);
  c = s3_creds;
  snprintf(c.session_token, sizeof c.session_token, "tok\nen");
  CHECK_INT(sign_err(&r, &c), -EINVAL);

  /* Headers. */
  struct sl_sigv4_header h[SL_SIGV4_MAX_HEADERS + 1];
  static char names[SL_SIGV4_MAX_HEADERS + 1][160];
  for (int i = 0; i <= SL_SIGV4_MAX_HEADERS; i++) {
    snprintf(names[i], sizeof names[i], "x-h%d", i);
    h[i].name = names[i];
    h[i].value = "v";
  }
  r = base;
  r.headers = h;
  r.n_headers = SL_SIGV4_MAX_HEADERS + 1;
  CHECK_INT(sign_err(&r, &s3_creds), SL_ELIMIT);
  r.n_headers = SL_SIGV4_MAX_HEADERS;
  CHECK_INT(sign_err(&r, &s3_creds), 0);
  r.n_headers = 1;
  r.headers = NULL;
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  r.headers = h;
  static const char *const bad_names[] = {"", "a b", "a:b", "a\nb", "é"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    h[0].name = bad_names[i];
    CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  }
  h[0].name = NULL;
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  memset(names[0], 'n', SL_SIGV4_HEADER_NAME_MAX + 1);
  names[0][SL_SIGV4_HEADER_NAME_MAX + 1] = '\0';
  h[0].name = names[0];
  CHECK_INT(sign_err(&r, &s3_creds), SL_ELIMIT);
  names[0][SL_SIGV4_HEADER_NAME_MAX] = '\0';
  CHECK_INT(sign_err(&r, &s3_creds), 0);
  h[0].name = "x-a";
  h[0].value = "a\x01" "b";
  CHECK_INT(sign_err(&r, &s3_creds), -EINVAL);
  char *big = malloc(SL_SIGV4_HEADER_VALUE_MAX + 2);
  CHECK(big != NULL);
  if (big) {
    memset(big, 'v', SL_SIGV4_HEADER_VALUE_MAX + 1);
    big[SL_SIGV4_HEADER_VALUE_MAX + 1] = '\0';
    h[0].value = big;
    CHECK_INT(sign_err(&r, &s3_creds), SL_ELIMIT);
    big[SL_SIGV4_HEADER_VALUE_MAX] = '\0';
    CHECK_INT(sign_err(&r, &s3_creds), 0);
    free(big);
  }
  /* Long names that fit each alone but not together in the Authorization. */
  for (int i = 0; i < SL_SIGV4_MAX_HEADERS; i++) {
    memset(names[i], 'a' + i % 26, 120);
    snprintf(names[i] + 120, 8, "%d", i);
    h[i].name = names[i];
    h[i].value = "v";
  }
  r.n_headers = SL_SIGV4_MAX_HEADERS;
  CHECK_INT(sign_err_(&r, &s3_creds, true), SL_ELIMIT);

  /* Presigning. */
  char url[4096] = "untouched";
  r = base;
  CHECK_INT(sl_sigv4_presign(&r, &s3_creds, 0, url, sizeof url), -EINVAL);
  CHECK_INT(sl_sigv4_presign(&r, &s3_creds, 604801, url, sizeof url), -EINVAL);
  CHECK_STR(url, "untouched");
  CHECK_INT(sl_sigv4_presign(&r, &s3_creds, 604800, url, sizeof url), 0);
  r.url = "https://h.example/?X-Amz-Signature=abc";
  CHECK_INT(sl_sigv4_presign(&r, &s3_creds, 60, url, sizeof url), -EINVAL);
  r.url = "https://h.example/?x-amz-date=1";
  CHECK_INT(sl_sigv4_presign(&r, &s3_creds, 60, url, sizeof url), -EINVAL);
  CHECK_INT(sl_sigv4_presign(&r, &s3_creds, 60, NULL, 0), -EINVAL);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test-sigv4 SIGV4_SUITE_DIR\n");
    return 1;
  }
  struct stat st;
  if (stat(argv[1], &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "the SigV4 test suite is not at %s (no such folder)\n", argv[1]);
    return 1;
  }
  walk(argv[1], 0);
  fprintf(stderr, "%d cases of the SigV4 suite\n", cases_run);
  CHECK(cases_run >= 30);          /* the suite has 34: a folder that lost them fails */
  test_s3_examples();
  test_encode();
  test_query_forms();
  test_malformed();
  TEST_MAIN_END();
}
