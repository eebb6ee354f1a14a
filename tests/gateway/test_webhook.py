#!/usr/bin/env python3
"""Webhooks end to end: a real spotlab-gateway with the local provider (real
spotlab-worker instances) posts to receivers this script runs on loopback.

usage: test_webhook.py GATEWAY WORKER TRAIN

Hooks: "ok" answers 200 and takes every event; "flaky" answers 500 twice,
then 200; "down" always answers 500 (retries = 2); "gone" points at a port
nobody listens on (retries = 1); "slow" holds its requests unanswered until
the script lets go. Every request's X-Spotlab-Signature is checked with
Python's hmac against the hook's secret. Checks: job.succeeded and
job.failed reach "ok" once each, signed, with a text; "flaky" gets its event
on the 3rd try under one delivery id; "down" and "gone" end as failed in
/metrics (which promtool accepts); the gateway answers a ping at once while
"slow" holds its requests, and stops at once with one in flight; an idle worker's shutdown, a preemption (an
injected kill) and a cancel arrive as idle.shutdown, job.preempted and
job.cancelled. Every wait has a deadline.
"""
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, failures, require  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402

GATEWAY, WORKER, TRAIN = (os.path.abspath(a) for a in sys.argv[1:4])
TOKENS = {"alice": "alice-token-1"}
# "ok"'s key is longer than SHA-256's block: HMAC hashes it first, as Python's hmac does
SECRETS = {"ok": "k" * 100, "flaky": "flaky-secret-from-a-file", "down": "down-secret",
           "slow": "slow-secret"}
ALL_EVENTS = "job.succeeded,job.failed,job.preempted,job.cancelled,idle.shutdown"


class Receiver:
    """An HTTP server on 127.0.0.1:0 in threads of its own: every POST is
    verified, recorded and answered as its path's hook behaves."""

    def __init__(self):
        self.cond = threading.Condition()
        self.requests = []          # dicts: hook, event, delivery, valid, body, status, t
        self.release = threading.Event()
        self.tries = {}             # flaky: tries per delivery id
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                receiver.handle(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, h):
        hook = h.path.strip("/")
        n = int(h.headers.get("Content-Length", "0"))
        body = h.rfile.read(n)
        ts = h.headers.get("X-Spotlab-Timestamp", "")
        sig = h.headers.get("X-Spotlab-Signature", "")
        valid = verifies(SECRETS.get(hook, "").encode(), ts, body, sig)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        rec = {"hook": hook, "event": h.headers.get("X-Spotlab-Event"),
               "delivery": h.headers.get("X-Spotlab-Delivery"), "valid": valid,
               "content_type": h.headers.get("Content-Type"), "body": payload,
               "raw": body, "ts": ts, "sig": sig, "status": None, "t": time.monotonic()}
        if hook == "slow":
            with self.cond:
                self.requests.append(rec)
                self.cond.notify_all()
            self.release.wait(60)
        status = 200
        if hook == "flaky":
            with self.cond:
                k = self.tries[rec["delivery"]] = self.tries.get(rec["delivery"], 0) + 1
            status = 500 if k <= 2 else 200
        elif hook == "down":
            status = 500
        rec["status"] = status
        try:
            h.send_response(status)
            h.send_header("Content-Length", "0")
            h.end_headers()
        except OSError:
            pass  # the gateway gave up on it (slow)
        with self.cond:
            if hook != "slow":
                self.requests.append(rec)
            self.cond.notify_all()

    def wait(self, pred, what, timeout):
        """The requests for which pred is true, once there is one; [] after timeout."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                got = [r for r in self.requests if pred(r)]
                if got or time.monotonic() >= end:
                    if not got:
                        print("waited in vain for %s; requests: %s" % (what, [
                            (r["hook"], r["event"], r["status"]) for r in self.requests]))
                    return got
                self.cond.wait(end - time.monotonic())

    def of(self, hook, event, job=None):
        with self.cond:
            return [r for r in self.requests if r["hook"] == hook and r["event"] == event and
                    (job is None or r["body"].get("job", {}).get("id") == job)]

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port():
    """A loopback port nobody listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read().decode()


