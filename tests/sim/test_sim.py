#!/usr/bin/env python3
"""spotlab-sim end to end: a synthetic trace whose capacity drops once, so the
job is preempted exactly once with a notice, and one real trace from
spot-traces when the shared data is there.

usage: test_sim.py SPOTLAB_SIM SPOT_TRACES_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

REAL = "preemption/1-node/aws-04-22-2023/us-east-1f_v100_1.json"


def run_sim(sim, trace, *args):
    cmd = [sim, "--trace", trace, "--json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def check(cond, what, rep):
    if not cond:
        sys.exit(f"FAIL: {what}\n{json.dumps(rep, indent=2)}")


def synthetic(sim):
    # 600 s ticks: capacity for the first 1200 simulated seconds, none in the
    # next 600 (one preemption, with the market's 120 s notice), then back.
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        with open(trace, "w") as f:
            json.dump({"metadata": {"gap_seconds": 600}, "data": [1, 1, 0] + [1] * 20}, f)
        every = 10
        rep = run_sim(sim, trace, "--steps", "50", "--step-s", "60", "--checkpoint-every", str(every),
                      "--time-scale", "2000")
    check(rep["state"] == "succeeded", "job succeeded", rep)
    check(rep["preemptions"] >= 1, "at least one preemption", rep)
    check(rep["preemptions_with_notice"] >= 1, "the trace's preemption comes with a notice", rep)
    check(rep["attempts"] == rep["preemptions"] + 1, "one instance per attempt", rep)
    check(rep["resumes"] == rep["preemptions"], "every preemption resumed", rep)
    check(rep["steps_executed"] >= 50, "every step executed", rep)
    lost = rep["steps_lost"]
    # A notice checkpoints at once; a hard loss loses at most one interval.
    limit = rep["preemptions"] * every
    check(0 <= lost <= limit, f"0 <= steps lost <= {limit}", rep)
    check(rep["checkpoints"] >= 50 // every - 1, "periodic checkpoints made", rep)
    check(0 < rep["cost_usd"] < rep["on_demand_usd"], "spot cost below the on-demand run", rep)
    check(rep["spot_s"] >= 50 * 60, "spot time covers the compute", rep)
    print(f"ok synthetic: {rep['preemptions']} preemption(s), {lost} steps lost, "
          f"${rep['cost_usd']:.4f} vs ${rep['on_demand_usd']:.4f} on demand, {rep['wall_s']:.1f} s wall")


def real(sim, traces):
    trace = os.path.join(traces, REAL)
    if not os.path.exists(trace):
        print(f"skipped the real-trace part: {trace} is absent")
        return
    rep = run_sim(sim, trace, "--steps", "300", "--step-s", "60", "--time-scale", "4000")
    check(rep["state"] == "succeeded", "job succeeded", rep)
    check(rep["checkpoint_every"] >= 1, "auto picked an interval from the trace", rep)
    check(0 <= rep["steps_lost"] <= max(1, rep["preemptions"]) * rep["checkpoint_every"],
          "steps lost within one interval per preemption", rep)
    check(0 < rep["cost_usd"] < rep["on_demand_usd"], "spot cost below the on-demand run", rep)
    print(f"ok real trace {REAL}: {rep['preemptions']} preemption(s), every {rep['checkpoint_every']} steps, "
          f"{rep['steps_lost']} lost, ${rep['cost_usd']:.4f} vs ${rep['on_demand_usd']:.4f}")


def main():
    sim, traces = sys.argv[1], sys.argv[2]
    synthetic(sim)
    real(sim, traces)


main()
