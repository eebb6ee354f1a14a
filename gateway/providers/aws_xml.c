/* EC2's XML replies (see aws_xml.h). Each reader parses the whole reply
 * into a tree (replies are bounded by AWS_XML_MAX_BYTES), walks the
 * documented paths by local name and copies what it needs into fixed-size
 * fields; the tree is freed before returning. Values that name something
 * (ids, types, zones, addresses) must fit their fields or the reply is
 * refused: a truncated instance id would name another instance. Free text
 * (messages, state reasons) is cut to fit. */
#include "aws_xml.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "sl_err.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_parser(void) {
  xmlInitParser();
}

/* No network, no entity substitution, no DTD loading, no messages on
 * stderr: the options that matter are the ones left out (XML_PARSE_NOENT,
 * XML_PARSE_DTDLOAD, XML_PARSE_HUGE). */
static int read_doc(const char *xml, size_t len, xmlDoc **ret) {
  if (!xml || len == 0)
    return SL_EPARSE;
  if (len > AWS_XML_MAX_BYTES)
    return SL_ELIMIT;
  pthread_once(&init_once, init_parser);
  xmlDoc *doc = xmlReadMemory(xml, (int)len, NULL, NULL,
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc)
    return SL_EPARSE;
  if (doc->intSubset || doc->extSubset || !xmlDocGetRootElement(doc)) {
    xmlFreeDoc(doc);
    return SL_EPARSE;
  }
  *ret = doc;
  return 0;
}

static bool named(const xmlNode *n, const char *name) {
  return n && n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

static xmlNode *child(const xmlNode *parent, const char *name) {
  if (!parent)
    return NULL;
  for (xmlNode *n = parent->children; n; n = n->next)
    if (named(n, name))
      return n;
  return NULL;
}

/* The element at a "/"-separated path of first children under parent. */
static xmlNode *at(const xmlNode *parent, const char *path) {
  char part[64];
  const xmlNode *n = parent;
  while (n && *path) {
    size_t k = strcspn(path, "/");
    if (k >= sizeof part)
      return NULL;
    memcpy(part, path, k);
    part[k] = '\0';
    n = child(n, part);
    path += k + (path[k] == '/');
  }
  return (xmlNode *)n;
}

/* The element's own text (text and CDATA children; entity references are
 * not followed), trimmed, into buf. 0; SL_ELIMIT when it does not fit
 * (buf then holds what fits). A missing element is "". */
static int text(const xmlNode *n, char *buf, size_t size) {
  size_t len = 0;
  bool over = false;
  buf[0] = '\0';
  if (!n)
    return 0;
  for (const xmlNode *c = n->children; c; c = c->next) {
    if (c->type != XML_TEXT_NODE && c->type != XML_CDATA_SECTION_NODE)
      continue;
    const char *s = (const char *)c->content;
    size_t k = s ? strlen(s) : 0;
    if (len + k >= size) {
      k = size - 1 - len;
      over = true;
    }
    memcpy(buf + len, s, k);
    len += k;
    buf[len] = '\0';
  }
  size_t start = 0;
  while (start < len && isspace((unsigned char)buf[start]))
    start++;
  while (len > start && isspace((unsigned char)buf[len - 1]))
    len--;
  memmove(buf, buf + start, len - start);
  buf[len - start] = '\0';
  return over ? SL_ELIMIT : 0;
}

/* A value that names something: it fits or the reply is refused. */
static int name_at(const xmlNode *parent, const char *path, char *buf, size_t size) {
  return text(at(parent, path), buf, size) < 0 ? SL_EPARSE : 0;
}

/* Free text: cut to fit. */
static void text_at(const xmlNode *parent, const char *path, char *buf, size_t size) {
  (void)text(at(parent, path), buf, size);
}

static int next_token(const xmlNode *root, char next[AWS_NEXT_TOKEN_MAX]) {
  if (!next)
    return 0;
  return name_at(root, "nextToken", next, AWS_NEXT_TOKEN_MAX);
}

static size_t count_items(const xmlNode *set) {
  size_t n = 0;
  if (set)
    for (const xmlNode *c = set->children; c; c = c->next)
      n += named(c, "item");
  return n;
}

/* ---- time ---- */

static bool digits(const char *s, int n, int *ret) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i]))
      return false;
    v = v * 10 + (s[i] - '0');
  }
  *ret = v;
  return true;
}

