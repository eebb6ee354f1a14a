#!/usr/bin/python3
"""Attacks on the gateway's kernel socket, replayed against the real
spotlab-gateway (local provider, real spotlab-worker instances) over real
ZeroMQ.

usage: test_kernel_auth.py CASE GATEWAY WORKER

routing-id   a peer that takes a signed-in kernel's ZeroMQ routing id after it
             left, and never presents a token, gets nothing of its user's
visibility   instances, status, jobs, logs, cost, attach and cancel show a user
             their own; an admin ([user.NAME] admin = yes) sees and manages all
hello-flood  one user's thousands of hellos never cut another user off
log-flood    thousands of malformed and unauthenticated requests a second
             leave the log small, the drops counted, and the gateway serving
"""
import os
import shutil
import sys
import tempfile
import time

import zmq

from checks import check, failures, run_case
from gateway_client import GatewayClient
from gateway_proc import GatewayProcess, kill_instances

CASE, GATEWAY, WORKER = sys.argv[1:4]
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-9876543210",
          "carol": "carol-token-5555555555"}
CTX = zmq.Context()
LONG = "while true; do echo tick; sleep 0.2; done"  # a %%run job that runs until cancelled


def gateway(gateway_opts=""):
    """The real gateway; carol is an admin; gateway_opts: more [gateway] lines."""
    gw = GatewayProcess(tempfile.mkdtemp(prefix="sec-auth-"), GATEWAY, TOKENS,
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_DEBUG": None,
                             "SPOTLAB_QUIET": None})
    with open(gw.ini) as f:
        ini = f.read()
    ini = ini.replace("[gateway]\n", "[gateway]\n" + gateway_opts, 1)
    ini = ini.replace("[user.carol]\n", "[user.carol]\nadmin = yes\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini)
    gw.start()
    return gw


def client(gw, user=None, **kw):
    return GatewayClient(gw.listen, token=TOKENS[user] if user else None, context=CTX, **kw)


def refused(r):
    return not r["ok"] and r["error"]["code"] == "SL_EAUTH"


def long_job(c):
    """A running %%run job of c's user, attached: its id and instance."""
    r = c.req("submit", kind="run", script=LONG, options={})
    assert r["ok"], r
    job = r["job"]
    assert c.req("attach", job=job, after=0)["ok"]
    c.wait_event(lambda e: e["job"] == job and e["event"] == "output", "output of %s" % job,
                 timeout=120)
    placed = [e for e in c.events if e["job"] == job and e["event"] == "placed"]
    return job, placed[-1]["instance"]


def squat(gw, rid, listen_s, timeout=30):
    """A DEALER that names itself rid and says no hello: it first listens
    silently for listen_s seconds (what it receives is kept), then pings to
    learn whether it holds rid (a connection that comes while the victim's
    still holds it gets nothing and tries again). The client, and every
    message that came to any attempt before it sent anything."""
    end = time.monotonic() + timeout
    heard = []
    while True:
        s = client(gw, routing_id=rid)
        until = time.monotonic() + listen_s
        while time.monotonic() < until:
            m = s.recv(until - time.monotonic())
            if m is not None:
                heard.append(m)
        try:
            s.req("ping", timeout=1, auth=None)
            return s, heard
        except TimeoutError:
            s.close()
            if time.monotonic() > end:
                raise


def case_routing_id(gw):
    rid = b"kernel-victim-0001"
    victim = client(gw, "alice", routing_id=rid)
    r = victim.req("session.set", vars={"secret": {"t": "str", "v": "hunter2"}})
    check(r["ok"], "the victim stores a variable")
    job, _ = long_job(victim)
    victim.close()

    # the job prints every 0.2 s: listening 1.5 s, a peer that got its events would hear some
    thief, heard = squat(gw, rid, 1.5)
    leaked = [m for m in heard if m.get("job") == job]
    check(not leaked, "a silent peer on the victim's routing id hears none of its job's events"
          " (%d came)" % len(leaked))
    r = thief.req("session.get", auth=None)
    check(refused(r), "no token, the victim's routing id: session.get refused (%s)" % r)
    check("hunter2" not in repr(r), "the variable does not leak")
    check(refused(thief.req("jobs", all=True, auth=None)), "jobs refused")
    check(refused(thief.req("cancel", job=job, auth=None)), "cancel refused")
    check(refused(thief.req("logs", job=job, auth=None)), "logs refused")
    check(refused(thief.req("attach", job=job, after=0, auth=None)), "attach refused")
    # a made-up secret is no better than none
    check(refused(thief.req("session.get", auth="0" * 64)), "a guessed secret is refused")
    check(refused(thief.req("cancel", job=job, auth="0" * 64)), "cancel with a guessed secret refused")
    leaked = [e for e in thief.events if e.get("job") == job]
    check(not leaked, "nor after its requests (%d came)" % len(leaked))
    # another user's valid token on that routing id is that user, not alice
    r = thief.req("hello", token=TOKENS["bob"], client="cli", session="")
    check(r["ok"] and r["user"] == "bob", "hello with bob's token there is bob")
    check(job not in [j["job"] for j in thief.req("jobs", all=True)["jobs"]],
          "bob does not see alice's job")
    check(not thief.req("cancel", job=job)["ok"], "bob cannot cancel it")
    thief.close()

    owner = client(gw, "alice")
    vars_ = owner.req("session.get")["vars"]
    check(vars_.get("secret", {}).get("v") == "hunter2", "the variable is intact")
    state = owner.req("attach", job=job, after=10 ** 9)["job"]["state"]
    check(state == "running", "the job still runs (%s)" % state)
    check(owner.req("cancel", job=job)["ok"], "its owner cancels it")
    owner.close()


def case_visibility(gw):
    alice, bob, carol = client(gw, "alice"), client(gw, "bob"), client(gw, "carol")
    ajob, ainst = long_job(alice)
    bjob, binst = long_job(bob)
    check(ainst != binst, "one instance each")

    def inst_ids(c):
        return {i["instance"] for i in c.req("instances")["instances"]}

    def worker_ids(c):
        return {i["instance"] for i in c.req("status")["workers"]}

    def job_ids(c, t="jobs"):
        return {j["job"] for j in c.req(t, all=True)["jobs"]}

    check(inst_ids(alice) == {ainst}, "alice's instances: hers only (%s)" % inst_ids(alice))
    check(inst_ids(bob) == {binst}, "bob's instances: his only (%s)" % inst_ids(bob))
    check({ainst, binst} <= inst_ids(carol), "the admin sees both instances")
    check(worker_ids(alice) == {ainst} and worker_ids(bob) == {binst},
          "status lists each user's own workers")
    check({ainst, binst} <= worker_ids(carol), "the admin's status lists every worker")
    st = alice.req("status")["gateway"]
    check(st["live_jobs"] == 1, "alice's status counts her live job only (%s)" % st["live_jobs"])
    check("log_dropped" not in st and "clients" not in st, "no gateway health for a user")
    st = carol.req("status")["gateway"]
    check(st["live_jobs"] >= 2 and "log_dropped" in st, "the admin's status counts all (%s)" % st)
    check(job_ids(alice) == {ajob} and job_ids(bob) == {bjob}, "jobs: each their own")
    check({ajob, bjob} <= job_ids(carol), "jobs: the admin sees both")
    check(job_ids(alice, "cost") == {ajob}, "cost lists alice's job only")
    check({ajob, bjob} <= job_ids(carol, "cost"), "the admin's cost lists both")
    for t in ("logs", "attach", "cancel"):
        r = bob.req(t, job=ajob, after=0)
        check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "bob's %s of alice's job: no such job" % t)
    r = bob.req("inject", action="kill", instance=ainst)
    check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "bob cannot touch alice's instance")
    check(carol.req("logs", job=ajob)["ok"], "the admin reads alice's job log")
    r = carol.req("attach", job=bjob, after=0)
    check(r["ok"] and r["job"]["user"] == "bob", "the admin attaches to bob's job")
    check(carol.req("cancel", job=ajob)["ok"] and carol.req("cancel", job=bjob)["ok"],
          "the admin cancels both")
    carol.wait_event(lambda e: e["job"] == bjob and e.get("state") == "cancelled", "bob's job cancelled")
    for c in (alice, bob, carol):
        c.close()


