#!/usr/bin/python3
"""Integration: version-1 checkpoints written by an earlier spotlab-train
(tests/data/ckpt-v1, see its README.md) still load.

For a tiny gpt and a tiny mlp, from the step-3 checkpoint of the run that
wrote them:
  --check accepts both of the run's files;
  --resume with the run's options continues to step 6 with every step's loss,
    grad_norm and eval_loss equal to that run's metrics, and writes a
    version-3 checkpoint whose parameters, moments and run state equal the
    run's own step-6 checkpoint;
  --eval (and --sample for the gpt) print what that run's binary printed;
  resuming with another config is refused, naming both.

"Equal" is byte for byte where this binary, on this machine, rounds as the one
that wrote the files did: where a run from the start reproduces the run's own
step-3 parameters byte for byte. Elsewhere (a sanitizer build compiles the
float code differently; OpenBLAS picks its kernels by the CPU, and another CPU
sums in another order) the last bits differ from the first step on, and equal
means within float rounding: a tensor loaded wrongly, or a step's state lost,
differs by far more.

usage: ckpt_v1_test.py SPOTLAB_TRAIN
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402
from train_metrics import events, steps  # noqa: E402

EXE = sys.argv[1]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ckpt-v1")
RUNS = {  # the options of the runs that wrote tests/data/ckpt-v1
    "gpt": ["--model", "gpt", "--layers", "1", "--heads", "2", "--dim", "16", "--ctx", "16",
            "--batch", "4", "--steps", "6", "--seed", "7", "--threads", "1", "--eval-batches", "2",
            "--checkpoint-every", "3", "--keep", "5"],
    "mlp": ["--model", "mlp", "--layers", "1", "--hidden", "8", "--batch", "16", "--steps", "6",
            "--seed", "7", "--threads", "1", "--checkpoint-every", "3", "--keep", "5"],
}
EVAL = {"gpt": ["--eval-batches", "2", "--batch", "4"], "mlp": []}
def run(*args):
    return subprocess.run([EXE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)


def sections(b):
    """tag -> payload of each section after the 512-byte header"""
    out, off = {}, 512
    while off + 24 <= len(b):
        tag, _, size = struct.unpack_from("<4sIQ", b, off)
        out[tag.decode()] = b[off + 24:off + 24 + size]
        off += 24 + size
    return out


# Metrics of a build that rounds otherwise: three steps of float32 move the
# last bits only (a few 1e-8 relative here).
METRIC_REL = 1e-5


def max_rel_diff(a, b):
    """Largest difference between two equally long arrays of float32, relative to the
    largest magnitude in them (Adam's second moments hold values near zero, where an
    element-wise ratio means nothing)."""
    n = len(a) // 4
    x, y = struct.unpack("<%df" % n, a[:4 * n]), struct.unpack("<%df" % n, b[:4 * n])
    scale = max((abs(v) for v in x + y), default=0.0)
    worst = max((abs(p - q) for p, q in zip(x, y)), default=0.0)
    return worst / scale if scale else worst


def same_arithmetic(root, name, v1_step3):
    """Whether this binary, run from the start, reproduces the version-1 run's step-3
    parameters byte for byte (the module's docstring says why it may not)."""
    d = os.path.join(root, name, "fresh")
    os.makedirs(d)
    r = run(*RUNS[name], "--ckpt-dir", d, "--metrics", os.path.join(d, "m.jsonl"))
    path = os.path.join(d, "ckpt-%010d.slck" % 3)
    if r.returncode != 0 or not os.path.exists(path):
        return False
    return sections(read(path)).get("PARM") == sections(read(v1_step3)).get("PARM")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def one_model(root, name):
    src = os.path.join(DATA, name)
    v1 = {s: os.path.join(src, "ckpt-%010d.slck" % s) for s in (3, 6)}
    r = run("--check", v1[3], v1[6])
    check(r.returncode == 0 and r.stdout.decode().count(": ok step") == 2,
          f"{name}: --check accepts both version-1 files ({r.stdout.decode().strip()})")
    for s in (3, 6):
        check(struct.unpack_from("<I", read(v1[s]), 8)[0] == 1, f"{name}: step-{s} file is version 1")

    ck = os.path.join(root, name, "ck")
    os.makedirs(ck)
    shutil.copy(v1[3], ck)
    metrics = os.path.join(root, name, "m.jsonl")
    r = run(*RUNS[name], "--ckpt-dir", ck, "--metrics", metrics, "--resume")
    check(r.returncode == 0, f"{name}: resumes from the version-1 checkpoint {r.stderr.decode()[-300:]}")
    resumed = [e for e in events(metrics) if e.get("event") == "resume"]
    check(len(resumed) == 1 and resumed[0]["step"] == 3, f"{name}: resume event at step 3 {resumed}")
    ref, got = steps(os.path.join(src, "metrics.jsonl")), steps(metrics)
    check(sorted(got) == [4, 5, 6], f"{name}: steps 4..6 run ({sorted(got)})")
    keys = ("loss", "grad_norm", "lr", "eval_loss", "eval_accuracy")
    exact = same_arithmetic(root, name, v1[3])
    print(f"     {name}: this build {'rounds as' if exact else 'rounds otherwise than'} the one "
          "that wrote the files")

    def differs(a, b):
        if exact or not isinstance(a, float) or not isinstance(b, float):
            return a != b
        return abs(a - b) > METRIC_REL * max(abs(a), abs(b))
    diff = [(s, k) for s in (4, 5, 6) for k in keys if differs(ref[s].get(k), got.get(s, {}).get(k))]
    check(not diff, f"{name}: losses, grad norms and evaluation "
          f"{'bit-identical to' if exact else f'within {METRIC_REL:g} relative of'} the run that wrote "
          "the checkpoint" + (f" (first difference: step {diff[0][0]} {diff[0][1]}: "
                              f"{ref[diff[0][0]].get(diff[0][1])} vs "
                              f"{got.get(diff[0][0], {}).get(diff[0][1])})" if diff else ""))

    new = read(os.path.join(ck, "ckpt-%010d.slck" % 6))
    old = read(v1[6])
    check(struct.unpack_from("<I", new, 8)[0] == 3, f"{name}: the new checkpoint is version 3")
    ns, os_ = sections(new), sections(old)
    check(sorted(ns) == ["ADMM", "ADMV", "CONF", "PARM"], f"{name}: version 3 sections {sorted(ns)}")
    tensors = ("PARM", "ADMM", "ADMV")
    if exact:
        check(all(ns.get(t) == os_[t] for t in tensors),
              f"{name}: step-6 parameters and moments equal the version-1 run's, byte for byte")
    else:
        worst = max(max_rel_diff(ns.get(t, b""), os_[t]) if len(ns.get(t, b"")) == len(os_[t])
                    else float("inf") for t in tensors)
        check(worst < 1e-5, f"{name}: this build rounds differently from the one that wrote the "
              f"files; step-6 parameters and moments within {worst:.2g} relative of the version-1 "
              "run's (a wrongly loaded tensor differs by far more)")
    # world size and rank, then step, AdamW step, seed, data position, RNGs, vocabulary
    check(new[52:60] == old[52:60] and new[64:464] == old[64:464],
          f"{name}: step-6 run state (step, seed, data position, RNG states) equals the version-1 run's")
    # the version-1 file had no run identity: the resumed run chose one and keeps it
    run_id = new[464:496].rstrip(b"\0")
    resumed_id = resumed[0].get("run_id", "").encode() if resumed else b""
    check(old[464:508] == bytes(44) and len(run_id) == 32 and run_id == resumed_id
          and new[496:504] != bytes(8),
          f"{name}: the new checkpoint carries the run identity of the resume event ({run_id!r})")
    check(new[16:16 + len(name) + 1] == name.encode() + b"\0", f"{name}: header names the model")
    print("     CONF: " + ns.get("CONF", b"").decode().replace("\n", " "))

    ev = os.path.join(root, name, "eval")
    os.makedirs(ev)
    shutil.copy(v1[3], ev)
    r = run("--eval", "--ckpt-dir", ev, "--threads", "1", *EVAL[name])
    want = read(os.path.join(src, "eval-step3.txt"))
    check(r.returncode == 0 and r.stdout == want,
          f"{name}: --eval of the version-1 file prints what its run's binary printed "
          f"({r.stdout!r} vs {want!r})")
    if name == "gpt":
        r = run("--sample", "The ", "--tokens", "40", "--temperature", "0.8", "--seed", "3",
                "--ckpt-dir", ev, "--threads", "1")
        check(r.returncode == 0 and r.stdout == read(os.path.join(src, "sample-step3.txt")),
              f"{name}: --sample of the version-1 file continues as its run's binary did")

    other = os.path.join(root, name, "other")
    os.makedirs(other)
    shutil.copy(v1[3], other)
    args = list(RUNS[name])
    args[args.index("--layers") + 1] = "2"
    r = run(*args, "--ckpt-dir", other, "--metrics", os.path.join(root, name, "o.jsonl"), "--resume")
    err = r.stderr.decode()
    check(r.returncode == 1 and "layers=1" in err and "layers=2" in err,
          f"{name}: resuming with another config is refused naming both ({err.strip()[-200:]})")


def main():
    with tempfile.TemporaryDirectory() as root:
        for name in RUNS:
            one_model(root, name)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
