#!/usr/bin/env python3
"""deadline= end to end: spotlab-gateway on the local provider replaying a
small hand-made trace (60 s ticks at time_scale 60: one tick per wall
second), real spotlab-worker and spotlab-train processes.

usage: test_deadline.py CASE GATEWAY [KERNEL]

  refuse   a deadline=10s job is refused at submit, naming the earliest
           possible finish; so is a malformed deadline
  switch   spot capacity disappears for good while the job runs on spot:
           it moves to on-demand and finishes before its deadline
  stay     (with KERNEL) a notebook cell with a loose deadline and spot
           capacity throughout stays on spot, and its display's text/plain
           shows the deadline, the slack and the plan
  history  the market's history the gateway records goes to its database
           (gateway.db, read here with sqlite3) and a gateway started again
           on the same state reads it back and goes on with it

Every wait has a deadline; nothing sleeps.
"""
import json
import re
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from checks import check, exit_status, require
from gateway_client import GatewayClient
from spotlab_home import restore_env, stop_all

CASE, GATEWAY = sys.argv[1], os.path.abspath(sys.argv[2])
KERNEL = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
SCALE = 60  # provider seconds per wall second: a 60 s tick lasts one wall second
MODEL = {"type": "gpt", "args": [], "options": {"layers": 2, "heads": 4, "dim": 64, "ctx": 64}}


