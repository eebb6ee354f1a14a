#!/usr/bin/python3
"""nodes=2 end to end: the real spotlab-gateway with the local provider, a spotlab-worker on
each of two local instances and a spotlab-train rank under each worker, against a reference:
one spotlab-train process on the same global batch, started by the test beside the job.

usage: test_gang.py CASE GATEWAY WORKER TRAIN

  gang         a train cell with nodes=2 runs to the end: two instances launched together,
               rank 0 and rank 1 run (one spotlab-train each, --world-size 2, one rendezvous),
               every step reported once, each loss the reference's within TOLERANCE, every
               checkpoint valid, and the cost that of both instances
  gang-notice  rank 1's instance is preempted with a notice mid-run: rank 0 checkpoints the
               step reached, both ranks stop, the job is placed again on two instances and
               resumes with no step lost; the losses still match
  gang-rebalance  rank 1's instance gets a rebalance recommendation mid-run (a job without
               periodic checkpoints): rank 1 takes no command, so the gateway asks rank 0, every
               rank checkpoints, and the job goes on in the same attempt; the losses still match
  gang-kill    rank 1's instance is killed without notice: rank 0 is stopped, the job resumes
               on two instances from the newest periodic checkpoint; the losses still match

The gateway, the reference run and the case's disturbance reuse tests/system/test_system.py
(same model, data, options and checks). SPOTLAB_GANG_KEEP=1 keeps the state folder and
prints the logs of a passing run too. At no moment may two processes run one rank of the
job. A spotlab-train built without gloo refuses --world-size on the CPU: the job then fails
with its refusal, and this test says so and fails.
"""
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_system as ts  # noqa: E402  (reads the same CASE GATEWAY WORKER TRAIN arguments)

NODES = 2
# docs/training.md: N CPU ranks give the numbers of one process that sums its gradients in N
# slices (--grad-slices N), bit for bit; the reference run is that process. Without EXACT the
# losses are held as tests/gpu/gpu_cli_test.py holds --gpus 2 to a 1-rank run: the first step
# within FIRST_TOLERANCE, every later one within TOLERANCE (relative).
EXACT = True
ts.REFERENCE_EXTRA = ["--grad-slices", str(NODES)]
FIRST_TOLERANCE = 1e-5
TOLERANCE = 2e-2
check = ts.check


