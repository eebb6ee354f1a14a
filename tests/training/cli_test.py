#!/usr/bin/python3
"""Integration: spotlab-train's command line, errors and inference commands.

Exit status 2 for usage errors, 1 for runtime errors with a message naming the
cause (missing or malformed data file, CUDA not built, config mismatch), 0 for
--help (which must list every option), --sample and --eval.

usage: cli_test.py SPOTLAB_TRAIN"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402
from without_cuda import UNSHARE, hiding_command  # noqa: E402

EXE = sys.argv[1]
OPTIONS = ["--model", "--data", "--layers", "--heads", "--dim", "--ctx", "--hidden", "--dropout",
           "--batch", "--lr", "--steps", "--warmup", "--weight-decay", "--grad-clip", "--seed",
           "--threads", "--device", "--ckpt-dir", "--checkpoint-every", "--keep", "--resume",
           "--metrics", "--eval-every", "--control", "--eval", "--sample", "--tokens",
           "--temperature", "--top-k", "--dump-init", "--rank", "--world-size", "--rendezvous",
           "--dist-timeout", "--grad-slices", "--help"]
TINY = ["--model", "gpt", "--layers", "1", "--heads", "2", "--dim", "16", "--ctx", "16", "--batch", "4",
        "--threads", "1", "--eval-batches", "1"]


def run(*args, **kw):
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120, **kw)




def main():
    r = run("--help")
    missing = [o for o in OPTIONS if o not in r.stdout]
    check(r.returncode == 0 and not missing, f"--help exits 0 and lists every option (missing {missing})", r)
    # --describe-options --json lists what --help shows under "options:", in order, and no action
    _, _, rest = r.stdout.partition("\noptions:\n")
    listed, _, actions = rest.partition("\nactions:\n")
    flags = [l.split()[0] for l in listed.splitlines() if l.startswith("  --")]
    d = run("--describe-options", "--json")
    described = [o["flag"] for o in json.loads(d.stdout)] if d.returncode == 0 else []
    acts = [l.split()[0] for l in actions.splitlines() if l.startswith("  --")]
    check(flags and described == flags, f"--describe-options lists the help's {len(flags)} options, in order",
          {"described": described, "help": flags, "stderr": d.stderr})
    check(acts == ["--check", "--check-cuda", "--describe-options", "--help", "--version"] and
          not set(acts) & set(described),
          "the help's actions are not among the described options", {"actions": acts, "described": described})
    v = run("--version")
    check(v.returncode == 0 and re.fullmatch(r"spotlab-train \d+\.\d+\.\d+\n", v.stdout),
          "--version prints the version, as the other programs do", v)
    for args, what in ((["--bogus"], "unknown option"), (["--steps", "x"], "bad number"),
                       (["--dropout", "0.1"], "dropout other than 0"), (["--model", "rnn"], "unknown model"),
                       (["--dim", "30", "--heads", "4"], "dim not a multiple of heads"),
                       (["--resume"], "--resume without --ckpt-dir"), (["--layers"], "missing value"),
                       (["--world-size", "2"], "--world-size on the CPU without --rendezvous"),
                       (["--world-size", "2", "--rank", "2", "--rendezvous", "tcp://127.0.0.1:1"],
                        "--rank not below --world-size"),
                       (["--grad-slices", "3", "--batch", "8"], "--grad-slices not dividing --batch"),
                       (["--grad-slices", "3", "--batch", "12", "--world-size", "2", "--rendezvous",
                         "tcp://127.0.0.1:1"], "--grad-slices not a multiple of the world size"),
                       (["--gpus", "2"], "--gpus on the CPU")):
        r = run(*args)
        check(r.returncode == 2 and "spotlab-train:" in r.stderr, f"usage error exits 2: {what}", r)
    r = run("--dropout", "0.1")
    check("only 0" in r.stderr, "dropout refusal says only 0 is supported", r)
    r = run(*TINY, "--device", "cuda", "--steps", "1")
    check(r.returncode == 1 and "CUDA" in r.stderr, "--device cuda without CUDA: clear error, exit 1", r)
    # the CUDA path is a module loaded for --device cuda: the program needs no CUDA library
    r = subprocess.run(["ldd", EXE], capture_output=True, text=True)
    check(r.returncode == 0 and not [l for l in r.stdout.splitlines()
                                     if any(n in l for n in ("libcudart", "libcublas", "libnccl"))],
          "spotlab-train links no CUDA library", r.stdout)
    r = run("--check-cuda")
    lines = (r.stdout if r.returncode == 0 else r.stderr).strip().splitlines()
    check(r.returncode in (0, 1) and len(lines) == 1 and
          (lines[0].startswith("CUDA: ") if r.returncode == 0 else lines[0].startswith("spotlab-train: ")),
          "--check-cuda: one line, the GPUs or why not", r)
    with tempfile.TemporaryDirectory() as d:
        alone = os.path.join(d, "spotlab-train")
        subprocess.run(["cp", EXE, alone], check=True)
        r = subprocess.run([alone, "--check-cuda"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "no CUDA backend" in r.stderr and "libspotlab-train-cuda.so" in r.stderr,
              "--check-cuda without the backend beside it or in ../lib/spotlab: says so", r)
        r = subprocess.run([alone, *TINY, "--device", "cuda", "--steps", "1"], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 1 and "--device cuda: this spotlab-train" in r.stderr,
              "--device cuda without the backend: clear error, exit 1", r)
        r = subprocess.run([alone, *TINY, "--steps", "2"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and r.stdout.count('"step":') >= 2, "the CPU path trains without it", r)
        # where this build's backend is and its CUDA libraries can be hidden (a mount
        # namespace, as root): a machine without them, as an image without CUDA 13
        hide, why = hiding_command(EXE)
        if hide is None:
            print("note: not checked without CUDA's libraries (%s)" % why)
        else:
            script = "%s && '%s' --check-cuda; echo \"check=$?\"; '%s' %s --steps 2 >/dev/null; " \
                     "echo \"train=$?\"" % (hide, EXE, EXE, " ".join(TINY))
            r = subprocess.run(UNSHARE + ["sh", "-c", script], capture_output=True, text=True, timeout=120)
            check("train=0" in r.stdout and "check=1" in r.stdout and
                  "cannot load the CUDA backend (lib" in r.stderr and "cannot open shared object" in r.stderr,
                  "without CUDA's libraries: the CPU path trains, --check-cuda names the missing one", r)
        # a damaged module: the loader's reason, never a crash
        with open(os.path.join(d, "libspotlab-train-cuda.so"), "wb") as f:
            f.write(b"\x7fELF not a library")
        r = subprocess.run([alone, "--check-cuda"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "cannot load the CUDA backend" in r.stderr,
              "--check-cuda with a damaged backend: the loader's reason", r)
    r = run(*TINY, "--data", "/nonexistent/text.txt", "--steps", "1")
    check(r.returncode == 1 and "/nonexistent/text.txt" in r.stderr, "missing text file named, exit 1", r)
    with tempfile.TemporaryDirectory() as d:
        r = run(*TINY, "--steps", "1", env={**os.environ, "SPOTLAB_DATA_DIR": d})
        check(r.returncode == 0, "moby-dick falls back to the npm package when SPOTLAB_DATA_DIR lacks it", r)
        bad = os.path.join(d, "fm")
        os.mkdir(bad)
        with gzip.open(os.path.join(bad, "train-images-idx3-ubyte.gz"), "wb") as f:
            f.write(b"\x00\x00\x08\x03" + (5).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + b"\x00" * 100)
        r = run("--model", "mlp", "--data", bad, "--steps", "1", "--threads", "1")
        check(r.returncode == 1 and "train-images-idx3-ubyte.gz" in r.stderr and "truncated" in r.stderr,
              "truncated IDX file: error names the file, exit 1", r)
        with gzip.open(os.path.join(bad, "train-images-idx3-ubyte.gz"), "wb") as f:
            f.write(b"\x00\x00\x08\x01" + b"\x00" * 100)
        r = run("--model", "mlp", "--data", bad, "--steps", "1", "--threads", "1")
        check(r.returncode == 1 and "magic" in r.stderr, "wrong IDX magic: clear error, exit 1", r)

        ck = os.path.join(d, "ck")
        r = run(*TINY, "--steps", "30", "--lr", "3e-3", "--ckpt-dir", ck, "--metrics", "fd:1")
        lines = [json.loads(l) for l in r.stdout.splitlines()]
        steps = [e for e in lines if "event" not in e]
        keys = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mem_bytes"}
        check(r.returncode == 0 and len(steps) == 30 and all(keys <= set(e) for e in steps)
              and "eval_loss" in steps[-1], "metrics: every step has step, loss, lr, grad_norm, tokens_per_s, mem_bytes", r)
        check(steps[-1]["loss"] < steps[0]["loss"], f"loss falls ({steps[0]['loss']} -> {steps[-1]['loss']})")
        r = run("--sample", "Call me", "--tokens", "40", "--temperature", "0.8", "--top-k", "5", "--ckpt-dir", ck)
        check(r.returncode == 0 and r.stdout.startswith("Call me") and len(r.stdout) >= 47,
              f"--sample continues the prompt: {r.stdout!r}", r)
        r2 = run("--sample", "Call me", "--tokens", "40", "--temperature", "0.8", "--top-k", "5", "--ckpt-dir", ck)
        check(r2.stdout == r.stdout, "--sample is reproducible with the same seed", r2)
        r = run("--sample", "Call me\x01", "--ckpt-dir", ck)
        check(r.returncode == 1 and "vocabulary" in r.stderr, "--sample with a byte outside the vocabulary", r)
        r = run("--eval", "--ckpt-dir", ck, "--batch", "4", "--eval-batches", "1", "--threads", "1")
        val = [l for l in r.stdout.splitlines() if l.startswith("eval_loss ")]
        check(r.returncode == 0 and val and abs(float(val[0].split()[1]) - steps[-1]["eval_loss"]) < 1e-6,
              "--eval prints the same eval loss as training's last evaluation", r)
        r = run(*TINY[:-6], "--dim", "32", "--heads", "2", "--batch", "4", "--threads", "1",
                "--steps", "40", "--resume", "--ckpt-dir", ck)
        check(r.returncode == 1 and "checkpoint is for" in r.stderr, "resume with another config is refused", r)
        r = run(*TINY, "--steps", "40", "--resume", "--ckpt-dir", os.path.join(d, "fresh"), "--metrics", "fd:1")
        check(r.returncode == 0 and '"event":"fresh"' in r.stdout, "--resume with no checkpoint starts fresh", r)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
