/* The admin page's files, embedded in the gateway at build time
 * (embed.py writes the table from the files beside this header). */
#ifndef GW_ADMIN_ASSETS_H
#define GW_ADMIN_ASSETS_H

#include <stddef.h>

struct gw_admin_asset {
  const char *path;             /* "/admin/app.js" */
  const char *type;             /* its Content-Type */
  const unsigned char *data;
  size_t len;
  const char *etag;             /* quoted, from the content's hash */
};

extern const struct gw_admin_asset gw_admin_assets[];
extern const size_t gw_admin_n_assets;

#endif
