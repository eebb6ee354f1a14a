#!/usr/bin/python3
"""A full state disk loses nothing the gateway acknowledged.

usage: test_disk_full.py GATEWAY WORKER TRAIN

The gateway's state folder is a 2 MiB tmpfs (mounted here as root, or in a
user and mount namespace this script re-runs itself in); the local
provider's instances and checkpoint store live on the ordinary disk through
two links, so only the gateway's database meets the full disk. Job A trains
with real spotlab-worker and spotlab-train while job B waits for the only
slot; a filler file then takes every free byte. Promised, and checked:

- the gateway says once in its log, and in the status reply's "store", that
  its disk is full; nothing logs per failed write;
- submit is refused with a sentence that says so;
- A ends on its worker while the disk is full: its end is not in the
  database, and B is not started on A's instance meanwhile;
- once the filler goes, the kept writes are saved: status says ok, A is
  succeeded with its last checkpoint (ckpt_step equals the newest row of
  the checkpoints table, the last step), each of its step metrics recorded
  once, its attached client sees the end, and only then B starts and
  succeeds.
Exit 77 only when no tmpfs can be mounted at all (it says why).
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from checks import check, failures, require
from gateway_client import GatewayClient
from gateway_proc import GatewayProcess, kill_instances

GATEWAY, WORKER, TRAIN = (os.path.realpath(p) for p in sys.argv[1:4])
TOKEN = "disk-full-token-0123456789"
FS_BYTES = 2 << 20
STEPS_A, STEPS_B = 2000, 20


def mount_tmpfs(path):
    """Mounts a 2 MiB tmpfs at path: (True, "") or (False, why)."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % FS_BYTES, "tmpfs", path],
                       capture_output=True, text=True)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def in_namespace():
    """Not root and not yet in a namespace: run again as root of a user and
    mount namespace (where mounting a tmpfs is allowed)."""
    if os.geteuid() == 0 or os.environ.get("SPOTLAB_TEST_USERNS"):
        return None
    env = dict(os.environ, SPOTLAB_TEST_USERNS="1")
    try:
        return subprocess.run(["unshare", "-rm", "--", sys.executable] + sys.argv, env=env).returncode
    except OSError as e:
        return "unshare: %s" % e


def fill(path):
    """Writes a file at path until the filesystem refuses another byte."""
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 16, 4096, 512, 1):
            chunk = b"\0" * size
            while True:
                try:
                    f.write(chunk)
                except OSError:
                    break


def store_of(c):
    r = c.req("status")
    assert r["ok"], r
    return r.get("store") or {}


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)  # asking the gateway again: no event says so
    return check(False, what + " (not within %ds)" % timeout)