int aws_xml_parse_time(const char *s, int64_t *ret) {
  int y, mo, d, h, mi, sec;
  if (!s || strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
      s[7] != '-' || !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') ||
      !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
      !digits(s + 17, 2, &sec))
    return SL_EPARSE;
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
    return SL_EPARSE;
  const char *p = s + 19;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p))
      return SL_EPARSE;
    while (isdigit((unsigned char)*p))
      p++;
  }
  int offset_s = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int oh, om;
    if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
      return SL_EPARSE;
    offset_s = (oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
    p += 6;
  } else {
    return SL_EPARSE;
  }
  if (*p)
    return SL_EPARSE;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
                  .tm_hour = h, .tm_min = mi, .tm_sec = sec};
  time_t t = timegm(&tm);
  if (t == (time_t)-1)
    return SL_EPARSE;
  *ret = (int64_t)t - offset_s;
  return 0;
}

/* ---- errors ---- */

int aws_xml_error(const char *xml, size_t len, struct aws_ec2_error *ret) {
  xmlDoc *doc;
  int r = read_doc(xml, len, &doc);
  if (r < 0)
    return r == SL_ELIMIT ? SL_ELIMIT : SL_EPARSE;
  xmlNode *root = xmlDocGetRootElement(doc);
  xmlNode *e = NULL;
  if (named(root, "Response"))
    e = at(root, "Errors/Error");
  else if (named(root, "ErrorResponse"))   /* the form other AWS query services use */
    e = child(root, "Error");
  char code[sizeof ret->code];
  r = SL_EPARSE;
  if (e && text(child(e, "Code"), code, sizeof code) == 0 && code[0]) {
    memcpy(ret->code, code, sizeof code);
    text_at(e, "Message", ret->message, sizeof ret->message);
    xmlNode *id = child(root, "RequestID");
    if (!id)
      id = child(root, "RequestId");
    text(id, ret->request_id, sizeof ret->request_id);
    r = 0;
  }
  xmlFreeDoc(doc);
  return r;
}

/* ---- instances ---- */

static void copy_tag(const char *value, char *field, size_t size) {
  /* A value too long for the field is not one spotlab wrote: treat the
   * instance as untagged rather than match a prefix of it. */
  if (strlen(value) < size)
    strcpy(field, value);
}

static int read_instance(const xmlNode *item, struct aws_instance *ret) {
  char buf[256];
  memset(ret, 0, sizeof *ret);
  if (name_at(item, "instanceId", ret->id, sizeof ret->id) < 0 || !ret->id[0] ||
      name_at(item, "instanceType", ret->type, sizeof ret->type) < 0 ||
      name_at(item, "placement/availabilityZone", ret->zone, sizeof ret->zone) < 0 ||
      name_at(item, "instanceState/name", ret->state, sizeof ret->state) < 0 ||
      name_at(item, "privateIpAddress", ret->private_ip, sizeof ret->private_ip) < 0 ||
      name_at(item, "ipAddress", ret->public_ip, sizeof ret->public_ip) < 0 ||
      name_at(item, "instanceLifecycle", buf, sizeof buf) < 0)
    return SL_EPARSE;
  ret->spot = strcmp(buf, "spot") == 0;
  if (name_at(item, "launchTime", buf, sizeof buf) < 0 ||
      (buf[0] && aws_xml_parse_time(buf, &ret->launch_time_unix) < 0))
    return SL_EPARSE;
  text_at(item, "stateReason/code", ret->state_reason, sizeof ret->state_reason);

  xmlNode *tags = child(item, "tagSet");
  for (xmlNode *t = tags ? tags->children : NULL; t; t = t->next) {
    char key[128], value[256];
    if (!named(t, "item") || text(child(t, "key"), key, sizeof key) < 0 ||
        text(child(t, "value"), value, sizeof value) < 0)
      continue;
    if (strcmp(key, "spotlab:instance") == 0)
      copy_tag(value, ret->tag_spotlab_instance, sizeof ret->tag_spotlab_instance);
    else if (strcmp(key, "spotlab:job") == 0)
      copy_tag(value, ret->tag_spotlab_job, sizeof ret->tag_spotlab_job);
    else if (strcmp(key, "spotlab:gateway") == 0)
      copy_tag(value, ret->tag_spotlab_gateway, sizeof ret->tag_spotlab_gateway);
  }
  return 0;
}