def case_hello_flood(gw):
    bob = client(gw, "bob", session="b")
    check(bob.req("session.set", vars={"x": {"t": "num", "v": 7}})["ok"], "bob stores a variable")
    time.sleep(0.05)  # bob is now the least recently active connection
    # alice says hello from 1,100 connections, one after the other, each
    # closed before the next; then from 300 that stay open
    for n in range(1100):
        client(gw, "alice", session="flood%d" % n).close()
    held = [client(gw, "alice", session="held%d" % n) for n in range(300)]
    first = held[0]
    r = bob.req("session.get")
    check(r["ok"] and r["vars"].get("x", {}).get("v") == 7,
          "bob's connection still works after alice's flood (%s)" % r.get("error"))
    check(refused(first.req("ping")), "alice's own oldest connection was the one forgotten")
    carol = client(gw, "carol")
    n = carol.req("status")["gateway"]["clients"]
    check(n <= 256 + 2, "alice holds at most max_clients_per_user connections (%d held)" % n)
    check(len(gw.logtext()) < 64 * 1024, "the hellos did not flood the log (%d bytes)"
          % len(gw.logtext()))
    for c in held:
        c.close()
    bob.close()
    carol.close()
    gw.stop()
    # a lower limit: the user's oldest connections go, the newest stay
    small = gateway("max_clients_per_user = 3\n")
    try:
        conns = [client(small, "alice", session="s%d" % n) for n in range(5)]
        alive = [c.req("ping")["ok"] for c in conns]
        check(alive == [False, False, True, True, True],
              "with max_clients_per_user = 3 the two oldest went: %s" % alive)
        b = client(small, "bob")
        check(b.req("ping")["ok"] and conns[-1].req("ping")["ok"],
              "bob's first connection takes none of alice's")
        for c in conns + [b]:
            c.close()
    finally:
        small.stop()
        if failures:
            print("gateway log:\n" + small.logtail(), file=sys.stderr)
        shutil.rmtree(small.dir, ignore_errors=True)


