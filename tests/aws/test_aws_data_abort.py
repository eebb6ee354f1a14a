#!/usr/bin/python3
"""A gateway killed while it stores a large data file in S3 leaves a
multipart upload open; its next start aborts it, so that S3 does not bill
the parts for ever, and stores the file anew.

usage: test_aws_data_abort.py GATEWAY WORKER TRAIN KERNEL

The gateway runs on the aws provider (tests/pylib/aws_env.py) and reaches S3
through the fault proxy of tests/s3/s3_fixture.py, which keeps the books of
the multipart uploads it sees and holds every part PUT of a data file
(_data/) while told to. A client uploads a 70 MiB file (protocols.md §1,
data.have and data.put): above the 64 MiB part size, so the gateway stores
it as a multipart upload. Once that upload is open and its parts are held,
the gateway gets SIGKILL. Then:
  - its state folder holds the record of the open upload (uploads/*.mpu);
  - started again with the parts let through, it aborts that upload (the
    proxy answers its AbortMultipartUpload), says so in its log, and keeps
    no record of it (neither the file nor a row of the store's multipart
    table);
  - the same data.have stores the file from the bytes it kept, as a
    completed multipart upload, and answers ready; the object in the bucket
    has the file's SHA-256; no multipart upload is left open.
Without the record the killed run's upload stays open, and the wait for its
abort fails.
"""
import glob
import hashlib
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
from aws_env import AwsEnv, PREFIX, end_test, kill_with_upload_open  # noqa: E402
from checks import check, require, exit_status  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from notebook import wait_for  # noqa: E402
from s3_fixture import HoldParts  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-data-abort-token-0123456789ab"
SIZE, CHUNK = 70 << 20, 1 << 20
HOLD_S = 120


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-data-abort-")
    env = c = None
    hold = HoldParts("/_data/")  # a data file's part PUTs

    data = random.Random(11).randbytes(SIZE)
    sha = hashlib.sha256(data).hexdigest()
    key = "%s/_data/alice/%s" % (PREFIX, sha)
    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN},
                     s3_faults=[(hold, "stall:%d" % HOLD_S)])
        proxy = env.proxy
        env.gw.start()
        require(env.gw.wait_log("worker bundle published", 120), "the worker bundle is published")
        c = GatewayClient(env.gw.listen, TOKEN)
        r = c.have(sha, SIZE, ("receiving",), 30)
        require(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0,
                "a new upload is asked for from its first byte", r)
        for off in range(0, SIZE, CHUNK):
            r = c.req("data.put", sha256=sha, size=SIZE, offset=off, frame=data[off:off + CHUNK],
                      timeout=30)
            require(r.get("ok"), "the chunk at %d is taken" % off, r)
        require(hold.held.wait(60), "the gateway's part PUTs of the file are held")
        with proxy.lock:
            open_before = dict(proxy.uploads)
        require(list(open_before.values()) == [key], "one multipart upload is open: %s" % open_before)
        uid = next(iter(open_before))
        c.close()
        c = None

        kill_with_upload_open(env, proxy, uid, key, "uploads/*.mpu", hold.on.clear)
        gwlog = env.gw.logtext()
        check("that an earlier run of the gateway left unfinished" in gwlog
              and "aborted the multipart upload left unfinished" in gwlog,
              "its log says so", [ln for ln in gwlog.splitlines() if "multipart" in ln][-3:])
        wait_for(lambda: not env.multipart_rows(), "the row of the aborted upload forgotten", 30)
        check(not glob.glob(os.path.join(env.gw.state, "uploads", "*.mpu")),
              "and no record of it is left")

        c = GatewayClient(env.gw.listen, TOKEN)
        r = c.have(sha, SIZE, ("ready",), 120)
        check(r.get("ok") and r["state"] == "ready",
              "the same upload is stored from the bytes kept, and ready (%s)" % r)
        with proxy.lock:
            completed, left = list(proxy.completed), dict(proxy.uploads)
        check(completed == [key], "as a completed multipart upload: %s" % completed)
        check(not left, "no multipart upload is left open: %s" % left)
        body, meta = env.s3.get(key)
        check(len(body) == SIZE and hashlib.sha256(body).hexdigest() == sha and meta.get("sha256") == sha,
              "the file is in the bucket whole, its SHA-256 with it")
        check(not glob.glob(os.path.join(env.gw.state, "uploads", "*.mpu")),
              "the completed upload leaves no record")
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, (c,))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
