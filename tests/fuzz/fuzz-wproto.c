/* Fuzz target: the gateway's worker protocol (gw_wproto_handle), over the
 * in-process gateway of gw-fixture.h.
 *
 * Input layout: the first byte chooses the scene (bits below); the rest is
 * a list of messages separated by "\n--\n", each the JSON body a worker
 * sends. A body is parsed as gw_wproto_recv parses it (sl_json_parse,
 * GW_JSON_DEPTH; a non-object is refused there) and handed to
 * gw_wproto_handle as coming from the admitted instance's worker; the
 * gateway's loop then settles (assigns, requeues, placements, provider
 * events). The socket and the ZAP check in front are not fuzzed here: the
 * CURVE handshake decides which instance a message comes from.
 *
 * Alice's job is J000001, on the first instance launched (a gang of two
 * with GANG; its options from the input with OPTIONS); bob's, with
 * OTHER_JOB, J000002 on another one. Each input gets
 * a fresh gateway (its own temporary state folder and SQLite store), so a
 * crash replays from its input alone. Nothing may crash, leak, hang or hit
 * undefined behaviour, whatever the bytes. */
#include "gw-fixture.h"

#include "gang.h"
#include "objstore.h"
#include "zmsg.h"

#include "sl_json.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
  REGISTER = 1 << 0,    /* the workers have registered */
  STARTED = 1 << 1,     /* and alice's job has started (running) */
  GANG = 1 << 2,        /* alice's job is a gang of two instances */
  OTHER_JOB = 1 << 3,   /* bob's job runs on an instance of its own */
  FROM_OTHER = 1 << 4,  /* messages come from the second instance */
  NOTICE = 1 << 5,      /* the provider gave alice's instance a notice */
  S3 = 1 << 6,          /* the gateway's store is s3:// (presign answered) */
  OPTIONS = 1 << 7,     /* the first message is alice's job's options instead */
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The S3 store presign requests are signed for: credentials from the
 * environment, nothing fetched (signing is local). Made once. */
static struct gw_objstore *objstore_once(void) {
  static struct gw_objstore *o;
  static bool tried;
  if (tried)
    return o;
  tried = true;
  setenv("SPOTLAB_QUIET", "1", 0); /* info lines: one per hello, launch, state change */
  sl_log_init(NULL);
  /* a fresh store per input: in memory, SQLite's syncs stay off the disk */
  if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
    setenv("TMPDIR", "/dev/shm", 1);
  setenv("AWS_ACCESS_KEY_ID", "AKIDFUZZFUZZFUZZ", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "fuzz/secret/key/not/a/real/one/00000000", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  char err[256];
  if (gw_objstore_open("s3://fuzz-bucket/pre", "us-east-1", &o, err, sizeof err) < 0 || !o) {
    fprintf(stderr, "fuzz-wproto: cannot open the store: %s\n", err);
    abort();
  }
  return o;
}

static void ids_of(struct fx *f, int64_t job, char ids[2][GW_INSTANCE_ID_MAX]) {
  struct gw_job *j = fx_job(f, job);
  if (!j)
    return;
  if (j->gang) {
    for (int r = 0; r < j->gang->n && r < 2; r++)
      snprintf(ids[r], GW_INSTANCE_ID_MAX, "%s", j->gang->m[r].instance);
  } else {
    snprintf(ids[0], GW_INSTANCE_ID_MAX, "%s", j->instance);
  }
}

static void started(struct fx *f, const char *inst, int64_t job, int rank) {
  char id[16];
  json_t *b = json_pack("{s:s,s:s,s:s,s:i}", "type", "started", "instance", inst, "job",
                        fx_jid(job, id), "rank", rank);
  if (rank == 0)
    json_object_set_new(b, "rendezvous", json_string("tcp://127.0.0.1:41000"));
  fx_worker(f, inst, b);
  json_decref(b);
  fx_settle(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  struct gw_objstore *store = objstore_once();
  unsigned flags = data[0];
  data++;
  size--;
  struct fx *f = fx_new(NULL);
  if (!f)
    abort();
  if (flags & S3)
    gw_wproto_set_objstore(f->wproto, store);
  char ids[2][GW_INSTANCE_ID_MAX] = {"", ""};
  const uint8_t *p = data, *end = data + size;
  json_t *o = NULL;
  if (flags & OPTIONS) {
    /* what a submit carries reaches the worker in assign (checkpoint_every, steps) */
    const uint8_t *sep = memmem(p, size, "\n--\n", 4);
    char why[128];
    if (sl_json_parse((const char *)p, (size_t)((sep ? sep : end) - p), GW_JSON_DEPTH, &o, why,
                      sizeof why) < 0 || !json_is_object(o)) {
      json_decref(o);
      o = NULL;
    }
    p = sep ? sep + 4 : end;
  }
  if (!o)
    o = json_pack("{s:i,s:i}", "steps", 100, "checkpoint_every", 10);
  if (flags & GANG)
    json_object_set_new(o, "nodes", json_integer(2));
  int64_t job = fx_submit(f, "alice", "nb", "train", o);
  fx_settle(f);
  ids_of(f, job, ids);
  if (flags & OTHER_JOB) {
    int64_t bob = fx_submit(f, "bob", "nb", "train", json_pack("{s:i}", "steps", 100));
    char other[GW_INSTANCE_ID_MAX];
    if (bob > 0 && fx_run_job(f, bob, other) && !ids[1][0])
      snprintf(ids[1], sizeof ids[1], "%s", other);
  }
  if (flags & (REGISTER | STARTED)) {
    for (int k = 0; k < 2; k++)
      if (ids[k][0] && fx_inst(f, ids[k]) && !fx_inst(f, ids[k])->registered)
        fx_register(f, ids[k], NULL, NULL);
    fx_settle(f);
  }
  if (flags & STARTED) {
    struct gw_job *j = fx_job(f, job);
    for (int r = 0; j && r < (j->gang ? 2 : 1); r++)
      if (ids[r][0] && fx_inst(f, ids[r]))
        started(f, ids[r], job, r);
  }
  if ((flags & NOTICE) && ids[0][0]) {
    fp_notice(f->fp, ids[0], 120 * SL_US_PER_S);
    fx_settle(f);
  }
  const char *from = ids[flags & FROM_OTHER && ids[1][0] ? 1 : 0];
  while (from[0] && fx_inst(f, from)) {
    const uint8_t *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
    const uint8_t *stop = sep ? sep : end;
    json_t *body = NULL;
    char why[128];
    if (sl_json_parse((const char *)p, (size_t)(stop - p), GW_JSON_DEPTH, &body, why,
                      sizeof why) == 0 &&
        json_is_object(body))
      fx_worker(f, from, body);
    json_decref(body);
    fx_settle(f);
    fx_captures_clear(f);
    fx_bus_clear(f);
    if (!sep)
      break;
    p = sep + 4;
  }
  fx_free(f);
  return 0;
}
