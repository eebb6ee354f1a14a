#!/usr/bin/env python3
"""Budgets end to end: a real spotlab-gateway (local provider, real
spotlab-worker and spotlab-train), users alice and bob in group ml, and root
an admin.

usage: test_budget.py GATEWAY WORKER TRAIN

Alice trains; once her job has cost something, root sets group ml's budget
over PUT /api/budgets a little above it. Each alert_at threshold (50, 80,
100) reaches alice's session and bob's as one notice; at the hard cap the
job is checkpointed and paused with no step lost, and new submits are
refused with the amount and the cap. The same alerts and the cap reach a
webhook receiver the test runs, signed. A restarted gateway fires nothing
again. Bob's PUT is refused (403); root raises the cap and the job resumes
from the step it stopped at. Every wait has a deadline.
"""
import hashlib
import hmac
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, require  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402

GATEWAY, WORKER, TRAIN = (os.path.abspath(a) for a in sys.argv[1:4])
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-2", "root": "root-token-3"}


HOOK_SECRET = "budget-hook-secret"


class Receiver:
    """Webhook posts to 127.0.0.1:0, each recorded with whether its
    X-Spotlab-Signature verifies."""

    def __init__(self):
        self.posts = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ts = self.headers.get("X-Spotlab-Timestamp", "")
                want = "sha256=" + hmac.new(HOOK_SECRET.encode(), ts.encode() + b"." + body,
                                            hashlib.sha256).hexdigest()
                receiver.posts.append({"event": self.headers.get("X-Spotlab-Event"),
                                       "valid": hmac.compare_digest(
                                           want, self.headers.get("X-Spotlab-Signature", "")),
                                       "body": json.loads(body or b"{}")})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, pred, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = [p for p in list(self.posts) if pred(p)]
            if got:
                return got
            time.sleep(0.1)  # the posts come from the gateway's loop: nothing to wait on
        return []

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def http(base, path, token, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")


def wait_file(path, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.05)  # polling a file: no event to wait on
    return False


def budget_notices(c):
    return [n for n in c.notices if n.get("event") == "budget"]


def ml_budget(base, token):
    code, body = http(base, "/api/budgets", token)
    require(code == 200, "GET /api/budgets", body)
    return [b for b in body["budgets"] if b["scope"] == "group" and b["name"] == "ml"]


def gang_paused(alice, base):
    """A gang (nodes=2) when the cap is reached again: every rank stops,
    rank 0's final checkpoint is the step reached, and it resumes there."""
    r = alice.req("submit", kind="train", model="m", data="d",
                  options={"steps": 10000000, "batch": 4, "threads": 1,
                           "checkpoint_every": 1000000, "nodes": 2})
    require(r["ok"], "submit a gang", r)
    job = r["job"]
    require(alice.req("attach", job=job, after=0)["ok"], "attach the gang")
    alice.wait_event(lambda e: e["job"] == job and e["event"] == "metric" and "step" in e,
                     "the gang's first step", 120)
    spent = ml_budget(base, TOKENS["root"])[0]["spent_usd"]
    code, body = http(base, "/api/budgets/group/ml", TOKENS["root"], "PUT",
                      {"monthly_usd": round(spent + 0.05, 6)})
    check(code == 200, "root lowers the cap near the spend: %s" % body)
    paused = alice.wait_event(lambda e: e["job"] == job and e["event"] == "paused",
                              "the gang paused", 120)
    alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                     e["reason"].startswith("paused: "), "the gang queued again", 60)
    steps = [e["step"] for e in alice.events if e["job"] == job and e["event"] == "metric"
             and "step" in e]
    check(steps and paused["step"] >= max(steps),
          "the gang paused at the last step reached: paused %s, last metric %s"
          % (paused["step"], max(steps) if steps else None))
    code, body = http(base, "/api/budgets/group/ml", TOKENS["root"], "PUT", {"monthly_usd": 1e7})
    check(code == 200, "root raises the cap again: %s" % body)
    m = alice.wait_event(lambda e: e["job"] == job and e["event"] == "metric" and "step" in e and
                         e["step"] > paused["step"] - 1 and e["seq"] > paused["seq"],
                         "a step of the gang after the resume", 120)
    check(paused["step"] < m["step"] <= paused["step"] + 200,
          "the gang resumed from the pause's checkpoint: %s after %s" % (m["step"], paused["step"]))
    alice.req("cancel", job=job)
    alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                     e["state"] == "cancelled", "the gang cancelled", 60)


