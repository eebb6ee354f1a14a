#!/usr/bin/python3
"""System tests: the real spotlab-gateway with the local provider, spotlab-worker and
spotlab-train, driven over the kernel protocol.

usage: test_system.py CASE GATEWAY WORKER TRAIN

Every case trains the same tiny gpt on a small text file as a spot job, disturbs the run and
checks that the job ends exactly as an uninterrupted run of the same job does: every step's
loss (float32 bits) and every checkpoint in the store (bytes) equal those of a reference run of
spotlab-train that the test starts beside the job.

  notice      a preemption with notice mid-run: zero steps lost
  rebalance   a rebalance recommendation mid-run (a job without periodic checkpoints): the
              job checkpoints at once and goes on in the same attempt
  kill        a hard loss (no notice): resumes from the newest durable checkpoint; steps
              redone stay within one checkpoint interval
  hang        the worker stops answering: declared lost after the heartbeat timeout, then
              as kill
  store-fail  the checkpoint store fills up halfway through an upload, then a preemption:
              no partial object, the job resumes from the previous checkpoint
  disk-full   the worker's disk fills up while spotlab-train writes a checkpoint: training
              goes on, the previous checkpoint stays valid, and once space returns the job
              completes
  disk-full-end  the same disk stays full to the end: the job fails clearly, since its final
              checkpoint could not be written; the previous checkpoint stays whole

store-fail, disk-full and disk-full-end put a folder on a small tmpfs. They run in a private
mount namespace (as root, or as root of a new user namespace) and exit 77 (skipped) only when
neither can mount a tmpfs. Every wait is for an event or a process, with a deadline.
"""
import glob
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures, run_case  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances, signal_instance  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402

CASE, GATEWAY, WORKER, TRAIN = sys.argv[1:5]
GATEWAY, WORKER, TRAIN = (os.path.abspath(p) for p in (GATEWAY, WORKER, TRAIN))
TOKEN = "alice-token-0123456789"
NS_ENV = "SPOTLAB_SYSTEM_TEST_NS"

MODEL = {"layers": 2, "heads": 2, "dim": 64, "ctx": 64}
STEPS, EVERY = 400, 20
STORE_KEEP = 3  # [store] keep's default
OPTIONS = {"steps": STEPS, "batch": 8, "lr": 0.001, "seed": 1, "threads": 1,
           "checkpoint_every": EVERY}
NOTICE_S = 120            # simulated seconds: 2 s of wall time at time_scale 60
HEARTBEAT_TIMEOUT_S = 2
WAIT_S = 180              # generous: the integration suite also runs under ASan





def skip(why):
    print("SKIP:", why)
    sys.exit(77)


# ---- a private mount namespace for the tmpfs cases ----

def enter_mount_namespace():
    """Re-executes this script in a mount namespace where it may mount a tmpfs."""
    if os.environ.get(NS_ENV) == "1":
        return
    unshare = shutil.which("unshare")
    if not unshare:
        skip("unshare(1) is missing, so no tmpfs can be mounted")
    variants = []
    if os.geteuid() == 0:
        variants.append([unshare, "--mount", "--propagation", "private"])
    variants.append([unshare, "--user", "--map-root-user", "--mount", "--propagation", "private"])
    probe = ("d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\" && umount \"$d\"; "
             "r=$?; rmdir \"$d\"; exit $r")
    why = []
    for v in variants:
        p = subprocess.run(v + ["/bin/sh", "-c", probe], capture_output=True, text=True)
        if p.returncode == 0:
            os.environ[NS_ENV] = "1"
            sys.stdout.flush()
            os.execv(v[0], v + [sys.executable] + sys.argv)
        why.append("%s: %s" % (" ".join(v[1:]), p.stderr.strip()[-200:]))
    skip("cannot mount a tmpfs in a private mount namespace (%s)" % "; ".join(why))


def mount_tmpfs(path, size_bytes):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % size_bytes, "tmpfs",
                    path], check=True)


def resize_tmpfs(path, size_bytes):
    subprocess.run(["mount", "-o", "remount,size=%d,mode=0700" % size_bytes, "tmpfs", path],
                   check=True)


# ---- the reference run ----