class Gateway:
    """The embedded gateway in a fresh SPOTLAB_HOME whose local provider
    replays capacity (a list, one entry per 60 s tick)."""

    def __init__(self, capacity):
        self.home = tempfile.mkdtemp(prefix="spotlab-deadline-")
        trace = os.path.join(self.home, "trace.json")
        with open(trace, "w") as f:
            json.dump({"metadata": {"gap_seconds": 60}, "data": capacity}, f)
        self.ini = os.path.join(self.home, "gateway.ini")
        with open(self.ini, "w") as f:
            f.write("[provider.local]\nslots = 2\ntime_scale = %d\nmarket = trace:%s\n" % (SCALE, trace))
        self.saved = {k: os.environ.get(k) for k in ("SPOTLAB_HOME", "SPOTLAB_GATEWAY", "SPOTLAB_TOKEN",
                                                     "SPOTLAB_CONFIG")}
        os.environ["SPOTLAB_HOME"] = self.home
        os.environ["SPOTLAB_CONFIG"] = self.ini
        self.start()

    def start(self):
        p = subprocess.run([GATEWAY, "--embedded", "--daemon"], capture_output=True, text=True, timeout=60)
        require(p.returncode == 0, "the gateway starts", p)
        with open(os.path.join(self.home, "token")) as f:
            self.token = f.read().strip()
        os.environ["SPOTLAB_TOKEN"] = self.token
        self.address = os.environ["SPOTLAB_GATEWAY"] = "ipc://%s/gateway.sock" % self.home

    def client(self):
        c = GatewayClient(self.address, self.token, session="deadline")
        text = os.path.join(self.home, "text.txt")
        with open(text, "w") as f:
            f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
        r = c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": MODEL},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "session.set", r)
        return c

    def log(self):
        try:
            with open(os.path.join(self.home, "gateway.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        if failures_now():
            print("gateway log:\n" + self.log()[-6000:], file=sys.stderr)
        stop_all(self.home)
        restore_env(self.saved)
        shutil.rmtree(self.home, ignore_errors=True)


def failures_now():
    from checks import failures
    return bool(failures)


def events_of(c, job, until_final=True, timeout=240):
    """Attaches to job and returns its events, up to its end when until_final."""
    r = c.req("attach", job=job, after=0)
    require(r["ok"], "attach %s" % job, r)
    if until_final:
        c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                     e["state"] in ("succeeded", "failed", "cancelled"), "the end of %s" % job, timeout)
    return [e for e in c.events if e["job"] == job]


def case_refuse():
    gw = Gateway([1])
    try:
        c = gw.client()
        r = c.req("submit", kind="train", model="m", data="d",
                  options={"steps": 40, "batch": 4, "deadline": "10s"})
        msg = r.get("error", {}).get("message", "")
        check(not r["ok"] and r["error"]["code"] == "SL_ECONFIG", "deadline=10s is refused at submit", r)
        check("deadline=10s cannot be met" in msg and "earliest possible finish" in msg and
              "after submission" in msg, "the refusal names the earliest possible finish: %s" % msg)
        r = c.req("submit", kind="run", options={"deadline": "10s"}, script="true")
        check(not r["ok"] and "earliest possible finish" in r["error"]["message"],
              "a %%run job with deadline=10s is refused too", r)
        r = c.req("submit", kind="train", model="m", data="d", options={"steps": 40, "deadline": "soon"})
        check(not r["ok"] and "deadline must be a duration" in r["error"]["message"],
              "a deadline that is not a duration is refused", r)
        check(c.req("jobs")["jobs"] == [], "nothing was queued")
        r = c.req("submit", kind="train", model="m", data="d",
                  options={"steps": 40, "batch": 4, "threads": 1, "deadline": "3h"})
        check(r["ok"], "deadline=3h is taken", r)
    finally:
        gw.close()


JOB = {"batch": 8, "threads": 1}


def step_seconds():
    """Wall seconds per training step of the test's job on this machine and
    build (a sanitizer build trains several times slower), from a short job
    on a gateway of its own: between its first and last step metrics, so
    that neither the start nor the final checkpoint and the end count (with
    them, a sanitizer build's estimate came out twice the real step time
    once, and the job ended before its spot capacity did)."""
    gw = Gateway([1])
    try:
        c = gw.client()
        steps = 200
        r = c.req("submit", kind="train", model="m", data="d", options=dict(JOB, steps=steps))
        require(r["ok"], "a job to time the steps is taken", r)
        evs = events_of(c, r["job"], timeout=200)
        states = [e for e in evs if e["event"] == "state"]
        require(states[-1]["state"] == "succeeded", "the timing job succeeded", states[-1])
        metrics = [e for e in evs if e["event"] == "metric" and isinstance(e.get("step"), int)]
        require(len(metrics) >= 2 and metrics[-1]["step"] - metrics[0]["step"] >= steps // 2,
                "the timing job's step metrics span half its steps",
                [e.get("step") for e in metrics][:5] + ["..."] + [e.get("step") for e in metrics][-5:])
        began = next(e["time_us"] for e in states if e["state"] == "running")
        print("     %.1f ms a step from running to the end"
              % ((states[-1]["time_us"] - began) / 1e3 / steps))
        return (metrics[-1]["time_us"] - metrics[0]["time_us"]) / 1e6 / \
            (metrics[-1]["step"] - metrics[0]["step"])
    finally:
        gw.close()


def case_switch():
    # capacity for the first 8 ticks (8 wall s), then none for 5.5 wall hours;
    # the job waits for spot while its slack allows, so a deadline with less
    # slack ends the test sooner. The job is sized to about compute_s wall
    # seconds of training on this machine, so that on-demand can still make
    # the deadline after the spot instance is lost, and so that the job
    # outlasts the capacity (about 6.5 s of training) even if this machine
    # ran the timing job at half the speed it runs this one (seen once under
    # ASan: 34.8 ms a step timed, the job's 344 steps done in 7 s).
    deadline_min, compute_s = 50, 16.0
    step_s = step_seconds()
    steps = int(min(2500, compute_s / step_s))
    print("     %.1f ms a step here: %d steps" % (step_s * 1e3, steps))
    gw = Gateway([1] * 8 + [0] * 20000)
    try:
        c = gw.client()
        t0 = time.time()
        r = c.req("submit", kind="train", model="m", data="d",
                  options=dict(JOB, steps=steps, checkpoint_every=200, deadline="%dm" % deadline_min))
        require(r["ok"], "a job with deadline=%dm is taken" % deadline_min, r)
        job = r["job"]
        evs = events_of(c, job, timeout=200)
        kinds = [e["event"] for e in evs]
        placed = [e for e in evs if e["event"] == "placed"]
        plans = [e for e in evs if e["event"] == "plan"]
        end = [e for e in evs if e["event"] == "state"][-1]
        check(end["state"] == "succeeded", "the job succeeded", end)
        check(placed and placed[0]["spot"], "it started on spot", placed)
        check("preempted" in kinds, "it lost its spot instance when capacity went", kinds)
        check(len(placed) >= 2 and not placed[-1]["spot"], "it finished on on-demand", placed)
        check(plans and plans[0]["mode"] == "spot", "the first plan was spot", plans[:1])
        check(any(p["mode"] == "on-demand" for p in plans), "a later plan chose on-demand",
              [(p["mode"], p["why"]) for p in plans])
        first_od = next(i for i, e in enumerate(evs) if e["event"] == "placed" and not e["spot"]) \
            if len(placed) >= 2 else -1
        od_plan = next((i for i, e in enumerate(evs) if e["event"] == "plan" and e["mode"] == "on-demand"), -1)
        check(0 <= od_plan < first_od, "on-demand was placed after the plan said so")
        deadline_us = plans[0]["deadline_us"] if plans else 0
        check(abs(deadline_us / 1e6 - (t0 + deadline_min * 60 / SCALE)) < 5,
              "the plan's deadline is %d provider minutes after submission (%.1f wall s)"
              % (deadline_min, deadline_us / 1e6 - t0))
        check(end["time_us"] <= deadline_us, "it finished before its deadline (%.1f of %.1f wall s)"
              % ((end["time_us"] - deadline_us) / 1e6 + deadline_min * 60 / SCALE, deadline_min * 60 / SCALE))
        check(all(p["slack_s"] <= p["left_s"] for p in plans), "the slack never exceeds the time left")
        for p in plans:
            print("     plan +%.0f s: %s, slack %.0f s (%s)%s" % ((p["time_us"] / 1e6 - t0), p["text"], p["slack_s"],
                                                           p["why"], " moving " + p["move"] if "move" in p else ""))
    finally:
        gw.close()


def case_stay():
    from jupyter_client import KernelManager
    from kernelspec_env import KernelspecEnv
    require(KERNEL is not None, "stay needs KERNEL")
    gw = Gateway([1])
    try:
        c = gw.client()
        with KernelspecEnv(KERNEL):
            km = KernelManager(kernel_name="spotlab")
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=60)
                msgs = []
                text = os.path.join(gw.home, "text.txt")
                reply = kc.execute_interactive(
                    'model m = gpt(layers=2, heads=4, dim=64, ctx=64)\ndata d = text("%s")\n'
                    'train m on d steps=300 batch=8 threads=1 checkpoint_every=100 deadline=10h' % text,
                    output_hook=msgs.append, timeout=240)
                check(reply["content"]["status"] == "ok", "the cell succeeds", reply["content"])
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        texts = [m["content"]["data"].get("text/plain", "") for m in msgs
                 if m["msg_type"] in ("display_data", "update_display_data")]
        live = [t for t in texts if "(running)" in t and "\ndeadline " in t]
        check(live, "the live display shows the deadline while the job runs", texts)
        line = next((ln for ln in (live[-1] if live else "").splitlines() if ln.startswith("deadline ")), "")
        # the spot offer may name its zone ("spot on g4dn.xlarge in local-1a while ...")
        check("left" in line and "slack" in line and
              re.search(r"spot on g4dn\.xlarge( in [a-z0-9-]+)? while slack >", line) and
              "then on-demand" in line, "text/plain: deadline, slack and plan: %r" % line)
        final = texts[-1] if texts else ""
        check("deadline" in final and ": met" in final, "the final display says the deadline was met",
              final)
        check("plan: spot on" in final, "the timeline tells the plan", final)
        jobs = c.req("jobs")["jobs"]
        require(len(jobs) == 1, "one job", jobs)
        evs = events_of(c, jobs[0]["job"], timeout=30)
        placed = [e for e in evs if e["event"] == "placed"]
        check(placed and all(e["spot"] for e in placed), "it ran on spot only", placed)
        check(not [e for e in evs if e["event"] in ("preempted",) or e.get("move")],
              "it was never moved", [e for e in evs if e["event"] == "plan"])
        check(all(e["mode"] == "spot" for e in evs if e["event"] == "plan"), "every plan was spot")
    finally:
        gw.close()


