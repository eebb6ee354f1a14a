#!/usr/bin/python3
"""Integration: exact resume and checkpoint behaviour of spotlab-train.

A run of N steps uninterrupted is the reference. Then, each in a fresh folder:
  kill -9 at a random step, --resume, continue to N;
  the same with the newest checkpoint corrupted before resuming (fallback);
  SIGTERM at a random step (checkpoint, durable, exit 0), --resume to N;
every step's loss (last value written for that step) and the final checkpoint
(parameters, moments, RNG states) must be bit-identical to the reference.
Also: "checkpoint" on --control and SIGUSR1 force a durable checkpoint,
"checkpoint_every N" on --control changes the periodic interval, and
checkpoint writes that fail (file size limit, EFBIG) leave earlier
checkpoints intact while training carries on, and a run whose final
checkpoint is not written exits 1. A corrupt checkpoint skipped on resume
is renamed to NAME.corrupt, not replaced by the resumed run's.
Waits poll the metrics file against a deadline; nothing sleeps for a fixed time.

usage: resume_test.py SPOTLAB_TRAIN"""
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402
from procs import blocked_in  # noqa: E402
from train_metrics import events, losses  # noqa: E402

EXE = sys.argv[1]
N = 200
ARGS = ["--model", "gpt", "--layers", "2", "--heads", "2", "--dim", "32", "--ctx", "32",
        "--batch", "8", "--steps", str(N), "--seed", "5", "--threads", "1", "--eval-batches", "1",
        "--checkpoint-every", "7", "--keep", "3",
        "--run-id", "exact-resume"]  # one identity: every variant's checkpoints equal the reference's