def write_text(path):
    """About 16 KB of word salad: enough variety that the loss keeps moving."""
    words = ("call me ishmael some years ago never mind how long precisely having little or no "
             "money in my purse and nothing particular to interest me on shore i thought i would "
             "sail about a little and see the watery part of the world").split()
    state, out = 7, []
    for _ in range(3000):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(words[(state >> 33) % len(words)])
        if (state >> 20) % 10 == 0:
            out.append(".\n")
    with open(path, "w") as f:
        f.write(" ".join(out))


# Extra spotlab-train arguments of the reference run (a caller's choice, e.g. test_gang's
# --grad-slices, which makes one process sum its gradients as N ranks do).
REFERENCE_EXTRA = []


class Reference:
    """spotlab-train run with the job's arguments, every checkpoint kept, metrics read from
    its stdout as they come."""

    def __init__(self, folder, text):
        self.dir = os.path.join(folder, "reference")
        os.makedirs(self.dir)
        argv = [TRAIN, "--model", "gpt", "--data", text, "--ckpt-dir",
                os.path.join(self.dir, "ckpt"), "--metrics", "fd:1", "--keep", "100000",
                "--checkpoint-every", str(EVERY)]
        for k, v in list(MODEL.items()) + list(OPTIONS.items()):
            if k != "checkpoint_every":
                argv += ["--" + k.replace("_", "-"), str(v)]
        argv += REFERENCE_EXTRA
        self.lines = []
        self.first_ckpt = threading.Event()
        self.ckpt_bytes = 0
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))
            m = json.loads(line)
            if m.get("event") == "checkpoint" and not self.first_ckpt.is_set():
                self.ckpt_bytes = os.path.getsize(m["path"])
                self.first_ckpt.set()

    def checkpoint_size(self):
        if not self.first_ckpt.wait(WAIT_S):
            raise TimeoutError("the reference run wrote no checkpoint")
        return self.ckpt_bytes

    def finish(self):
        try:
            rc = self.p.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise
        self.reader.join(WAIT_S)
        err = self.p.stderr.read()
        if rc != 0:
            raise RuntimeError("reference run failed (%d): %s" % (rc, err[-2000:]))
        self.losses = {}
        for line in self.lines:
            m = json.loads(line)
            if "event" not in m and "loss" in m:
                self.losses[m["step"]] = m["loss"]
                text = line.split('"loss":', 1)[1].split(",", 1)[0]
                check("%.9g" % f32(m["loss"]) == text,
                      "loss %s of step %d reads back to the same float32" % (text, m["step"]))
        check(sorted(self.losses) == list(range(1, STEPS + 1)),
              "the reference run reported every step")

    def checkpoint_path(self, step):
        return os.path.join(self.dir, "ckpt", "ckpt-%010d.slck" % step)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.pack("<f", x).hex()


def digest(path):
    """A checkpoint's contents but for its run id and header CRC: the job's run
    id is its job id, the reference run's its own (run_id() reads it)."""
    with open(path, "rb") as f:
        b = f.read()
    return hashlib.sha256(b[:464] + b[496:508] + b[512:]).hexdigest()


def run_id(path):
    with open(path, "rb") as f:
        return f.read(512)[464:496].rstrip(b"\0").decode("ascii", "replace")


# ---- gateway and client ----

class Gateway(GatewayProcess):
    def __init__(self, folder):
        # spot capacity that never drops: no market preemptions
        super().__init__(folder, GATEWAY, {"alice": TOKEN}, market_capacity=8,
                         heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, register_timeout_s=30,
                         extra_ini="[worker]\nmetrics_per_s = 100000\n",
                         env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                              "SPOTLAB_NOTICE_POLL_MS": "50", "SPOTLAB_DEBUG": "worker.store"})

    def stop(self):
        """Stops the gateway and our workers; checks that the gateway stopped cleanly and
        that no process reported a sanitizer error (the suite also runs under ASan/UBSan)."""
        if self.p:
            rc = super().stop()
            check(rc == 0, "the gateway stopped cleanly (%s)" % rc)
        text = self.logs(tail=None)
        for needle in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            check(needle not in text, "no %s report in the logs" % needle)
        kill_instances(self.state)

    def logs(self, tail=5000):
        text = ""
        for path in [self.logpath] + sorted(glob.glob(os.path.join(
                self.state, "instances", "*", "worker.log"))):
            try:
                with open(path, "rb") as f:
                    body = f.read().decode(errors="replace")
                text += "==> %s\n%s\n" % (path, body[-tail:] if tail else body)
            except OSError:
                pass
        return text


