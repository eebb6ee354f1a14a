/* The Jupyter connection file: transport, address, five ports, key, scheme. */
#ifndef JK_CONNFILE_H
#define JK_CONNFILE_H

#include <stddef.h>
#include <stdint.h>

enum jk_channel { JK_CH_SHELL, JK_CH_CONTROL, JK_CH_STDIN, JK_CH_IOPUB, JK_CH_HB, JK_CH_COUNT };

struct jk_connection {
  char transport[8];  /* "tcp" or "ipc" */
  char ip[256];
  int ports[JK_CH_COUNT];
  uint8_t key[1024];
  size_t key_len;
  char kernel_name[64];
};

/* Parses the JSON text of a connection file. Refuses any signature_scheme
 * other than hmac-sha256 (SL_ESCHEME), unknown transports, missing or
 * out-of-range ports and over-long keys (SL_ECONFIG), with a message in err. */
int jk_connection_parse(const char *text, size_t len, struct jk_connection *ret,
                        char *err, size_t err_size);
/* Reads and parses path (at most 64 KiB). */
int jk_connection_load(const char *path, struct jk_connection *ret, char *err, size_t err_size);
/* The ZeroMQ endpoint for a channel: "tcp://ip:port" or "ipc://ip-port". */
int jk_connection_endpoint(const struct jk_connection *c, enum jk_channel ch, char *buf, size_t size);

#endif
