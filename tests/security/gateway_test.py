#!/usr/bin/python3
"""Security: attacks on spotlab-gateway that hold, replayed end to end against
the real gateway over real ZeroMQ sockets, with the fake provider's scripted
CURVE workers (tests/gateway/fake_worker.py).

Every refusal is checked beside a control: the same request or message from
the rightful peer takes effect, so a check cannot pass merely because nothing
works.

Cases (one per meson test):
  token-wrong    hello with a wrong token, another user's token hash (what the
                 state holds), an empty, a 64 KiB, a truncated and an extended
                 token: each refused with SL_EAUTH, and the connection can do
                 nothing after it (jobs, session, submit, cancel or attach of
                 alice's job); no token reaches the log; alice's own token works.
  token-missing  no hello at all, and hellos without a token or with a token
                 that is not a string: every request type is SL_EAUTH and
                 changes nothing.
  curve-unregistered
                 a worker with a fresh CURVE key, and one without CURVE, speak
                 for a running job (register, metric, checkpoint, done):
                 nothing reaches the gateway; the instance's own key, sending
                 the same metric, moves the job.
  worker-other-job
                 instance A's registered key speaks for instance B's job
                 (metric, checkpoint, done, and messages naming instance B):
                 refused, job B untouched; B's key sending the same moves it.

The token cases speak the kernel protocol only through GatewayClient's public
functions (the constructor's hello and req()), so that they hold whatever the
hello returns.

usage: gateway_test.py CASE GATEWAY FAKE_GATEWAY FAKE_WORKER"""
import json
import os
import sys

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gateway"))
from gwcases import (CTX, TOKENS, Client, Gateway, attach, configure, define, gateway_cleanup,  # noqa: E402
                     state_is, submit, worker_socket)
from checks import check, run_case  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import token_sha256  # noqa: E402

CASE = sys.argv[1]
configure(*sys.argv[2:5])
REQUESTS = ["ping", "status", "jobs", "instances", "session.get", "session.set", "submit",
            "attach", "cancel", "logs", "inject"]


def refused(r):
    return not r.get("ok") and r.get("error", {}).get("code") == "SL_EAUTH"


def hello_refused(gw, token):
    """A client whose hello with token failed, and that reply."""
    c = GatewayClient(gw.listen, context=CTX)
    kw = {} if token is None else {"token": token}
    return c, c.req("hello", client="cli", session="nb", **kw)


def alice_job(gw):
    """alice signed in, with a job that finished."""
    a = Client(gw.listen, "alice")
    define(a)
    job = submit(a, steps=3)
    attach(a, job)
    a.wait_event(state_is(job, "succeeded"))
    return a, job


def acts_nothing(gw, c, job, what):
    """c (not signed in) can read or change nothing of alice's."""
    for t, kw in (("jobs", {"all": True}), ("session.get", {}),
                  ("session.set", {"vars": {"stolen": {"t": "num", "v": 1}}}),
                  ("submit", {"kind": "train", "model": "m", "data": "d"}),
                  ("attach", {"job": job, "after": 0}), ("logs", {"job": job}),
                  ("cancel", {"job": job})):
        r = c.req(t, **kw)
        check(refused(r) and "jobs" not in r and "events" not in r,
              "%s: %s refused with SL_EAUTH" % (what, t), r)
    check(not c.events, "%s: no event reached the connection" % what, c.events[:3])


def case_token_wrong(gw):
    a, job = alice_job(gw)
    long_token = "x" * (64 << 10)
    tokens = {"a wrong token": "wrong-token-0000000000",
              "alice's token hash": token_sha256(TOKENS["alice"]),
              "an empty token": "",
              "a 64 KiB token": long_token,
              "alice's token less its last byte": TOKENS["alice"][:-1],
              "alice's token and one more byte": TOKENS["alice"] + "0"}
    for what, token in tokens.items():
        c, r = hello_refused(gw, token)
        check(refused(r) and "user" not in r, "hello with %s refused" % what, r)
        acts_nothing(gw, c, job, "after a hello with " + what)
        c.close()
    # the constructor's hello says the same
    try:
        GatewayClient(gw.listen, token="wrong-token-0000000000", context=CTX)
        check(False, "GatewayClient with a wrong token is refused")
    except AssertionError as e:
        check(refused(e.args[0]) if e.args and isinstance(e.args[0], dict) else False,
              "GatewayClient with a wrong token is refused (SL_EAUTH)", e.args)
    log = gw.logtext()
    check(all(t not in log for t in tokens.values() if len(t) > 8) and TOKENS["alice"] not in log,
          "no token, right or wrong, in the gateway's log")
    # control: alice's own token on a new connection sees the job and nothing was changed
    ok = Client(gw.listen, "alice")
    jobs = ok.req("jobs", all=True)
    check(jobs["ok"] and any(j["job"] == job for j in jobs["jobs"]),
          "control: alice's own token signs in and lists her job", jobs)
    s = ok.req("session.get")
    check(s["ok"] and "stolen" not in s.get("vars", {}), "alice's session was not written to", s)
    summary = ok.req("attach", job=job, after=10 ** 9)
    check(summary["ok"] and summary["job"]["state"] == "succeeded", "alice's job is as it was")