/* Appends the items of set to *arr (capacity cap, n used). */
static int read_instance_set(const xmlNode *set, struct aws_instance *arr, size_t cap, size_t *n) {
  for (const xmlNode *c = set ? set->children : NULL; c; c = c->next) {
    if (!named(c, "item"))
      continue;
    if (*n >= cap)
      return SL_EPARSE;
    int r = read_instance(c, &arr[*n]);
    if (r < 0)
      return r;
    (*n)++;
  }
  return 0;
}

int aws_xml_instances(const char *xml, size_t len, struct aws_instance **ret, size_t *ret_n,
                      char next[AWS_NEXT_TOKEN_MAX]) {
  xmlDoc *doc;
  int r = read_doc(xml, len, &doc);
  if (r < 0)
    return r;
  xmlNode *root = xmlDocGetRootElement(doc);
  xmlNode *top = child(root, "instancesSet");
  xmlNode *reservations = child(root, "reservationSet");
  struct aws_instance *arr = NULL;
  size_t cap = count_items(top), n = 0;
  char token[AWS_NEXT_TOKEN_MAX] = "";
  r = SL_EPARSE;
  if (!named(root, "RunInstancesResponse") && !named(root, "DescribeInstancesResponse"))
    goto out;
  for (xmlNode *res = reservations ? reservations->children : NULL; res; res = res->next)
    if (named(res, "item"))
      cap += count_items(child(res, "instancesSet"));
  if (cap > AWS_XML_MAX_ITEMS) {
    r = SL_ELIMIT;
    goto out;
  }
  if (cap && !(arr = calloc(cap, sizeof *arr))) {
    r = -ENOMEM;
    goto out;
  }
  if ((r = read_instance_set(top, arr, cap, &n)) < 0)
    goto out;
  for (xmlNode *res = reservations ? reservations->children : NULL; res; res = res->next)
    if (named(res, "item") && (r = read_instance_set(child(res, "instancesSet"), arr, cap, &n)) < 0)
      goto out;
  if ((r = next_token(root, token)) < 0)
    goto out;
  if (next)
    strcpy(next, token);
  *ret = arr;
  *ret_n = n;
  arr = NULL;
  r = 0;
out:
  free(arr);
  xmlFreeDoc(doc);
  return r;
}

/* ---- the other lists ---- */

/* Reads the items of root's set into an owned array of n elements of
 * size bytes with read_one; the common frame of the list replies. The root
 * must be the action's reply; a reply without the set has no items. */