def metric(text, name, **labels):
    """The value of name{labels} in an exposition text, or None."""
    want = name + "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "} "
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    return None


def wait_metric(base, what, pred, timeout):
    """The /metrics text once pred(text) holds; the last text after timeout."""
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        text = get(base, "/metrics")
        if pred(text):
            return text
        time.sleep(0.2)  # /metrics is a pull interface: polling is how it is read
    print("waited in vain for %s" % what)
    return text


def submit(c, script):
    r = c.req("submit", kind="run", script=script, options={})
    require(r["ok"], "submit %s" % script, r)
    require(c.req("attach", job=r["job"], after=0)["ok"], "attach %s" % r["job"])
    return r["job"]


def ended(c, job, timeout=120):
    return c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                        e["state"] in ("succeeded", "failed", "cancelled"),
                        "the end of %s" % job, timeout)["state"]


def verifies(key, ts, body, sig):
    """Whether sig (X-Spotlab-Signature) signs ts and body with key, as a
    receiver checks it: HMAC-SHA256 of "TS.BODY", and TS within 5 minutes."""
    if not ts.isdigit():
        return False
    want = "sha256=" + hmac.new(key, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, sig) and abs(time.time() - int(ts)) < 300


def check_signed(recs, what):
    r = recs[0] if recs else {}
    check(recs and r["valid"] and r["content_type"] == "application/json",
          "%s: signed (X-Spotlab-Signature verifies with Python's hmac)" % what, r)
    # the receiver's check refuses the same delivery under another key, with
    # another body, or with its timestamp changed: it is able to fail
    if recs:
        ts, raw, sig = r["ts"], r["raw"], r["sig"]
        check(not verifies(b"another key", ts, raw, sig) and
              not verifies(SECRETS[r["hook"]].encode(), ts, raw + b" ", sig) and
              not verifies(SECRETS[r["hook"]].encode(), str(int(ts) + 1), raw, sig),
              "%s: the signature fails under another key, body or timestamp" % what)


