#!/usr/bin/python3
"""spotlab-gateway integration tests with the real local provider: real
spotlab-worker instances running spotlab-train, over real sockets.

usage: test_gateway_local.py CASE GATEWAY WORKER TRAIN

  local-train  a small model trained end to end: metrics and checkpoints,
               each step's metric once, the idle instance terminated by the
               gateway and no process of it left
  local-place  placement: a capacity failure retried at once on another
               type, spot=auto on-demand at once without spot capacity,
               spot=yes waiting for spot, region=, %instances' ranking, a
               group's instance_types, and a zone that just preempted an
               instance not picked first, also by the gateway started again
               after it
  local-refused  a gateway started on an older copy of its state folder
               refuses the worker of a running job; started again on its
               current state it has the worker back within seconds, and the
               job goes on in the same attempt
  local-ended  an instance that ended while the gateway was down, after
               the provider dropped its record and before the gateway saved
               the end (a gateway killed in between), is taken for ended at
               the next start, not listed until the register timeout; its
               job runs again
  local-notice  a gateway killed just after a spot notice knows of it when
               started again: the job's preemption is one with notice

Every wait has a deadline; nothing sleeps to wait for an event.
"""
import glob
import json
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures, run_case  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances, session_pids, signal_instance, wait_text  # noqa: E402
from gwcases import TOKENS, Client, Gateway, attach, configure, state_is, submit  # noqa: E402

CASE, GATEWAY, WORKER, TRAIN = sys.argv[1:5]


def case_local_train():
    # a short worker_timeout: the gateway itself has the provider terminate
    # the instance once its job is done (a stopped gateway leaves workers
    # running by design, for its next start)
    real = Gateway(GATEWAY, slots=1, extra_ini="[idle]\nworker_timeout = 3s\n")
    try:
        text = os.path.join(real.dir, "text.txt")
        with open(text, "w") as f:
            f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
        c = Client(real.listen, "alice")
        r = c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
                "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        check(r["ok"], "session.set")
        job = submit(c, steps=40, batch=4, threads=1, checkpoint_every=10)
        attach(c, job)
        end = c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                           e["state"] in ("succeeded", "failed"), timeout=240)
        check(end["state"] == "succeeded", "real training succeeded: %r" % end)
        inst = [e for e in c.events if e["job"] == job and e["event"] == "placed"][-1]["instance"]
        sid = json.load(open(os.path.join(real.state, "instances", inst, "instance.json")))["pid"]
        check(sid in session_pids(sid), "the instance's worker %d runs" % sid)
        kinds = [e["event"] for e in c.events if e["job"] == job]
        check(kinds.count("metric") >= 1 and "checkpoint" in kinds, "metrics and checkpoints")
        steps = [e["step"] for e in c.events if e["job"] == job and e["event"] == "metric"]
        check(steps == sorted(set(steps)) and steps[-1:] == [40],
              "each step's metric once, the last one 40 (spotlab-train's done adds none): %s"
              % steps[-5:])
        check(c.req("jobs")["jobs"][0]["step"] == 40, "the job's summary has the last step")
        check(real.wait_log("instance %s gone" % inst, 60), "the idle instance was terminated")
        deadline = time.monotonic() + 20
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for other processes' exit: no event to wait on
        check(not session_pids(sid), "no process of the instance remains: %s" % session_pids(sid))
        real.stop()
        check(real.p.returncode == 0, "the gateway stopped cleanly (%s)" % real.p.returncode)
    finally:
        if failures:
            print("real gateway log:\n" + real.logtext()[-8000:], file=sys.stderr)
        real.cleanup()


def place_gateway(capacity, slots, extra_ini="", user_options=None):
    """The real gateway with the local provider, real spotlab-worker
    instances, and a spot market whose capacity per type never changes."""
    g = GatewayProcess(tempfile.mkdtemp(prefix="gw-place-"), GATEWAY, TOKENS, provider="local",
                       slots=slots, market_capacity=capacity,
                       extra_ini="[idle]\nworker_timeout = 10m\n" + extra_ini,
                       env={"SPOTLAB_DEBUG": "gateway"}, user_options=user_options)
    g.start()
    return g


