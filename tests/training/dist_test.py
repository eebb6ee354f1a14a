#!/usr/bin/python3
"""Integration: data parallelism on the CPU through gloo, with real processes.

World 2 is two spotlab-train processes, --device cpu --world-size 2 --rank 0|1
--rendezvous tcp://127.0.0.1:PORT, on loopback. For a small gpt and a small mlp:
  - against one process with --grad-slices 2 (the same two slice gradients,
    added in the same order): every step's loss and gradient norm, every eval
    loss, and the final parameters and AdamW moments are bit-identical;
  - against one process computing the batch in a single pass (the default):
    the gradient sums run in another order, so numbers differ in rounding;
    they must agree within LOSS_TOL per step loss and PARAM_TOL per
    parameter (printed with the measured differences);
  - losses fall; only rank 0 writes metrics and checkpoints, which record
    world size 2.
Failures: rank 1 killed -9 mid-run makes rank 0 exit 1 with a message (and
rank 0 killed makes rank 1 do so), at once for a dead process and within
--dist-timeout for a stopped one (SIGSTOP); a rank whose peer never comes
exits 1 after --dist-timeout naming what is missing.
Resume: both ranks killed -9 at a random step (and, in another run, rank 1
sent SIGTERM, which stops both and checkpoints), then both resumed with
--resume: every step's loss and the final checkpoint are bit-identical to the
uninterrupted world-2 run. A world-2 checkpoint resumed by one process with
--grad-slices 2 continues bit-identically too (the state is replicated).
Waits poll files or process exits against deadlines; nothing sleeps for a
fixed time.

usage: dist_test.py SPOTLAB_TRAIN"""
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402
from procs import blocked_in  # noqa: E402
from train_metrics import events, steps  # noqa: E402

EXE = sys.argv[1]
TIMEOUT_S = 3  # --dist-timeout for the failure cases
LOSS_TOL = 1e-4   # per-step loss, single pass against world 2 (nats)
PARAM_TOL = 1e-4  # per parameter after the run, single pass against world 2
GPT = ["--model", "gpt", "--layers", "2", "--heads", "2", "--dim", "32", "--ctx", "32",
       "--batch", "8", "--seed", "5", "--threads", "1", "--eval-batches", "2", "--lr", "1e-3"]
MLP = ["--model", "mlp", "--hidden", "64", "--layers", "2", "--batch", "32", "--seed", "3",
       "--threads", "1"]




def wait_for(path, pred, procs, deadline_s=60):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if any(pred(e) for e in events(path)):
            return True
        if any(p.poll() is not None for p in procs):
            return any(pred(e) for e in events(path))
        time.sleep(0.002)  # polling interval, not a wait for the event
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_cmd(args, d, rank, world, port, extra=()):
    return [EXE, *args, "--world-size", str(world), "--rank", str(rank),
            "--rendezvous", f"tcp://127.0.0.1:{port}", "--ckpt-dir", os.path.join(d, f"ck{rank}"),
            "--metrics", os.path.join(d, f"m{rank}.jsonl"), *extra]


