/* The budgets of the HTTP API (http_budget.h). The answers are the kernel
 * protocol's "budget" reply, so the notebook, the CLI and the API read the
 * same thing. */
#include "http_budget.h"

#include "sl_err.h"
#include "sl_json.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define PREFIX "/api/budgets"

bool gw_http_budget_url(const char *url) {
  return !strcmp(url, PREFIX) || !strncmp(url, PREFIX "/", sizeof PREFIX);
}

static json_t *error(unsigned code, const char *msg) {
  return json_pack("{s:{s:i,s:s}}", "error", "code", (int)code, "message", msg);
}

#define ANSWER(code, v) (*ret_body = (v), (code))

unsigned gw_http_budget(struct gw_budget *b, const char *url, const char *method,
                        const char *user, bool admin, const char *body, size_t len,
                        json_t **ret_body) {
  if (!b)
    return ANSWER(404, error(404, "this gateway keeps no budgets"));
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  if (!strcmp(url, PREFIX)) {
    if (!get)
      return ANSWER(405, error(405, "only GET and HEAD"));
    return ANSWER(200, gw_budget_json(b, admin ? NULL : user));
  }
  const char *rest = url + sizeof PREFIX; /* after "/api/budgets/" */
  char scope[16], name[128] = "";
  if (!strcmp(rest, "gateway")) {
    snprintf(scope, sizeof scope, "gateway");
  } else {
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : 0;
    if (!slash || n >= sizeof scope || strlen(slash + 1) >= sizeof name || !slash[1] ||
        strchr(slash + 1, '/'))
      return ANSWER(404, error(404, "no such budget: /api/budgets/gateway, group/NAME or user/NAME"));
    memcpy(scope, rest, n);
    scope[n] = 0;
    snprintf(name, sizeof name, "%s", slash + 1);
    if (strcmp(scope, "group") && strcmp(scope, "user"))
      return ANSWER(404, error(404, "no such budget: /api/budgets/gateway, group/NAME or user/NAME"));
  }
  if (strcmp(method, "PUT"))
    return ANSWER(405, error(405, "only PUT"));
  if (!admin)
    return ANSWER(403, error(403, "only an admin may set a budget"));
  json_t *v = NULL;
  char why[160] = "";
  if (!body || sl_json_parse(body, len, 4, &v, why, sizeof why) < 0 || !json_is_object(v) ||
      !json_is_number(json_object_get(v, "monthly_usd"))) {
    json_decref(v);
    return ANSWER(400, error(400, "the body must be {\"monthly_usd\": NUMBER}"));
  }
  char err[200];
  int r = gw_budget_set(b, scope, name, json_number_value(json_object_get(v, "monthly_usd")), user,
                        err, sizeof err);
  json_decref(v);
  /* a full table of live budgets is the state refusing the request, not the gateway failing */
  unsigned code = r == -EINVAL ? 400u : r == SL_ELIMIT ? 409u : 500u;
  if (r < 0)
    return ANSWER(code, error((int)code, err));
  json_t *reply = gw_budget_json(b, NULL);
  gw_budget_note(b, scope, name, reply);
  return ANSWER(200, reply);
}