def wait_for(path, pred, proc=None, deadline_s=60, after=0):
    """The first event from index `after` on in the metrics file that satisfies pred."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for e in events(path)[after:]:
            if pred(e):
                return e
        if proc is not None and proc.poll() is not None:
            for e in events(path)[after:]:
                if pred(e):
                    return e
            return None
        time.sleep(0.002)  # polling interval, not a wait for the event
    return None


def start(d, *extra, **kw):
    return subprocess.Popen([EXE, *ARGS, "--ckpt-dir", os.path.join(d, "ck"),
                             "--metrics", os.path.join(d, "m.jsonl"), *extra],
                            stdout=subprocess.DEVNULL, **kw)


def final_ckpt(d):
    with open(os.path.join(d, "ck", "ckpt-%010d.slck" % N), "rb") as f:
        return f.read()


def compare(name, d, ref_losses, ref_ckpt):
    got = losses(os.path.join(d, "m.jsonl"))
    check(sorted(got) == list(range(1, N + 1)), f"{name}: every step 1..{N} has a loss")
    diff = [s for s in range(1, N + 1) if got.get(s) != ref_losses[s]]
    check(not diff, f"{name}: losses bit-identical to the uninterrupted run"
          + (f" (first difference at step {diff[0]})" if diff else ""))
    check(final_ckpt(d) == ref_ckpt, f"{name}: final parameters, moments and RNG states bit-identical")


def full_pipe(root):
    """A worker reads the metrics pipe late at times (a slow upload, a gateway
    away): the run then waits in a write of a metrics line. A checkpoint
    request (SIGUSR1) and the stop (SIGTERM) that come then must not cost
    that line."""
    d = os.path.join(root, "full-pipe")
    os.mkdir(d)
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen([EXE, *ARGS, "--ckpt-dir", os.path.join(d, "ck"), "--metrics", f"fd:{w_fd}",
                          "--steps", "1000000", "--checkpoint-every", "0"],
                         stdout=subprocess.DEVNULL, pass_fds=(w_fd,))
    os.close(w_fd)
    waits = 0
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        # nothing reads the pipe: the run waits in a write again after each signal
        waits += blocked_in(p.pid, 1, 60)  # x86-64 write
        p.send_signal(sig)
    check(waits == 2, f"full pipe: each signal came while a metrics write waited ({waits} of 2)")
    data = b""
    while True:
        chunk = os.read(r_fd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r_fd)
    rc = p.wait(timeout=120)
    check(rc == 0, f"full pipe: exit status 0 after SIGTERM (got {rc})")
    lines = data.decode(errors="replace").split("\n")
    bad = []
    evs = []
    for line in lines:
        if not line:
            continue
        try:
            evs.append(json.loads(line))
        except ValueError:
            bad.append(line[:120])
    got = [e["step"] for e in evs if "event" not in e]
    check(not bad, f"full pipe: every metrics line is whole JSON {bad[:3]}")
    gaps = [(a, b) for a, b in zip(got, got[1:]) if b != a + 1]
    check(got and got[0] == 1 and not gaps, f"full pipe: no step's line is lost ({len(got)} steps, gaps {gaps[:5]})")
    term = [e for e in evs if e.get("event") == "terminated"]
    check(term and got and term[-1]["step"] == got[-1],
          f"full pipe: the run ends at the last step it reported ({term[-1:]}, {got[-1:]})")


def main():
    seed = int(os.environ.get("TC_TEST_SEED", time.time_ns() % 1000000))
    print(f"kill points drawn with TC_TEST_SEED={seed}")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as root:
        ref = os.path.join(root, "ref")
        os.mkdir(ref)
        check(start(ref).wait(timeout=120) == 0, "reference run exits 0")
        ref_losses = losses(os.path.join(ref, "m.jsonl"))
        ref_ckpt = final_ckpt(ref)
        kept = sorted(os.listdir(os.path.join(ref, "ck")))
        check(len(kept) == 3, f"--keep 3 keeps three checkpoints ({kept})")

        for variant in ("kill", "kill+corrupt", "sigterm"):
            k = rng.randrange(20, N - 40)
            for attempt in range(3):
                # the run at the lowest priority, so that on a loaded machine this poller sees
                # step k and signals before the run's last step; one that still got there first
                # is run again in a fresh folder
                d = os.path.join(root, "%s-%d" % (variant, attempt))
                os.mkdir(d)
                m = os.path.join(d, "m.jsonl")
                p = start(d, preexec_fn=lambda: os.nice(19))
                hit = wait_for(m, lambda e: "event" not in e and e.get("step", 0) >= k, p)
                if p.poll() is None:
                    break
                p.wait()
                print(f"{variant}: the run ended before step {k} was seen; again")
            if variant == "sigterm":
                p.send_signal(signal.SIGTERM)
                rc = p.wait(timeout=60)
                check(rc == 0, f"{variant} at step ~{k}: exit status 0 after SIGTERM (got {rc})")
                term = [e for e in events(m) if e.get("event") == "terminated"]
                check(bool(term) and term[-1]["durable"] is True, f"{variant}: 'terminated' event, durable")
                if term:
                    ck = [e for e in events(m) if e.get("event") == "checkpoint" and e["step"] == term[-1]["step"]]
                    check(bool(ck) and ck[-1]["durable"] is True, f"{variant}: checkpoint at step {term[-1]['step']} reported durable")
            else:
                p.kill()
                rc = p.wait(timeout=60)
                check(hit is not None and rc == -signal.SIGKILL,
                      f"{variant}: killed with SIGKILL at step >= {k} (rc {rc})")
            if variant == "kill+corrupt":
                names = sorted(n for n in os.listdir(os.path.join(d, "ck")) if n.endswith(".slck"))
                newest = os.path.join(d, "ck", names[-1])
                with open(newest, "r+b") as f:
                    f.seek(700)
                    b = f.read(1)
                    f.seek(700)
                    f.write(bytes([b[0] ^ 0xFF]))
                with open(newest, "rb") as f:
                    corrupt = f.read()
            before = len(events(m))
            rc = start(d, "--resume").wait(timeout=120)
            check(rc == 0, f"{variant}: resumed run exits 0")
            new = events(m)[before:]
            res = [e for e in new if e.get("event") == "resume"]
            check(len(res) == 1, f"{variant}: resumed from a checkpoint ({res[0]['path'] if res else None})")
            if variant == "kill+corrupt":
                warn = [e for e in new if e.get("event") == "warning"]
                check(bool(warn) and names[-1] in warn[0]["path"] and "checksum" in warn[0]["error"],
                      f"{variant}: warning names the corrupt newest checkpoint")
                check(bool(res) and names[-1] not in res[0]["path"], f"{variant}: fell back to the previous checkpoint")
                # the resumed run writes that step again: the corrupt file was renamed, not replaced
                kept = newest + ".corrupt"
                check(bool(warn) and warn[0].get("moved_to") == kept and os.path.exists(kept) and
                      open(kept, "rb").read() == corrupt,
                      f"{variant}: the corrupt checkpoint is kept, renamed out of the way: {warn[:1]}")
            compare(variant, d, ref_losses, ref_ckpt)

        # forced checkpoints: control fd and SIGUSR1
        d = os.path.join(root, "control")
        os.mkdir(d)
        r_fd, w_fd = os.pipe()
        m = os.path.join(d, "m.jsonl")
        # a run far longer than the checks need, ended by SIGTERM: a loaded machine's slow
        # polling of the metrics file cannot let it finish before a check's request arrives
        long_run = 1000000
        p = start(d, "--control", f"fd:{r_fd}", "--checkpoint-every", "0", "--steps", str(long_run),
                  pass_fds=(r_fd,))
        os.close(r_fd)
        wait_for(m, lambda e: "event" not in e and e.get("step", 0) >= 30, p)
        seen = len(events(m))
        os.write(w_fd, b"checkpoint\n")
        e = wait_for(m, lambda e: e.get("event") == "checkpoint" and e["step"] < long_run, p, after=seen)
        check(e is not None and e["durable"] is True and os.path.exists(e["path"]) and e["write_ms"] >= 0,
              f"control 'checkpoint': durable checkpoint event {e}")
        wait_for(m, lambda e: "event" not in e and e.get("step", 0) >= 80, p)
        seen = len(events(m))
        p.send_signal(signal.SIGUSR1)
        e = wait_for(m, lambda e: e.get("event") == "checkpoint" and 80 <= e["step"] < long_run, p, after=seen)
        check(e is not None and e["durable"] is True, f"SIGUSR1: durable checkpoint event {e}")
        # "checkpoint_every N" on the control fd sets the periodic interval mid-run. A loaded
        # machine may run on far past step 80 before SIGUSR1's checkpoint, so each wait reads
        # only the events written after its request (CI once matched SIGUSR1's at step 207).
        seen = len(events(m))
        os.write(w_fd, b"checkpoint_every 25\n")
        e = wait_for(m, lambda e: e.get("event") == "checkpoint_every", p, after=seen)
        check(e is not None and e["steps"] == 25, f"control 'checkpoint_every 25' acknowledged {e}")
        e = wait_for(m, lambda e: e.get("event") == "checkpoint" and e["step"] < long_run, p, after=seen)
        check(e is not None and e["step"] % 25 == 0,
              f"periodic checkpoint at the new interval after 'checkpoint_every 25': {e}")
        os.write(w_fd, b"checkpoint_every x\n")
        e = wait_for(m, lambda e: e.get("event") == "warning" and e.get("op") == "control", p)
        check(e is not None, f"a malformed checkpoint_every is a warning {e}")
        os.close(w_fd)
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=120) == 0, "control run exits 0 after SIGTERM")

        full_pipe(root)

        # failed writes: the file size limit makes every new checkpoint fail (EFBIG)
        d = os.path.join(root, "efbig")
        os.mkdir(d)
        m = os.path.join(d, "m.jsonl")
        check(subprocess.run([EXE, *ARGS, "--steps", "50", "--ckpt-dir", os.path.join(d, "ck"),
                              "--metrics", m], stdout=subprocess.DEVNULL).returncode == 0, "first 50 steps")
        ckdir = os.path.join(d, "ck")
        snap = {n: open(os.path.join(ckdir, n), "rb").read() for n in os.listdir(ckdir)}

        def limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))

        rc = subprocess.run([EXE, *ARGS, "--steps", "80", "--resume", "--ckpt-dir", ckdir,
                             "--metrics", "fd:1"], stdout=subprocess.PIPE, preexec_fn=limit,
                            timeout=120)
        out = [json.loads(l) for l in rc.stdout.decode().splitlines()]
        errs = [e for e in out if e.get("event") == "error" and e.get("op") == "checkpoint"]
        steps = [e["step"] for e in out if "event" not in e]
        done = [e for e in out if e.get("event") == "done"]
        check(rc.returncode == 1 and done and done[-1]["durable"] is False,
              f"EFBIG: training continued to the end, then exited 1 since its final checkpoint is not "
              f"written (rc {rc.returncode}, {done})")
        check(len(errs) >= 4 and all(e["code"] == "EFBIG" for e in errs),
              f"EFBIG: an error event per failed checkpoint ({len(errs)}, {errs[:1]})")
        check(steps and steps[-1] == 80, "EFBIG: all steps ran")
        after = {n: open(os.path.join(ckdir, n), "rb").read() for n in os.listdir(ckdir)}
        check(after == snap, "EFBIG: earlier checkpoints untouched, no temporary left")

    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