def case_log_flood(gw):
    good = client(gw, "alice")
    before = os.path.getsize(gw.logpath)
    s = CTX.socket(zmq.DEALER)
    s.linger = 0
    s.sndtimeo = 30000
    s.connect(gw.listen)
    kinds = [b"not json", b"[1,2,3]", b'{"type":"hello","id":1,"token":"wrong-token"}',
             b'{"type":"ping","id":2}', b"\xff\xfe"]
    t0 = time.monotonic()
    sent = 0
    for n in range(20000):
        s.send(kinds[n % len(kinds)])
        sent += 1
        while s.poll(0):  # read the error replies so the gateway's sends to us go on
            s.recv()
    # the gateway has read everything once it answers a ping behind the flood
    check(good.req("ping", timeout=60)["ok"], "a good client is answered behind the flood")
    took = time.monotonic() - t0
    grown = os.path.getsize(gw.logpath) - before
    # two sites (wire, auth) of 20 lines and 10 a second each, a report line
    # per passing line, lines under 200 bytes; unlimited, 16,000 lines
    budget = 2 * 2 * (20 + 10 * (took + 2)) * 200
    check(grown < budget, "%d bad requests in %.1fs grew the log by %d bytes (at most %d)"
          % (sent, took, grown, budget))
    check(gw.wait_log("similar messages dropped", 10), "the drops are reported in the log")
    carol = client(gw, "carol")
    dropped = carol.req("status")["gateway"].get("log_dropped", 0)
    check(dropped >= sent // 2, "the admin's status counts %d dropped lines" % dropped)
    check("wrong-token" not in gw.logtext(), "no token reaches the log")
    s.close(0)
    good.close()
    carol.close()


CASES = {"routing-id": case_routing_id, "visibility": case_visibility,
         "hello-flood": case_hello_flood, "log-flood": case_log_flood}


def main():
    gw = gateway()

    def cleanup(failed):
        gw.stop(15)
        kill_instances(gw.state)
        if failed:
            print("gateway log (%s):\n%s" % (gw.logpath, gw.logtail()), file=sys.stderr)
        else:
            shutil.rmtree(gw.dir, ignore_errors=True)
    return run_case(CASES[CASE], gw, cleanup=cleanup)


if __name__ == "__main__":
    sys.exit(main())
