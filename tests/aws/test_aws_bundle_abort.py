#!/usr/bin/python3
"""A gateway killed while it publishes the worker bundle as a multipart upload
leaves that upload open; its next start aborts it and publishes the bundle
anew. With it, `[store] part_mib` sets the part size of the gateway's uploads.

usage: test_aws_bundle_abort.py GATEWAY WORKER TRAIN KERNEL

The gateway runs on the aws provider (tests/pylib/aws_env.py) with
[store] part_mib = 5 and reaches S3 through the fault proxy of
tests/s3/s3_fixture.py, which keeps the books of the multipart uploads it
sees and holds every part PUT of the bundle (_spotlab/bundle-…) while told
to. The bundle (tens of MiB) is above 5 MiB, so the gateway puts it as a
multipart upload of 5 MiB parts. Once that upload is open and its parts are
held, the gateway gets SIGKILL. Then:
  - its state folder holds the record of the open upload
    (uploads/bundle-*.mpu) with the upload's key and id;
  - started again with the parts let through, it aborts that upload, says so
    in its log, and keeps no record of it (neither the file nor a row of the
    store's multipart table);
  - it publishes the bundle again, as a completed multipart upload of 5 MiB
    parts, and no multipart upload is left open.
Without the record the killed run's upload stays open, and the wait for its
abort fails; with the bundle started before the start takes the records,
the new run's own upload would be aborted and the bundle not published.
"""
import glob
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
from aws_env import AwsEnv, PREFIX, end_test, kill_with_upload_open  # noqa: E402
from checks import check, require, exit_status  # noqa: E402
from notebook import wait_for  # noqa: E402
from s3_fixture import HoldParts  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-bundle-abort-token-0123456789"
PART = 5 << 20
HOLD_S = 120


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-bundle-abort-")
    env = None
    hold = HoldParts("/_spotlab/bundle-")  # the bundle's part PUTs

    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN},
                     s3_faults=[(hold, "stall:%d" % HOLD_S)], store_ini="part_mib = 5\n")
        proxy = env.proxy
        env.gw.start()
        require(hold.held.wait(120), "the gateway's part PUTs of the worker bundle are held")
        with proxy.lock:
            open_before = dict(proxy.uploads)
        keys = list(open_before.values())
        require(len(keys) == 1 and keys[0].startswith(PREFIX + "/_spotlab/bundle-"),
                "one multipart upload, the bundle's, is open: %s" % open_before)
        uid, key = next(iter(open_before.items()))
        bundle = glob.glob(os.path.join(env.gw.state, "bundle", "*.tar.gz"))
        check(bundle and os.path.getsize(bundle[0]) > 2 * PART,
              "the bundle is larger than two parts: %s" % [(b, os.path.getsize(b)) for b in bundle])

        kill_with_upload_open(env, proxy, uid, key, "uploads/bundle-*.mpu", hold.on.clear)
        require(env.gw.wait_log("worker bundle published", 120), "the worker bundle is published again")
        gwlog = env.gw.logtext()
        check("that an earlier run of the gateway left unfinished" in gwlog
              and "aborted the multipart upload left unfinished" in gwlog,
              "its log says so", [ln for ln in gwlog.splitlines() if "multipart" in ln][-3:])
        wait_for(lambda: not env.multipart_rows(), "the row of the aborted upload forgotten", 30)
        with proxy.lock:
            completed, left = list(proxy.completed), dict(proxy.uploads)
            parts = {u: sorted(p) for u, p in proxy.part_bytes.items() if u != uid}
        check(completed == [key], "the bundle is published as a completed multipart upload: %s" % completed)
        check(not left, "no multipart upload is left open: %s" % left)
        sizes = next(iter(parts.values()), [])
        check(len(parts) == 1 and len(sizes) >= 3 and sizes[1:] == [PART] * (len(sizes) - 1) and sizes[0] <= PART,
              "in parts of 5 MiB ([store] part_mib), the last one smaller: %s" % parts)
        check(not glob.glob(os.path.join(env.gw.state, "uploads", "*.mpu")),
              "no record is left")
        body, _ = env.s3.get(key)
        check(bundle and body == open(bundle[0], "rb").read(), "the object is the bundle, whole")
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, ())
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
