/* nodes=N on the worker: the assign's gang field, rank 0's rendezvous
 * (address and a free port) and the three flags spotlab-train gets. */
#include "harness.h"

#include "gang.h"
#include "sl_err.h"
#include "spec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int parse(const char *json, struct wk_gang *g) {
  json_t *v = json ? json_loads(json, JSON_DECODE_ANY, NULL) : NULL;
  char err[256] = "";
  int r = wk_gang_parse(v, g, err, sizeof err);
  json_decref(v);
  return r;
}

static void test_parse(void) {
  struct wk_gang g;
  CHECK_INT(parse(NULL, &g), 0);
  CHECK_INT(g.world_size, 0);
  CHECK_INT(parse("null", &g), 0);
  CHECK_INT(g.world_size, 0);
  CHECK_INT(parse("{\"rank\":0,\"world_size\":2}", &g), 0);
  CHECK_INT(g.rank, 0);
  CHECK_INT(g.world_size, 2);
  CHECK_STR(g.rendezvous, ""); /* rank 0 makes it */
  CHECK_INT(parse("{\"rank\":3,\"world_size\":4,\"rendezvous\":\"tcp://10.0.0.5:41000\"}", &g), 0);
  CHECK_INT(g.rank, 3);
  CHECK_STR(g.rendezvous, "tcp://10.0.0.5:41000");
  /* refused: no rendezvous for a rank above 0, ranks out of range, one rank */
  CHECK_INT(parse("{\"rank\":1,\"world_size\":2}", &g), SL_ECONFIG);
  CHECK_INT(parse("{\"rank\":1,\"world_size\":2,\"rendezvous\":\"udp://h:1\"}", &g), SL_ECONFIG);
  CHECK_INT(parse("{\"rank\":1,\"world_size\":2,\"rendezvous\":\"tcp://h:1 --x\"}", &g), SL_ECONFIG);
  CHECK_INT(parse("{\"rank\":2,\"world_size\":2,\"rendezvous\":\"tcp://h:1\"}", &g), SL_ECONFIG);
  CHECK_INT(parse("{\"rank\":-1,\"world_size\":2}", &g), SL_ECONFIG);
  CHECK_INT(parse("{\"rank\":0,\"world_size\":1}", &g), SL_ECONFIG);
  CHECK_INT(parse("{\"rank\":\"0\",\"world_size\":2}", &g), SL_ECONFIG);
  CHECK_INT(parse("[0,2]", &g), SL_ECONFIG);
}

static void test_host(void) {
  char host[128];
  CHECK_INT(wk_gang_host("10.1.2.3", "tcp://gw.example.org:7401", host, sizeof host), 0);
  CHECK_STR(host, "10.1.2.3"); /* configured: taken as it is */
  CHECK_INT(wk_gang_host("", "ipc:///tmp/x/workers.sock", host, sizeof host), 0);
  CHECK_STR(host, "127.0.0.1");
  CHECK_INT(wk_gang_host(NULL, "tcp://127.0.0.1:7401", host, sizeof host), 0);
  CHECK_STR(host, "127.0.0.1"); /* the route to a loopback gateway */
  CHECK_INT(wk_gang_host(NULL, "tcp://*:7401", host, sizeof host), 0);
  CHECK_STR(host, "127.0.0.1");
  CHECK_INT(wk_gang_host(NULL, "tcp://[::1]:7401", host, sizeof host), 0);
  CHECK_STR(host, "::1");
  CHECK_INT(wk_gang_host("a-very-long-address", "ipc://x", host, 8), -ENAMETOOLONG);
}

/* The port named is free: a listener binds it (as spotlab-train's rank 0
 * does, with SO_REUSEADDR), and two rendezvous do not share one. */
static void test_rendezvous(void) {
  struct wk_gang a = {.world_size = 2}, b = {.world_size = 2};
  char err[256] = "";
  CHECK_INT(wk_gang_rendezvous(&a, "127.0.0.1", err, sizeof err), 0);
  CHECK_INT(wk_gang_rendezvous(&b, "127.0.0.1", err, sizeof err), 0);
  int pa = 0, pb = 0;
  CHECK(sscanf(a.rendezvous, "tcp://127.0.0.1:%d", &pa) == 1 && pa > 0 && pa < 65536);
  CHECK(sscanf(b.rendezvous, "tcp://127.0.0.1:%d", &pb) == 1 && pb > 0);
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pa)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  CHECK_INT(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_INT(listen(fd, 4), 0);
  /* while it listens, another rendezvous gets another port */
  struct wk_gang c = {.world_size = 2};
  CHECK_INT(wk_gang_rendezvous(&c, "127.0.0.1", err, sizeof err), 0);
  int pc = 0;
  CHECK(sscanf(c.rendezvous, "tcp://127.0.0.1:%d", &pc) == 1 && pc != pa);
  close(fd);
  int v6 = socket(AF_INET6, SOCK_STREAM, 0);
  if (v6 >= 0) { /* IPv6 addresses go in brackets */
    close(v6);
    if (wk_gang_rendezvous(&c, "::1", err, sizeof err) == 0)
      CHECK(!strncmp(c.rendezvous, "tcp://[::1]:", 12));
  }
  CHECK_INT(wk_gang_rendezvous(&c, "not-an-address", err, sizeof err), SL_ECONFIG);
}

static void test_argv(void) {
  json_t *spec = json_loads("{\"model\":{\"type\":\"gpt\"},\"data\":{\"type\":\"text\",\"args\":[\"t.txt\"]},"
                            "\"options\":{\"steps\":10,\"batch\":8,\"nodes\":2}}", 0, NULL);
  struct wk_spec_paths p = {.train = "/t", .ckpt_dir = "/c", .metrics_fd = 3, .control_fd = 4,
                            .resume = true, .rank = 1, .world_size = 2,
                            .rendezvous = "tcp://127.0.0.1:41000"};
  char **argv = NULL, err[256] = "", out[1024] = "";
  CHECK_INT(wk_spec_build_argv(WK_KIND_TRAIN, spec, &p, &argv, err, sizeof err), 0);
  for (size_t i = 0; argv && argv[i]; i++) {
    if (i) strcat(out, " ");
    strcat(out, argv[i]);
  }
  CHECK_STR(out, "/t --model gpt --data t.txt --resume --world-size 2 --rank 1 --rendezvous "
                 "tcp://127.0.0.1:41000 --ckpt-dir /c --metrics fd:3 --control fd:4 --steps 10 --batch 8");
  wk_argv_free(argv);
  p.rendezvous = NULL;
  CHECK_INT(wk_spec_build_argv(WK_KIND_TRAIN, spec, &p, &argv, err, sizeof err), SL_ECONFIG);
  json_decref(spec);
}

int main(void) {
  test_parse();
  test_host();
  test_rendezvous();
  test_argv();
  TEST_MAIN_END();
}
