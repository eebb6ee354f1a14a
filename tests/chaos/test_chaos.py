#!/usr/bin/python3
"""The chaos suite: one training job survives 20 random kills.

usage: test_chaos.py GATEWAY WORKER TRAIN KERNEL

A real spotlab-gateway (local provider, real spotlab-worker and
spotlab-train) and a real spotlab-kernel (through jupyter_client). The kernel
first runs a reference job without interruption, then the same `train`
statement again while this script kills, at moments chosen by a seeded RNG:
the job's worker with a notice (`inject preempt`) and without one (`inject
kill`), its spotlab-train process (SIGKILL), the gateway (SIGKILL, then a new
gateway on the same state folder) and the kernel (SIGKILL through the
KernelManager, a restart, then `%attach JOB`). Each kind comes four times.

At the end: the job succeeded and the kernel's cell says so; every step's
loss in the job's event log equals the reference run's bit for bit, and no
step is missing; every checkpoint file in the store and in the workers'
folders passes `spotlab-train --check`; the event log (and the stream a
client saw across gateway restarts) numbers events 1, 2, 3... with no gap or
duplicate; at most one spotlab-train ran the job at any time; no worker runs
that the gateway does not know of; after one more (clean) restart the gateway
lists no instance that is gone and keeps its idle workers.

SPOTLAB_CHAOS_PROVIDER=aws runs the same on the aws provider
(tests/pylib/aws_env.py: the EC2 stand-in's instances, the worker bundle,
an S3 store on s3rver): the worker is interrupted through the stand-in
(with its two-minute notice, or killed without one), checkpoints are read
back from S3 (their x-amz-meta-sha256 checked), at most `keep` of them
remain, and workers are matched to the gateway's instances by their
spotlab:instance tag.

SPOTLAB_CHAOS_SEED=N replays a schedule (the seed is printed first);
SPOTLAB_CHAOS_KILLS=N changes the number of kills; SPOTLAB_CHAOS_KEEP=1 keeps
the state folder of a run that passed. A wait for the next kill's step that
takes over SPOTLAB_CHAOS_SLOW_S seconds (30; the job trains a few hundred
steps a second here) prints the job's last events and the tails of the gateway's
and the recent workers' logs, so that a slow recovery can be read from a run
that passed. Every wait is for an event
(a gateway message, a kernel message, a process exit) with a deadline.
"""

import glob
import hashlib
import json
import os
import queue
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import zmq
from jupyter_client import KernelManager

from kernelspec_env import KernelspecEnv
from checks import check, failures
from gateway_proc import GatewayProcess
from procs import cmdline, processes
from spotlab_home import wait_exit

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
SEED = int(os.environ.get("SPOTLAB_CHAOS_SEED") or int.from_bytes(os.urandom(4), "little"))
KILLS = int(os.environ.get("SPOTLAB_CHAOS_KILLS") or 20)
SLOW_S = float(os.environ.get("SPOTLAB_CHAOS_SLOW_S") or 30)
PROVIDER = os.environ.get("SPOTLAB_CHAOS_PROVIDER") or "local"
if PROVIDER not in ("local", "aws"):
    sys.exit("SPOTLAB_CHAOS_PROVIDER: local or aws, not %r" % PROVIDER)
AWS = None  # the AwsEnv of an aws run
KINDS = ("preempt", "kill", "train", "gateway", "kernel")
TOKEN = "chaos-token-0123456789abcdef"
# Long enough to outlast the kills: they lag behind their target steps (a
# gateway kept down, a preemption waited out), and with 4000 a fast machine
# finished the job before the last of them.
STEPS = 8000
TRAIN_CELL = ("train m on d steps=%d batch=8 lr=3e-3 seed=5 checkpoint_every=50 "
              "spot=yes" % STEPS)
DEFS_CELL = 'model m = gpt(layers=2, heads=2, dim=32, ctx=64)\ndata d = text("%s")'
FINAL = ("succeeded", "failed", "cancelled")
CTX = zmq.Context()


def log(*args):
    print("[%7.2f]" % (time.monotonic() - T0), *args, flush=True)




T0 = time.monotonic()


