/* Connection file parsing. Everything in the file is untrusted text: each
 * field is type- and range-checked, and a failure names the field. */
#include "connfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_err.h"
#include "sl_json.h"

static const char *const port_keys[JK_CH_COUNT] = {
  [JK_CH_SHELL] = "shell_port", [JK_CH_CONTROL] = "control_port", [JK_CH_STDIN] = "stdin_port",
  [JK_CH_IOPUB] = "iopub_port", [JK_CH_HB] = "hb_port",
};

int jk_connection_parse(const char *text, size_t len, struct jk_connection *ret,
                        char *err, size_t err_size) {
  json_t *root = NULL;
  int r = sl_json_parse(text, len, 8, &root, err, err_size);
  if (r < 0)
    return r;
  struct jk_connection c;
  memset(&c, 0, sizeof c);
  r = SL_ECONFIG;
  if (!json_is_object(root)) {
    snprintf(err, err_size, "connection file is not a JSON object");
    goto out;
  }
  const char *scheme = sl_json_get_str(root, "signature_scheme", "hmac-sha256");
  if (strcmp(scheme, "hmac-sha256") != 0) {
    snprintf(err, err_size, "signature_scheme \"%.64s\" is not supported (only hmac-sha256)", scheme);
    r = SL_ESCHEME;
    goto out;
  }
  const char *transport = sl_json_get_str(root, "transport", "tcp");
  if (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0) {
    snprintf(err, err_size, "transport \"%.32s\" is not supported (tcp or ipc)", transport);
    goto out;
  }
  snprintf(c.transport, sizeof c.transport, "%s", transport);
  const char *ip = sl_json_get_str(root, "ip", "127.0.0.1");
  if (strlen(ip) == 0 || strlen(ip) >= sizeof c.ip) {
    snprintf(err, err_size, "ip is empty or too long");
    goto out;
  }
  snprintf(c.ip, sizeof c.ip, "%s", ip);
  for (int i = 0; i < JK_CH_COUNT; i++) {
    json_t *p = json_object_get(root, port_keys[i]);
    if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) > 65535) {
      snprintf(err, err_size, "%s is missing or not a port number", port_keys[i]);
      goto out;
    }
    c.ports[i] = (int)json_integer_value(p);
  }
  json_t *key = json_object_get(root, "key");
  if (key && !json_is_string(key)) {
    snprintf(err, err_size, "key is not a string");
    goto out;
  }
  size_t key_len = key ? json_string_length(key) : 0;
  if (key_len > sizeof c.key) {
    snprintf(err, err_size, "key is longer than %zu bytes", sizeof c.key);
    goto out;
  }
  if (key_len)
    memcpy(c.key, json_string_value(key), key_len);
  c.key_len = key_len;
  snprintf(c.kernel_name, sizeof c.kernel_name, "%s", sl_json_get_str(root, "kernel_name", "spotlab"));
  *ret = c;
  r = 0;
out:
  memset(&c, 0, sizeof c);
  json_decref(root);
  return r;
}

int jk_connection_load(const char *path, struct jk_connection *ret, char *err, size_t err_size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, err_size, "cannot open connection file %s: %s", path, strerror(e));
    return -e;
  }
  char *buf = malloc(65536 + 1);
  if (!buf) {
    fclose(f);
    return -ENOMEM;
  }
  size_t n = fread(buf, 1, 65536 + 1, f);
  fclose(f);
  int r;
  if (n > 65536) {
    snprintf(err, err_size, "connection file %s is larger than 64 KiB", path);
    r = SL_ELIMIT;
  } else {
    char inner[384];
    r = jk_connection_parse(buf, n, ret, inner, sizeof inner);
    if (r < 0)
      snprintf(err, err_size, "connection file %s: %s", path, inner);
  }
  free(buf);
  return r;
}

int jk_connection_endpoint(const struct jk_connection *c, enum jk_channel ch, char *buf, size_t size) {
  int n;
  if (strcmp(c->transport, "ipc") == 0)
    n = snprintf(buf, size, "ipc://%s-%d", c->ip, c->ports[ch]);
  else if (c->ports[ch] == 0)
    n = snprintf(buf, size, "tcp://%s:*", c->ip);
  else
    n = snprintf(buf, size, "tcp://%s:%d", c->ip, c->ports[ch]);
  return n < 0 || (size_t)n >= size ? SL_ELIMIT : 0;
}