def sleep_job(c, **opts):
    """A %%run job that holds its instance until cancelled, attached."""
    r = c.req("submit", kind="run", script="sleep 600", options=opts)
    check(r["ok"], "submit %s: %s" % (opts, r))
    if r["ok"]:
        attach(c, r["job"])
    return r.get("job")


def cancel(c, job):
    c.req("cancel", job=job)
    c.wait_event(state_is(job, "cancelled"), timeout=20)


def end_gateway(g, states=None):
    """A case's end: g stopped and the instances of its state folders
    (states, else its own) killed; on a failure the log's tail printed and
    the folder kept (also when a wait that ran out of time is on its way up)."""
    failed = bool(failures) or sys.exc_info()[0] is not None
    if failed:
        print("gateway log (%s):\n%s" % (g.logpath, g.logtext()[-6000:]), file=sys.stderr)
        for log in sorted(glob.glob(os.path.join(g.state, "instances", "*", "*.log"))):
            with open(log, errors="replace") as f:
                print("%s:\n%s" % (log, f.read()[-3000:]), file=sys.stderr)
    g.stop(15)
    for d in states or [g.state]:
        if os.path.isdir(d):
            kill_instances(d)  # workers outlive a stopped gateway by design
    if not failed:
        shutil.rmtree(g.dir, ignore_errors=True)


def placed(c, job, n=1, timeout=30):
    """The job's n-th placed event."""
    c.wait_event(lambda e: e["job"] == job and e["event"] == "placed" and
                 len([x for x in c.events if x["job"] == job and x["event"] == "placed"]) >= n,
                 "placed #%d of %s" % (n, job), timeout)
    return [e for e in c.events if e["job"] == job and e["event"] == "placed"][n - 1]