def case_token_missing(gw):
    a, job = alice_job(gw)
    c = GatewayClient(gw.listen, context=CTX)
    for t in REQUESTS:
        r = c.req(t, job=job, after=0, kind="train", model="m", data="d", action="kill",
                  instance="i-000000000000")
        check(refused(r), "no hello: %s refused with SL_EAUTH" % t, r)
    acts_nothing(gw, c, job, "no hello")
    for what, token in (("no token", None), ("a null token", json.loads("null")),
                        ("a number as token", 12345), ("a list as token", [TOKENS["alice"]]),
                        ("an object as token", {"token": TOKENS["alice"]})):
        r = c.req("hello", client="cli", session="nb",
                  **({} if token is None and what == "no token" else {"token": token}))
        check(refused(r) and "user" not in r, "hello with %s refused" % what, r)
        r = c.req("jobs", all=True)
        check(refused(r), "after a hello with %s: jobs refused" % what, r)
    c.close()
    ok = Client(gw.listen, "alice")
    check(ok.req("attach", job=job, after=10 ** 9)["job"]["state"] == "succeeded",
          "control: alice signs in and her job is as it was")


def two_held_jobs(gw, c):
    """Two jobs each held running on an instance of its own: [(job, summary)]."""
    define(c)
    jobs = [submit(c, steps=50, hold=True) for _ in range(2)]
    out = []
    for job in jobs:
        attach(c, job)
        c.wait_event(lambda e, j=job: e["job"] == j and e["event"] == "checkpoint", timeout=60)
        out.append((job, c.req("attach", job=job, after=10 ** 9)["job"]))
    return out


def sync(s, what):
    """Sends a message of an unknown type, which the gateway answers with an
    SL_EWIRE error, and returns what s received up to that answer: everything
    s sent before it has been handled by then."""
    s.send(b'{"type":"teleport"}')
    got = []
    while s.poll(10000):
        m = json.loads(s.recv())
        if m.get("type") == "error" and m["error"].get("code") == "SL_EWIRE":
            return got
        got.append(m)
    check(False, "%s: the gateway answers the connection" % what)
    return got


def forged(job, summary, step, loss):
    """What a worker would send for job: a metric, a checkpoint and a done."""
    a = summary["attempt"]
    return [{"type": "metric", "job": job, "attempt": a, "data": {"step": step, "loss": loss}},
            {"type": "checkpoint", "job": job, "attempt": a, "step": step,
             "key": "%s/ckpt-%08d.tc" % (job, step), "bytes": 10, "write_ms": 1, "upload_ms": 1},
            {"type": "done", "job": job, "attempt": a, "status": "succeeded", "exit_code": 0,
             "message": "", "step": step}]


def saw_metric(c, job, loss):
    return [e for e in c.events if e["job"] == job and e["event"] == "metric"
            and e.get("loss") == loss]


def job_unmoved(c, job, before, loss, what):
    now = c.req("attach", job=job, after=10 ** 9)["job"]
    check(now["state"] == "running" and now["checkpoint"] == before["checkpoint"]
          and now["step"] == before["step"], "%s: the job is unmoved (state %s, step %s, "
          "checkpoint %s)" % (what, now["state"], now["step"], now["checkpoint"]))
    c.req("ping")  # reads what the gateway sent meanwhile
    check(not saw_metric(c, job, loss), "%s: no metric event reached the job's client" % what)


