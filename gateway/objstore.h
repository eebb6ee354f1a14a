/* The checkpoint store as the gateway reaches it ([store] url).
 *
 * For an s3:// store the gateway holds the AWS credentials (sl_awscreds)
 * and signs: its own requests (the worker bundle) and, on a worker's
 * `presign` request, URLs for exactly the objects that worker may touch,
 * those under the keys of the jobs it runs (protocols.md §2, presign).
 * Workers never hold credentials. A file:/// store needs none of this: its
 * workers share the gateway's host. */
#ifndef GW_OBJSTORE_H
#define GW_OBJSTORE_H

#include "sl_s3.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_PRESIGN_MAX 64           /* URLs per presign request */
#define GW_PRESIGN_EXPIRES_S 3600   /* a worker's URL is valid this long */

struct gw_objstore;

/* Opens the store at url (s3://BUCKET[/PREFIX]); region may be "" (the
 * environment's, then the AWS profile's). The credential chain is read now;
 * credentials are fetched when first needed. NULL *ret for any other URL
 * (nothing to sign). SL_ECONFIG with a sentence in err. */
int gw_objstore_open(const char *url, const char *region, struct gw_objstore **ret, char *err,
                     size_t err_size);
struct gw_objstore *gw_objstore_free(struct gw_objstore *o);

/* A signer with the gateway's own credentials, for its own requests
 * (borrowing o). */
struct sl_s3_signer gw_objstore_signer(struct gw_objstore *o);

/* Options for the gateway's own S3 clients (o borrowed): their requests stop,
 * failing with -ECANCELED, once gw_objstore_stop was called; their multipart
 * uploads have parts of the size set here. */
struct sl_s3_opts gw_objstore_opts(struct gw_objstore *o);
/* The part size of the multipart uploads ([store] part_mib); 0: the S3
 * client's default. NULL is a no-op. */
void gw_objstore_set_part_bytes(struct gw_objstore *o, uint64_t bytes);

/* The gateway stops: its own S3 requests under way end within about a
 * second, and later ones fail at once. Any thread; o may be NULL. */
void gw_objstore_stop(struct gw_objstore *o);

/* A presigned GET of key for the gateway's own use (the worker bundle in
 * an instance's user data), valid expires_s (bounded by the credentials'
 * life). */
int gw_objstore_presign_get(struct gw_objstore *o, const char *key, long expires_s, char *url,
                            size_t url_size, char *err, size_t err_size);

/* Presigns n requests (at most GW_PRESIGN_MAX) for a worker, each of whose
 * keys must lie under one of the prefixes ("J000003/"). SL_EAUTH for a key
 * outside them, -EINVAL for a malformed request, SL_EAUTH when no
 * credentials can be had; a sentence in err. */
int gw_objstore_presign_for(struct gw_objstore *o, const struct sl_s3_presign_req *reqs, size_t n,
                            const char *const *prefixes, size_t n_prefixes, char **ret_urls,
                            char *err, size_t err_size);

#endif
