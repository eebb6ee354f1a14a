#!/usr/bin/env python3
"""spotlab-sim --policy: the evaluator's interface and its figures.

usage: test_policy.py SPOTLAB_SIM SPOT_TRACES_DIR cli|grid

cli (suite unit): hand-made traces written by the test, with every figure
worked out here from the tick model's rules (rounding, overhead per segment,
prices); the JSON keys other tools read; the errors for bad input.

grid (suite slow): a part of bench/policy's grid (work of 8 hours, every
deadline ratio and overhead, two start ticks, single and multi zone) and
these bounds, checked on what it prints:
  - every policy meets every deadline (on-demand from the start could);
  - no policy costs less than the optimum, on-demand costs (P + O) ticks
    at its price exactly;
  - spotlab's mean cost is at most 1.10 times the optimum's, below Uniform
    Progress's mean and Greedy's, and its worst case is below Uniform
    Progress's worst.
The bounds hold with margin on the measured figures (bench/RESULTS.md)."""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from checks import require  # noqa: E402
import policy_grid  # noqa: E402


def sim_run(sim, args, expect=0):
    p = subprocess.run([sim, *args], capture_output=True, text=True, timeout=120)
    if p.returncode != expect:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}, not {expect}: {p.stderr.strip()}")
    return (json.loads(p.stdout) if expect == 0 and "--json" in args else p.stdout), p.stderr


def trace(d, name, data, gap, prices=None):
    path = os.path.join(d, name)
    obj = {"metadata": {"gap_seconds": gap}, "data": data}
    if prices is not None:
        obj["prices"] = prices
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def job(tr, policy, start, work, deadline, overhead, *extra):
    a = ["--policy", policy]
    for t in tr:
        a += ["--trace", t]
    return a + ["--start-tick", str(start), "--work", str(work), "--deadline", str(deadline),
                "--restart-overhead", str(overhead), *extra, "--json"]


