#!/usr/bin/env python3
"""spotlab-sim end to end: a synthetic trace whose capacity drops once, so the
job is preempted exactly once with a notice, one real trace from spot-traces
when the shared data is there, and what spotlab-sim says about a trace that
keeps the job waiting for capacity.

usage: test_sim.py SPOTLAB_SIM SPOT_TRACES_DIR [late-capacity]

late-capacity (suite slow, about 90 s): the real trace that starts with 56
simulated hours without V100 capacity, with --type p3.2xlarge and the
default timeout. The job waits in the queue, then runs; spotlab-sim used to
give up on it while it was still queued, its timeout counting the job's
work but not the trace's wait.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import require  # noqa: E402
from procs import alive  # noqa: E402

REAL = "preemption/1-node/aws-04-22-2023/us-east-1f_v100_1.json"
# No V100 capacity for its first 1038 ticks of 195 s: 202410 simulated seconds.
LATE = "availability/1-node/aws-02-15-2023/us-east-1d_v100_1.json"
LATE_FIRST_S = 202410


def run_sim(sim, trace, *args, timeout=60, expect=0, env=None):
    cmd = [sim, "--trace", trace, "--json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != expect:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, not {expect}: {p.stderr.strip()}")
    return (json.loads(p.stdout) if expect == 0 else None), p.stderr


def synthetic(sim):
    # 600 s ticks: capacity for the first 2400 simulated seconds, none in the
    # next 600 (one preemption, with the market's 120 s notice), then back. The
    # 50 steps of 60 s cannot end before the loss; the job must be running by
    # the notice (2280 s, 4.6 wall s at 500) for it to count: with capacity for
    # 1200 s, a start-up slowed by a loaded machine missed it now and then
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        with open(trace, "w") as f:
            json.dump({"metadata": {"gap_seconds": 600}, "data": [1, 1, 1, 1, 0] + [1] * 20}, f)
        every = 10
        # A wall second is 500 simulated seconds: the start-up of the workers and of
        # spotlab-train, slow in a sanitizer build on a busy machine, is billed at that
        # rate (at 2000, 4.2 wall s in all made the spot run dearer than on-demand)
        rep, _ = run_sim(sim, trace, "--steps", "50", "--step-s", "60", "--checkpoint-every", str(every),
                         "--time-scale", "500")
    require(rep["state"] == "succeeded", "job succeeded", rep)
    require(rep["preemptions"] >= 1, "at least one preemption", rep)
    require(rep["preemptions_with_notice"] >= 1, "the trace's preemption comes with a notice", rep)
    require(rep["attempts"] == rep["preemptions"] + 1, "one instance per attempt", rep)
    require(rep["resumes"] == rep["preemptions"], "every preemption resumed", rep)
    require(rep["steps_executed"] >= 50, "every step executed", rep)
    lost = rep["steps_lost"]
    # A notice checkpoints at once; a hard loss loses at most one interval.
    limit = rep["preemptions"] * every
    require(0 <= lost <= limit, f"0 <= steps lost <= {limit}", rep)
    require(rep["checkpoints"] >= 50 // every - 1, "periodic checkpoints made", rep)
    require(0 < rep["cost_usd"] < rep["on_demand_usd"], "spot cost below the on-demand run", rep)
    require(rep["spot_s"] >= 50 * 60, "spot time covers the compute", rep)
    print(f"ok synthetic: {rep['preemptions']} preemption(s), {lost} steps lost, "
          f"${rep['cost_usd']:.4f} vs ${rep['on_demand_usd']:.4f} on demand, {rep['wall_s']:.1f} s wall")


def real(sim, traces):
    trace = os.path.join(traces, REAL)
    require(os.path.exists(trace), f"the trace {trace} is there")
    # At time_scale 2000 the market's 120 s notice lasts 60 wall ms (and up to a
    # second more, rounded); at 4000 a busy machine made the worker miss one now
    # and then, which loses the work since the last folder sync, not one interval.
    rep, _ = run_sim(sim, trace, "--steps", "200", "--step-s", "60", "--time-scale", "2000")
    require(rep["state"] == "succeeded", "job succeeded", rep)
    require(rep["checkpoint_every"] >= 1, "auto picked an interval from the trace", rep)
    require(0 <= rep["steps_lost"] <= max(1, rep["preemptions"]) * rep["checkpoint_every"],
          "steps lost within one interval per preemption", rep)
    require(0 < rep["cost_usd"] < rep["on_demand_usd"], "spot cost below the on-demand run", rep)
    print(f"ok real trace {REAL}: {rep['preemptions']} preemption(s), every {rep['checkpoint_every']} steps, "
          f"{rep['steps_lost']} lost, ${rep['cost_usd']:.4f} vs ${rep['on_demand_usd']:.4f}")


def waiting(sim):
    """What spotlab-sim says about a trace whose capacity comes late, or never, or that the
    gateway would refuse."""
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "late.json")
        with open(trace, "w") as f:  # capacity from simulated second 60000 (30 wall s) on
            json.dump({"metadata": {"gap_seconds": 600}, "data": [0] * 100 + [1] * 100}, f)
        _, err = run_sim(sim, trace, "--steps", "5", "--time-scale", "2000", "--timeout", "2", expect=1)
        require("no spot capacity for its first 60000 simulated s" in err, "the wait is announced", err)
        require("did not end within 2 s (it was queued, never placed" in err, "a timeout says the job waited", err)
        require("spotlab-sim: no answer" not in err and "interrupted" not in err,
                "the job is cancelled after the timeout", err)
        with open(trace, "w") as f:
            json.dump({"metadata": {"gap_seconds": 600}, "data": [0] * 10}, f)
        _, err = run_sim(sim, trace, "--steps", "5", expect=2)
        require("offers no spot capacity at any tick" in err, "a trace without capacity is refused", err)
        # what the gateway's market refuses is named before a gateway starts
        for gap, data, want in ((0.5, [1] * 10, "gap_seconds missing or not in 1..86400"),
                                (600, [1, "1", 1], "data[1] is not a whole number")):
            with open(trace, "w") as f:
                json.dump({"metadata": {"gap_seconds": gap}, "data": data}, f)
            _, err = run_sim(sim, trace, "--steps", "5", expect=2)
            require(want in err, f"a trace the gateway refuses is refused: {want}", err)
        # a gateway that does not start: the end of its log is in the message, since the
        # simulator's folder (and the log with it) is removed on the way out
        with open(trace, "w") as f:
            json.dump({"metadata": {"gap_seconds": 600}, "data": [1] * 10}, f)
        fake = os.path.join(d, "gateway.sh")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nfor i in $(seq 40); do echo \"line $i of a log longer than its end shown\"; done >> \"$SPOTLAB_HOME/gateway.log\"\n"
                    "echo 'error: the last words' >> \"$SPOTLAB_HOME/gateway.log\"\nexit 3\n")
        os.chmod(fake, 0o755)
        _, err = run_sim(sim, trace, "--steps", "5", expect=1, env={"SPOTLAB_GATEWAY_BIN": fake})
        require("failed (status 3); its log ends:" in err and err.rstrip().endswith("error: the last words")
                and "line 40 " in err and "line 1 " not in err,
                "a gateway that fails to start shows its log's end", err)
    print("ok waiting: the wait for capacity is announced, a timeout while queued says so, a trace"
          " the gateway refuses is refused first, a gateway that fails to start shows its log")


def interrupted(sim):
    """Ctrl-C (SIGINT) while the job runs: the job is cancelled, the private
    gateway and its worker stop, and the simulator's folder goes."""
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        with open(trace, "w") as f:
            json.dump({"metadata": {"gap_seconds": 600}, "data": [1] * 200}, f)
        tmp = os.path.join(d, "tmp")
        os.mkdir(tmp)
        p = subprocess.Popen([sim, "--trace", trace, "--steps", "5000", "--step-s", "60",
                              "--time-scale", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, TMPDIR=tmp))
        pids = []
        end = time.monotonic() + 60
        while time.monotonic() < end and p.poll() is None:
            homes = glob.glob(os.path.join(tmp, "spotlab-sim-*"))
            try:
                gw = int(open(os.path.join(homes[0], "gateway.pid")).read())
                rec = glob.glob(os.path.join(homes[0], "instances", "*", "instance.json"))
                worker = json.load(open(rec[0]))["pid"]
                if gw > 1 and worker > 1:  # a record written before its worker started says 0
                    pids = [gw, worker]
                    break
                time.sleep(0.05)
            except (IndexError, OSError, ValueError, KeyError):
                time.sleep(0.05)  # polling the folder: nothing to block on
        require(len(pids) == 2, "the simulator's gateway and worker run", pids)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        require(p.returncode == 130 and "interrupted; J000001 is cancelled" in err,
                "Ctrl-C: exit 130, the job cancelled", (p.returncode, err))
        left = [pid for pid in pids if alive(pid)]
        require(not left and not os.listdir(tmp), "Ctrl-C: no gateway, worker or folder left",
                (left, os.listdir(tmp)))
    print("ok interrupted: Ctrl-C cancels the job and removes the gateway, worker and folder")


