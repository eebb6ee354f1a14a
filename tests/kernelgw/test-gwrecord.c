/* A run record as text: every part of a full record, "-" for what a record
 * lacks, and no crash on a record that is not one. */
#include "harness.h"
#include "gwrecord.h"

#include <stdlib.h>
#include <string.h>

#define HAS(text, s) CHECK((text) && strstr((text), (s)) != NULL)

int main(void) {
  json_t *full = json_loads(
      "{\"job\":\"J000004\",\"kind\":\"train\",\"state\":\"succeeded\",\"user\":\"alice\","
      "\"created_us\":1700000000000000,\"rerun_of\":\"J000001\",\"forced\":true,"
      "\"spec\":{\"kind\":\"train\",\"options\":{\"steps\":20,\"seed\":7}},"
      "\"model\":{\"name\":\"m\",\"definition\":{\"type\":\"gpt\"}},"
      "\"data\":{\"name\":\"d\",\"definition\":{\"type\":\"text\"},\"path\":\"/x/book.txt\","
      "\"sha256\":\"aaaa\"},\"data_changed\":{\"was\":\"aaaa\",\"now\":\"bbbb\"},"
      "\"seed\":7,\"seed_from\":\"gateway\",\"spotlab_version\":\"0.1.0\","
      "\"build_ids\":{\"gateway\":\"g1\",\"worker\":[\"w1\",\"w2\"],\"train\":[\"t1\"]},"
      "\"attempts\":[{\"attempt\":1,\"instance_type\":\"g5.xlarge\",\"zone\":\"us-east-1a\","
      "\"market\":\"spot\",\"from_step\":0,\"started_us\":1700000000000000,\"outcome\":\"preempted\"}],"
      "\"checkpoints\":[{\"step\":10,\"bytes\":1234,\"key\":\"J000004/ckpt/10\",\"time_us\":1700000001000000}]}",
      0, NULL);
  CHECK(full != NULL);
  char *t = jk_format_record(full);
  HAS(t, "J000004 (train, succeeded)");
  HAS(t, "a rerun of J000001 (forced)");
  HAS(t, "{\"seed\":7,\"steps\":20}");
  HAS(t, "m = {\"type\":\"gpt\"}");
  HAS(t, "/x/book.txt  aaaa");
  HAS(t, "changed: sha256 aaaa then, bbbb now");
  HAS(t, "7 (chosen by the gateway)");
  HAS(t, "gateway g1, worker w1, w2, spotlab-train t1");
  HAS(t, "g5.xlarge");
  HAS(t, "preempted");
  HAS(t, "step 10");
  HAS(t, "J000004/ckpt/10");
  free(t);
  json_decref(full);

  json_t *bare = json_pack("{s:s}", "job", "J000009");
  t = jk_format_record(bare);
  HAS(t, "J000009 (-, -)");
  HAS(t, "seed        -");
  HAS(t, "none yet");
  CHECK(t && !strstr(t, "rerun"));
  free(t);
  json_decref(bare);
  t = jk_format_record(NULL);
  CHECK(t != NULL);
  free(t);
  json_t *odd = json_pack("{s:i,s:[i],s:s}", "job", 3, "attempts", 5, "build_ids", "x");
  t = jk_format_record(odd);
  CHECK(t != NULL);
  free(t);
  json_decref(odd);
  TEST_MAIN_END();
}