def write_ini(gw, folder, port, gone):
    key = os.path.join(folder, "flaky.key")
    with open(key, "w") as f:
        f.write(SECRETS["flaky"] + "\n")
    base = "http://127.0.0.1:%d/" % port
    hooks = ("[webhook.ok]\nurl = %sok\nevents = %s\nsecret = %s\n"
             "[webhook.flaky]\nurl = %sflaky\nevents = job.succeeded\nsecret_file = flaky.key\n"
             "[webhook.down]\nurl = %sdown\nevents = job.succeeded\nsecret = %s\nretries = 2\n"
             "[webhook.gone]\nurl = http://127.0.0.1:%d/x\nevents = job.succeeded\nsecret = g\n"
             "retries = 1\ntimeout = 2s\n"
             "[webhook.slow]\nurl = %sslow\nevents = job.succeeded,job.failed,job.cancelled\n"
             "secret = %s\n"
             "timeout = 40s\nretries = 0\n"
             % (base, ALL_EVENTS, SECRETS["ok"], base, base, SECRETS["down"], gone, base,
                SECRETS["slow"]))
    with open(gw.ini) as f:  # [gateway] comes first in the file GatewayProcess writes
        ini = f.read().replace("[gateway]\n", "[gateway]\nhttp = 127.0.0.1:0\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini + hooks)


def check_ends(rx, a, b):
    ok_a = rx.wait(lambda r: r["hook"] == "ok" and r["event"] == "job.succeeded", "ok: job.succeeded", 20)
    ok_b = rx.wait(lambda r: r["hook"] == "ok" and r["event"] == "job.failed", "ok: job.failed", 20)
    for recs, job, state in ((ok_a, a, "succeeded"), (ok_b, b, "failed")):
        body = recs[0]["body"] if recs else {}
        check(body.get("event") == "job." + state and body.get("job", {}).get("id") == job and
              body["job"].get("state") == state and body["job"].get("user") == "alice" and
              body["job"].get("instance") and body.get("time", "").endswith("Z"),
              "ok: job.%s names %s, its state, user and instance" % (state, job), body)
        check(job in body.get("text", "") and state in body.get("text", ""),
              "ok: job.%s has a text: %r" % (state, body.get("text")))
        check_signed(recs, "ok: job.%s" % state)
    check(ok_a and len(ok_a[0]["delivery"] or "") == 32, "a delivery id of 32 hex digits")


def check_slow(rx, gw, base):
    held = rx.wait(lambda r: r["hook"] == "slow", "slow: a held request", 20)
    check(held, "slow: its request arrived and is held unanswered")
    c = GatewayClient(gw.listen, TOKENS["alice"], session="ping")
    times = []
    for _ in range(5):
        t0 = time.monotonic()
        r = c.req("ping", timeout=5)
        times.append(time.monotonic() - t0)
        check(r["ok"], "ping answered while slow holds its request")
    c.close()
    # a loop that waited on the receiver would answer only at its 40 s timeout; 2 s is
    # slack for a loaded machine
    check(max(times) < 2, "ping answers at once meanwhile: %s s" % ["%.3f" % t for t in times])
    t0 = time.monotonic()
    text = get(base, "/metrics")
    check(time.monotonic() - t0 < 2, "/metrics answers at once meanwhile")
    pending = metric(text, "spotlab_webhook_pending", webhook="slow")
    check(pending is not None and pending >= 1, "slow's delivery is pending: %s" % pending)
    rx.release.set()
    text = wait_metric(base, "slow delivered", lambda t: metric(
        t, "spotlab_webhook_deliveries_total", webhook="slow", event="job.succeeded",
        outcome="delivered") == 1, 20)
    check(metric(text, "spotlab_webhook_deliveries_total", webhook="slow", event="job.succeeded",
                 outcome="delivered") == 1, "slow: delivered once let go")


def check_retries(rx, base, a):
    got = rx.wait(lambda r: r["hook"] == "flaky" and r["status"] == 200, "flaky: a 200", 30)
    tries = sorted(rx.of("flaky", "job.succeeded", a), key=lambda r: r["t"])
    check(got and [r["status"] for r in tries] == [500, 500, 200],
          "flaky: 500, 500, then delivered on the 3rd try: %s" % [r["status"] for r in tries])
    check(len({r["delivery"] for r in tries}) == 1 and all(r["valid"] for r in tries),
          "flaky: one delivery id, every try signed (secret_file)")
    gaps = [y["t"] - x["t"] for x, y in zip(tries, tries[1:])]
    check(len(gaps) == 2 and gaps[0] >= 0.4 and gaps[1] >= 0.9,
          "flaky: the waits back off (about 1 s, then 2 s): %s" % ["%.2f" % g for g in gaps])

    def done(t):
        return (metric(t, "spotlab_webhook_deliveries_total", webhook="down", event="job.succeeded",
                       outcome="failed") == 1 and
                metric(t, "spotlab_webhook_deliveries_total", webhook="gone", event="job.succeeded",
                       outcome="failed") == 1)
    text = wait_metric(base, "down and gone failed", done, 40)
    check(done(text), "down and gone end as failed in /metrics")
    check(len(rx.of("down", "job.succeeded")) == 3, "down: 1 + retries (2) tries: %d" %
          len(rx.of("down", "job.succeeded")))
    for hook, retries in (("down", 2), ("gone", 1), ("flaky", 2), ("ok", 0)):
        v = metric(text, "spotlab_webhook_retries_total", webhook=hook)
        check(v == retries, "retries of %s: %s" % (hook, v))
    for hook in ("down", "gone", "flaky"):
        check(metric(text, "spotlab_webhook_pending", webhook=hook) == 0, "%s: nothing pending" % hook)
    check(metric(text, "spotlab_webhook_deliveries_total", webhook="flaky", event="job.succeeded",
                 outcome="delivered") == 1, "flaky: delivered in /metrics")
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, "promtool check metrics passes: %s%s" % (p.stdout, p.stderr))