def case_local_place():
    """Placement with the local provider: a capacity failure retried at once
    on another type, spot=auto on-demand at once without spot capacity,
    region=, and a zone that just preempted an instance not picked first,
    also by the gateway started again after it."""
    gws = []
    try:
        # capacity 1 per type: g4dn.xlarge spot is taken by the first job; the
        # second job's best (g4dn.xlarge spot, every zone) is refused, and it
        # goes on at once to g5.xlarge spot
        one = place_gateway(capacity=1, slots=3)
        gws.append(one)
        c = Client(one.listen, "alice")
        first = sleep_job(c, instance="g4dn.xlarge", spot="yes")
        p1 = placed(c, first)
        check(p1["instance_type"] == "g4dn.xlarge" and p1["spot"], "first job on g4dn spot: %s" % p1)
        t0 = time.monotonic()
        second = sleep_job(c, instance="g4dn.xlarge,g5.xlarge", spot="yes")
        p2 = placed(c, second, timeout=15)
        check(p2["instance_type"] == "g5.xlarge" and p2["spot"],
              "second job retried on g5.xlarge spot: %s" % p2)
        check(time.monotonic() - t0 < 10, "retried at once (%.1f s)" % (time.monotonic() - t0))
        check(one.wait_log("no capacity for g4dn.xlarge", 5), "the refusal was remembered")
        # region=: the local provider's region is its zone_prefix
        r = c.req("submit", kind="run", script="true", options={"region": "mars-1"})
        check(not r["ok"] and "no provider offers region \"mars-1\"" in r["error"]["message"]
              and "local-1" in r["error"]["message"], "an unknown region refused: %s" % r)
        third = sleep_job(c, region="local-1", spot="no")
        p3 = placed(c, third)
        check(p3["zone"].startswith("local-1") and not p3["spot"], "region=local-1: %s" % p3)
        m = c.req("market", gpus=1)
        rk = m.get("ranking") or []
        check(m["ok"] and len(rk) >= 2 and [e["rank"] for e in rk] == list(range(1, len(rk) + 1))
              and all(e.get("why") for e in rk)
              and all(rk[i]["usd_per_unit"] <= rk[i + 1]["usd_per_unit"]
                      for i in range(len(rk) - 1) if not rk[i + 1].get("held")),
              "%%instances ranks every offer best first with a reason: %s" % rk[:3])
        for j in (first, second, third):
            c.req("cancel", job=j)

        # no spot capacity at all: spot=auto (the default) is on on-demand at once
        zero = place_gateway(capacity=0, slots=1)
        gws.append(zero)
        c = Client(zero.listen, "alice")
        t0 = time.monotonic()
        auto = sleep_job(c)
        pa = placed(c, auto, timeout=15)
        check(not pa["spot"], "spot=auto without spot capacity: on-demand (%s)" % pa)
        check(time.monotonic() - t0 < 10, "on-demand at once (%.1f s)" % (time.monotonic() - t0))
        # spot=yes waits for spot instead
        cancel(c, auto)
        refusals = zero.logtext().count("no capacity for")
        waits = sleep_job(c, spot="yes")
        spot_offers = len([e for e in c.req("market")["ranking"] if e["market"] == "spot"])
        deadline = time.monotonic() + 20
        while (zero.logtext().count("no capacity for") < refusals + 2 * spot_offers and
               time.monotonic() < deadline):
            time.sleep(0.1)  # polling the log: no event to wait on
        check(zero.logtext().count("no capacity for") >= refusals + 2 * spot_offers,
              "spot=yes asked for spot again and again")
        js = c.req("attach", job=waits, after=10 ** 9)["job"]  # reads what was sent meanwhile
        check(js["state"] == "queued" and not js.get("instance") and
              not [e for e in c.events if e["job"] == waits and e["event"] == "placed"],
              "spot=yes is not placed on on-demand: %s" % js)
        c.req("cancel", job=waits)

        # a group's instance_types: bob's group may run on g5.xlarge only, a
        # user of their own (carol) on g4dn.xlarge; alice on any
        allow = place_gateway(capacity=2, slots=2,
                              extra_ini="[group.small]\ninstance_types = g5.xlarge\n",
                              user_options={"bob": "group = small\n",
                                            "carol": "group = small\ninstance_types = g4dn.xlarge\n"})
        gws.append(allow)
        b = Client(allow.listen, "bob")
        r = b.req("submit", kind="run", script="true", options={"instance": "g4dn.xlarge"})
        check(not r["ok"] and "instance type g4dn.xlarge is not allowed for bob (allowed: g5.xlarge)"
              in r["error"]["message"], "a type outside the group's refused at submit: %s" % r)
        ranked = {e["type"] for e in b.req("market")["ranking"]}
        check(ranked == {"g5.xlarge"}, "%%instances shows bob only his group's types: %s" % ranked)
        bj = sleep_job(b)
        pb = placed(b, bj)
        check(pb["instance_type"] == "g5.xlarge", "bob's job placed on his group's type: %s" % pb)
        cc = Client(allow.listen, "carol")
        cj = sleep_job(cc)
        pc = placed(cc, cj)
        check(pc["instance_type"] == "g4dn.xlarge", "a user's own instance_types win: %s" % pc)
        a = Client(allow.listen, "alice")
        check(len({e["type"] for e in a.req("market")["ranking"]}) > 2,
              "a user without a limit sees every type")
        for c, j in ((b, bj), (cc, cj)):
            c.req("cancel", job=j)

        # a spot instance preempted in a zone: the job goes elsewhere first
        two = place_gateway(capacity=2, slots=2)
        gws.append(two)
        c = Client(two.listen, "alice")
        job = sleep_job(c, instance="g4dn.xlarge", spot="yes")
        q1 = placed(c, job)
        r = c.req("inject", action="preempt", instance=q1["instance"], notice_s=1)
        check(r["ok"], "preemption injected: %s" % r)
        q2 = placed(c, job, n=2, timeout=60)
        check(q2["instance_type"] == "g4dn.xlarge" and q2["spot"] and q2["zone"] != q1["zone"],
              "placed again away from the zone that preempted it: %s then %s"
              % (q1["zone"], q2["zone"]))
        cancel(c, job)
        c.close()

        # the gateway started again on its state remembers that preemption
        two.stop(15)
        db = sqlite3.connect(os.path.join(two.state, "gateway.db"))
        row = db.execute("SELECT body FROM learned WHERE name='placement'").fetchone()
        db.close()
        kept = json.loads(row[0]) if row else {}
        check([f for f in kept.get("failures", []) if f["zone"] == q1["zone"] and f["spot"]
               and not f["capacity"] and f["type"] == "g4dn.xlarge"],
              "the preemption is in the database: %s" % kept)
        two.start()
        check(two.wait_log("restored what the gateway learned for placement", 10),
              "the placement memory read back at start")
        c = Client(two.listen, "alice")
        rk = c.req("market", gpus=1).get("ranking") or []
        there = [e for e in rk if e["type"] == "g4dn.xlarge" and e.get("zone") == q1["zone"]
                 and e["market"] == "spot"]
        check(there and "preempted" in there[0]["why"],
              "after the restart %s's spot offer still counts its preemption: %s"
              % (q1["zone"], there))
        c.close()
    finally:
        for g in gws:
            end_gateway(g)