def gateway_in_force(base, alice):
    """The gateway's budget set live is the one every view shows: the
    kernel protocol's status and cost (%status, spotlab status),
    /api/status, /api/cost and /metrics, not [budget] monthly_usd."""
    code, st = http(base, "/api/status", TOKENS["root"])
    file_usd = st["budget"]["monthly_usd"]
    require(code == 200 and file_usd > 0, "the file's budget in /api/status", st)
    live = 123456.5
    check(live != file_usd, "a live amount other than the file's")
    code, body = http(base, "/api/budgets/gateway", TOKENS["root"], "PUT", {"monthly_usd": live})
    check(code == 200, "root sets the gateway's budget: %s %s" % (code, body))
    seen = {}
    code, st = http(base, "/api/status", TOKENS["alice"])
    seen["/api/status"] = (st.get("budget") or {}).get("monthly_usd")
    code, cost = http(base, "/api/cost", TOKENS["alice"])
    seen["/api/cost"] = cost.get("budget_usd")
    r = alice.req("status")
    seen["status"] = (r.get("budget") or {}).get("monthly_usd")
    seen["hard_cap"] = (r.get("budget") or {}).get("hard_cap")
    seen["cost"] = alice.req("cost").get("budget_usd")
    with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    seen["/metrics"] = [line for line in metrics.splitlines()
                        if line.startswith("spotlab_budget_monthly_usd ")]
    check(seen == {"/api/status": live, "/api/cost": live, "status": live, "hard_cap": True,
                   "cost": live, "/metrics": ["spotlab_budget_monthly_usd %.17g" % live]},
          "the live gateway budget %s everywhere (the file's %s): %s" % (live, file_usd, seen))