def market_history(home):
    """{(provider, type, zone): [capacity of each tick, None where not stored]}
    from the gateway's database."""
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(home, "gateway.db"), uri=True, timeout=10)
    try:
        rows = db.execute("SELECT provider, type, zone, chunk, up FROM market_history "
                          "ORDER BY provider, type, zone, chunk").fetchall()
    finally:
        db.close()
    out = {}
    for prov, typ, zone, chunk, up in rows:
        ticks = out.setdefault((prov, typ, zone), [])
        ticks.extend([None] * (chunk * 60 - len(ticks)))
        ticks.extend(up)
    return out


def wait_history(home, ticks, what, timeout=60):
    """The history once every offer holds at least `ticks` ticks."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            h = market_history(home)
        except sqlite3.Error:
            h = {}
        done = bool(h) and all(len(t) >= ticks for t in h.values())
        if done or time.monotonic() > deadline:
            require(done, what, {k: len(t) for k, t in h.items()})
            return h
        time.sleep(0.2)


def case_history():
    # runs of 3 ticks with capacity and 2 without; one tick per wall second
    gw = Gateway([1, 1, 1, 0, 0] * 2000)
    try:
        first = wait_history(gw.home, 12, "the gateway writes the market's history")
        for key, ticks in first.items():
            check(set(ticks) <= {0, 1} and 1 in ticks and 0 in ticks,
                  "%s: capacity, and none, in the ticks written (%s)" % ("/".join(key), ticks))
        stop_all(gw.home)
        stopped = market_history(gw.home)
        check(all(len(stopped[k]) >= len(first[k]) for k in first),
              "the stopped gateway wrote what it had (%s)" % {k: len(v) for k, v in stopped.items()})
        gw.start()
        n = max(len(t) for t in stopped.values())
        after = wait_history(gw.home, n + 5, "the gateway started again goes on writing it")
        log = gw.log()
        check("market history of %d offer(s) restored" % len(stopped) in log,
              "the new gateway restored the history of %d offers" % len(stopped),
              [ln for ln in log.splitlines() if "gateway.market" in ln])
        for key, ticks in stopped.items():
            now = after.get(key, [])
            name = "/".join(key)
            check(now[:len(ticks)] == ticks, "%s: the ticks from before the restart are kept" % name)
            check(None not in now, "%s: its ticks go on with no gap across the restart" % name)
    finally:
        gw.close()


def main():
    {"refuse": case_refuse, "switch": case_switch, "stay": case_stay, "history": case_history}[CASE]()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