def case_local_refused():
    """A gateway started on an older copy of its state folder (a backup
    restored) does not know the instance a job runs on, and its ZAP handler
    refuses the worker's key. libzmq never reconnects after a refused
    handshake; the worker opens a new connection by itself (1 s, 2 s, 4 s
    ...), so the gateway started again on its current state has the worker
    back within its register timeout, and the job goes on in the same
    attempt instead of being requeued."""
    g = place_gateway(capacity=1, slots=1)
    old, cur = g.state + ".old", g.state + ".current"
    try:
        c = Client(g.listen, "alice")
        check(c.req("jobs")["ok"], "the gateway answers")
        c.close()
        g.stop(15)
        shutil.copytree(g.state, old, symlinks=True)  # the backup, before any instance
        g.start()
        c = Client(g.listen, "alice")
        job = sleep_job(c)
        where = placed(c, job)
        inst = where["instance"]
        c.wait_event(state_is(job, "running"), timeout=60)
        before = c.req("attach", job=job, after=10 ** 9)["job"]
        c.close()
        g.stop(15)  # its workers keep running, for its next start
        os.rename(g.state, cur)
        os.rename(old, g.state)
        g.start()
        check(g.wait_log("refused a worker connection", 20),
              "the gateway on the older state refuses the worker")
        wlog = os.path.join(cur, "instances", inst, "worker.log")
        check(wait_text(wlog, "the gateway refused the agent connection", 20),
              "the worker logs the refusal")
        g.stop(15)
        os.rename(g.state, old)
        os.rename(cur, g.state)
        seen = g.logtext().count("worker %s registered" % inst)
        t0 = time.monotonic()
        g.start()
        end = t0 + 20  # the gateway's register timeout in this test
        while g.logtext().count("worker %s registered" % inst) == seen and time.monotonic() < end:
            time.sleep(0.05)  # polling the log: no event to wait on
        took = time.monotonic() - t0
        check(g.logtext().count("worker %s registered" % inst) > seen,
              "the worker registered with the gateway on its current state (%.1f s)" % took)
        c = Client(g.listen, "alice")
        now = attach(c, job)
        check(now["state"] == "running" and now["attempt"] == before["attempt"]
              and now.get("instance") == inst,
              "the job runs on in the same attempt on %s: %s" % (inst, now))
        check(not [e for e in c.events if e["job"] == job and e["event"] == "preempted"], "not requeued")
        cancel(c, job)
        c.close()
    finally:
        if failures:
            for d in (g.state, cur):
                for w in glob.glob(os.path.join(d, "instances", "*", "worker.log")):
                    with open(w, errors="replace") as f:
                        print("%s:\n%s" % (w, f.read()[-3000:]), file=sys.stderr)
        end_gateway(g, [g.state, cur])


