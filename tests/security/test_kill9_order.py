#!/usr/bin/python3
"""kill -9 of the gateway under load never leaves a succeeded job behind
its checkpoints or metrics.

usage: test_kill9_order.py GATEWAY WORKER TRAIN

A real gateway (local provider, real spotlab-worker and spotlab-train, every
step's metric sent) runs several short train jobs at once; at moments drawn
by a seeded RNG it is killed with SIGKILL and started again on the same
state folder, ROUNDS times. Once every job ended, the database is read: each
job succeeded; its ckpt_step is its last step and the newest row of the
checkpoints table, and ckpt_key names that checkpoint; its recorded step
metrics cover every step from the first to the last (no hole). The seed is
printed first; SPOTLAB_KILL9_SEED=N replays a schedule.
"""
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time

from checks import check, failures, require
from gateway_client import GatewayClient
from gateway_proc import GatewayProcess, kill_instances

GATEWAY, WORKER, TRAIN = (os.path.realpath(p) for p in sys.argv[1:4])
SEED = int(os.environ.get("SPOTLAB_KILL9_SEED") or int.from_bytes(os.urandom(4), "little"))
TOKEN = "kill9-token-0123456789abcdef"
JOBS, STEPS, ROUNDS = 4, 12000, 6
FINAL = ("succeeded", "failed", "cancelled")


def connect(gw, timeout=60):
    end = time.monotonic() + timeout
    while True:
        try:
            return GatewayClient(gw.listen, TOKEN, hello_timeout=5)
        except (TimeoutError, AssertionError):
            if time.monotonic() > end or not gw.alive():
                raise


def states(c, jobs):
    return {j["job"]: j for j in c.req("jobs", timeout=30)["jobs"] if j["job"] in jobs}


def main():
    print("seed", SEED, flush=True)
    rng = random.Random(SEED)
    root = tempfile.mkdtemp(prefix="sec-kill9-")
    text = os.path.join(root, "text.txt")
    with open(text, "w") as f:
        f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
    gw = GatewayProcess(root, GATEWAY, {"alice": TOKEN}, slots=JOBS, register_timeout_s=30,
                        heartbeat_timeout_s=20, extra_ini="[worker]\nmetrics_per_s = 100000\n",
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                             "SPOTLAB_DEBUG": None})
    c = None
    try:
        gw.start()
        c = connect(gw)
        r = c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
                "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "session.set", r)
        jobs = []
        for i in range(JOBS):
            r = c.req("submit", kind="train", model="m", data="d",
                      options=dict(steps=STEPS, batch=4, threads=1, checkpoint_every=rng.choice((50, 97, 200)),
                                   seed=i + 1))
            require(r["ok"], "submit", r)
            jobs.append(r["job"])
        for j in jobs:
            c.req("attach", job=j, after=0)
        c.wait_event(lambda e: e["event"] == "metric", "a first metric", 180)
        hits = 0
        for n in range(ROUNDS):
            # a moment while the jobs report: after a few more events arrive
            wait = rng.uniform(0.2, 2.5)
            end = time.monotonic() + wait
            while time.monotonic() < end:
                c.recv(end - time.monotonic())
            live = [j for j, s in states(c, jobs).items() if s["state"] not in FINAL]
            print("round %d: kill -9 after %.2fs, %d jobs live" % (n, wait, len(live)), flush=True)
            hits += bool(live)
            c.close()
            gw.kill()
            gw.start()
            c = connect(gw)
            if not live:
                break
        check(hits >= 3, "%d of the kills came while jobs ran (at least 3)" % hits)
        deadline = time.monotonic() + 600
        while True:
            now = states(c, jobs)
            if all(now[j]["state"] in FINAL for j in jobs) or time.monotonic() > deadline:
                break
            c.recv(1.0)
        require(all(now[j]["state"] in FINAL for j in jobs), "every job ended: %s"
                % {j: now[j]["state"] for j in jobs})
        c.close()
        c = None
        gw.stop()
        db = sqlite3.connect("file:%s/gateway.db?mode=ro" % gw.state, uri=True)
        for j in jobs:
            jid = int(j[1:])
            state, step, ckpt_step, ckpt_key = db.execute(
                "SELECT state, step, ckpt_step, ckpt_key FROM jobs WHERE id=?", (jid,)).fetchone()
            newest, = db.execute("SELECT MAX(step) FROM checkpoints WHERE job=?", (jid,)).fetchone()
            check(state == "succeeded", "%s succeeded (%s)" % (j, state))
            check(ckpt_step == newest == STEPS and ckpt_key == "%s/ckpt-%08d.tc" % (j, STEPS),
                  "%s: ckpt_step %s (%s) is the newest checkpoint in the store (%s) and the last step"
                  % (j, ckpt_step, ckpt_key, newest))
            steps = set()
            for (body,) in db.execute("SELECT body FROM events WHERE job=? AND kind='metric'", (jid,)):
                s = json.loads(body).get("step")
                if isinstance(s, int) and "loss" in json.loads(body):
                    steps.add(s)
            holes = sorted(set(range(1, STEPS + 1)) - steps)  # every step from the first
            runs = []  # the holes as ranges
            for h in holes:
                if runs and runs[-1][1] == h - 1:
                    runs[-1][1] = h
                else:
                    runs.append([h, h])
            check(steps and max(steps) == STEPS and not holes,
                  "%s: step metrics recorded up to %s with no hole (%d missing: %s)"
                  % (j, max(steps, default=None), len(holes), runs[:8]))
        db.close()
    finally:
        if c is not None:
            c.close()
        if failures:
            print("seed %d; gateway log:\n%s" % (SEED, gw.logtail(8000)), file=sys.stderr)
        if gw.alive():
            gw.kill()
        kill_instances(gw.state)
        if os.environ.get("SPOTLAB_KILL9_KEEP"):
            print("state kept in", root, file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
