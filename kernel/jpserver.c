/* Which notebook this kernel runs, asked of the Jupyter server that started it.
 *
 * Jupyter Server sets JPY_SESSION_NAME; classic Notebook does not, so the
 * kernel asks. jupyter_client sets JPY_PARENT_PID in a kernel's environment
 * to the pid of the process that launched it; a Notebook or Jupyter Server
 * writes a runtime file nbserver-PID.json / jpserver-PID.json holding its
 * url and token, in the folder it also writes connection files to. The
 * kernel finds that file (jpserver_file.c) and runs spotlab-kernel-session,
 * which asks GET {url}api/sessions (token from the file, or
 * JUPYTERHUB_API_TOKEN for a single-user server on a hub) and prints the
 * path of the session whose kernel has this kernel's id. A server records
 * the session just after it starts the kernel, so an answer that does not
 * list it yet is asked again until a deadline. This file is that program's
 * half: HTTP is libcurl, whose forty-odd libraries (TLS, Kerberos, LDAP)
 * would otherwise be loaded by every kernel. Only the parent server is
 * asked: a kernel started by nbclient or jupyter console has no such file,
 * asks nobody and starts no program. The token is sent in a header, never
 * logged. */
#include "jpserver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_http.h"
#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#define RUNTIME_MAX_BYTES 65536
#define SESSIONS_MAX_BYTES (4u << 20)
#define TRY_TIMEOUT_MS 2000
#define RETRY_MS 100

/* The server's runtime file at path (owned JSON, with a url), or NULL. */
static json_t *server_file(const char *path) {
  json_t *o = NULL;
  char why[128];
  if (sl_json_read_object(path, RUNTIME_MAX_BYTES, 8, &o, why, sizeof why) < 0)
    return NULL;
  if (json_is_string(json_object_get(o, "url")))
    return o;
  json_decref(o);
  return NULL;
}

/* The session list's entry for kernel_id: its path into ret. */
static int find_session(const json_t *list, const char *kernel_id, char *ret, size_t size) {
  size_t i;
  json_t *s;
  json_array_foreach(list, i, s) {
    const json_t *k = json_object_get(s, "kernel");
    if (strcmp(sl_json_get_str(k, "id", ""), kernel_id) != 0)
      continue;
    /* "path" since Notebook 5; "notebook": {"path"} before */
    const char *path = sl_json_get_str(s, "path", sl_json_get_str(json_object_get(s, "notebook"), "path", ""));
    if (!*path || strlen(path) >= size)
      return -ENOENT;
    snprintf(ret, size, "%s", path);
    return 0;
  }
  return -ENOENT;
}

/* One GET of api/sessions: 0 and the path, -EAGAIN when the server answered
 * without this kernel, or another error. */
static int ask(const json_t *server, const char *kernel_id, char *ret, size_t size) {
  const char *url = sl_json_get_str(server, "url", ""), *token = sl_json_get_str(server, "token", "");
  const char *hub = getenv("JUPYTERHUB_API_TOKEN");
  if (!*token && hub)
    token = hub;
  char full[2048], auth[1024];
  size_t n = strlen(url);
  if (snprintf(full, sizeof full, "%s%sapi/sessions", url, n && url[n - 1] == '/' ? "" : "/") >= (int)sizeof full ||
      snprintf(auth, sizeof auth, "Authorization: token %s", token) >= (int)sizeof auth)
    return -ENAMETOOLONG;
  struct sl_http_req req = {
      .method = "GET", .url = full, .headers = {*token ? auth : NULL}, .body_max_bytes = SESSIONS_MAX_BYTES,
      .connect_timeout_ms = TRY_TIMEOUT_MS, .timeout_ms = TRY_TIMEOUT_MS, .retry = {.max_tries = 1}};
  struct sl_http_resp resp = {0};
  int r = sl_http_do(&req, &resp);
  explicit_bzero(auth, sizeof auth);
  if (r < 0)
    return r;
  if (resp.status != 200) {
    sl_debug("kernel.session", "the Jupyter server at %s answered %ld to api/sessions", url, resp.status);
    sl_http_resp_done(&resp);
    return -EACCES;
  }
  json_t *list = NULL;
  r = sl_json_parse(resp.body, resp.body_len, 16, &list, NULL, 0);
  sl_http_resp_done(&resp);
  if (r < 0)
    return r;
  r = json_is_array(list) ? find_session(list, kernel_id, ret, size) : -EPROTO;
  json_decref(list);
  return r == -ENOENT ? -EAGAIN : r;
}

int jk_jpserver_notebook(const char *path_of_file, const char *kernel_id, int wait_ms, char *ret,
                         size_t size) {
  if (!kernel_id || !*kernel_id)
    return -ENOENT;
  json_t *server = server_file(path_of_file);
  if (!server)
    return -ENOENT;
  if (sl_http_global_init() < 0) {
    json_decref(server);
    return -ENOENT;
  }
  int64_t deadline = sl_time_mono_us() + (int64_t)wait_ms * SL_US_PER_MS;
  char path[4096];
  int r;
  for (;;) {
    r = ask(server, kernel_id, path, sizeof path);
    if (r != -EAGAIN || sl_time_mono_us() >= deadline)
      break;
    nanosleep(&(struct timespec){0, RETRY_MS * 1000000L}, NULL);
  }
  json_decref(server);
  if (r == -EAGAIN)
    r = -ENOENT;
  if (r < 0)
    return r;
  if (strlen(path) >= size)
    return -ENAMETOOLONG;
  snprintf(ret, size, "%s", path);
  return 0;
}