def check_preempt_cancel(rx, c):
    job = submit(c, "sleep 120")
    c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and e["state"] == "running",
                 "%s running" % job, 120)
    placed = [e for e in c.events if e["job"] == job and e["event"] == "placed"]
    require(placed, "%s was placed" % job)
    r = c.req("inject", action="kill", instance=placed[-1]["instance"])
    check(r["ok"], "kill injected: %s" % r)
    pre = rx.wait(lambda r: r["hook"] == "ok" and r["event"] == "job.preempted", "job.preempted", 60)
    body = pre[0]["body"] if pre else {}
    check(body.get("job", {}).get("id") == job and body["job"].get("instance") ==
          placed[-1]["instance"] and body.get("notice") is False and job in body.get("text", ""),
          "ok: job.preempted names the job and the lost instance, without notice", body)
    check_signed(pre, "ok: job.preempted")
    rx.release.clear()  # slow holds the job.cancelled post: in flight when the gateway stops
    check(c.req("cancel", job=job)["ok"], "cancel accepted")
    check(ended(c, job) == "cancelled", "%s cancelled" % job)
    can = rx.wait(lambda r: r["hook"] == "ok" and r["event"] == "job.cancelled", "job.cancelled", 20)
    check(can and can[0]["body"]["job"]["id"] == job and can[0]["valid"],
          "ok: job.cancelled for %s" % job)


def main():
    require(shutil.which("promtool"), "promtool is installed (Debian's prometheus package)")
    folder = tempfile.mkdtemp(prefix="gw-webhook-")
    rx = Receiver()
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2,
                        extra_ini="[idle]\nworker_timeout = 4s\n",
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                             "SPOTLAB_DEBUG": "gateway.webhook"})
    write_ini(gw, folder, rx.port, closed_port())
    gw.start()
    try:
        require(gw.wait_log("HTTP API and /metrics on http://127.0.0.1:", 20), "the gateway starts",
                gw.logtail())
        with open(os.path.join(gw.state, "http.address")) as f:
            base = "http://" + f.read().strip()
        c = GatewayClient(gw.listen, TOKENS["alice"])
        a = submit(c, "sleep 1")
        b = submit(c, "exit 3")
        check(ended(c, a) == "succeeded" and ended(c, b) == "failed", "one job succeeds, one fails")
        check_ends(rx, a, b)
        check_slow(rx, gw, base)
        check_retries(rx, base, a)
        idle = rx.wait(lambda r: r["hook"] == "ok" and r["event"] == "idle.shutdown",
                       "idle.shutdown", 60)
        body = idle[0]["body"] if idle else {}
        check(body.get("instance", {}).get("user") == "alice" and body["instance"].get("id") and
              "Idle shutdown" in body.get("text", ""),
              "ok: idle.shutdown names the instance and its user", body)
        check_signed(idle, "ok: idle.shutdown")
        check_preempt_cancel(rx, c)
        c.close()
        for job, event in ((a, "job.succeeded"), (b, "job.failed")):
            n = len(rx.of("ok", event, job))
            check(n == 1, "ok: %s of %s arrived once: %d" % (event, job, n))
        with rx.cond:
            bad = [(r["hook"], r["event"]) for r in rx.requests if not r["valid"]]
        check(not bad, "every request was signed with its hook's key: %s" % bad)
        check("k" * 100 not in gw.logtext() and SECRETS["flaky"] not in gw.logtext() and
              "127.0.0.1:%d/ok" % rx.port not in gw.logtext(),
              "neither secrets nor URLs reach the log")
        check(rx.wait(lambda r: r["hook"] == "slow" and r["event"] == "job.cancelled",
                      "slow: job.cancelled held", 20), "slow holds a post as the gateway stops")
        t0 = time.monotonic()
        rc = gw.stop()
        check(rc == 0 and time.monotonic() - t0 < 8,
              "the gateway stops at once and cleanly with a post in flight (exit %s)" % rc)
    finally:
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)  # workers outlive a stopped gateway by design
        rx.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