class Client(GatewayClient):
    def __init__(self, address):
        super().__init__(address, token=TOKEN, session="system", hello_timeout=30)

    def req(self, type_, timeout=20, **kw):
        return super().req(type_, timeout, **kw)

    def wait_event(self, pred, what, timeout=WAIT_S):
        return super().wait_event(pred, what, timeout)


def event_is(kind, **fields):
    return lambda e: e.get("event") == kind and all(e.get(k) == v for k, v in fields.items())


def ended(e):
    return e.get("event") == "state" and e.get("state") in ("succeeded", "failed", "cancelled")


class Run:
    """One case: a reference run, a gateway, a client attached to one train job."""

    def __init__(self, folder):
        self.dir = folder
        self.text = os.path.join(folder, "text.txt")
        write_text(self.text)
        self.ref = Reference(folder, self.text)
        self.gw = Gateway(folder)
        self.c = None
        self.job = None

    def start_job(self, **options):
        """options: the job's own, over OPTIONS."""
        self.gw.start()
        self.c = Client(self.gw.listen)
        r = self.c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [self.text],
                                                   "options": {}}}])
        assert r["ok"], r
        r = self.c.req("submit", kind="train", model="m", data="d",
                       options=dict(OPTIONS, spot="yes", **options))
        assert r["ok"], r
        self.job = r["job"]
        r = self.c.req("attach", job=self.job, after=0)
        assert r["ok"], r
        self.t0 = time.monotonic()

    def placed(self):
        return self.c.wait_event(event_is("placed"), "placed")["instance"]

    def inject(self, action, **kw):
        r = self.c.req("inject", action=action, instance=self.placed(), **kw)
        check(r["ok"], "inject %s: %r" % (action, r))

    def wait_end(self):
        end = self.c.wait_event(ended, "the job's end")
        self.duration = time.monotonic() - self.t0
        check(end["state"] == "succeeded", "the job succeeded: %r" % end)
        self.ref.finish()
        return end

    def events(self, kind=None):
        return [e for e in self.c.events if e["job"] == self.job and
                (kind is None or e["event"] == kind)]

    def attempts(self):
        """Metric steps and losses of each attempt, in arrival order."""
        out, cur = [], None
        for e in self.events():
            if e["event"] == "placed":
                cur = []
                out.append(cur)
            elif e["event"] == "metric" and "loss" in e and cur is not None:
                # the core's closing "done" event repeats the last step's loss
                if not (cur and cur[-1] == (e["step"], e["loss"]) and "eval_loss" in e):
                    cur.append((e["step"], e["loss"]))
        return out

    def check_losses(self, attempts):
        def ref(step):
            return f32_bits(self.ref.losses.get(step, float("nan")))
        bad = [(s, f32_bits(l), ref(s)) for a in attempts for s, l in a if f32_bits(l) != ref(s)]
        n = sum(len(a) for a in attempts)
        check(not bad, "all %d step losses equal the reference's bit for bit; differ: %s"
              % (n, bad[:5]))

    def store_dir(self):
        return os.path.join(self.gw.state, "store", self.job)

    def verify_checkpoint(self, path, step):
        """A checkpoint off the periodic schedule (a notice's) has no reference twin:
        spotlab-train --check verifies its header, layout and section checksums."""
        p = subprocess.run([TRAIN, "--check", path], capture_output=True, text=True,
                           timeout=WAIT_S)
        return p.returncode == 0 and p.stdout.strip() == "%s: ok step %d" % (path, step)

    def check_store(self, expect_steps=None):
        """Every object under a checkpoint name is complete: the reference's checkpoint of
        that step byte for byte, or, for a step the reference did not checkpoint, one that
        spotlab-train accepts; and no temporary is left behind."""
        names = sorted(os.listdir(self.store_dir()))
        steps = []
        for n in names:
            if n.startswith(".wk-tmp.") and writer_stopped(n):
                # a put still under way in a worker that was stopped mid-way (case hang): its
                # process lives on until the instance is killed, and the next put into the
                # folder after that removes it
                print("a stopped worker's put in progress: %s" % n)
                continue
            if not (n.startswith("ckpt-") and n.endswith(".tc")):
                check(False, "the store holds only checkpoints; found %s" % n)
                continue
            step = int(n[5:-3])
            steps.append(step)
            path, ref = os.path.join(self.store_dir(), n), self.ref.checkpoint_path(step)
            if os.path.exists(ref):
                check(digest(path) == digest(ref),
                      "store object %s equals the reference checkpoint of step %d" % (n, step))
                check(run_id(path) == self.job, "store object %s is of the job's run (%s, job %s)"
                      % (n, run_id(path), self.job))
            else:
                check(step % EVERY and self.verify_checkpoint(path, step),
                      "store object %s (off the schedule) is a valid checkpoint" % n)
        if expect_steps is not None:
            # the worker deletes all but the newest [store] keep once a newer one is stored
            expect_steps = sorted(expect_steps)[-STORE_KEEP:]
            check(steps == expect_steps, "store checkpoints %s, expected %s"
                  % (steps, expect_steps))
        return steps

    def close(self, keep):
        if self.c:
            self.c.close()
        self.gw.stop()
        if self.ref.p.poll() is None:
            self.ref.p.kill()
            self.ref.p.wait()
        if keep or failures:
            print(self.gw.logs()[-12000:], file=sys.stderr)


