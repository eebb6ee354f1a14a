/* The HTTP API's budgets (http.c routes to it): GET /api/budgets lists the
 * budgets the caller sees (an admin: every one), PUT
 * /api/budgets/{gateway|group/NAME|user/NAME} with {"monthly_usd": N} sets
 * one live (an admin only). */
#ifndef GW_HTTP_BUDGET_H
#define GW_HTTP_BUDGET_H

#include "budget.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether url is one of the budgets' resources. */
bool gw_http_budget_url(const char *url);
/* Answers method on url for user (admin: whether an admin) with the
 * request's body (borrowed, may be NULL): the status code, and the owned
 * JSON answer in *ret_body. b NULL: 404 (no budgets kept). */
unsigned gw_http_budget(struct gw_budget *b, const char *url, const char *method,
                        const char *user, bool admin, const char *body, size_t len,
                        json_t **ret_body);

#endif