class RankWatch:
    """Samples /proc for the spotlab-train processes of a data-parallel run under folder (a
    job's process runs in its job folder on its instance) while the job runs: which ranks
    ran, with which world size and rendezvous, and whether one rank ever ran twice at once."""

    def __init__(self, folder):
        self.folder = os.path.realpath(folder) + "/"
        self.seen = {}          # rank -> set of (world_size, rendezvous)
        self.pids = {}          # rank -> set of pids
        self.twice = []         # (rank, pids) at a moment when one rank ran more than once
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _ranks(self):
        now = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if not os.readlink("/proc/%s/cwd" % d).startswith(self.folder):
                    continue
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
                with open("/proc/%s/stat" % d) as f:
                    stat = f.read().rsplit(")", 1)[1].split()
                if stat[0] == "Z":
                    continue
            except OSError:
                continue
            if not any(a.endswith("spotlab-train") for a in argv[:2]) or "--world-size" not in argv:
                continue
            opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
            try:
                rank = int(opt.get("--rank", "0"))
            except ValueError:
                continue
            now.setdefault(rank, []).append((int(d), int(stat[1]), opt.get("--world-size"),
                                             opt.get("--rendezvous")))
        # a task that a rank's process cloned itself (the leak checker's tracer in sanitizer
        # builds shares its argv and folder) is not a second run of that rank, whether or not
        # its parent made it into this sample: the parent is looked at again
        for rank, procs in now.items():
            pids = {p[0] for p in procs}
            now[rank] = [(pid, world, rdv) for pid, ppid, world, rdv in procs
                         if ppid not in pids and not self._is_train(ppid)]
        return now

    @staticmethod
    def _is_train(pid):
        """Whether pid is a spotlab-train process, by its name, which outlasts its command line
        (a process whose main thread has ended shows as a zombie with none)."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                stat = f.read()
        except OSError:
            return False
        return stat[stat.find("(") + 1:stat.rfind(")")] == "spotlab-train"

    def _run(self):
        before = set()  # (rank, pid) of the sample before
        while not self.stop.is_set():
            now = set()
            for rank, procs in self._ranks().items():
                for pid, world, rdv in procs:
                    self.seen.setdefault(rank, set()).add((world, rdv))
                    now.add((rank, pid))
                    # a rank's process counts once two samples saw it: the leak checker's
                    # tracer outlives a rank's process killed in its check for a moment,
                    # with no spotlab-train parent to tell it by (a process that trains
                    # runs for far longer than one sample)
                    if (rank, pid) in before:
                        self.pids.setdefault(rank, set()).add(pid)
                if len(procs) > 1:
                    self.twice.append((rank, [p[0] for p in procs]))
            before = now
            time.sleep(0.05)

    def finish(self):
        self.stop.set()
        self.t.join(5)


class GangRun(ts.Run):
    def __init__(self, folder):
        super().__init__(folder)
        # a third slot: the gang is placed again while a preempted instance still drains
        with open(self.gw.ini) as f:
            ini = f.read()
        with open(self.gw.ini, "w") as f:
            f.write(ini.replace("slots = 2", "slots = 3"))
        self.watch = None

    def start_job(self, **options):
        self.gw.start()
        self.c = ts.Client(self.gw.listen)
        r = self.c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [],
                                                    "options": ts.MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [self.text],
                                                   "options": {}}}])
        assert r["ok"], r
        self.watch = RankWatch(self.gw.state)
        r = self.c.req("submit", kind="train", model="m", data="d",
                       options=dict(ts.OPTIONS, spot="yes", nodes=NODES, **options))
        assert r["ok"], r
        self.job = r["job"]
        r = self.c.req("attach", job=self.job, after=0)
        assert r["ok"], r
        self.t0 = time.monotonic()

    def gang(self):
        """The instances of the first placement, rank order."""
        return self.c.wait_event(ts.event_is("placed"), "placed")["instances"]

    def reach(self, pred, what):
        """Waits for an event; False (a failure, the job's end checked) when the job
        ended first."""
        e = self.c.wait_event(lambda e: pred(e) or ts.ended(e), what)
        if pred(e):
            return True
        check(False, "the job ended before %s: %r" % (what, e))
        self.wait_end()
        return False

    def wait_end(self):
        end = self.c.wait_event(ts.ended, "the job's end")
        self.duration = time.monotonic() - self.t0
        self.watch.finish()
        ok = check(end["state"] == "succeeded", "the job succeeded: %r" % end)
        self.ref.finish()
        return ok

    def check_losses(self, attempts):
        """Every reported loss as the reference's: bit for bit with EXACT, else step 1 within
        FIRST_TOLERANCE and every step within TOLERANCE (relative)."""
        worst, bad, exact, n = 0.0, [], 0, 0
        for a in attempts:
            for s, loss in a:
                ref = self.ref.losses.get(s)
                n += 1
                if ref is None:
                    bad.append((s, loss, None))
                    continue
                d = abs(loss - ref) / max(abs(ref), 1e-12)
                worst = max(worst, d)
                same = ts.f32_bits(loss) == ts.f32_bits(ref)
                exact += same
                if not same and (EXACT or d > (FIRST_TOLERANCE if s == 1 else TOLERANCE)):
                    bad.append((s, loss, ref))
        print("losses: %d steps, %d bit for bit, largest relative difference %.3g"
              % (n, exact, worst))
        check(not bad, "all %d losses %s the one-process reference's; off (step, loss, "
              "reference): %s" % (n, "equal to" if EXACT else "close to", bad[:5]))

    def check_store(self):
        """Every checkpoint in the store is whole (rank 0 writes them; the world size they
        record differs from the reference's, so bytes are not compared)."""
        names = sorted(os.listdir(self.store_dir()))
        check(names and all(n.startswith("ckpt-") and n.endswith(".tc") for n in names),
              "the store holds checkpoints only: %s" % names)
        for n in names:
            path = os.path.join(self.store_dir(), n)
            check(self.verify_checkpoint(path, int(n[5:-3])), "%s is a valid checkpoint" % n)
        return [int(n[5:-3]) for n in names]

    def check_ranks(self, placements):
        w = self.watch
        print("ranks seen: %s" % {r: sorted(v) for r, v in w.seen.items()})
        check(sorted(w.seen) == list(range(NODES)), "every rank ran: %s" % sorted(w.seen))
        for r, v in w.seen.items():
            check(all(world == str(NODES) and rdv and rdv.startswith("tcp://127.0.0.1:")
                      for world, rdv in v),
                  "rank %d ran with --world-size %d and a loopback rendezvous: %s"
                  % (r, NODES, sorted(v)))
        check(len(w.pids.get(0, ())) == placements and len(w.pids.get(1, ())) == placements,
              "one process per rank and placement: %s" % w.pids)
        check(not w.twice, "no rank ever ran twice at once: %s" % w.twice[:3])
        # the ranks of one placement meet at one rendezvous
        rdvs = {rdv for v in w.seen.values() for _, rdv in v}
        check(len(rdvs) <= placements, "one rendezvous per placement: %s" % sorted(rdvs))

    def check_placements(self, n):
        placed = self.events("placed")
        check(len(placed) == n, "%d placements: %d" % (n, len(placed)))
        for p in placed:
            insts = p.get("instances") or []
            check(p.get("nodes") == NODES and len(set(insts)) == NODES and
                  p["instance"] == insts[0],
                  "placement %d: %d distinct instances, rank 0 first: %s"
                  % (p.get("attempt", 0), NODES, insts))
            for i in insts:
                check(os.path.isdir(os.path.join(self.gw.state, "instances", i)),
                      "instance %s was launched" % i)
        return placed

    def check_cost(self, placed):
        """Both instances cost: the job's cost is about twice one instance's price over the
        time it was placed (the local market's clock runs time_scale times the wall's)."""
        costs = self.events("cost")
        if not check(costs, "cost events"):
            return
        spent = costs[-1]["cost_usd"]
        end = [e for e in self.events("state") if e["state"] in ("succeeded", "failed")][-1]
        one = 0.0
        for k, p in enumerate(placed):
            stop = placed[k + 1]["time_us"] if k + 1 < len(placed) else end["time_us"]
            one += p["price_usd_per_hour"] * (stop - p["time_us"]) / 3.6e9 * 60
        print("cost: %.6f USD for %.6f USD of one instance's time" % (spent, one))
        check(one > 0 and 1.5 <= spent / one <= 2.05,
              "the job paid for %d instances: %.6f of %.6f" % (NODES, spent, one))

    def close(self, keep):
        if self.watch:
            self.watch.finish()
        super().close(keep)


def case_gang(run):
    run.start_job()
    gang = run.gang()
    if not run.wait_end():
        return
    att = run.attempts()
    print("gang: %s, %d attempt(s), %.1f s" % (gang, len(att), run.duration))
    placed = run.check_placements(1)
    check(not run.events("preempted") and len(att) == 1, "one attempt, never preempted")
    check(ts.contiguous([s for s, _ in att[0]], 1, ts.STEPS), "every step reported once")
    run.check_losses(att)
    run.check_ranks(1)
    steps = run.check_store()
    check(ts.STEPS in steps, "the final checkpoint is in the store")
    run.check_cost(placed)


def case_gang_notice(run):
    run.start_job()
    gang = run.gang()
    if not run.reach(lambda e: e.get("event") == "metric" and e.get("step", 0) >= 2 * ts.EVERY,
                     "step %d" % (2 * ts.EVERY)):
        return
    r = run.c.req("inject", action="preempt", instance=gang[1], notice_s=ts.NOTICE_S)
    check(r["ok"], "inject preempt %s: %r" % (gang[1], r))
    if not run.wait_end():
        return
    pre, res, att = run.events("preempted"), run.events("resumed"), run.attempts()
    if not check(len(pre) == 1 and len(res) == 1 and len(att) == 2,
                 "one preemption, one resume, two attempts: %d %d %d"
                 % (len(pre), len(res), len(att))):
        return
    check(pre[0]["notice"] is True and pre[0]["instance"] == gang[1],
          "preempted with notice, naming rank 1's instance: %r" % pre[0])
    check(len(run.events("notice")) == 1, "one notice event")
    placed = run.check_placements(2)
    check(gang[1] not in placed[1]["instances"], "the preempted instance is not used again")
    reached, durable = max(s for s, _ in att[0]), pre[0]["step"]
    print("gang-notice: preempted at step %d, durable %d, resumed from %d on %s; %.1f s"
          % (reached, durable, res[0]["from_step"], placed[1]["instances"], run.duration))
    check(durable == reached, "zero steps lost: rank 0 checkpointed step %d, reached %d"
          % (durable, reached))
    check(res[0]["from_step"] == durable, "resumed from that checkpoint")
    check(ts.contiguous([s for s, _ in att[0]], 1, reached), "attempt 1 reported every step")
    check(ts.contiguous([s for s, _ in att[1]], durable + 1, ts.STEPS),
          "attempt 2 reported every step from %d" % (durable + 1))
    run.check_losses(att)
    run.check_ranks(2)
    run.check_store()
    run.check_cost(placed)


def case_gang_rebalance(run):
    run.start_job(checkpoint_every=10 * ts.STEPS)
    gang = run.gang()
    if not run.reach(lambda e: e.get("event") == "metric" and e.get("step", 0) >= ts.EVERY,
                     "step %d" % ts.EVERY):
        return
    r = run.c.req("inject", action="rebalance", instance=gang[1])
    check(r["ok"], "inject rebalance %s: %r" % (gang[1], r))
    if not run.wait_end():
        return
    att = run.attempts()
    asked = ts.check_rebalance(run, att)
    print("gang-rebalance: checkpoint at step %s; %.1f s" % (asked, run.duration))
    check(ts.contiguous([s for s, _ in att[0]], 1, ts.STEPS), "every step reported once")
    run.check_losses(att)
    run.check_ranks(1)
    steps = run.check_store()
    check(ts.STEPS in steps and set(asked) <= set(steps), "the asked and the final checkpoints are in the store")


def case_gang_kill(run):
    run.start_job()
    gang = run.gang()
    if not run.reach(lambda e: e.get("event") == "checkpoint" and e.get("step", 0) >= 2 * ts.EVERY,
                     "a checkpoint at step %d" % (2 * ts.EVERY)):
        return
    r = run.c.req("inject", action="kill", instance=gang[1])
    check(r["ok"], "inject kill %s: %r" % (gang[1], r))
    if not run.wait_end():
        return
    pre, res, att = run.events("preempted"), run.events("resumed"), run.attempts()
    if not check(len(pre) == 1 and len(res) == 1 and len(att) == 2,
                 "one preemption, one resume, two attempts: %d %d %d"
                 % (len(pre), len(res), len(att))):
        return
    check(pre[0]["notice"] is False and pre[0]["instance"] == gang[1],
          "lost without notice, naming rank 1's instance: %r" % pre[0])
    check(not run.events("notice"), "no notice event")
    placed = run.check_placements(2)
    evs = run.events()
    durable = ts.checkpoint_steps_before(evs, ts.event_is("preempted"))
    reached = max(s for s, _ in att[0])
    lag = ts.checkpoint_lag(evs, reached)
    redone = reached - res[0]["from_step"]
    print("gang-kill: step reached %d, newest durable %d, resumed from %d on %s, %d steps "
          "redone; %.1f s" % (reached, durable[-1], res[0]["from_step"],
                              placed[1]["instances"], redone, run.duration))
    check(pre[0]["step"] == durable[-1] and res[0]["from_step"] == durable[-1],
          "resumed from the newest durable checkpoint (%d)" % durable[-1])
    check(durable[-1] % ts.EVERY == 0, "a periodic checkpoint")
    check(redone <= ts.EVERY + lag, "steps redone (%d) within one interval (%d) plus the "
          "checkpoint in flight (%d)" % (redone, ts.EVERY, lag))
    check(ts.contiguous([s for s, _ in att[0]], 1, reached), "attempt 1 reported every step")
    check(ts.contiguous([s for s, _ in att[1]], durable[-1] + 1, ts.STEPS),
          "attempt 2 reported every step after the checkpoint")
    run.check_losses(att)
    run.check_ranks(2)
    run.check_store()
    run.check_cost(placed)


CASES = {"gang": case_gang, "gang-notice": case_gang_notice, "gang-rebalance": case_gang_rebalance,
         "gang-kill": case_gang_kill}


def main():
    folder = tempfile.mkdtemp(prefix="spotlab-gang-")
    run = GangRun(folder)

    def cleanup(failed):
        keep = bool(os.environ.get("SPOTLAB_GANG_KEEP"))  # logs and state of a passing run too
        run.close(keep=keep or failed)
        if not failed and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print("kept %s" % folder, file=sys.stderr)
    return ts.run_case(CASES[ts.CASE], run, cleanup=cleanup)


if __name__ == "__main__":
    sys.exit(main())
