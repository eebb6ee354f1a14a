/* SHA-256 for uploads, with libcrypto loaded on first use (khash.h). Its
 * six EVP functions are looked up once; any missing, and libsodium does. */
#include "khash.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "sl_log.h"

static struct {
  bool ok;
  void *(*ctx_new)(void);
  void (*ctx_free)(void *);
  const void *(*sha256)(void);
  int (*init)(void *, const void *, void *);
  int (*update)(void *, const void *, size_t);
  int (*final)(void *, unsigned char *, unsigned int *);
} evp;

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  static const char *const names[] = {"libcrypto.so.3", "libcrypto.so"};
  void *lib = NULL;
  for (size_t i = 0; !lib && i < sizeof names / sizeof *names; i++)
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    sl_debug("kernel.upload", "libcrypto not loaded (%s): uploads hash with libsodium", dlerror());
    return;
  }
  *(void **)&evp.ctx_new = dlsym(lib, "EVP_MD_CTX_new");
  *(void **)&evp.ctx_free = dlsym(lib, "EVP_MD_CTX_free");
  *(void **)&evp.sha256 = dlsym(lib, "EVP_sha256");
  *(void **)&evp.init = dlsym(lib, "EVP_DigestInit_ex");
  *(void **)&evp.update = dlsym(lib, "EVP_DigestUpdate");
  *(void **)&evp.final = dlsym(lib, "EVP_DigestFinal_ex");
  evp.ok = evp.ctx_new && evp.ctx_free && evp.sha256 && evp.init && evp.update && evp.final;
  if (!evp.ok)
    sl_debug("kernel.upload", "libcrypto lacks the EVP digest functions: uploads hash with libsodium");
  /* the library stays loaded for the kernel's life */
}

void jk_hash_init(struct jk_hash *h, bool fast) {
  h->ctx = NULL;
  if (fast) {
    pthread_once(&once, load);
    if (evp.ok && (h->ctx = evp.ctx_new()) && !evp.init(h->ctx, evp.sha256(), NULL)) {
      evp.ctx_free(h->ctx);
      h->ctx = NULL;
    }
  }
  if (!h->ctx)
    crypto_hash_sha256_init(&h->sodium);
}

void jk_hash_update(struct jk_hash *h, const void *data, size_t len) {
  if (h->ctx)
    evp.update(h->ctx, data, len);
  else
    crypto_hash_sha256_update(&h->sodium, data, len);
}

void jk_hash_final_hex(struct jk_hash *h, char hex[65]) {
  unsigned char md[64];
  unsigned int n = crypto_hash_sha256_BYTES;
  if (h->ctx) {
    evp.final(h->ctx, md, &n);
    evp.ctx_free(h->ctx);
    h->ctx = NULL;
  } else {
    crypto_hash_sha256_final(&h->sodium, md);
  }
  sodium_bin2hex(hex, 65, md, crypto_hash_sha256_BYTES);
}

void jk_hash_drop(struct jk_hash *h) {
  if (h->ctx)
    evp.ctx_free(h->ctx);
  h->ctx = NULL;
}

bool jk_hash_is_fast(const struct jk_hash *h) { return h->ctx != NULL; }
