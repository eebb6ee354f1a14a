/* gloo behind the C API of tc_gloo.h.
 *
 * The mesh is built the way gloo::rendezvous::Context::connectFullMesh builds
 * it (one tcp pair per peer, then connect each to the peer's address), except
 * that the addresses travel through the caller's exchange instead of a gloo
 * store. Every entry point catches what gloo throws (guarded); no exception
 * crosses into C. */
#include "tc_gloo.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "sl_err.h"
}

namespace {

/* A gloo::Context whose pairs are made (listen) and joined (connect) in two
 * steps, with the address exchange in between left to the caller. */
class Mesh : public gloo::Context {
 public:
  Mesh(int rank, int size) : gloo::Context(rank, size) {}

  void listen(const std::string &host) {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    transportContext_ = device_->createContext(rank, size);
    transportContext_->setTimeout(getTimeout());
    for (int i = 0; i < size; i++)
      if (i != rank) transportContext_->createPair(i);
  }

  std::vector<char> address(int peer) {
    return transportContext_->getPair(peer)->address().bytes();
  }

  void connect(int peer, const std::vector<char> &bytes) {
    transportContext_->getPair(peer)->connect(bytes);
  }
};

} // namespace

struct tc_gloo {
  std::shared_ptr<Mesh> mesh;
  std::string error;
};

/* The one place where gloo's errors become codes: a timeout, a lost peer
 * (gloo's I/O errors), memory, or anything else gloo refused. The text drops
 * gloo's "[source:line] " prefix. */
static int err_from_gloo(std::string *text, const char *op) {
  int code = SL_EGLOO;
  const char *what = "unknown error";
  try {
    throw;
  } catch (const gloo::IoException &e) {
    what = e.what();
    code = strstr(what, "Timed out") || strstr(what, "timeout") ? -ETIMEDOUT : -ECONNRESET;
  } catch (const std::bad_alloc &) {
    what = "out of memory";
    code = -ENOMEM;
  } catch (const std::exception &e) {
    what = e.what();
  } catch (...) {
  }
  if (what[0] == '[' && strstr(what, "] ")) what = strstr(what, "] ") + 2;
  try {
    *text = std::string(op) + ": " + what;
  } catch (...) {
  }
  return code;
}

template <typename F> static int guarded(tc_gloo *g, const char *op, F f) {
  try {
    f();
    return 0;
  } catch (...) {
    return err_from_gloo(&g->error, op);
  }
}

int tc_gloo_new(int rank, int world, const char *host, int timeout_ms, struct tc_gloo **ret,
                char *err, size_t err_size) {
  tc_gloo *g = new (std::nothrow) tc_gloo;
  if (!g) return -ENOMEM;
  int r = guarded(g, "gloo", [&] {
    g->mesh = std::make_shared<Mesh>(rank, world);
    g->mesh->setTimeout(std::chrono::milliseconds(timeout_ms));
    g->mesh->listen(host);
  });
  if (r < 0) {
    snprintf(err, err_size, "cannot listen on %s: %s", host, g->error.c_str());
    delete g;
    return r;
  }
  *ret = g;
  return 0;
}

int tc_gloo_addresses(struct tc_gloo *g, uint8_t *slots) {
  return guarded(g, "address", [&] {
    int world = g->mesh->size;
    memset(slots, 0, (size_t)world * TC_GLOO_SLOT_BYTES);
    for (int k = 0; k < world; k++) {
      if (k == g->mesh->rank) continue;
      std::vector<char> a = g->mesh->address(k);
      GLOO_ENFORCE(a.size() + 2 <= TC_GLOO_SLOT_BYTES, "address too long");
      uint8_t *s = slots + (size_t)k * TC_GLOO_SLOT_BYTES;
      s[0] = (uint8_t)(a.size() & 0xff);
      s[1] = (uint8_t)(a.size() >> 8);
      memcpy(s + 2, a.data(), a.size());
    }
  });
}

int tc_gloo_connect(struct tc_gloo *g, const uint8_t *slots) {
  return guarded(g, "connect", [&] {
    for (int k = 0; k < g->mesh->size; k++) {
      if (k == g->mesh->rank) continue;
      const uint8_t *s = slots + (size_t)k * TC_GLOO_SLOT_BYTES;
      size_t n = (size_t)s[0] | (size_t)s[1] << 8;
      GLOO_ENFORCE(n > 0 && n + 2 <= TC_GLOO_SLOT_BYTES, "malformed address from rank ", k);
      g->mesh->connect(k, std::vector<char>(s + 2, s + 2 + n));
    }
  });
}

int tc_gloo_alltoallv(struct tc_gloo *g, const void *in, const size_t *in_bytes, void *out,
                      const size_t *out_bytes) {
  return guarded(g, "all-to-all", [&] {
    int world = g->mesh->size;
    gloo::AlltoallvOptions o(g->mesh);
    o.setInput(static_cast<char *>(const_cast<void *>(in)),
               std::vector<int64_t>(in_bytes, in_bytes + world));
    o.setOutput(static_cast<char *>(out), std::vector<int64_t>(out_bytes, out_bytes + world));
    gloo::alltoallv(o);
  });
}

int tc_gloo_allgatherv(struct tc_gloo *g, void *buf, const size_t *bytes) {
  return guarded(g, "all-gather", [&] {
    gloo::AllgathervOptions o(g->mesh);
    o.setOutput(static_cast<char *>(buf), std::vector<size_t>(bytes, bytes + g->mesh->size));
    gloo::allgatherv(o);
  });
}

int tc_gloo_broadcast(struct tc_gloo *g, void *buf, size_t bytes, int root) {
  return guarded(g, "broadcast", [&] {
    gloo::BroadcastOptions o(g->mesh);
    o.setOutput(static_cast<char *>(buf), bytes);
    o.setRoot(root);
    gloo::broadcast(o);
  });
}

int tc_gloo_barrier(struct tc_gloo *g) {
  return guarded(g, "barrier", [&] {
    gloo::BarrierOptions o(g->mesh);
    gloo::barrier(o);
  });
}

const char *tc_gloo_error(const struct tc_gloo *g) { return g->error.c_str(); }

struct tc_gloo *tc_gloo_free(struct tc_gloo *g) {
  delete g;
  return nullptr;
}