def contiguous(steps, first, last):
    return steps == list(range(first, last + 1))


def checkpoint_steps_before(evs, pred):
    """Steps of the checkpoint events before the first event matching pred."""
    out = []
    for e in evs:
        if pred(e):
            break
        if e["event"] == "checkpoint":
            out.append(e["step"])
    return out


def checkpoint_lag(evs, reached):
    """Steps the core ran past a checkpoint before it was durable, up to the loss: for each
    checkpoint event, the newest step reported by then beyond it; and for the periodic
    checkpoint it was writing when the loss came (due at or before the step reached, and
    never durable), the steps run past that one."""
    lag, last, newest = 0, 0, 0
    for e in evs:
        if e["event"] == "preempted":
            break
        if e["event"] == "metric" and "loss" in e:
            last = e["step"]
        if e["event"] == "checkpoint":
            lag = max(lag, last - e["step"])
            newest = max(newest, e["step"])
    due = reached // EVERY * EVERY
    return max(lag, reached - due) if due > newest else lag


# ---- cases ----

def case_notice(run):
    run.start_job()
    run.c.wait_event(lambda e: e.get("event") == "metric" and e.get("step", 0) >= 2 * EVERY,
                     "step %d" % (2 * EVERY))
    run.inject("preempt", notice_s=NOTICE_S)
    run.wait_end()
    pre = run.events("preempted")
    res = run.events("resumed")
    att = run.attempts()
    if not (check(len(pre) == 1 and len(res) == 1 and len(att) == 2,
                  "one preemption, one resume, two attempts: %d %d %d"
                  % (len(pre), len(res), len(att)))):
        return
    check(pre[0]["notice"] is True, "the preemption had a notice")
    check(len(run.events("notice")) == 1, "a notice event")
    reached = max(s for s, _ in att[0])
    durable = pre[0]["step"]
    first, second = [s for s, _ in att[0]], [s for s, _ in att[1]]
    print("notice: preempted at step %d, durable %d, resumed from %d; %d + %d steps reported; "
          "%.1f s" % (reached, durable, res[0]["from_step"], len(first), len(second),
                      run.duration))
    check(durable == reached, "zero steps lost: durable step %d == step reached %d"
          % (durable, reached))
    check(res[0]["from_step"] == durable, "resumed from the durable step")
    check(contiguous(first, 1, reached), "attempt 1 reported every step 1..%d" % reached)
    check(contiguous(second, durable + 1, STEPS),
          "attempt 2 reported every step %d..%d" % (durable + 1, STEPS))
    run.check_losses(att)
    run.check_store()