def main():
    folder = tempfile.mkdtemp(prefix="gw-budget-")
    opts = {"alice": "group = ml\n", "bob": "group = ml\n", "root": "admin = yes\n"}
    rx = Receiver()
    # a market that never takes an instance back: every step a metric shows
    # belongs to the attempt the cap pauses
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2, time_scale=3600, user_options=opts,
                        market_capacity=4,
                        extra_ini="[idle]\nworker_timeout = 10m\n[group.ml]\nmonthly_usd = 1000\n"
                                  "alert_at = 50,80,100\nhard_cap = yes\n"
                                  "[webhook.team]\nurl = http://127.0.0.1:%d/team\n"
                                  "events = budget.alert,budget.cap\nsecret = %s\n"
                                  % (rx.port, HOOK_SECRET),
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                             "SPOTLAB_DEBUG": None})
    with open(gw.ini) as f:
        ini = f.read().replace("[gateway]\n", "[gateway]\nhttp = 127.0.0.1:0\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini)
    text = os.path.join(folder, "text.txt")
    with open(text, "w") as f:
        f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
    gw.start()
    try:
        require(gw.wait_log("HTTP API and /metrics on http://127.0.0.1:", 20), "HTTP listens",
                gw.logtail())
        base = "http://" + open(os.path.join(gw.state, "http.address")).read().strip()
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        bob = GatewayClient(gw.listen, TOKENS["bob"], session="bobs")
        r = alice.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
                "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "session.set", r)
        r = alice.req("submit", kind="train", model="m", data="d",
                      options={"steps": 10000000, "batch": 4, "threads": 1, "checkpoint_every": 1000000})
        require(r["ok"], "submit", r)
        job = r["job"]
        require(alice.req("attach", job=job, after=0)["ok"], "attach")
        cost = alice.wait_event(lambda e: e["job"] == job and e["event"] == "cost" and
                                e["cost_usd"] > 0, "the job's first cost", 120)
        # the cap a little above what is spent: every threshold lies ahead
        cap = round(cost["cost_usd"] * 2.5, 6)
        code, body = http(base, "/api/budgets/group/ml", TOKENS["root"], "PUT", {"monthly_usd": cap})
        check(code == 200, "root sets ml's budget to %s: %s %s" % (cap, code, body))
        check("note" not in body, "ml is a group of the file: no note: %s" % body.get("note"))
        code, body = http(base, "/api/budgets/group/ml", TOKENS["bob"], "PUT", {"monthly_usd": 1e6})
        check(code == 403, "bob's PUT is refused: %s %s" % (code, body))
        # a budget that applies to no one yet is kept, and the reply says so
        for path, known, says in (("group/mlx", False, "no [group.mlx] section"),
                                  ("user/alice", True, ""), ("user/dave", False, "user dave is on record")):
            code, body = http(base, "/api/budgets/" + path, TOKENS["root"], "PUT", {"monthly_usd": 1e6})
            check(code == 200 and ("note" not in body if known else says in body.get("note", "")),
                  "PUT %s: %s note: %s %s" % (path, "no" if known else "a", code, body.get("note")))
        for pct in (50, 80, 100):
            n = alice.wait_notice(lambda n: n.get("event") == "budget" and not n["cap"] and
                                  n["threshold_pct"] == pct, "the %d%% alert" % pct, 120)
            check(n["scope"] == "group" and n["name"] == "ml" and
                  ("of its $%.2f monthly budget (%d%%)" % (cap, pct)) in n["text"],
                  "alice's %d%% notice: %s" % (pct, n["text"]))
        capn = alice.wait_notice(lambda n: n.get("event") == "budget" and n["cap"], "the cap", 60)
        check("group ml's monthly budget is spent" in capn["text"], "the cap notice: %s" % capn["text"])
        paused = alice.wait_event(lambda e: e["job"] == job and e["event"] == "paused",
                                  "the job paused", 120)
        queued = alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                                  e["reason"].startswith("paused: "), "the job queued again", 60)
        check("group ml's monthly budget is spent: $" in queued["reason"], queued["reason"])
        steps1 = [e["step"] for e in alice.events if e["job"] == job and e["event"] == "metric"
                  and "step" in e]
        check(steps1 and paused["step"] >= max(steps1),
              "paused at the last step reached, none lost: paused %s, last metric %s"
              % (paused["step"], max(steps1) if steps1 else None))
        r = bob.req("submit", kind="run", script="true", options={})
        check(not r["ok"] and "group ml's monthly budget is spent: $" in r["error"]["message"] and
              ("of $%.2f" % cap) in r["error"]["message"], "bob's submit is refused: %s" % r)
        for c in (alice, bob):
            c.req("ping")  # reads every notice sent so far
        for c, who in ((alice, "alice"), (bob, "bob")):
            got = sorted((n["threshold_pct"], n["cap"]) for n in budget_notices(c))
            check([p for p, cp in got if not cp] == [50, 80, 100] and
                  len([1 for p, cp in got if cp]) == 1, "%s: each notice once: %s" % (who, got))
        cap_posts = rx.wait(lambda p: p["event"] == "budget.cap", 30)
        alerts = sorted(p["body"]["budget"]["threshold_pct"] for p in rx.posts
                        if p["event"] == "budget.alert")
        check(alerts == [50, 80, 100] and len(cap_posts) == 1,
              "the webhook got each alert once and the cap once: %s, %d" % (alerts, len(cap_posts)))
        check(rx.posts and all(p["valid"] and p["body"].get("text") and
                               p["body"]["budget"]["scope"] == "group" and
                               p["body"]["budget"]["name"] == "ml" for p in rx.posts),
              "every post signed, with a text, for group ml: %s" % [p["body"] for p in rx.posts])
        with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        check('spotlab_budget_scope_capped{scope="group",name="ml"} 1\n' in metrics and
              'spotlab_budget_scope_usd{scope="group",name="ml"} %.17g\n' % cap in metrics,
              "/metrics shows ml's budget capped: %s" %
              [l for l in metrics.splitlines() if "scope_" in l and "ml" in l])
        b = ml_budget(base, TOKENS["alice"])
        check(b and b[0]["fired"] == [50, 80, 100] and b[0]["capped"] and b[0].get("override"),
              "alice sees ml's budget: %s" % b)
        lines = gw.logtext().count("Budget alert: group ml")
        alice.close()
        bob.close()
        # a restart fires nothing again
        gw.stop()
        os.unlink(os.path.join(gw.state, "http.address"))
        gw.start()
        require(gw.wait_log("HTTP API and /metrics on http://127.0.0.1:", 20) and
                wait_file(os.path.join(gw.state, "http.address"), 20), "HTTP again")
        base = "http://" + open(os.path.join(gw.state, "http.address")).read().strip()
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        require(alice.req("attach", job=job, after=queued["seq"])["ok"], "attach again")
        b = ml_budget(base, TOKENS["root"])
        check(b and b[0]["capped"] and b[0]["budget_usd"] == cap, "the cap survived: %s" % b)
        alice.req("ping")
        check(not budget_notices(alice), "no notice after the restart: %s" % budget_notices(alice))
        check(gw.logtext().count("Budget alert: group ml") == lines, "no alert logged again")
        # raised live: the job goes on from its checkpoint
        code, body = http(base, "/api/budgets/group/ml", TOKENS["root"], "PUT", {"monthly_usd": 1e6})
        check(code == 200, "root raises the cap: %s" % body)
        alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                         e["state"] == "running", "the job running again", 120)
        m = alice.wait_event(lambda e: e["job"] == job and e["event"] == "metric" and "step" in e,
                             "a step after the resume", 120)
        check(m["step"] > paused["step"],
              "resumed after step %s, not before it: %s" % (paused["step"], m["step"]))
        check(m["step"] <= paused["step"] + 200, "resumed from the pause's checkpoint: %s" % m["step"])
        alice.req("cancel", job=job)
        alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                         e["state"] == "cancelled", "the job cancelled", 60)
        gang_paused(alice, base)
        gateway_in_force(base, alice)
        alice.close()
    finally:
        from checks import failures
        if failures:
            print("gateway log:\n" + gw.logtail(12000), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)
        rx.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
