#!/usr/bin/env python3
"""The HTTP API and /metrics end to end: a real spotlab-gateway with
[gateway] http = 127.0.0.1:0 and the local provider (real spotlab-worker
instances), two users and an admin, a %%run job each for alice and bob.

usage: test_http.py GATEWAY WORKER TRAIN

Checks the API's authorisation (no token or a bad one 401; a user reads
only their own jobs and costs, another user's job 403, an unknown one 404;
an admin reads everyone's), `promtool check metrics` on /metrics, and a real
Prometheus scraping the gateway every second whose query API returns the
series the jobs produced. Every wait has a deadline.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, require  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402

GATEWAY, WORKER, TRAIN = (os.path.abspath(a) for a in sys.argv[1:4])
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-2", "root": "root-token-3"}


def get(base, path, token=None, method="GET"):
    """(status, body as text) of one request."""
    headers = {"Authorization": "Bearer " + token} if token else {}
    req = urllib.request.Request(base + path, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(base, path, token=None, method="GET"):
    code, body = get(base, path, token, method)
    try:
        return code, json.loads(body)
    except ValueError:
        return code, {"unparsed": body}


def run_job(c, script):
    r = c.req("submit", kind="run", script=script, options={})
    require(r["ok"], "submit %s" % script, r)
    require(c.req("attach", job=r["job"], after=0)["ok"], "attach %s" % r["job"])
    return r["job"]


def wait_end(c, job):
    e = c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                     e["state"] in ("succeeded", "failed", "cancelled"), "the end of %s" % job, 120)
    check(e["state"] == "succeeded", "%s succeeded: %s" % (job, e))


def check_api(base, alice_job, bob_job):
    code, body = get_json(base, "/api/jobs")
    check(code == 401 and "Bearer" in body["error"]["message"], "no token: 401 %s" % body)
    check(get(base, "/api/status", "not-a-token")[0] == 401, "a bad token: 401")
    check(get(base, "/api/cost", "")[0] == 401, "an empty token: 401")

    code, body = get_json(base, "/api/jobs", TOKENS["alice"])
    ids = [j["job"] for j in body.get("jobs", [])]
    check(code == 200 and ids == [alice_job], "alice lists only her job: %s %s" % (code, ids))
    code, body = get_json(base, "/api/jobs/" + bob_job, TOKENS["alice"])
    check(code == 403 and "error" in body, "alice reading bob's job: 403 %s" % body)
    code, body = get_json(base, "/api/jobs?user=bob", TOKENS["alice"])
    check(code == 403, "alice listing bob's jobs: 403 %s" % body)
    code, body = get_json(base, "/api/cost?user=bob", TOKENS["alice"])
    check(code == 403, "alice reading bob's cost: 403 %s" % body)
    code, body = get_json(base, "/api/jobs/J999999", TOKENS["alice"])
    check(code == 404, "an unknown job: 404 %s" % body)
    check(get(base, "/api/nothing", TOKENS["alice"])[0] == 404, "an unknown resource: 404")
    code, body = get_json(base, "/api/jobs", TOKENS["alice"], method="POST")
    check(code == 405, "POST: 405 %s" % body)

    code, body = get_json(base, "/api/jobs/" + alice_job, TOKENS["alice"])
    states = [e.get("state") for e in body.get("events", []) if e.get("event") == "state"]
    check(code == 200 and body["job"] == alice_job and "succeeded" in states,
          "alice reads her job with its events: %s %s" % (code, states))
    code, cost = get_json(base, "/api/cost", TOKENS["alice"])
    check(code == 200 and [r["key"] for r in cost["by_user"]] == ["alice"] and
          [r["key"] for r in cost["by_job"]] == [alice_job] and cost["spent_usd"] > 0 and
          cost["by_type"] and cost["by_day"], "alice's cost is hers alone and not zero: %s" % cost)
    code, body = get_json(base, "/api/instances", TOKENS["alice"])
    check(code == 200 and all(i["user"] == "alice" for i in body["instances"]),
          "alice sees only her instances: %s" % body)
    code, body = get_json(base, "/api/status", TOKENS["alice"])
    check(code == 200 and body["user"] == "alice" and not body["admin"] and
          "clients" not in body["gateway"], "alice's status: %s" % body)

    code, body = get_json(base, "/api/jobs", TOKENS["root"])
    check(code == 200 and sorted(j["job"] for j in body["jobs"]) == sorted([alice_job, bob_job]),
          "the admin lists every job: %s" % body)
    code, body = get_json(base, "/api/jobs?user=bob", TOKENS["root"])
    check(code == 200 and [j["job"] for j in body["jobs"]] == [bob_job], "the admin picks bob: %s" % body)
    code, body = get_json(base, "/api/jobs/" + bob_job, TOKENS["root"])
    check(code == 200 and body["user"] == "bob", "the admin reads bob's job: %s" % code)
    code, body = get_json(base, "/api/cost", TOKENS["root"])
    check(code == 200 and sorted(r["key"] for r in body["by_user"]) == ["alice", "bob"],
          "the admin sees every user's cost: %s" % body)
    code, body = get_json(base, "/api/cost?user=bob", TOKENS["root"])
    check(code == 200 and [r["key"] for r in body["by_job"]] == [bob_job], "the admin reads bob's cost")
    code, body = get_json(base, "/api/status", TOKENS["root"])
    check(code == 200 and body["admin"] and "clients" in body["gateway"], "the admin's status: %s" % body)


def check_metrics(base):
    code, text = get(base, "/metrics")
    check(code == 200, "/metrics without a token: %s" % code)
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, "promtool check metrics passes: %s%s" % (p.stdout, p.stderr))
    check('spotlab_jobs{state="succeeded"} 2\n' in text, "two succeeded jobs in /metrics")
    for user in ("alice", "bob"):
        check('spotlab_spend_usd_total{user="%s"} ' % user in text, "%s's spend in /metrics" % user)
    check("spotlab_http_request_duration_seconds_bucket{le=\"+Inf\"}" in text and
          'spotlab_http_requests_total{code="403"}' in text, "the server's own requests counted")
    check("spotlab_gateway_build_info{version=" in text, "build info")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prom_query(prom, query):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def check_prometheus(folder, address):
    port = free_port()
    cfg = os.path.join(folder, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: spotlab\n    static_configs:\n"
                "      - targets: ['%s']\n" % address)
    log = open(os.path.join(folder, "prometheus.log"), "wb")
    p = subprocess.Popen(["prometheus", "--config.file=" + cfg,
                          "--storage.tsdb.path=" + os.path.join(folder, "tsdb"),
                          "--web.listen-address=127.0.0.1:%d" % port],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    prom = "http://127.0.0.1:%d" % port
    try:
        found, spend, r = None, None, None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (found and spend):
            r = prom_query(prom, 'spotlab_jobs{state="succeeded"}')
            res = (r or {}).get("data", {}).get("result", [])
            found = res if res and res[0]["value"][1] == "2" else None
            r2 = prom_query(prom, 'spotlab_spend_usd_total{user="alice"} > 0')
            spend = (r2 or {}).get("data", {}).get("result", []) or None
            time.sleep(0.5)  # Prometheus's query API: polling is its interface
        check(found and found[0]["metric"].get("job") == "spotlab",
              "Prometheus scraped spotlab_jobs{state=succeeded} = 2: %s" % r)
        check(spend, "Prometheus has alice's spend")
        r = prom_query(prom, 'up{job="spotlab"}')
        check(r and r["data"]["result"] and r["data"]["result"][0]["value"][1] == "1",
              "the scrape target is up: %s" % r)
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
        if not found:
            with open(os.path.join(folder, "prometheus.log"), errors="replace") as f:
                print("prometheus log:\n" + f.read()[-4000:], file=sys.stderr)


def main():
    for tool in ("promtool", "prometheus"):
        require(shutil.which(tool), "%s is installed (Debian's prometheus package)" % tool)
    folder = tempfile.mkdtemp(prefix="gw-http-")
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2, user_options={"root": "admin = yes\n"},
                        extra_ini="[idle]\nworker_timeout = 10m\n",
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                             "SPOTLAB_DEBUG": None})
    with open(gw.ini) as f:  # [gateway] comes first in the file GatewayProcess writes
        ini = f.read().replace("[gateway]\n", "[gateway]\nhttp = 127.0.0.1:0\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini)
    gw.start()
    try:
        require(gw.wait_log("HTTP API and /metrics on http://127.0.0.1:", 20), "the HTTP server listens",
                gw.logtail())
        with open(os.path.join(gw.state, "http.address")) as f:
            address = f.read().strip()
        check(address.startswith("127.0.0.1:") and not address.endswith(":0"),
              "the bound port is in http.address: %s" % address)
        base = "http://" + address
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        bob = GatewayClient(gw.listen, TOKENS["bob"])
        a = run_job(alice, "sleep 3")
        b = run_job(bob, "sleep 3")
        wait_end(alice, a)
        wait_end(bob, b)
        check_api(base, a, b)
        check_metrics(base)
        check_prometheus(folder, address)
        alice.close()
        bob.close()
    finally:
        from checks import failures
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)  # workers outlive a stopped gateway by design
        shutil.rmtree(folder, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