def start_world(args, d, world=2, extra=()):
    port = free_port()
    return [subprocess.Popen(rank_cmd(args, d, r, world, port, extra), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]


def finish(procs, timeout=120):
    """exit statuses and stderr texts"""
    out = [p.communicate(timeout=timeout)[1] for p in procs]
    return [p.returncode for p in procs], out


def run_one(args, d, extra=()):
    r = subprocess.run([EXE, *args, "--ckpt-dir", os.path.join(d, "ck0"), "--metrics",
                        os.path.join(d, "m0.jsonl"), *extra], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    return r.returncode, r.stderr


def ckpt(d, step):
    with open(os.path.join(d, "ck0", "ckpt-%010d.slck" % step), "rb") as f:
        return f.read()


def world_of(b):
    return struct.unpack_from("<I", b, 52)[0]


def same_state(a, b):
    """everything but the world size, the run identity (separate runs have
    their own) and the header CRC"""
    return a[:52] == b[:52] and a[56:464] == b[56:464] and a[512:] == b[512:]


def params(b):
    """the PARM section's floats: sections follow the 512-byte header, each a
    24-byte section header (tag, CRC, payload bytes, reserved) and its payload"""
    off = 512
    while off < len(b):
        tag, _, size = struct.unpack_from("<4sIQ", b, off)
        if tag == b"PARM":
            return struct.unpack_from("<%df" % (size // 4), b, off + 24)
        off += 24 + size
    raise ValueError("no PARM section")


def mkdir(root, name):
    d = os.path.join(root, name)
    os.mkdir(d)
    return d


def compare_models(root, name, args, n):
    args = [*args, "--steps", str(n), "--eval-every", str(n // 2)]
    d2 = mkdir(root, name + "-w2")
    codes, errs = finish(start_world(args, d2))
    check(codes == [0, 0], f"{name}: both ranks exit 0 ({codes}; {[e[-300:] for e in errs if e]})")
    w2 = steps(os.path.join(d2, "m0.jsonl"))
    check(sorted(w2) == list(range(1, n + 1)), f"{name}: rank 0 reports every step 1..{n}")
    check(w2[n]["loss"] < w2[1]["loss"] - 0.05, f"{name}: loss falls ({w2[1]['loss']} -> {w2[n]['loss']})")
    check(not os.path.exists(os.path.join(d2, "m1.jsonl")), f"{name}: rank 1 writes no metrics")
    check(os.listdir(os.path.join(d2, "ck1")) == [], f"{name}: rank 1 writes no checkpoint")
    dev = [e for e in events(os.path.join(d2, "m0.jsonl")) if e.get("event") == "device"]
    check(bool(dev) and "rank 0 of 2 gloo" in dev[0]["device"], f"{name}: device event {dev[:1]}")
    ref = ckpt(d2, n)
    check(world_of(ref) == 2, f"{name}: checkpoint records world size 2")

    d1 = mkdir(root, name + "-s2")
    code, err = run_one(args, d1, ["--grad-slices", "2"])
    check(code == 0, f"{name}: one process, --grad-slices 2, exits 0 {err[-300:]}")
    s2 = steps(os.path.join(d1, "m0.jsonl"))
    keys = ("loss", "grad_norm", "eval_loss")
    diff = [s for s in range(1, n + 1) if any(w2[s].get(k) != s2.get(s, {}).get(k) for k in keys)]
    check(not diff, f"{name}: world 2 = one process with --grad-slices 2, bit for bit, in every "
          "step's loss, grad_norm and eval_loss" + (f" (first difference at step {diff[0]})" if diff else ""))
    check(same_state(ref, ckpt(d1, n)), f"{name}: ... and in the final parameters, moments and RNG states")

    d0 = mkdir(root, name + "-s1")
    code, err = run_one(args, d0)
    check(code == 0, f"{name}: one process, single pass, exits 0 {err[-300:]}")
    s1 = steps(os.path.join(d0, "m0.jsonl"))
    dloss = max(abs(w2[s]["loss"] - s1[s]["loss"]) for s in range(1, n + 1))
    dpar = max(abs(x - y) for x, y in zip(params(ref), params(ckpt(d0, n))))
    dnorm = max(abs(w2[s]["grad_norm"] - s1[s]["grad_norm"]) for s in range(1, n + 1))
    check(dpar > 0 or dnorm > 0, f"{name}: the single pass does differ in rounding (max |grad_norm "
          f"diff| {dnorm:.3g}), so the bit-for-bit match above is not a coincidence")
    check(dloss <= LOSS_TOL and dpar <= PARAM_TOL,
          f"{name}: world 2 against one single-pass process: max |loss diff| {dloss:.3g} "
          f"(tolerance {LOSS_TOL:g}), max |parameter diff| {dpar:.3g} (tolerance {PARAM_TOL:g})")


def failure_cases(root):
    args = [*GPT, "--steps", "1000000", "--dist-timeout", str(TIMEOUT_S)]
    for victim, how in ((1, "kill"), (0, "kill"), (1, "stop")):
        d = mkdir(root, f"fail-{how}-{victim}")
        procs = start_world(args, d)
        up = wait_for(os.path.join(d, "m0.jsonl"), lambda e: e.get("step", 0) >= 20 and "event" not in e, procs)
        check(up, f"{how} rank {victim}: both ranks train")
        other = procs[1 - victim]
        procs[victim].send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            err = other.communicate(timeout=TIMEOUT_S + 30)[1]
        except subprocess.TimeoutExpired:
            other.kill()
            err = other.communicate()[1]
        took = time.monotonic() - t0
        procs[victim].kill()
        procs[victim].communicate()
        limit = TIMEOUT_S + 5 if how == "stop" else 5
        msg = err.strip().splitlines()[-1] if err.strip() else ""
        print(f"     rank {1 - victim} after {how} of rank {victim}: rc {other.returncode} in {took:.2f} s: {msg}")
        want = "stopped answering" if how == "stop" else "gone away"
        check(other.returncode == 1 and took < limit and f"rank {1 - victim} of 2" in msg and want in msg,
              f"{how} rank {victim}: rank {1 - victim} exits 1 within {limit} s saying another rank has "
              f"{'stopped answering' if how == 'stop' else 'gone away'}")
        if how == "stop":
            check(took >= TIMEOUT_S - 0.5, f"stop rank {victim}: rank {1 - victim} waited --dist-timeout first")
    for alone in (0, 1):
        d = mkdir(root, f"alone-{alone}")
        port = free_port()
        t0 = time.monotonic()
        r = subprocess.run(rank_cmd(args, d, alone, 2, port), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        took = time.monotonic() - t0
        msg = r.stderr.strip()
        print(f"     rank {alone} alone: rc {r.returncode} in {took:.2f} s: {msg}")
        named = "rank(s) 1" in msg if alone == 0 else "nothing heard from rank 0" in msg
        check(r.returncode == 1 and took < TIMEOUT_S + 5 and named,
              f"rank {alone} alone: exits 1 after --dist-timeout naming who is missing")
    # a job stopped (cancelled, preempted) while its ranks meet: a rank waiting for the
    # others stops at once, as in training, instead of waiting out --dist-timeout
    for alone in (0, 1):
        d = mkdir(root, f"stop-alone-{alone}")
        p = subprocess.Popen(rank_cmd([*GPT, "--steps", "1000000", "--dist-timeout", "60"], d, alone, 2,
                                      free_port()), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # its rendezvous waits in poll(2) (x86-64: 7), whether it listens or dials
        waiting = blocked_in(p.pid, 7, 30, hold_s=0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
        took = time.monotonic() - t0
        term = [e for e in events(os.path.join(d, f"m{alone}.jsonl")) if e.get("event") == "terminated"]
        print(f"     rank {alone} alone, SIGTERM while it waits: rc {p.returncode} in {took:.2f} s")
        # rank 0 alone reports (the run's one voice)
        check(waiting and p.returncode == 0 and took < 5 and (alone or (term and term[-1]["step"] == 0)),
              f"rank {alone} alone: SIGTERM while it waits for the others ends it at once, exit 0"
              f"{'' if alone else ', terminated at step 0'} ({err.strip()[-200:]!r}, {term})")


def resume_cases(root, rng):
    n = 60
    # one run identity, so that the resumed runs' checkpoints equal the reference's byte for byte
    args = [*GPT, "--steps", str(n), "--checkpoint-every", "7", "--eval-every", "30",
            "--run-id", "dist-resume"]
    ref = mkdir(root, "resume-ref")
    codes, _ = finish(start_world(args, ref))
    check(codes == [0, 0], "resume: uninterrupted world-2 run exits 0")
    ref_steps = steps(os.path.join(ref, "m0.jsonl"))
    ref_ck = ckpt(ref, n)

    for how in ("kill", "sigterm"):
        d = mkdir(root, "resume-" + how)
        k = rng.randrange(15, 45)
        procs = start_world(args, d)
        m = os.path.join(d, "m0.jsonl")
        hit = wait_for(m, lambda e: "event" not in e and e.get("step", 0) >= k, procs)
        # rank 0 held where it is (rank 1 cannot get more than a step ahead): the run
        # cannot end before the signal lands
        procs[0].send_signal(signal.SIGSTOP)
        if how == "kill":
            for p in procs:
                p.kill()
            codes, _ = finish(procs)
            check(hit and codes == [-signal.SIGKILL] * 2,
                  f"resume: both ranks killed with SIGKILL at step >= {k} ({codes})")
        else:  # one rank asked to stop: both stop at the same step, rank 0 checkpoints
            procs[1].send_signal(signal.SIGTERM)
            procs[0].send_signal(signal.SIGCONT)
            codes, _ = finish(procs)
            term = [e for e in events(m) if e.get("event") == "terminated"]
            check(hit and codes == [0, 0] and bool(term) and term[-1]["durable"] is True,
                  f"resume: SIGTERM to rank 1 at step >= {k} stops both with exit 0 and a durable "
                  f"checkpoint ({codes}, {term})")
        before = len(events(m))
        codes, errs = finish(start_world(args, d, extra=["--resume"]))
        check(codes == [0, 0], f"resume after {how}: both ranks resume and exit 0 ({codes}; "
              f"{[e[-300:] for e in errs if e]})")
        res = [e for e in events(m)[before:] if e.get("event") == "resume"]
        check(len(res) == 1 and res[0]["world_size"] == 2 and res[0]["ckpt_world_size"] == 2,
              f"resume after {how}: rank 0 resumed from a world-2 checkpoint {res}")
        got = steps(m)
        diff = [s for s in range(1, n + 1) if got.get(s, {}).get("loss") != ref_steps[s]["loss"]
                or got[s].get("grad_norm") != ref_steps[s]["grad_norm"]]
        check(not diff, f"resume after {how}: every step's loss and grad_norm bit-identical to the "
              "uninterrupted run" + (f" (first difference at step {diff[0]})" if diff else ""))
        check(ckpt(d, n) == ref_ck, f"resume after {how}: final checkpoint bit-identical to the "
              "uninterrupted run")

    # the world-2 state, resumed by one process computing the same two slices
    d = mkdir(root, "resume-world1")
    os.mkdir(os.path.join(d, "ck0"))
    kept = sorted(x for x in os.listdir(os.path.join(ref, "ck0")) if x.endswith(".slck"))
    shutil.copy(os.path.join(ref, "ck0", kept[0]), os.path.join(d, "ck0"))
    code, err = run_one(args, d, ["--resume", "--grad-slices", "2"])
    got = steps(os.path.join(d, "m0.jsonl"))
    first = int(kept[0][5:15]) + 1
    check(code == 0 and sorted(got) == list(range(first, n + 1))
          and all(got[s]["loss"] == ref_steps[s]["loss"] for s in got),
          f"resume: one process resumes the world-2 checkpoint {kept[0]} with --grad-slices 2, "
          f"losses bit-identical {err[-300:]}")
    fin = ckpt(d, n)
    check(world_of(fin) == 1 and same_state(fin, ref_ck),
          "resume: ... and the final state too (its checkpoint records world size 1)")


def main():
    seed = int(os.environ.get("TC_TEST_SEED", time.time_ns() % 1000000))
    print(f"kill points drawn with TC_TEST_SEED={seed}")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as root:
        compare_models(root, "gpt", GPT, 40)
        compare_models(root, "mlp", MLP, 40)
        failure_cases(root)
        resume_cases(root, rng)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
