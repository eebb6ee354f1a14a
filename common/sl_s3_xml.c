/* S3's XML replies: errors, a page of a list, the start and the completion
 * of a multipart upload. Every reply a store (or whatever answers at its
 * endpoint) sends is read here, with libxml2 and without the network or
 * entity expansion. Nothing read is trusted further than these functions
 * check it. */
#include "sl_s3_int.h"
#include "sl_strv.h"

#include "sl_err.h"

#include <errno.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 1024 /* S3's limit on a whole key, prefix included */

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;
static void xml_init(void) { xmlInitParser(); }

void sl_s3_xml_init(void) { pthread_once(&xml_once, xml_init); }

/* A reply as a tree: no network, no entity expansion. NULL if it does not parse. */
static xmlDoc *xml_read(const char *body, size_t len) {
  if (!body || !len || len > INT_MAX) return NULL;
  return xmlReadMemory(body, (int)len, NULL, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
                                                       XML_PARSE_NOWARNING);
}

/* The root element when it is named root, else NULL. */
static xmlNode *root_named(xmlDoc *d, const char *root) {
  xmlNode *n = d ? xmlDocGetRootElement(d) : NULL;
  return n && !strcmp((const char *)n->name, root) ? n : NULL;
}

static xmlNode *xml_child(xmlNode *n, const char *name) {
  for (xmlNode *c = n ? n->children : NULL; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE && !strcmp((const char *)c->name, name)) return c;
  return NULL;
}

/* The text of n's child `name` into out: its length, -ENOENT when absent,
 * SL_ELIMIT when it does not fit. */
static int xml_text(xmlNode *n, const char *name, char *out, size_t size) {
  xmlNode *c = xml_child(n, name);
  if (!c) return -ENOENT;
  xmlChar *t = xmlNodeGetContent(c);
  size_t len = t ? strlen((const char *)t) : 0;
  int r = len < size ? (int)len : SL_ELIMIT;
  if (r >= 0) memcpy(out, t ? (const char *)t : "", len + 1);
  xmlFree(t);
  return r;
}

void sl_s3_xml_error(const char *body, size_t len, char code[64], char msg[200]) {
  code[0] = msg[0] = 0;
  xmlDoc *d = xml_read(body, len);
  xmlNode *root = root_named(d, "Error");
  if (root) {
    if (xml_text(root, "Code", code, 64) < 0) code[0] = 0;
    if (xml_text(root, "Message", msg, 200) < 0) msg[0] = 0;
  }
  xmlFreeDoc(d);
}

bool sl_s3_xml_is(const char *body, size_t len, const char *root) {
  xmlDoc *d = xml_read(body, len);
  bool is = root_named(d, root) != NULL;
  xmlFreeDoc(d);
  return is;
}

int sl_s3_xml_upload_id(const char *body, size_t len, char *id, size_t size) {
  xmlDoc *d = xml_read(body, len);
  xmlNode *root = root_named(d, "InitiateMultipartUploadResult");
  int r = root ? xml_text(root, "UploadId", id, size) : SL_EPARSE;
  xmlFreeDoc(d);
  return r > 0 ? r : r == 0 || r == -ENOENT ? SL_EPARSE : r;
}

int sl_s3_xml_list_page(const char *body, size_t len, const char *prefix, struct sl_strv *l,
                        char *next, size_t next_size, char *err, size_t err_size) {
  xmlDoc *d = xml_read(body, len);
  xmlNode *root = root_named(d, "ListBucketResult");
  int r = 0;
  char truncated[8] = "";
  char *key = malloc(KEY_MAX + 1);
  if (!key) {
    r = -ENOMEM;
    goto done;
  }
  if (!root) {
    r = sl_err_say(err, err_size, SL_EPARSE, "S3 list of %s: the answer is not a ListBucketResult",
                   prefix);
    goto done;
  }
  size_t pl = strlen(prefix), cut = 0;
  int kl = xml_text(root, "Prefix", key, KEY_MAX + 1);
  if (kl < 0) kl = 0; /* no Prefix: the bucket's root */
  if ((size_t)kl < pl || memcmp(key + kl - pl, prefix, pl)) {
    r = sl_err_say(err, err_size, SL_EPARSE, "S3 list of %s: the answer is for another prefix",
                   prefix);
    goto done;
  }
  cut = (size_t)kl - pl;
  char store_prefix[KEY_MAX + 1];
  memcpy(store_prefix, key, cut);
  store_prefix[cut] = 0;
  for (xmlNode *n = root->children; n && r >= 0; n = n->next) {
    if (n->type != XML_ELEMENT_NODE || strcmp((const char *)n->name, "Contents")) continue;
    if (xml_text(n, "Key", key, KEY_MAX + 1) < 0) {
      r = sl_err_say(err, err_size, SL_EPARSE, "S3 list of %s: an entry without a usable Key",
                     prefix);
    } else if (strlen(key) > cut && !memcmp(key, store_prefix, cut)) {
      if ((r = sl_strv_add(l, key + cut, SL_S3_LIST_MAX)) == SL_ELIMIT)
        sl_err_say(err, err_size, r, "S3 list of %s: more than %d keys", prefix, SL_S3_LIST_MAX);
    }
  }
  if (r < 0) goto done;
  next[0] = 0;
  if (xml_text(root, "IsTruncated", truncated, sizeof truncated) >= 0 && !strcmp(truncated, "true") &&
      xml_text(root, "NextContinuationToken", next, next_size) <= 0)
    r = sl_err_say(err, err_size, SL_EPARSE,
                   "S3 list of %s: a truncated page without a usable token", prefix);
done:
  free(key);
  xmlFreeDoc(d);
  return r;
}