def control_moves(gw, c, job, summary, loss):
    """The instance's own key sending a metric and a checkpoint moves the job."""
    s, _ = worker_socket(os.path.join(gw.state, "instances", summary["instance"], "worker.json"))
    msgs = forged(job, summary, 7, loss)[:2]
    for m in msgs:
        s.send(json.dumps(m).encode())
    ev = c.wait_event(lambda e: e["job"] == job and e["event"] == "metric" and
                      e.get("loss") == loss, "the control's metric")
    check(ev is not None, "control: the instance's own key moves its job (metric step 7)")
    sync(s, "control")
    now = c.req("attach", job=job, after=10 ** 9)["job"]
    check(now["checkpoint"] == msgs[1]["key"], "control: ... and records its checkpoint (%s)"
          % now["checkpoint"])
    s.close(0)


def case_curve_unregistered(gw):
    c = Client(gw.listen, "alice")
    (job, summary), _ = two_held_jobs(gw, c)
    key = open(os.path.join(gw.state, "gateway.key")).read().split()[0]
    pub, sec = zmq.curve_keypair()
    s = CTX.socket(zmq.DEALER)
    s.linger = 0
    s.curve_serverkey = key.encode()
    s.curve_publickey, s.curve_secretkey = pub, sec
    s.connect(gw.workers)
    plain = CTX.socket(zmq.DEALER)
    plain.linger = 0
    plain.connect(gw.workers)
    for sock in (s, plain):
        sock.send(json.dumps({"type": "register", "instance": summary["instance"], "jobs": [
            {"job": job, "attempt": summary["attempt"], "step": 40}]}).encode())
        for m in forged(job, summary, 40, 0.0404):
            sock.send(json.dumps(m).encode())
    check(gw.wait_log("refused a worker connection"), "the unregistered key's connection refused "
          "and logged")
    check(not s.poll(1000) and not plain.poll(100), "neither connection gets any answer")
    log = gw.logtext()
    check(sec.decode() not in log and pub.decode() not in log, "the keys are not logged")
    job_unmoved(c, job, summary, 0.0404, "unregistered key and a plain socket")
    s.close(0)
    plain.close(0)
    control_moves(gw, c, job, summary, 0.0707)


def case_worker_other_job(gw):
    c = Client(gw.listen, "alice")
    (ja, sa), (jb, sb) = two_held_jobs(gw, c)
    check(sa["instance"] != sb["instance"], "the two jobs run on two instances (%s, %s)"
          % (sa["instance"], sb["instance"]))
    s, cfg = worker_socket(os.path.join(gw.state, "instances", sa["instance"], "worker.json"))
    # A's key, about B's job: with A's own instance (or none) named, then naming B's
    for m in forged(jb, sb, 40, 0.0404):
        s.send(json.dumps(m).encode())
    errors = []
    for m in forged(jb, sb, 41, 0.0414):
        m["instance"] = sb["instance"]
        s.send(json.dumps(m).encode())
    s.send(json.dumps({"type": "heartbeat", "instance": sb["instance"], "jobs": [
        {"job": jb, "attempt": sb["attempt"], "step": 41}]}).encode())
    s.send(json.dumps({"type": "register", "instance": sb["instance"], "jobs": []}).encode())
    for m in sync(s, "A's key"):
        if m.get("type") == "error":
            errors.append(m["error"]["code"])
    check(errors.count("SL_EAUTH") == 5, "each message naming instance B is answered SL_EAUTH "
          "(%s)" % errors)
    check(gw.wait_log("message names another instance"), "... and logged")
    job_unmoved(c, jb, sb, 0.0404, "A's key speaking for B's job")
    job_unmoved(c, jb, sb, 0.0414, "A's key naming B's instance")
    now = c.req("attach", job=ja, after=10 ** 9)["job"]
    check(now["state"] == "running", "A's own job is still running (%s)" % now["state"])
    s.close(0)
    control_moves(gw, c, jb, sb, 0.0707)


CASES = {"token-wrong": case_token_wrong, "token-missing": case_token_missing,
         "curve-unregistered": case_curve_unregistered, "worker-other-job": case_worker_other_job}


def main():
    gw = Gateway(slots=2)
    return run_case(CASES[CASE], gw, cleanup=lambda failed: gateway_cleanup(gw, failed))


if __name__ == "__main__":
    sys.exit(main())