def cli(sim):
    with tempfile.TemporaryDirectory() as d:
        # 15-minute ticks. Zone a: capacity in ticks 2..9, zone b in 6..17.
        a = trace(d, "a.json", [0, 0] + [1] * 8 + [0] * 14, 900)
        b = trace(d, "b.json", [0] * 6 + [1] * 12 + [0] * 6, 900, prices=[0.5] * 24)
        # 2 h of work = 8 ticks, 0.2 h overhead = 1 tick (rounded up), a
        # 5 h deadline = 20 ticks, on-demand 4.0, spot 1.0 where no prices.
        prices = ["--spot-price", "1.0", "--ondemand-price", "4.0"]
        r, _ = sim_run(sim, job([a], "ondemand", 0, 2, 5, 0.2, *prices))
        for k in ("cost_usd", "finish_hours", "deadline_met", "spot_hours", "ondemand_hours",
                  "preemptions"):
            require(k in r, f"the JSON has {k}", r)
        require(math.isclose(r["cost_usd"], 9 * 4.0 * 0.25), "on-demand: 9 ticks at 4.0", r)
        require(math.isclose(r["finish_hours"], 9 * 0.25) and r["deadline_met"], "done after 9 ticks", r)
        require(r["spot_hours"] == 0 and math.isclose(r["ondemand_hours"], 2.25), "hours", r)
        # optimum on zone a alone: spot ticks 2..9 give 7 ticks of progress
        # (one overhead); one more on on-demand needs its own overhead: 2
        # ticks at 4.0. Total 8 * 1.0 + 2 * 4.0 = 16 ticks-USD, times 0.25 h.
        r, _ = sim_run(sim, job([a], "optimal", 0, 2, 5, 0.2, *prices))
        require(math.isclose(r["cost_usd"], (8 * 1.0 + 2 * 4.0) * 0.25), "optimum on zone a", r)
        require(r["deadline_met"] and r["preemptions"] <= 1, "optimum meets its deadline", r)
        # both zones: b's trace prices (0.5) and its longer run: 9 ticks
        # on b (1 overhead + 8 progress) at 0.5.
        r, _ = sim_run(sim, job([a, b], "optimal", 0, 2, 5, 0.2, *prices))
        require(math.isclose(r["cost_usd"], 9 * 0.5 * 0.25), "optimum on zone b", r)
        require(math.isclose(r["spot_hours"], 2.25) and r["ondemand_hours"] == 0, "all on spot", r)
        # the start tick: from tick 10 zone a has nothing left, b has 8 ticks
        r, _ = sim_run(sim, job([a, b], "optimal", 10, 2, 3.5, 0.2, *prices))
        require(r["deadline_met"] and r["ondemand_hours"] > 0, "from tick 10 spot is short", r)
        for pol in ("spotlab", "uniform-progress", "greedy"):
            r, _ = sim_run(sim, job([a, b], pol, 0, 2, 5, 0.2, *prices))
            require(r["deadline_met"], f"{pol} meets the deadline", r)
            opt = 9 * 0.5 * 0.25
            require(r["cost_usd"] >= opt - 1e-9, f"{pol} costs no less than the optimum", r)
        # a deadline on-demand cannot keep: optimal says so (exit 1); a
        # policy runs late and says that
        _, err = sim_run(sim, job([a], "optimal", 0, 2, 2, 0.2), expect=1)
        require("even on on-demand" in err, "an impossible deadline is named", err)
        r, _ = sim_run(sim, job([a], "spotlab", 0, 2, 2, 0.2))
        require(not r["deadline_met"] and r["finish_hours"] > 2, "late, and said so", r)
        # an optimum whose tables would pass 2 GiB (1 s ticks, 10 h of
        # overhead) is refused, not left to run the machine out of memory
        big = trace(d, "big.json", [1] * 42000, 1)
        _, err = sim_run(sim, job([big], "optimal", 0, 1, 11.5, 10), expect=1)
        require("2 GiB" in err, "an optimum too large is refused", err)
        # the text report
        out, _ = sim_run(sim, job([a], "greedy", 0, 2, 5, 0.2)[:-1])
        require("deadline 5.00 h: met" in out, "text report", out)

        # bad input: clear errors, exit 2
        bad = trace(d, "bad.json", "not a list", 900)
        gap = trace(d, "gap.json", [1] * 24, 600)
        short = trace(d, "short.json", [1] * 4, 900)
        neg = trace(d, "neg.json", [1, -1], 900)
        # what the gateway's market refuses: counts written as reals, a price of 0
        real = trace(d, "real.json", [1, 1.0], 900)
        zero = trace(d, "zero.json", [1] * 24, 900, prices=[0.5] * 23 + [0])
        # ticks so short that the deadline's hours would pass int64_t ticks
        tiny = trace(d, "tiny.json", [1] * 24, 1e-30)
        broken = os.path.join(d, "broken.json")
        with open(broken, "w") as f:
            f.write('{"metadata": {"gap_seconds": 900}, "data": [1, 1')
        cases = [
            (job([a], "cheapest", 0, 2, 5, 0.2), "unknown policy"),
            (job([bad], "greedy", 0, 2, 5, 0.2), "bad.json: \"data\" missing, empty"),
            (job([broken], "greedy", 0, 2, 5, 0.2), "broken.json"),
            (job([neg], "greedy", 0, 0.1, 0.2, 0), "whole number"),
            (job([real], "greedy", 0, 0.1, 0.2, 0), "real.json: data[1] is not a whole number"),
            (job([zero], "greedy", 0, 2, 5, 0.2), "zero.json: prices[23] is not a positive price"),
            (job([tiny], "greedy", 0, 2, 5, 0.2), "gap_seconds missing or not in 1..86400"),
            (job([a, gap], "greedy", 0, 2, 5, 0.2), "share their ticks"),
            (job([short], "greedy", 0, 2, 5, 0.2), "ends past"),
            (job([a], "greedy", 0, -1, 5, 0.2), "--work"),
            # decimal numbers only: strtod alone reads "0x10" as 16 and "inf" as a number
            (job([a], "greedy", 0, "0x2", 5, 0.2), "--work must be a number in"),
            (job([a], "greedy", 0, 2, "inf", 0.2), "--deadline must be a number in"),
            (job([a], "greedy", "1e1", 2, 5, 0.2), "--start-tick must be a whole number in"),
            (job([a], "greedy", 0, 2, 5, 0.2, "--nodes", "1.5"), "--nodes must be a whole number in"),
            (job([], "greedy", 0, 2, 5, 0.2), "required"),
            (job([os.path.join(d, "none.json")], "greedy", 0, 2, 5, 0.2), "none.json"),
        ]
        for args, want in cases:
            _, err = sim_run(sim, args, expect=2)
            require(want in err, f"error names '{want}'", err)

        # --batch: a line a job, in order, each the report or the failure
        # that job alone gives; one bad line spoils no other
        good = [job([a, b], pol, 0, 2, 5, 0.2, *prices) for pol in
                ("spotlab", "uniform-progress", "greedy", "optimal", "ondemand")]
        good.append(job([a], "greedy", 0, 2, 5, 0.2)[:-1])  # --json is implied
        impossible = job([a], "optimal", 0, 2, 2, 0.2)
        lines = [json.dumps(x) for x in good[:3]]
        lines += [json.dumps(impossible), "not json", "[1, 2]", "",
                  json.dumps(["--help"]), json.dumps(["--tr\u0000ace", "x"])]
        lines += [json.dumps(args) for args, _ in cases]
        lines += [json.dumps(x) for x in good[3:]]
        p = subprocess.run([sim, "--batch"], input="\n".join(lines) + "\n", capture_output=True,
                           text=True, timeout=120)
        require(p.returncode == 0, "--batch exits 0 at the end of its input", p.stderr)
        out = [json.loads(x) for x in p.stdout.splitlines()]
        require(len(out) == len(lines), "one report a line", (len(out), len(lines)))
        want = [sim_run(sim, x + ([] if "--json" in x else ["--json"]))[0] for x in good]
        require(out[:3] == want[:3] and out[-3:] == want[3:], "the reports of single runs", out)
        require(out[3]["exit"] == 1 and "even on on-demand" in out[3]["error"],
                "a job that cannot be evaluated: exit 1 and why", out[3])
        for o in out[4:9]:
            require(o["exit"] == 2 and o["error"], "a line that is no job: exit 2 and why", o)
        for o, (_, want_err) in zip(out[9:-3], cases):
            require(o["exit"] == 2 and want_err in o["error"], f"batch error names '{want_err}'", o)
        # an unreadable trace is read again on each line that names it
        fixed = os.path.join(d, "later.json")
        line = json.dumps(job([fixed], "greedy", 0, 2, 5, 0.2))
        with subprocess.Popen([sim, "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) as p:
            p.stdin.write(line + "\n")
            p.stdin.flush()
            first = json.loads(p.stdout.readline())
            os.link(a, fixed)
            p.stdin.write(line + "\n")
            p.stdin.close()
            second = json.loads(p.stdout.readline())
        require(first["exit"] == 2 and "later.json" in first["error"], "missing trace named", first)
        require(second == want[-1], "the same line once the trace is there", second)
        for extra in (["--json"], ["--policy", "greedy"]):
            _, err = sim_run(sim, ["--batch", *extra], expect=2)
            require("--batch takes no other option" in err, "--batch alone", err)
    print("ok: spotlab-sim --policy interface")


def grid(sim, traces):
    scs = policy_grid.scenarios(root=traces, work=[8], starts=2)
    require(len(scs) > 100, "the grid has scenarios", len(scs))
    policy_grid.run(sim, scs)
    bad = []
    for sc in scs:
        o = sc.results["optimal"]
        where = (sc.name, sc.work, sc.deadline, sc.overhead, sc.start)
        for pol in policy_grid.POLICIES:
            r = sc.results[pol]
            if not r["deadline_met"]:
                bad.append(("missed its deadline", pol, where, r))
            if r["cost_usd"] < o["cost_usd"] * (1 - 1e-9):
                bad.append(("cheaper than the optimum", pol, where, r, o))
        gap = sc.traces[0].gap
        ticks = math.ceil(sc.work * 3600 / gap - 1e-9) + math.ceil(sc.overhead * 3600 / gap - 1e-9)
        want = ticks * gap / 3600 * sc.ondemand * sc.nodes
        if not math.isclose(sc.results["ondemand"]["cost_usd"], want, rel_tol=1e-9):
            bad.append(("on-demand not (P + O) ticks", where, sc.results["ondemand"], want))
    require(not bad, "every deadline met, no policy below the optimum, on-demand at (P + O) ticks",
            bad[:5])
    s = policy_grid.summary(scs)
    line = {p: (round(s[p]["mean"], 4), round(s[p]["worst"], 4)) for p in policy_grid.POLICIES}
    print("grid:", len(scs), "scenarios; mean and worst cost / optimum:", line)
    sp, up, gr = s["spotlab"], s["uniform-progress"], s["greedy"]
    require(sp["mean"] <= 1.10, "spotlab's mean at most 1.10 x the optimum", line)
    require(sp["mean"] < up["mean"] and sp["mean"] < gr["mean"], "spotlab's mean below UP's and Greedy's", line)
    require(sp["worst"] < up["worst"], "spotlab's worst case below UP's", line)
    print("ok: policy grid")


def main():
    sim, traces, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "cli":
        cli(sim)
    else:
        grid(sim, traces)


if __name__ == "__main__":
    main()