def check_rebalance(run, att):
    """After a rebalance recommendation: one notice event, for a rebalance the job went
    on through; one attempt, never preempted; and besides the final one, one checkpoint:
    the one the recommendation asked for, after it."""
    evs = run.events()
    notes = [e for e in evs if e["event"] == "notice"]
    check(len(notes) == 1 and notes[0].get("action") == "rebalance" and notes[0].get("leaving") is False,
          "one notice, a rebalance the job goes on through: %r" % notes)
    check(len(att) == 1 and not run.events("preempted"), "one attempt, never preempted")
    at = evs.index(notes[0]) if notes else len(evs)
    before = [e["step"] for e in evs[:at] if e["event"] == "checkpoint"]
    asked = [e["step"] for e in evs[at:] if e["event"] == "checkpoint" and e["step"] < STEPS]
    check(not before and len(asked) == 1,
          "one checkpoint before the last, the one the recommendation asked for: %s %s"
          % (before, asked))
    return asked


def case_rebalance(run):
    run.start_job(checkpoint_every=10 * STEPS)
    run.c.wait_event(lambda e: e.get("event") == "metric" and e.get("step", 0) >= EVERY,
                     "step %d" % EVERY)
    run.inject("rebalance")
    run.c.wait_event(event_is("notice"), "the recommendation")
    workers = run.c.req("status").get("workers", [])
    check([w.get("at_risk") for w in workers] == [True],
          "status shows the instance at risk: %s" % [(w.get("instance"), w.get("at_risk")) for w in workers])
    run.wait_end()
    att = run.attempts()
    asked = check_rebalance(run, att)
    print("rebalance: checkpoint at step %s; %.1f s" % (asked, run.duration))
    check(contiguous([s for s, _ in att[0]], 1, STEPS), "every step reported once")
    run.check_losses(att)
    steps = run.check_store()
    check(STEPS in steps, "the final checkpoint is in the store")


def writer_stopped(tmp):
    """Whether the process that writes the store temporary tmp
    (.wk-tmp.NAME.SPACE.PID.N, worker/store.c) is alive and stopped (SIGSTOP)."""
    parts = tmp.rsplit(".", 2)
    try:
        with open("/proc/%d/stat" % int(parts[1])) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, ValueError, IndexError):
        return False


def hard_loss(run, name, lose):
    """A worker lost without a notice, a few intervals in, right after a checkpoint is
    durable: the job resumes from the newest durable checkpoint and redoes at most one
    interval (plus the steps run while the checkpoint in flight was written). A stale
    temporary planted in the job's store folder is gone by the end."""
    run.start_job()
    run.c.wait_event(lambda e: e.get("event") == "checkpoint" and e.get("step", 0) >= 2 * EVERY,
                     "a checkpoint at step %d" % (2 * EVERY))
    # what a put that stopped an hour ago (on another machine sharing the store) leaves: the
    # next put into the folder removes it, and check_store finds no temporary
    stale = os.path.join(run.store_dir(), ".wk-tmp.ckpt-%08d.tc.0000abcd.4242.0" % EVERY)
    with open(stale, "wb") as f:
        f.write(b"part of a checkpoint")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    lose()
    lost = time.monotonic()
    pre = run.c.wait_event(event_is("preempted"), "preempted")
    lost_after = time.monotonic() - lost
    run.wait_end()
    res = run.events("resumed")
    att = run.attempts()
    if not check(len(run.events("preempted")) == 1 and len(res) == 1 and len(att) == 2,
                 "one preemption, one resume, two attempts"):
        return None
    check(pre["notice"] is False, "a hard loss has no notice")
    check(not run.events("notice"), "no notice event")
    evs = run.events()
    durable = checkpoint_steps_before(evs, event_is("preempted"))
    reached = max(s for s, _ in att[0])
    redone = reached - res[0]["from_step"]
    lag = checkpoint_lag(evs, reached)
    print("%s: step reached %d, newest durable %d, resumed from %d, %d steps redone "
          "(interval %d, checkpoint lag up to %d steps), lost after %.2f s; %.1f s"
          % (name, reached, durable[-1], res[0]["from_step"], redone, EVERY, lag, lost_after,
             run.duration))
    check(pre["step"] == durable[-1] and res[0]["from_step"] == durable[-1],
          "resumed from the newest durable checkpoint (%d)" % durable[-1])
    check(durable[-1] % EVERY == 0, "that is a periodic checkpoint")
    check(redone <= EVERY + lag,
          "steps redone (%d) within one interval (%d) plus the checkpoint in flight (%d)"
          % (redone, EVERY, lag))
    check(contiguous([s for s, _ in att[0]], 1, reached), "attempt 1 reported every step")
    check(contiguous([s for s, _ in att[1]], durable[-1] + 1, STEPS),
          "attempt 2 reported every step after the checkpoint")
    run.check_losses(att)
    run.check_store()
    return lost_after


