#!/usr/bin/python3
"""A gateway told to stop while it stores an uploaded data file in S3 stops
at once, and stores the file at its next start.

usage: test_aws_stop_store.py GATEWAY WORKER TRAIN KERNEL

The gateway runs on the aws provider (tests/pylib/aws_env.py) and reaches S3
through the fault proxy of tests/s3/s3_fixture.py, which holds every PUT of
a data file (_data/) unanswered for two minutes while told to. A client
uploads a 3 MiB file (protocols.md §1, data.have and data.put); once its
last chunk is in and the gateway's PUT of the object is held, the gateway
gets SIGTERM. Then:
  - it exits with status 0 within 10 s (its S3 client would otherwise try
    for minutes), saying in its log that the storing stopped with it;
  - the received bytes stay in its state folder (uploads/alice-SHA.part);
  - started again with S3 answering, the same data.have finds the bytes,
    stores them without a byte sent again, and answers ready; the object is
    in the bucket under _data/alice/SHA256 with its SHA-256.
Then the stored file is deleted (data.delete) while the proxy holds its
DELETE, and the gateway gets SIGTERM: it stops at once, and started again
it deletes the file from the bucket.
"""
import hashlib
import os
import random
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
from aws_env import AwsEnv, PREFIX, end_test  # noqa: E402
from checks import check, require, exit_status, log  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-stop-store-token-0123456789ab"
SIZE, CHUNK = 3 << 20, 1 << 20
HOLD_S = 120
STOP_WITHIN_S = 10


class HoldData:
    """A FaultProxy predicate: true for the requests of method on a data file while on is set."""

    def __init__(self, method, on=True):
        self.method = method
        self.on = threading.Event()
        if on:
            self.on.set()
        self.held = threading.Event()  # set as the first is held

    def __call__(self, method, target):
        if method != self.method or "/_data/" not in target.partition("?")[0] or not self.on.is_set():
            return False
        self.held.set()
        return True


def delete_across_stop(env, c, sha, hold_delete):
    """spotlab data rm of the stored file while S3 holds its DELETE, and a SIGTERM: the
    gateway stops at once, and the next start deletes it."""
    path = "/home/alice/notes.txt"
    require(c.req("session.set", defs=[
        {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {"layers": 1}}},
        {"name": "d", "kind": "data", "spec": {"type": "text", "args": [path], "options": {}}}])["ok"],
        "session.set")
    r = c.req("submit", kind="train", model="m", data="d", options={"steps": 10},
              data_files=[{"path": path, "sha256": sha, "size": SIZE}])
    require(r.get("ok") and "job" in r, "a job names the stored file", r)
    require(c.req("cancel", job=r["job"])["ok"], "and is cancelled")
    end = time.monotonic() + 60
    while time.monotonic() < end:
        jobs = c.req("jobs").get("jobs", [])
        if all(j["state"] in ("succeeded", "failed", "cancelled") for j in jobs):
            break
        time.sleep(0.1)
    hold_delete.on.set()
    r = c.req("data.delete", sha256=sha)
    check(r.get("ok") and r.get("path") == path, "data.delete takes it: %s" % r)
    require(hold_delete.held.wait(30), "the gateway's DELETE of the file is held")
    t0 = time.monotonic()
    code = env.gw.stop(timeout=60)
    took = time.monotonic() - t0
    check(code == 0 and took < STOP_WITHIN_S, "the gateway stops within %d s while the DELETE hangs "
          "(%.1f s, status %s)" % (STOP_WITHIN_S, took, code))
    key = "%s/_data/alice/%s" % (PREFIX, sha)
    check([o["Key"] for o in env.s3.objects("%s/_data/" % PREFIX)] == [key], "the file is still in the bucket")
    hold_delete.on.clear()
    env.gw.start()
    c2 = GatewayClient(env.gw.listen, TOKEN)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and (env.s3.objects("%s/_data/" % PREFIX) or c2.req("data.list")["uploads"]):
            time.sleep(0.2)
        check(not env.s3.objects("%s/_data/" % PREFIX), "started again, the gateway deletes it from the bucket")
        check(not c2.req("data.list")["uploads"], "and it is no longer listed")
    finally:
        c2.close()


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-stop-store-")
    env = c = None
    hold, hold_delete = HoldData("PUT"), HoldData("DELETE", on=False)

    data = random.Random(7).randbytes(SIZE)
    sha = hashlib.sha256(data).hexdigest()
    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN},
                     s3_faults=[(hold, "stall:%d" % HOLD_S), (hold_delete, "stall:%d" % HOLD_S)])
        proxy = env.proxy
        env.gw.start()
        # the worker bundle first (built and put in seconds): the stop then waits on no build
        require(env.gw.wait_log("worker bundle published", 120), "the worker bundle is published")
        c = GatewayClient(env.gw.listen, TOKEN)
        r = c.have(sha, SIZE, ("receiving",), 30)
        require(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0,
                "a new upload is asked for from its first byte", r)
        for off in range(0, SIZE, CHUNK):
            r = c.req("data.put", sha256=sha, size=SIZE, offset=off, frame=data[off:off + CHUNK])
            require(r.get("ok"), "the chunk at %d is taken" % off, r)
        check(r["state"] in ("checking", "publishing"),
              "with the last chunk in, the file is being stored (%s)" % r["state"])
        require(hold.held.wait(30), "the gateway's PUT of the file is held")
        c.close()
        c = None

        t0 = time.monotonic()
        code = env.gw.stop(timeout=60)
        took = time.monotonic() - t0
        log("gateway stopped in %.1f s, status %s" % (took, code))
        check(code == 0 and took < STOP_WITHIN_S,
              "the gateway stops within %d s while the file's PUT hangs (%.1f s, status %s)"
              % (STOP_WITHIN_S, took, code))
        gwlog = env.gw.logtext()
        check("stopped with the gateway" in gwlog,
              "its log says the storing stopped with it",
              [ln for ln in gwlog.splitlines() if "_data/" in ln][-3:])
        part = os.path.join(env.gw.state, "uploads", "alice-%s.part" % sha)
        size = os.path.getsize(part) if os.path.exists(part) else None
        check(size == SIZE, "the bytes received stay in %s (%s bytes)" % (part, size))

        hold.on.clear()
        puts_before = proxy.seen["put-object"]
        env.gw.start()
        c = GatewayClient(env.gw.listen, TOKEN)
        r = c.have(sha, SIZE, ("ready", "receiving"), 60)
        check(r.get("ok") and r["state"] == "ready",
              "started again, the same upload is stored and ready with no byte sent again (%s)"
              % r)
        body, meta = env.s3.get("%s/_data/alice/%s" % (PREFIX, sha))
        check(hashlib.sha256(body).hexdigest() == sha and meta.get("sha256") == sha,
              "the file is in the bucket as _data/alice/%.12s…, its SHA-256 with it" % sha)
        check(proxy.seen["put-object"] > puts_before, "it was put after the restart")
        check(not os.path.exists(part), "the part is gone once stored")
        delete_across_stop(env, c, sha, hold_delete)
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, (c,))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