def write_text(path):
    """A few KB of word salad: the training text (deterministic)."""
    rng = random.Random(0)
    words = ("call me ishmael some years ago never mind how long precisely having little or no "
             "money in my purse and nothing particular to interest me on shore I thought I would "
             "sail about a little and see the watery part of the world").split()
    lines = [" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(400)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def parent(pid):
    """The parent pid of pid, or None. (A sanitizer build's leak check runs in
    a clone of the process that exits, with the same command line: a child of
    a spotlab-train of the job is that, not a second run.)"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class Gateway(GatewayProcess):
    """spotlab-gateway on a private state folder; kill() and start() again. Plenty of
    spot capacity: only this script preempts."""

    def __init__(self, root):
        super().__init__(root, GATEWAY, {"chaos": TOKEN}, slots=6, market_capacity=64,
                         register_timeout_s=10, extra_ini="[worker]\nmetrics_per_s = 100000\n",
                         env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                              "SPOTLAB_DEBUG": None})


class Monitor:
    """A kernel-protocol client (as the CLI is) that follows one job. Across
    a gateway restart it says hello again and attaches from the last seq it
    saw, so its stream must number events 1, 2, 3... exactly once."""

    def __init__(self, gw):
        self.gw = gw
        self.s = None
        self.nid = 0
        self.auth = None
        self.job = None
        self.events = []
        self.last_seq = 0
        self.anomalies = []
        self.state = None
        self.instance = None
        self.max_step = 0
        self.hook = None  # called after every batch of messages

    def connect(self, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            if self.s is not None:
                self.s.close(0)
            self.s = CTX.socket(zmq.DEALER)
            self.s.linger = 0
            self.s.connect(self.gw.listen)
            try:
                r = self.req("hello", token=TOKEN, client="cli", session="chaos", version="0.1.0",
                             timeout=3)
                assert r["ok"], r
                break
            except TimeoutError:
                if time.monotonic() > deadline or not self.gw.alive():
                    raise TimeoutError("the gateway does not answer hello")
        if self.job:
            r = self.req("attach", job=self.job, after=self.last_seq)
            assert r["ok"], r

    def follow(self, job):
        self.job = job
        r = self.req("attach", job=job, after=0)
        assert r["ok"], r

    def _handle(self, m):
        if m.get("type") != "event" or m.get("job") != self.job:
            return
        seq = m.get("seq")
        if seq != self.last_seq + 1:
            self.anomalies.append("after seq %d came seq %s (%s)" % (self.last_seq, seq, m.get("event")))
        if isinstance(seq, int) and seq > self.last_seq:
            self.last_seq = seq
        self.events.append(m)
        kind = m.get("event")
        if kind == "state":
            self.state = m.get("state")
            if self.state in ("queued", "preempted") or self.state in FINAL:
                self.instance = None
        elif kind == "placed":
            self.instance = m.get("instance")
        elif kind == "preempted":
            self.instance = None
        elif kind == "metric" and isinstance(m.get("step"), int):
            self.max_step = max(self.max_step, m["step"])

    def tail(self, n=12):
        return ["%s:%s" % (e.get("seq"), e.get("state") or e.get("instance") or e.get("step") or
                           e.get("event")) for e in self.events if e.get("event") != "metric"][-n:]

    def pump(self, timeout):
        """Waits up to timeout for messages and handles all that came."""
        got = []
        if self.s.poll(int(timeout * 1000)):
            while True:
                try:
                    got.append(json.loads(self.s.recv(zmq.NOBLOCK)))
                except zmq.Again:
                    break
        for m in got:
            self._handle(m)
        if self.hook:
            self.hook()
        return got

    def req(self, type_, timeout=10, **kw):
        self.nid += 1
        rid = self.nid
        kw.update(type=type_, id=rid)
        if type_ != "hello" and self.auth:
            kw["auth"] = self.auth  # the secret the last hello gave
        self.s.send(json.dumps(kw).encode())
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply to %s" % type_)
            for m in self.pump(min(left, 0.2)):
                if m.get("type") == "reply" and m.get("re") == rid:
                    if type_ == "hello" and m.get("ok"):
                        self.auth = m.get("auth")
                    return m

    def wait(self, pred, timeout, what, after_end=False):
        """Pumps until pred(); fails at the deadline, or (unless after_end)
        when the job ends first."""
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError("%s: not within %ds (job state %s, step %d)"
                                   % (what, timeout, self.state, self.max_step))
            if self.state in FINAL and not after_end:
                raise RuntimeError("%s: the job ended (%s) first; the last events: %s"
                                   % (what, self.state, self.tail()))
            self.pump(0.1)

    def log_events(self, job):
        """The job's whole event log, page by page."""
        out, after = [], 0
        while True:
            r = self.req("logs", job=job, after=after, limit=10000, timeout=30)
            assert r["ok"], r
            out += r["events"]
            if not r["events"] or not r.get("more"):
                return out
            after = r["events"][-1]["seq"]


class Notebook:
    """spotlab-kernel started as a front end starts it."""

    def __init__(self):
        self.km = KernelManager(kernel_name="spotlab")
        self.km.start_kernel()
        self.connect()
        self.cell = None       # msg_id of the cell following the job
        self.display = ""      # its latest text/plain display
        self.reply = None
        self.idle = False      # its idle status came: nothing more follows

    def connect(self):
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code, timeout):
        msgs = []
        reply = self.kc.execute_interactive(code, output_hook=msgs.append, timeout=timeout)
        return reply["content"], msgs

    def start(self, code):
        self.cell = self.kc.execute(code)
        self.display, self.reply, self.idle = "", None, False

    def drain(self):
        """Takes what the kernel sent so far for the followed cell."""
        while True:
            try:
                m = self.kc.get_iopub_msg(timeout=0)
            except queue.Empty:
                break
            self.take(m)
        while self.reply is None:
            try:
                m = self.kc.get_shell_msg(timeout=0)
            except queue.Empty:
                break
            if m["parent_header"].get("msg_id") == self.cell:
                self.reply = m["content"]

    def settle(self, timeout):
        """Takes the followed cell's output up to its idle status: the kernel
        sends it after the cell's reply, which comes on another socket and
        may be read before the output that preceded it."""
        deadline = time.monotonic() + timeout
        while not self.idle and time.monotonic() < deadline:
            try:
                self.take(self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                break

    def take(self, m):
        """An iopub message: the followed cell's display, or its idle status."""
        if m["parent_header"].get("msg_id") != self.cell:
            return
        if m["msg_type"] in ("display_data", "update_display_data"):
            self.display = m["content"]["data"].get("text/plain", "")
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            self.idle = True

    def kill_and_restart(self):
        self.kc.stop_channels()
        pid = self.km.provisioner.process.pid
        os.kill(pid, signal.SIGKILL)
        wait_exit([pid], 30)
        self.km.restart_kernel(now=True)
        self.connect()

    def close(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception as e:  # cleanup must go on
            print("kernel shutdown:", e, file=sys.stderr)


def job_of(text):
    m = re.search(r"\bJ\d{6}\b", text or "")
    return m.group(0) if m else None


def step_losses(events):
    """{step: [loss bits, ...]} of the metric events (float32 bits)."""
    out = {}
    for e in events:
        if e.get("event") == "metric" and isinstance(e.get("step"), int) and "loss" in e:
            out.setdefault(e["step"], []).append(struct.pack("<f", e["loss"]))
    return out


def aws_interrupt(name, notice):
    """The stand-in's spot interruption of the instance tagged spotlab:instance=name,
    answered as an inject is: {"ok", "error"}."""
    try:
        AWS.ec2.interrupt(name, notice)
        return {"ok": True}
    except RuntimeError as e:  # not there (yet, or any more), or already going
        return {"ok": False, "error": str(e)}


def print_log_tails(gw, out=sys.stdout):
    """The tails of the gateway's log and of the three workers' logs written
    last: what a slow recovery or a failure is read from."""
    try:  # what it prints only helps; a log gone meanwhile is no failure
        print("---- gateway log (%s), tail ----\n%s" % (gw.logpath, gw.logtail(4000)), file=out)
        work = AWS.ec2.dir if AWS else gw.state
        logs = glob.glob(os.path.join(work, "instances", "**", "worker.log"), recursive=True)
        for path in sorted(logs, key=os.path.getmtime)[-3:]:
            with open(path, errors="replace") as f:
                print("---- %s, tail ----\n%s" % (path, f.read()[-2000:]), file=out)
    except OSError as e:
        log("the logs could not be read (%s)" % e)
    out.flush()


class Chaos:
    def __init__(self, gw, mon, nb, job, state):
        self.gw, self.mon, self.nb, self.job, self.state = gw, mon, nb, job, state
        self.rng = random.Random(SEED)
        self.max_trains = 0
        self.hit = set()  # instances an inject hit, spotlab-train pids killed
        self.next_watch = 0
        self.kernel_kills_done = 0
        mon.hook = self.watch

    def watch(self):
        """How many spotlab-train run the job: after gateway messages, at most
        every 50 ms (a scan of /proc costs more than a message)."""
        now = time.monotonic()
        if now < self.next_watch:
            return
        self.next_watch = now + 0.05
        # a train this script SIGKILLed runs nothing more, though /proc may
        # still show it while the kernel tears it down
        pids = [p for p in self.trains() if p not in self.hit]
        n = len([p for p in pids if parent(p) not in pids])
        if n > self.max_trains:
            self.max_trains = n
            if n > 1:
                log("%d spotlab-train processes run %s at once" % (n, self.job))

    def trains(self):
        return processes("spotlab-train", "%s/instances/" % self.state, "/jobs/%s/" % self.job)

    def inject(self, action, notice_s=None):
        """inject on the job's instance; waits for one that takes it (and that
        no inject hit before: one killed a moment ago may not be reaped yet)."""
        deadline = time.monotonic() + 60
        while True:
            self.mon.wait(lambda: self.mon.instance and self.mon.instance not in self.hit, 60,
                          "an instance for " + action)
            target = self.mon.instance
            if AWS:
                r = aws_interrupt(target, action == "preempt")
                notice_s = 120 if action == "preempt" else None
            else:
                kw = {"notice_s": notice_s} if notice_s else {}
                r = self.mon.req("inject", action=action, instance=target, **kw)
            if r["ok"]:
                self.hit.add(target)
                return "instance %s%s" % (target, " notice %ds" % notice_s if notice_s else "")
            log("inject %s on %s refused: %s" % (action, target, r["error"]))
            if time.monotonic() > deadline:
                raise TimeoutError("inject %s refused: %s" % (action, r["error"]))
            # a notice already running, or the instance just went: wait for the next one
            self.mon.wait(lambda: self.mon.instance != target, 60, "the next instance")

    def kill_train(self):
        """SIGKILL to the job's spotlab-train processes not hit before. One that ends on its
        own between the scan and the signal (its instance just preempted, say) is passed
        over, and the kill waits for the next one."""
        deadline = time.monotonic() + 60
        while True:
            pids = []
            fresh = lambda: pids.extend(p for p in self.trains() if p not in self.hit) or pids
            self.mon.wait(fresh, max(0.0, deadline - time.monotonic()), "a spotlab-train process")
            killed = []
            for pid in pids:
                self.hit.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    log("spotlab-train pid %d ended before the kill" % pid)
            if killed:
                return "pid %s" % killed

    def kill_gateway(self):
        self.gw.kill()
        down = self.rng.uniform(0, 1.5)
        end = time.monotonic() + down
        while time.monotonic() < end:  # the workers go on alone; the monitor's socket is quiet
            self.mon.pump(end - time.monotonic())
        self.gw.start()
        self.mon.connect()
        return "down %.1fs" % down

    def kill_kernel(self):
        self.nb.kill_and_restart()
        self.nb.start("%attach " + self.job)
        self.kernel_kills_done += 1
        return "restarted, %attach"

    def report_slow(self, from_step, target, took):
        log("slow: step %d to %d took %.1f s; the job's last events: %s"
            % (from_step, target, took, self.mon.tail()))
        print_log_tails(self.gw)

    def one(self, i, kind, target, quick):
        t_prev = time.monotonic()
        if quick:
            end = t_prev + self.rng.uniform(0, 1.0)
            while time.monotonic() < end:
                self.mon.pump(max(0.0, end - time.monotonic()))
                if self.mon.state in FINAL:
                    raise RuntimeError("the job ended (%s) before kill %d" % (self.mon.state, i + 1))
        else:
            from_step = self.mon.max_step
            self.mon.wait(lambda: self.mon.max_step >= target, 120, "step %d" % target)
            if time.monotonic() - t_prev > SLOW_S:
                self.report_slow(from_step, target, time.monotonic() - t_prev)
        at = "step %d, %s" % (self.mon.max_step, self.mon.state)
        if kind == "preempt":
            what = self.inject("preempt", self.rng.choice((30, 60, 120)))
        elif kind == "kill":
            what = self.inject("kill")
        elif kind == "train":
            what = self.kill_train()
        elif kind == "gateway":
            what = self.kill_gateway()
        else:
            what = self.kill_kernel()
        log("kill %2d/%d %-8s (%s): %s" % (i + 1, KILLS, kind, at, what))
        self.nb.drain()

    def run(self):
        kinds = [KINDS[i % len(KINDS)] for i in range(KILLS)]
        self.rng.shuffle(kinds)
        targets = sorted(int(self.rng.uniform(0.02, 0.5) * STEPS) for _ in range(KILLS))
        quick = [self.rng.random() < 0.3 for _ in range(KILLS)]
        for i, kind in enumerate(kinds):
            self.one(i, kind, targets[i], quick[i])


def live_instances(mon):
    return {i["instance"] for i in mon.req("instances")["instances"] if i["state"] != "terminated"}


def running_workers(gw):
    """Instance ids of the spotlab-worker processes running on the state folder (on
    aws: the stand-in's instance folders, named by EC2 id; the gateway's name is the
    instance's spotlab:instance tag)."""
    ids = set()
    names = {i["id"]: AWS.ec2.tag(i, "spotlab:instance") for i in AWS.ec2.instances()} \
        if AWS else {}
    for pid in processes("spotlab-worker", (AWS.ec2.dir if AWS else gw.state) + "/"):
        cfg = [a for a in cmdline(pid) or [] if a.endswith(b"worker.json")]
        folder = os.path.basename(os.path.dirname(cfg[0].decode())) if cfg else "?"
        ids.add(names.get(folder, folder) if AWS else folder)
    return ids


def store_checkpoints(gw, job, events):
    """The checkpoint files to --check (the store's and the workers' own), and a
    failure message about the store, or None. The aws store is read back from S3,
    each object checked against its x-amz-meta-sha256; `keep` applies there."""
    work = AWS.ec2.dir if AWS else gw.state
    local = glob.glob(os.path.join(work, "instances", "*", "work", "jobs", "*", "ckpt", "*"))
    keys = [e["path"] for e in events if e["event"] == "checkpoint"]
    if not AWS:
        files = sorted(glob.glob(os.path.join(gw.state, "store", "**", "*.tc"), recursive=True))
        stored = {os.path.relpath(f, os.path.join(gw.state, "store")) for f in files}
        # the worker keeps the newest [store] keep (3) of a job's checkpoints
        newest = set(sorted(set(keys))[-3:])
        bad = None if keys and newest <= stored else \
            "the newest checkpoint events name files not in the store: %s" % sorted(newest - stored)[:5]
        if bad is None and len([k for k in stored if k.startswith(job + "/")]) > 3:
            bad = "more checkpoints of %s in the store than keep (3)" % job
        return sorted(files + local), bad
    folder = os.path.join(AWS.root, "from-s3")
    os.makedirs(folder, exist_ok=True)
    files, stored, bad = [], set(), []
    for o in AWS.s3.objects(AWS.store_prefix(job)):
        if not os.path.basename(o["Key"]).startswith("ckpt-"):
            continue
        body, meta = AWS.s3.get(o["Key"])
        if meta.get("sha256") != hashlib.sha256(body).hexdigest():
            bad.append("%s: x-amz-meta-sha256 %s does not match" % (o["Key"], meta.get("sha256")))
        stored.add(o["Key"][len(AWS.store_prefix()):])
        files.append(os.path.join(folder, os.path.basename(o["Key"])))
        with open(files[-1], "wb") as f:
            f.write(body)
    newest = set(sorted(set(keys))[-AWS.gw.keep:])  # ckpt-%08d: by step
    if not keys or not newest <= stored:
        bad.append("the newest checkpoint events name objects not in S3: %s"
                   % sorted(newest - stored)[:5])
    if len(stored) > AWS.gw.keep:
        bad.append("%d checkpoints in S3, keep is %d" % (len(stored), AWS.gw.keep))
    return sorted(files + local), "; ".join(bad) or None


def final_checks(gw, mon, nb, chaos, job, ref_job):
    mon.wait(lambda: mon.state in FINAL, 240, "the end of the job")
    check(mon.state == "succeeded", "the job succeeded (%s)" % mon.state)
    deadline = time.monotonic() + 120
    while nb.reply is None and time.monotonic() < deadline:
        try:
            m = nb.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if m["parent_header"].get("msg_id") == nb.cell:
            nb.reply = m["content"]
    nb.settle(30)
    check(nb.reply is not None and nb.reply["status"] == "ok",
          "the kernel's cell following the job ended ok: %r"
          % ((nb.reply["status"], nb.reply.get("evalue")) if nb.reply else None,))
    check("succeeded" in nb.display and "step %d/%d" % (STEPS, STEPS) in nb.display,
          "the kernel's display shows the job succeeded at the last step")

    events = mon.log_events(job)
    seqs = [e["seq"] for e in events]
    check(seqs == list(range(1, len(seqs) + 1)),
          "the event log numbers %d events 1..N with no gap or duplicate" % len(seqs))
    r = mon.req("jobs", all=True)
    summary = [j for j in r["jobs"] if j["job"] == job]
    check(summary and summary[0]["last_seq"] == len(seqs) and summary[0]["state"] == "succeeded",
          "the job summary agrees (state, last_seq)")
    check(not mon.anomalies, "the followed stream had no gap or duplicate across %d gateway starts%s"
          % (gw.starts, ": %s" % mon.anomalies[:5] if mon.anomalies else ""))
    check(mon.last_seq == len(seqs), "the followed stream saw every event (%d of %d)"
          % (mon.last_seq, len(seqs)))
    states = [e["state"] for e in events if e["event"] == "state"]
    check(states.count("succeeded") == 1 and states[-1] == "succeeded",
          "one succeeded state, the last one")

    ref = step_losses(mon.log_events(ref_job))
    got = step_losses(events)
    want_steps = set(range(1, STEPS + 1))
    check(set(ref) == want_steps and all(len(set(v)) == 1 for v in ref.values()),
          "the reference run logged every step, each with one loss")
    missing = sorted(want_steps - set(got))
    check(not missing, "the chaos run logged every step (%d missing%s)"
          % (len(missing), ", first %s" % missing[:10] if missing else ""))
    differ = [s for s, bits in got.items() if s in ref and any(b != ref[s][0] for b in bits)]
    repeats = sum(len(v) - 1 for v in got.values())
    check(not differ, "every logged loss equals the reference bit for bit (%d steps, %d re-run "
          "after a loss%s)" % (len(got), repeats, "; differ at %s" % differ[:10] if differ else ""))

    files, store_bad = store_checkpoints(gw, job, events)
    p = subprocess.run([TRAIN, "--check", *files], capture_output=True, text=True, timeout=120) \
        if files else None
    bad = [line for line in (p.stdout.splitlines() if p else []) if ": ok step " not in line]
    check(files and p.returncode == 0 and not bad,
          "all %d checkpoint files pass spotlab-train --check%s"
          % (len(files), ": %s" % bad[:5] if bad else ""))
    check(not store_bad, "the checkpoint events name files in the %s store%s"
          % (PROVIDER, ": %s" % store_bad if store_bad else ""))

    check(chaos.max_trains == 1, "at most one spotlab-train ran the job at a time (%d)" % chaos.max_trains)
    check(not chaos.trains(), "no spotlab-train of the job is left")
    known = live_instances(mon)
    stray = running_workers(gw) - known
    check(not stray, "every running worker is an instance the gateway knows (%d known%s)"
          % (len(known), ", stray %s" % sorted(stray) if stray else ""))
    # one more (clean) restart: the gateway comes back with exactly the instances that run,
    # and its idle workers stay (worker_timeout is 10 minutes); one the test gave a notice
    # may go meanwhile
    idle = {i["instance"] for i in mon.req("instances")["instances"]
            if i["state"] == "idle" and i["instance"] not in chaos.hit}
    gw.p.send_signal(signal.SIGTERM)
    gw.p.wait(30)
    gw.start()
    mon.connect()
    deadline = time.monotonic() + 5  # a draining worker that just exited is reaped within 0.5 s
    while True:
        ghosts = live_instances(mon) - running_workers(gw)
        if not ghosts or time.monotonic() > deadline:
            break
        mon.pump(0.2)
    check(not ghosts, "after a restart the gateway lists no instance that is gone%s"
          % (": %s" % sorted(ghosts) if ghosts else ""))
    if not idle:  # the job ended on an instance with a notice from the test
        log("no idle worker without a notice: the restart's idle check does not apply")
        return
    back = lambda: {i["instance"] for i in mon.req("instances")["instances"]
                    if i["registered"] and i["state"] == "idle"}
    mon.wait(lambda: idle <= back(), 15, "the idle workers registering again", after_end=True)
    end = time.monotonic() + 1.0  # housekeeping runs every 200 ms: give it a few rounds
    while time.monotonic() < end:
        mon.pump(end - time.monotonic())
    kept = back() & running_workers(gw)
    check(idle <= kept, "a restart keeps the idle workers (%s of %s)" % (sorted(kept), sorted(idle)))


def main():
    root = tempfile.mkdtemp(prefix="spotlab-chaos-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    log("chaos seed %d (SPOTLAB_CHAOS_SEED=%d reproduces the schedule), %d kills, folder %s"
        % (SEED, SEED, KILLS, root))
    global AWS
    if PROVIDER == "aws":
        from aws_env import AwsEnv
        AWS = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"chaos": TOKEN}, time_scale=60,
                     boot_seconds=30, heartbeat_timeout_s=5)
        gw = AWS.gw
    else:
        gw = Gateway(root)
    os.environ.update(SPOTLAB_GATEWAY=gw.listen, SPOTLAB_TOKEN=TOKEN,
                      SPOTLAB_HOME=os.path.join(root, "home"))
    nb = None
    mon = Monitor(gw)
    try:
        gw.start()
        mon.connect()
        with KernelspecEnv(KERNEL):
            nb = Notebook()
            content, _ = nb.run(DEFS_CELL % text, timeout=60)
            assert content["status"] == "ok", content
            t = time.monotonic()
            content, msgs = nb.run(TRAIN_CELL, timeout=300)
            shown = [m["content"]["data"].get("text/plain", "") for m in msgs
                     if m["msg_type"] in ("display_data", "update_display_data")]
            ref_job = job_of(shown[-1] if shown else "")
            check(content["status"] == "ok" and ref_job, "the reference run succeeded (%s, %.1fs%s)"
                  % (ref_job, time.monotonic() - t,
                     "" if content["status"] == "ok" else ": %s" % content.get("evalue")))
            if failures:
                return 1
            nb.start(TRAIN_CELL)
            deadline = time.monotonic() + 60
            while not job_of(nb.display) and time.monotonic() < deadline:
                m = nb.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
                if m["parent_header"].get("msg_id") == nb.cell and m["msg_type"] == "display_data":
                    nb.display = m["content"]["data"].get("text/plain", "")
            job = job_of(nb.display)
            assert job and job != ref_job, "no job id in the display: %r" % nb.display
            log("reference %s; chaos on %s" % (ref_job, job))
            mon.follow(job)
            chaos = Chaos(gw, mon, nb, job, AWS.ec2.dir if AWS else gw.state)
            t = time.monotonic()
            chaos.run()
            log("%d kills in %.1fs; waiting for the end" % (KILLS, time.monotonic() - t))
            final_checks(gw, mon, nb, chaos, job, ref_job)
    except Exception as e:  # a timeout or a broken expectation is a failure with context
        failures.append("%s: %s" % (type(e).__name__, e))
        print("FAIL %s: %s" % (type(e).__name__, e), flush=True)
    finally:
        if nb:
            nb.close()
        if failures:
            print_log_tails(gw, sys.stderr)
        if gw.alive():
            gw.p.send_signal(signal.SIGTERM)
            try:
                gw.p.wait(20)
            except subprocess.TimeoutExpired:
                gw.kill()
        if AWS:
            AWS.close()
        left = processes("spotlab-worker", root + "/") + processes("spotlab-train", root + "/")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended since the scan
        wait_exit(left, 20)
        if failures or os.environ.get("SPOTLAB_CHAOS_KEEP"):
            print("seed %d; state kept in %s" % (SEED, root), file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    log("%d failures (seed %d)" % (len(failures), SEED))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
