/* Fuzz target: the readers of EC2's XML replies (gateway/providers/aws_xml.c,
 * libxml2 underneath), which every answer from EC2 or from whatever stands
 * at its endpoint goes through.
 *
 * The first input byte chooses the reader (its value modulo 6: the error
 * form, instances, state changes, spot prices, placement scores, a
 * timestamp); the rest is the reply. A refusal is SL_EPARSE or SL_ELIMIT
 * (-ENOMEM where memory ran out) and leaves nothing allocated; what reads
 * holds at most AWS_XML_MAX_ITEMS entries, every string of them terminated
 * inside its field, and a next token terminated inside its buffer. No input
 * may crash, leak, hang, fetch anything or hit undefined behaviour. */
#include "fuzz.h"
#include "aws_xml.h"
#include "sl_err.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TERMINATED(field) (memchr((field), 0, sizeof(field)) != NULL)

static void refused(int r) {
  if (r != SL_EPARSE && r != SL_ELIMIT && r != -ENOMEM)
    abort();
}

/* A list reader's outcome: a refusal leaves nothing; what reads holds at
 * most AWS_XML_MAX_ITEMS entries. Whether its items are to be checked. */
static int listed(int r, const void *v, size_t n) {
  if (r < 0) {
    refused(r);
    if (v)
      abort();
    return 0;
  }
  if (n > AWS_XML_MAX_ITEMS || (n && !v))
    abort();
  return 1;
}

static void check_next(int r, const char *next) {
  if (r == 0 && !memchr(next, 0, AWS_NEXT_TOKEN_MAX))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  int which = data[0] % 6;
  size_t len = size - 1;
  char *xml = fuzz_exact_copy(data + 1, len);
  char next[AWS_NEXT_TOKEN_MAX];
  memset(next, 'x', sizeof next);
  size_t n = 0;
  int r;
  switch (which) {
  case 0: {
    struct aws_ec2_error e;
    memset(&e, 'x', sizeof e);
    r = aws_xml_error(xml, len, &e);
    if (r == 0 && (!TERMINATED(e.code) || !TERMINATED(e.message) || !TERMINATED(e.request_id)))
      abort();
    if (r < 0)
      refused(r);
    break;
  }
  case 1: {
    struct aws_instance *v = NULL;
    r = aws_xml_instances(xml, len, &v, &n, next);
    if (!listed(r, v, n))
      break;
    check_next(r, next);
    for (size_t i = 0; i < n; i++)
      if (!TERMINATED(v[i].id) || !TERMINATED(v[i].type) || !TERMINATED(v[i].zone) ||
          !TERMINATED(v[i].state) || !TERMINATED(v[i].private_ip) || !TERMINATED(v[i].public_ip) ||
          !TERMINATED(v[i].tag_spotlab_instance) || !TERMINATED(v[i].tag_spotlab_job) ||
          !TERMINATED(v[i].tag_spotlab_gateway) || !TERMINATED(v[i].state_reason))
        abort();
    free(v);
    break;
  }
  case 2: {
    struct aws_state_change *v = NULL;
    r = aws_xml_state_changes(xml, len, &v, &n);
    if (!listed(r, v, n))
      break;
    for (size_t i = 0; i < n; i++)
      if (!TERMINATED(v[i].id) || !TERMINATED(v[i].current) || !TERMINATED(v[i].previous))
        abort();
    free(v);
    break;
  }
  case 3: {
    struct aws_spot_price *v = NULL;
    r = aws_xml_spot_prices(xml, len, &v, &n, next);
    if (!listed(r, v, n))
      break;
    check_next(r, next);
    for (size_t i = 0; i < n; i++)
      if (!TERMINATED(v[i].type) || !TERMINATED(v[i].zone))
        abort();
    free(v);
    break;
  }
  case 4: {
    struct aws_placement_score *v = NULL;
    r = aws_xml_placement_scores(xml, len, &v, &n, next);
    if (!listed(r, v, n))
      break;
    check_next(r, next);
    for (size_t i = 0; i < n; i++)
      if (!TERMINATED(v[i].zone) || !TERMINATED(v[i].zone_id) || !TERMINATED(v[i].region))
        abort();
    free(v);
    break;
  }
  default: {
    /* a timestamp is a C string */
    char *text = fuzz_string_copy((const uint8_t *)xml, len);
    int64_t t;
    r = aws_xml_parse_time(text, &t);
    if (r < 0)
      refused(r);
    free(text);
    break;
  }
  }
  free(xml);
  return 0;
}
