#!/usr/bin/python3
"""A worker goes on sending heartbeats while a checkpoint upload is slow, so
its gateway does not take it for lost; and it registers with a gateway that
restarts meanwhile.

usage: test_aws_slow_store.py GATEWAY WORKER TRAIN KERNEL

A train job runs on the aws provider (tests/pylib/aws_env.py) with a
gateway that takes a worker for lost after 1 s without a heartbeat (the
workers send one every 200 ms). S3 is reached through the
fault proxy of tests/s3/s3_fixture.py, which holds the first two PUTs of a
checkpoint for 10 s each and then closes them unanswered, so that
checkpoint's upload takes over 20 s (the S3 client tries again). As the
first PUT is held, the gateway is killed (SIGKILL) and started again on its
state; the worker, whose loop waits for the upload, must register with it
meanwhile, before the proxy lets the last held PUT go (the gateway's log says
when the worker registered).
Then:
  - the checkpoint is stored, and the worker reports an upload of 20 s or more;
  - the gateway never takes the worker for lost: the job runs in one
    placement on one instance, and nobody terminates that instance before
    the job ends;
  - the job succeeds, its steps 1 to STEPS in order.
"""
import os
import re
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
from aws_env import AwsEnv, end_test  # noqa: E402
from checks import check, require, exit_status, log  # noqa: E402
from notebook import FINAL, Monitor, wait_for, write_text  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-slow-store-token-0123456789ab"
MODEL = {"layers": 1, "heads": 2, "dim": 32, "ctx": 32}
STEPS, EVERY = 300, 100
REGISTERED = re.compile(r"\] info: worker \S+ registered$", re.M)
STALLS, HOLD_S = 2, 10  # PUTs held, and for how long each (s3_fixture.FaultProxy)


class StallCheckpoints:
    """A FaultProxy predicate: true for the first n PUTs of a checkpoint object."""

    def __init__(self, n):
        self.left = n
        self.lock = threading.Lock()
        self.first = threading.Event()  # set as the first PUT is held
        self.held_at = []  # time.monotonic() of each PUT held

    def __call__(self, method, target):
        if method != "PUT" or "/ckpt-" not in target.partition("?")[0]:
            return False
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            self.held_at.append(time.monotonic())
            self.first.set()
            return True


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-slow-store-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    env = mon = None
    stall = StallCheckpoints(STALLS)

    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN}, time_scale=60,
                     boot_seconds=60, heartbeat_timeout_s=1,
                     s3_faults=[(stall, "stall:%d" % HOLD_S)])
        proxy = env.proxy
        env.gw.start()
        mon = Monitor(env.gw.listen, TOKEN)
        r = mon.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "the session's definitions are set", r)
        r = mon.submit(kind="train", model="m", data="d",
                    options={"steps": STEPS, "batch": 4, "seed": 1, "checkpoint_every": EVERY,
                             "spot": "yes"})
        require(r["ok"], "the train job is submitted", r)
        job = r["job"]
        mon.follow(job)
        require(stall.first.wait(180), "a checkpoint's PUT is held")
        env.gw.kill()
        mon.close()
        registrations = len(REGISTERED.findall(env.gw.logtext()))
        env.gw.start()
        log("gateway killed and started again during the upload")
        registered_at = wait_for(
            lambda: len(REGISTERED.findall(env.gw.logtext())) > registrations and time.monotonic(),
            "the worker's registration with the restarted gateway", 120)
        mon = Monitor(env.gw.listen, TOKEN)
        mon.follow(job)
        mon.until(lambda: mon.state() in FINAL, "the end of the job", 180, end_ok=True)
        log("job %s %s; events %s" % (job, mon.state(), mon.tail(20)))
        check(stall.left == 0 and proxy.faults["put-object"] == STALLS,
              "the proxy stalled %d checkpoint PUTs (%d left, faults %s)"
              % (STALLS, stall.left, dict(proxy.faults)))
        check(len(stall.held_at) == STALLS and registered_at < stall.held_at[-1] + HOLD_S,
              "the worker registered while the checkpoint's upload was held (%.1f s after the "
              "first PUT was held, the last one let go %.1f s after it)"
              % (registered_at - stall.held_at[0],
                 stall.held_at[-1] + HOLD_S - stall.held_at[0]))
        cks = mon.mine("checkpoint")
        slow = [c for c in cks if (c.get("upload_ms") or 0) >= 1000 * HOLD_S * STALLS]
        check(slow, "a checkpoint upload took %d s or more: %s"
              % (HOLD_S * STALLS, [(c.get("step"), c.get("upload_ms")) for c in cks]))
        check(mon.state() == "succeeded", "the job succeeded (%s)" % mon.state())
        placed = mon.mine("placed")
        check(len(placed) == 1, "the job was placed once: %s" % [p.get("instance") for p in placed])
        att = [a for a in mon.attempts() if a]
        check(len(att) == 1 and att[0] == list(range(1, STEPS + 1)),
              "one attempt ran steps 1 to %d in order: %s"
              % (STEPS, [(min(a), max(a), len(a)) for a in att]))
        gwlog = env.gw.logtail(200000)
        check("worker lost" not in gwlog, "the gateway never took the worker for lost",
              [ln for ln in gwlog.splitlines() if "worker lost" in ln][:3])
        stored = sorted(o["Key"] for o in env.s3.objects(env.store_prefix(job) + "ckpt-"))
        check(stored and stored[-1] == env.store_prefix(job) + "ckpt-%08d.tc" % STEPS,
              "the last checkpoint is in S3: %s" % stored)
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, (mon,))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
