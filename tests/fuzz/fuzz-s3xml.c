/* Fuzz target: the readers of S3's XML replies (common/sl_s3_xml.c,
 * libxml2 underneath), which every answer from a store, or from whatever
 * stands at its endpoint, goes through.
 *
 * The first input byte chooses the reader (its value modulo 4: an error, a
 * list page, the start of an upload, the completion of one); for a list page
 * the second byte chooses the prefix asked for ("", "ckpt/J000001/" or
 * "p/"); the rest is the reply. An error's code and message are terminated
 * inside their fields; a list page is refused with SL_EPARSE or SL_ELIMIT
 * and a sentence, or gives keys that are non-empty C strings, at most
 * SL_S3_LIST_MAX of them, and a next token terminated inside its buffer; an
 * upload id is refused or a terminated string of the length returned. No
 * input may crash, leak, hang, fetch anything or hit undefined behaviour. */
#include "fuzz.h"
#include "sl_err.h"
#include "sl_s3.h"
#include "sl_s3_int.h"
#include "sl_strv.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void list_page(uint8_t which_prefix, const char *body, size_t len) {
  static const char *const prefixes[] = {"", "ckpt/J000001/", "p/"};
  const char *prefix = prefixes[which_prefix % 3];
  struct sl_strv l = {0};
  char next[64], err[256];
  memset(next, 'x', sizeof next);
  err[0] = 0;
  int r = sl_s3_xml_list_page(body, len, prefix, &l, next, sizeof next, err, sizeof err);
  if (r < 0) {
    if ((r != SL_EPARSE && r != SL_ELIMIT && r != -ENOMEM) || (r != -ENOMEM && !err[0]))
      abort();
  } else {
    if (!memchr(next, 0, sizeof next) || l.n > SL_S3_LIST_MAX)
      abort();
    for (size_t i = 0; i < l.n; i++)
      if (!l.v[i] || !l.v[i][0])
        abort();
  }
  sl_strv_free(l.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  sl_s3_xml_init();
  int which = data[0] % 4;
  size_t len = size - 1;
  char *body = fuzz_exact_copy(data + 1, len);
  switch (which) {
  case 0: {
    char code[64], msg[200];
    memset(code, 'x', sizeof code);
    memset(msg, 'x', sizeof msg);
    sl_s3_xml_error(body, len, code, msg);
    if (!memchr(code, 0, sizeof code) || !memchr(msg, 0, sizeof msg))
      abort();
    break;
  }
  case 1:
    if (len)
      list_page((uint8_t)body[0], body + 1, len - 1);
    break;
  case 2: {
    char id[128];
    memset(id, 'x', sizeof id);
    int r = sl_s3_xml_upload_id(body, len, id, sizeof id);
    if (r < 0 ? r != SL_EPARSE && r != SL_ELIMIT : (size_t)r >= sizeof id || strlen(id) != (size_t)r)
      abort();
    break;
  }
  default:
    sl_s3_xml_is(body, len, "CompleteMultipartUploadResult");
    break;
  }
  free(body);
  return 0;
}