def case_kill(run):
    """inject kill: the local provider sees the worker's process group die."""
    lost_after = hard_loss(run, "kill", lambda: run.inject("kill"))
    check(lost_after is None or lost_after < HEARTBEAT_TIMEOUT_S + 10,
          "the loss was noticed within the heartbeat timeout (%.1f s)" % (lost_after or 0))


def case_hang(run):
    """The worker's process group stops (a hung or cut-off instance): nothing but the missing
    heartbeats tells the gateway, which declares the worker lost after heartbeat_timeout."""
    def stop_worker():
        rec = os.path.join(run.gw.state, "instances", run.placed(), "instance.json")
        check(signal_instance(rec, signal.SIGSTOP) >= 2, "stopped the worker and its job")
    lost_after = hard_loss(run, "hang", stop_worker)
    check(lost_after is None or HEARTBEAT_TIMEOUT_S - 0.5 <= lost_after < HEARTBEAT_TIMEOUT_S + 10,
          "declared lost after the heartbeat timeout of %d s (%.1f s)"
          % (HEARTBEAT_TIMEOUT_S, lost_after or 0))


def case_store_fail(run):
    size = run.ref.checkpoint_size()
    # room for one checkpoint and half of the next: the second upload stops midway
    mount_tmpfs(os.path.join(run.gw.state, "store"), size + size // 2)
    run.start_job()
    line = run.c.wait_event(lambda e: e.get("event") == "output" and
                            "not uploaded" in e.get("text", ""), "a failed upload")
    print("store-fail: %s" % line["text"])
    good = checkpoint_steps_before(run.events(), lambda e: e is line)
    check(good == [EVERY], "only the first checkpoint is in the store: %s" % good)
    check(not [n for n in os.listdir(run.store_dir()) if n.startswith(".")],
          "no temporary object is left after the failed upload")
    run.check_store([EVERY])
    run.inject("preempt", notice_s=NOTICE_S)
    pre = run.c.wait_event(event_is("preempted"), "preempted")
    resize_tmpfs(os.path.join(run.gw.state, "store"), 64 << 20)
    run.wait_end()
    res = run.events("resumed")
    att = run.attempts()
    if not check(len(res) == 1 and len(att) == 2, "one resume, two attempts"):
        return
    reached = max(s for s, _ in att[0])
    print("store-fail: preempted at step %d, resumed from %d (%.1f s)"
          % (reached, res[0]["from_step"], run.duration))
    check(pre["step"] == EVERY and res[0]["from_step"] == EVERY,
          "resumed from the previous good checkpoint (%d): preempted %r, resumed %r"
          % (EVERY, pre["step"], res[0]["from_step"]))
    check(contiguous([s for s, _ in att[1]], EVERY + 1, STEPS),
          "attempt 2 reported every step after the good checkpoint")
    run.check_losses(att)
    steps = run.check_store()
    check(STEPS in steps, "the final checkpoint is in the store")


def case_disk_full(run):
    size = run.ref.checkpoint_size()
    instances = os.path.join(run.gw.state, "instances")
    # the worker's folders: its files, one checkpoint and half of the next
    mount_tmpfs(instances, size + size // 2 + (64 << 10))
    run.start_job()
    line = run.c.wait_event(lambda e: e.get("event") == "output" and
                            "not written" in e.get("text", ""), "a failed checkpoint write")
    print("disk-full: %s" % line["text"])
    check(("checkpoint of step %d not written" % (2 * EVERY)) in line["text"],
          "the second checkpoint is the one that did not fit")
    check("resumes from step %d" % EVERY in line["text"], "the line names the resume point")
    ckpt = glob.glob(os.path.join(instances, "*", "work", "jobs", run.job, "ckpt"))
    if check(len(ckpt) == 1, "one job folder: %s" % ckpt):
        names = sorted(os.listdir(ckpt[0]))
        check(names == ["ckpt-%010d.slck" % EVERY], "the worker's folder keeps only the "
              "previous checkpoint and no partial file: %s" % names)
        check(digest(os.path.join(ckpt[0], names[0])) == digest(run.ref.checkpoint_path(EVERY)),
              "the previous checkpoint is intact")
    # training goes on with the disk full
    run.c.wait_event(lambda e: e.get("event") == "metric" and e.get("step", 0) > 2 * EVERY + 1,
                     "a step after the failed checkpoint")
    resize_tmpfs(instances, 64 << 20)
    run.wait_end()
    att = run.attempts()
    check(len(att) == 1 and not run.events("preempted"), "one attempt, never preempted")
    cks = [e["step"] for e in run.events("checkpoint")]
    print("disk-full: checkpoints %s (%.1f s)" % (cks, run.duration))
    check(cks[0] == EVERY and 2 * EVERY not in cks and cks[-1] == STEPS,
          "checkpoints: the first, none for the step that did not fit, then on to the end")
    check(contiguous([s for s, _ in att[0]], 1, STEPS), "every step reported once")
    run.check_losses(att)
    run.check_store(cks)


def case_disk_full_end(run):
    """The work disk fills up after the first checkpoint and stays full: training runs to the
    end, and the job fails, saying that its final checkpoint could not be written, rather than
    succeed with a model that was never saved; the previous checkpoint stays whole. (The
    periodic checkpoint of the last step fails, and spotlab-train tries it once more at the
    end.)"""
    size = run.ref.checkpoint_size()
    instances = os.path.join(run.gw.state, "instances")
    mount_tmpfs(instances, size + size // 2 + (64 << 10))
    run.start_job()
    end = run.c.wait_event(ended, "the job's end")
    run.duration = time.monotonic() - run.t0
    run.ref.finish()
    lines = [e["text"] for e in run.events("output") if "not written" in e["text"]]
    print("disk-full-end: %s; %d checkpoints not written (%.1f s)"
          % (end, len(lines), run.duration))
    check(end["state"] == "failed" and
          ("the final checkpoint (step %d) is not written" % STEPS) in end.get("reason", "") and
          end["reason"].endswith("the newest durable checkpoint: step %d" % EVERY),
          "the job failed, naming the final checkpoint and the newest durable one: %r" % end)
    check(sum("checkpoint of step %d not written" % STEPS in t for t in lines) == 2,
          "the user was told the final checkpoint was not written, and spotlab-train tried "
          "it again at the end after the periodic one of the same step failed")
    cks = [e["step"] for e in run.events("checkpoint")]
    check(cks == [EVERY], "only the first checkpoint became durable: %s" % cks)
    att = run.attempts()
    check(len(att) == 1 and contiguous([s for s, _ in att[0]], 1, STEPS),
          "one attempt that trained every step")
    run.check_losses(att)
    run.check_store([EVERY])
    folders = glob.glob(os.path.join(instances, "*", "work", "jobs", run.job))
    end = time.monotonic() + 20
    while folders and time.monotonic() < end:
        time.sleep(0.05)
        folders = [f for f in folders if os.path.exists(f)]
    check(not folders, "once the gateway has the job's end, the worker removes its folder, and with it "
          "the space its checkpoints took: %s" % folders)


CASES = {"notice": case_notice, "rebalance": case_rebalance, "kill": case_kill, "hang": case_hang,
         "store-fail": case_store_fail, "disk-full": case_disk_full,
         "disk-full-end": case_disk_full_end}


def main():
    if CASE in ("store-fail", "disk-full", "disk-full-end"):
        enter_mount_namespace()  # before anything is started: this may re-execute the script
    folder = tempfile.mkdtemp(prefix="spotlab-system-")
    run = Run(folder)

    def cleanup(failed):
        run.close(keep=failed)
        for m in ("store", "instances"):
            # lazily: a killed worker may still hold its folder for a moment
            subprocess.run(["umount", "-l", os.path.join(run.gw.state, m)], capture_output=True)
        if not failed:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print("kept %s" % folder, file=sys.stderr)
    return run_case(CASES[CASE], run, cleanup=cleanup)


if __name__ == "__main__":
    sys.exit(main())