static int read_list(const char *xml, size_t len, const char *root_name, const char *set_name,
                     size_t size, int (*read_one)(const xmlNode *item, void *elem), void **ret,
                     size_t *ret_n, char next[AWS_NEXT_TOKEN_MAX]) {
  xmlDoc *doc;
  int r = read_doc(xml, len, &doc);
  if (r < 0)
    return r;
  xmlNode *root = xmlDocGetRootElement(doc);
  xmlNode *set = child(root, set_name);
  size_t cap = count_items(set), n = 0;
  char token[AWS_NEXT_TOKEN_MAX] = "";
  char *arr = NULL;
  r = SL_EPARSE;
  if (!named(root, root_name))
    goto out;
  if (cap > AWS_XML_MAX_ITEMS) {
    r = SL_ELIMIT;
    goto out;
  }
  if (cap && !(arr = calloc(cap, size))) {
    r = -ENOMEM;
    goto out;
  }
  for (xmlNode *c = set ? set->children : NULL; c; c = c->next) {
    if (!named(c, "item"))
      continue;
    if ((r = read_one(c, arr + n * size)) < 0)
      goto out;
    n++;
  }
  if ((r = next_token(root, token)) < 0)
    goto out;
  if (next)
    strcpy(next, token);
  *ret = arr;
  *ret_n = n;
  arr = NULL;
  r = 0;
out:
  free(arr);
  xmlFreeDoc(doc);
  return r;
}

static int read_state_change(const xmlNode *item, void *elem) {
  struct aws_state_change *s = elem;
  if (name_at(item, "instanceId", s->id, sizeof s->id) < 0 || !s->id[0] ||
      name_at(item, "currentState/name", s->current, sizeof s->current) < 0 ||
      name_at(item, "previousState/name", s->previous, sizeof s->previous) < 0)
    return SL_EPARSE;
  return 0;
}

int aws_xml_state_changes(const char *xml, size_t len, struct aws_state_change **ret,
                          size_t *ret_n) {
  void *arr;
  int r = read_list(xml, len, "TerminateInstancesResponse", "instancesSet", sizeof **ret,
                    read_state_change, &arr, ret_n, NULL);
  if (r == 0)
    *ret = arr;
  return r;
}

static int read_spot_price(const xmlNode *item, void *elem) {
  struct aws_spot_price *p = elem;
  char buf[64], *end;
  if (name_at(item, "instanceType", p->type, sizeof p->type) < 0 || !p->type[0] ||
      name_at(item, "availabilityZone", p->zone, sizeof p->zone) < 0 ||
      name_at(item, "spotPrice", buf, sizeof buf) < 0 || !buf[0])
    return SL_EPARSE;
  errno = 0;
  p->usd_per_hour = strtod(buf, &end);
  if (errno || *end || !isfinite(p->usd_per_hour) || p->usd_per_hour < 0)
    return SL_EPARSE;
  if (name_at(item, "timestamp", buf, sizeof buf) < 0 || aws_xml_parse_time(buf, &p->time_unix) < 0)
    return SL_EPARSE;
  return 0;
}

int aws_xml_spot_prices(const char *xml, size_t len, struct aws_spot_price **ret, size_t *ret_n,
                        char next[AWS_NEXT_TOKEN_MAX]) {
  void *arr;
  int r = read_list(xml, len, "DescribeSpotPriceHistoryResponse", "spotPriceHistorySet",
                    sizeof **ret, read_spot_price, &arr, ret_n, next);
  if (r == 0)
    *ret = arr;
  return r;
}

static int read_score(const xmlNode *item, void *elem) {
  struct aws_placement_score *s = elem;
  char buf[32], *end;
  if (name_at(item, "region", s->region, sizeof s->region) < 0 ||
      name_at(item, "availabilityZoneId", s->zone_id, sizeof s->zone_id) < 0 ||
      name_at(item, "score", buf, sizeof buf) < 0 || !buf[0])
    return SL_EPARSE;
  errno = 0;
  long v = strtol(buf, &end, 10);
  if (errno || *end || v < 0 || v > 10)
    return SL_EPARSE;
  s->score = (int)v;
  return 0;
}

int aws_xml_placement_scores(const char *xml, size_t len, struct aws_placement_score **ret,
                             size_t *ret_n, char next[AWS_NEXT_TOKEN_MAX]) {
  void *arr;
  int r = read_list(xml, len, "GetSpotPlacementScoresResponse", "spotPlacementScoreSet",
                    sizeof **ret, read_score, &arr, ret_n, next);
  if (r == 0)
    *ret = arr;
  return r;
}
