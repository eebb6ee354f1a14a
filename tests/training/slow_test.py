#!/usr/bin/python3
"""Slow: the models learn on the real data sets, on the CPU.

  mlp: Fashion-MNIST test accuracy >= 85% within 5 minutes of wall time.
  gpt: held-out loss on Moby Dick below 2.0 nats per character within a
       budget of 600 steps (2 layers, 4 heads, dim 128, ctx 64, batch 32).
Prints the figures reached and the time taken.

usage: slow_test.py SPOTLAB_TRAIN mlp|gpt"""
import json
import os
import subprocess
import sys
import tempfile
import time

RUNS = {
    "mlp": (["--model", "mlp", "--data", "fashion-mnist", "--hidden", "256", "--layers", "2",
             "--batch", "64", "--lr", "1e-3", "--steps", "3000", "--eval-every", "1000"],
            "eval_accuracy", lambda v: v >= 0.85, ">= 0.85", 300),
    "gpt": (["--model", "gpt", "--data", "moby-dick", "--layers", "2", "--heads", "4", "--dim", "128",
             "--ctx", "64", "--batch", "32", "--lr", "3e-3", "--warmup", "50", "--steps", "600",
             "--eval-every", "100"],
            "eval_loss", lambda v: v < 2.0, "< 2.0", 900),
}


def main():
    exe, which = sys.argv[1], sys.argv[2]
    args, key, ok, want, limit_s = RUNS[which]
    threads = str(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.jsonl")
        t0 = time.monotonic()
        rc = subprocess.run([exe, *args, "--threads", threads, "--metrics", m, "--seed", "1"],
                            stdout=subprocess.DEVNULL, timeout=limit_s + 60).returncode
        took = time.monotonic() - t0
        evals = [json.loads(l) for l in open(m) if key in l and '"event"' not in l]
    for e in evals:
        print(f"step {e['step']:5d}: {key} {e[key]:.4f}")
    final = evals[-1][key] if evals else float("nan")
    print(f"{which}: {key} {final:.4f} (want {want}) in {took:.1f} s on {threads} threads "
          f"(limit {limit_s} s), exit status {rc}")
    if rc != 0 or not evals or not ok(final) or took > limit_s:
        print("FAIL")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