def late_capacity(sim, traces):
    trace = os.path.join(traces, LATE)
    require(os.path.exists(trace), f"the trace {trace} is there")
    scale = 2500  # the wait lasts 81 wall s; the old default timeout was 60 + 10 x 0.3 s
    rep, err = run_sim(sim, trace, "--type", "p3.2xlarge", "--steps", "10", "--time-scale", str(scale),
                       timeout=600)
    require(rep["state"] == "succeeded", "the job ran once the trace had capacity", rep)
    require(rep["instance_type"] == "p3.2xlarge", "on the type asked for", rep)
    require(rep["sim_s"] >= LATE_FIRST_S, "it waited for the trace's first capacity", rep)
    require(f"first {LATE_FIRST_S} simulated s" in err, "the wait was announced", err)
    print(f"ok late capacity {LATE}: waited {LATE_FIRST_S} simulated s ({LATE_FIRST_S / scale:.0f} wall s), "
          f"then {rep['steps_executed']} steps, {rep['wall_s']:.1f} s wall in all")


def unknown_type(sim, traces):
    # A type the catalog does not offer is a usage error, named before any job.
    _, err = run_sim(sim, os.path.join(traces, REAL), "--steps", "3", "--type", "p9.nope", expect=2)
    require("--type p9.nope" in err and "p3.2xlarge" in err, "the error names the type and what is offered", err)
    require(err.count("p3.2xlarge") == 1, "each offered type named once", err)


def main():
    sim, traces = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["late-capacity"]:
        late_capacity(sim, traces)
        return
    unknown_type(sim, traces)
    synthetic(sim)
    waiting(sim)
    interrupted(sim)
    real(sim, traces)


main()