def case_local_ended():
    """A gateway killed after the provider dropped an ended instance's record
    and before it saved the end leaves the instance live in its table; the
    next start takes it for ended at once (not at the register timeout) and
    runs its job again."""
    g = place_gateway(capacity=1, slots=1)  # register timeout: 20 s
    try:
        c = Client(g.listen, "alice")
        job = sleep_job(c)
        inst = placed(c, job)["instance"]
        c.wait_event(state_is(job, "running"), timeout=60)
        c.close()
        g.stop(15)  # its workers keep running, for its next start
        # what a gateway killed at the wrong moment leaves: the instance is
        # gone and the provider's record with it, the table still has it live
        rec = os.path.join(g.state, "instances", inst, "instance.json")
        check(signal_instance(rec, signal.SIGKILL) > 0, "the instance's worker ran")
        os.unlink(rec)
        t0 = time.monotonic()
        g.start()
        c = Client(g.listen, "alice")
        listed = True
        while listed and time.monotonic() - t0 < 5:
            listed = inst in [i["instance"] for i in c.req("instances")["instances"]]
            if listed:
                time.sleep(0.2)  # polling the gateway: no event to wait on
        took = time.monotonic() - t0
        check(not listed, "the gateway lists %s no longer, %.1f s after its start (register "
              "timeout: 20 s)" % (inst, took))
        check(g.wait_log("%s gone: instance ended while the gateway was down" % inst, 5),
              "the gateway logs why")
        now = attach(c, job)
        again = placed(c, job, 2) if now.get("instance") == inst or now["state"] != "running" else now
        check(again["instance"] != inst, "the job runs again elsewhere: %s" % again)
        cancel(c, job)
        c.close()
    finally:
        end_gateway(g)


def case_local_notice():
    """A gateway killed just after a spot notice, before the worker heard of
    it (stopped): started again, it knows from its events that the instance
    is going, and the job's preemption, when the notice runs out, is one with
    notice. (A worker that heard it says so in its register: the unit tests.)"""
    g = place_gateway(capacity=1, slots=1)  # time scale 60: 600 s of notice are 10 s
    try:
        c = Client(g.listen, "alice")
        job = sleep_job(c, spot="yes")
        inst = placed(c, job)["instance"]
        c.wait_event(state_is(job, "running"), timeout=60)
        rec = os.path.join(g.state, "instances", inst, "instance.json")
        check(signal_instance(rec, signal.SIGSTOP) > 0, "the instance's worker stopped")
        r = c.req("inject", action="preempt", instance=inst, notice_s=600)
        check(r["ok"], "preemption injected: %s" % r)
        c.wait_event(lambda e: e["job"] == job and e["event"] == "notice", "the notice", 20)
        c.close()
        g.kill()
        g.start()
        c = Client(g.listen, "alice")
        attach(c, job)
        pre = c.wait_event(lambda e: e["job"] == job and e["event"] == "preempted",
                           "the preemption", 40)
        check(pre["notice"] and pre["instance"] == inst,
              "after the restart the preemption is one with notice: %r" % pre)
        cancel(c, job)
        c.close()
    finally:
        end_gateway(g)


CASES = {"local-train": case_local_train, "local-place": case_local_place,
         "local-refused": case_local_refused, "local-ended": case_local_ended,
         "local-notice": case_local_notice}


def main():
    configure(GATEWAY)
    # the local provider's instances run these
    os.environ["SPOTLAB_WORKER_BIN"] = os.path.abspath(WORKER)
    os.environ["SPOTLAB_TRAIN_BIN"] = os.path.abspath(TRAIN)
    return run_case(CASES[CASE])


if __name__ == "__main__":
    sys.exit(main())