def main():
    again = in_namespace()
    if again is not None:
        if isinstance(again, str):
            print("SKIP: cannot mount a tmpfs: not root, and %s" % again)
            sys.exit(77)
        sys.exit(again)
    root = tempfile.mkdtemp(prefix="sec-diskfull-")
    state = os.path.join(root, "state")
    os.mkdir(state)
    ok, why = mount_tmpfs(state)
    if not ok:
        print("SKIP: cannot mount a tmpfs of 2 MiB (%s)" % why)
        shutil.rmtree(root, ignore_errors=True)
        sys.exit(77)
    gw = None
    try:
        for sub in ("instances", "store"):  # the workers' side stays on the ordinary disk
            os.mkdir(os.path.join(root, sub))
            os.symlink(os.path.join(root, sub), os.path.join(state, sub))
        text = os.path.join(root, "text.txt")
        with open(text, "w") as f:
            f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
        gw = GatewayProcess(root, GATEWAY, {"alice": TOKEN}, slots=1,
                            env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                                 "SPOTLAB_DEBUG": None})
        gw.start()
        c = GatewayClient(gw.listen, TOKEN)
        r = c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
                "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "session.set", r)
        opts = dict(batch=4, threads=1, checkpoint_every=50)
        a = c.req("submit", kind="train", model="m", data="d", options=dict(opts, steps=STEPS_A))
        b = c.req("submit", kind="train", model="m", data="d", options=dict(opts, steps=STEPS_B))
        require(a["ok"] and b["ok"], "two jobs submitted", [a, b])
        a, b = a["job"], b["job"]
        require(c.req("attach", job=a, after=0)["ok"], "attached to A")
        c.wait_event(lambda e: e["job"] == a and e["event"] == "metric", "A's first metric", 120)
        fill(os.path.join(state, "filler"))
        full = wait_for(lambda: (lambda s: s if s.get("ok") is False else None)(store_of(c)), 60,
                        "status says the state store fails")
        check(full and full.get("error") == "disk full" and full.get("kept_writes", 0) > 0,
              "status: the state disk is full, with writes kept (%s)" % full)
        r = c.req("submit", kind="train", model="m", data="d", options=dict(opts, steps=5))
        check(not r["ok"] and "disk is full" in r["error"]["message"],
              "submit refused with a clear error: %s" % r.get("error"))
        check(gw.wait_log("%s -> succeeded" % a, 240), "A ended on its worker while the disk is full")
        time.sleep(1.0)  # B must not start now: give placement the time it would need to
        log = gw.logtext()
        check("%s -> starting" % b not in log, "B is not started on A's instance before A's end is saved")
        check(log.count("the state disk is full") == 1 and "cannot save job" not in log,
              "the full disk is logged once (%d), no line per failed write (%d)"
              % (log.count("the state disk is full"), log.count("cannot save job")))
        row = c.req("jobs")["jobs"]
        check([j["state"] for j in row if j["job"] == a] != ["succeeded"],
              "A's end is not in the database yet (it is kept)")
        os.unlink(os.path.join(state, "filler"))
        check(wait_for(lambda: store_of(c).get("ok") is True, 60, "status ok again"),
              "status says the store is ok once space is back")
        end = c.wait_event(lambda e: e["job"] == a and e["event"] == "state" and
                           e["state"] in ("succeeded", "failed"), "A's end", 60)
        check(end["state"] == "succeeded", "the attached client sees A succeed: %s" % end)
        require(c.req("attach", job=b, after=0)["ok"], "attached to B")
        endb = c.wait_event(lambda e: e["job"] == b and e["event"] == "state" and
                            e["state"] in ("succeeded", "failed"), "B's end", 240)
        check(endb["state"] == "succeeded", "B ran once the writes were saved: %s" % endb)
        log = gw.logtext()
        saved = log.find("the state database takes writes again")
        check(0 <= saved < log.find("%s -> starting" % b), "B started only after A's end was saved")
        gw.stop()
        db = sqlite3.connect("file:%s/gateway.db?mode=ro" % state, uri=True)
        state_a, ckpt_step, ckpt_key, step = db.execute(
            "SELECT state, ckpt_step, ckpt_key, step FROM jobs WHERE id=?", (int(a[1:]),)).fetchone()
        newest = db.execute("SELECT MAX(step) FROM checkpoints WHERE job=?", (int(a[1:]),)).fetchone()[0]
        check(state_a == "succeeded" and ckpt_step == newest == step == STEPS_A and
              ckpt_key.endswith("%08d.tc" % STEPS_A),
              "A in the database: %s at step %s, ckpt_step %s (%s), newest checkpoint row %s"
              % (state_a, step, ckpt_step, ckpt_key, newest))
        steps = [json.loads(body).get("step") for (body,) in db.execute(
            "SELECT body FROM events WHERE job=? AND kind='metric' ORDER BY seq", (int(a[1:]),))]
        steps = [s for s in steps if isinstance(s, int)]
        check(steps and steps == sorted(set(steps)) and steps[-1] == STEPS_A,
              "A's step metrics each recorded once, in order, to the last (%d of them, last %s)"
              % (len(steps), steps[-1:]))
        seqs = [s for (s,) in db.execute("SELECT seq FROM events WHERE job=? ORDER BY seq", (int(a[1:]),))]
        check(seqs == list(range(1, len(seqs) + 1)), "A's events are numbered without a gap")
        db.close()
    finally:
        if gw is not None:
            if failures:
                print("gateway log:\n" + gw.logtail(8000), file=sys.stderr)
            if gw.alive():
                gw.kill()
            kill_instances(gw.state)
        subprocess.run(["umount", "-l", state], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
