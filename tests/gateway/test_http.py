#!/usr/bin/env python3
"""The HTTP API and /metrics end to end: a real spotlab-gateway with
[gateway] http = 127.0.0.1:0 and the local provider (real spotlab-worker
instances), two users and an admin, a %%run job each for alice and bob.

usage: test_http.py GATEWAY WORKER TRAIN

Checks the API's authorisation (no token or a bad one 401; a user reads
only their own jobs and costs, another user's job 404 exactly as an unknown one;
an admin reads everyone's), that every /api/cost row has the same fields, the
connection limits (one address holding idle connections cannot block another,
and a connection without a request head is closed after 10 s),
`promtool check metrics` on /metrics, and a real
Prometheus scraping the gateway every second whose query API returns the
series the jobs produced. A train job of carol's (group ml) is preempted
once and recovers: its recovery, checkpoint times and steps lost reach
/metrics and Prometheus, and its energy and emissions agree with its
instance types' rows of the shipped carbon table and its hours. Every wait
has a deadline.
"""
import http.client
import json
import os
import select
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
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-2", "root": "root-token-3",
          "carol": "carol-token-4"}
CARBON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gateway", "carbon.json")


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


def check_keepalive(address):
    """Requests on one connection: each answered on it and the connection
    kept (the admin page polls; Prometheus scrapes every second), also after
    a refused method whose body the gateway passes over."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    auth = {"Authorization": "Bearer " + TOKENS["alice"]}
    seen = []
    for method, path, body in (("GET", "/api/jobs", None), ("GET", "/metrics", None),
                               ("POST", "/api/jobs", b"x" * 3000), ("HEAD", "/api/jobs", None),
                               ("GET", "/api/jobs", None)):
        conn.request(method, path, body=body, headers=auth)
        r = conn.getresponse()
        r.read()
        seen.append((method, r.status, r.getheader("Connection"), conn.sock.getsockname() if conn.sock else None))
    socks = {x[3] for x in seen}
    check([x[1] for x in seen] == [200, 200, 405, 200, 200] and len(socks) == 1 and None not in socks
          and not any(x[2] for x in seen),
          "five requests on one kept-alive connection: %s" % [x[:3] for x in seen])
    conn.close()


PER_ADDRESS = 32      # gateway/http.c CONNECTIONS_PER_ADDRESS_MAX
REQUEST_TIMEOUT_S = 10  # gateway/http.c REQUEST_TIMEOUT_S; an answered connection idles 30 s


def wait_closed(socks, deadline, enough):
    """The sockets of socks the server closes (EOF or a reset) before
    deadline, waiting no longer once enough of them are, then a last look
    at the rest without waiting."""
    gone = []
    while True:
        left = deadline - time.monotonic()
        open_ = [x for x in socks if x not in gone]
        if not open_:
            return gone
        if len(gone) >= enough:
            left = 0
        ready, _, _ = select.select(open_, [], [], max(left, 0))
        for x in ready:
            try:
                if x.recv(1) == b"":
                    gone.append(x)
            except OSError:  # reset
                gone.append(x)
        if left <= 0:
            return gone


def status_from(address, source):
    """The status code of GET /api/status from source (an address of lo),
    or None when the connection is closed unanswered."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", "/api/status", headers={"Authorization": "Bearer " + TOKENS["alice"]})
        r = conn.getresponse()
        r.read()
        return r.status
    except (http.client.RemoteDisconnected, ConnectionError):
        return None
    finally:
        conn.close()


def check_connection_limits(address):
    """One address holding more idle connections than the server has
    (half a request line each, never finished): the server keeps
    PER_ADDRESS of them and closes the rest at once, so a client from
    another address (127.0.0.2: Linux routes all of 127/8 to lo, and the
    server's socket on 127.0.0.1 takes it) is answered while the idle ones
    are held, and the same address is refused. The held ones, which never
    sent a whole request head, are closed after REQUEST_TIMEOUT_S of
    silence, and the address is answered again."""
    host, port = address.rsplit(":", 1)
    socks = []
    first = time.monotonic()  # before the first byte of the held ones
    for _ in range(130):  # more than CONNECTIONS_MAX (128)
        s = socket.create_connection((host, int(port)), timeout=10)
        try:
            s.sendall(b"GET /api/status HT")
        except OSError:
            pass  # already closed: counted below
        socks.append(s)
    sent = time.monotonic()
    refused = wait_closed(socks, sent + 5, len(socks) - PER_ADDRESS)
    held = [s for s in socks if s not in refused]
    check(len(held) == PER_ADDRESS, "one address holds %d connections of 130, %d refused"
          % (len(held), len(refused)))
    check(status_from(address, "127.0.0.2") == 200,
          "another address is answered while 127.0.0.1 holds its connections idle")
    check(status_from(address, "127.0.0.1") is None, "127.0.0.1 over its share is refused")
    gone = wait_closed(held, sent + REQUEST_TIMEOUT_S + 5, len(held))
    took = time.monotonic() - first
    check(len(gone) == len(held) and took >= REQUEST_TIMEOUT_S - 1,
          "the connections that never sent a request head are closed after %d s: %d of %d in %.1f s"
          % (REQUEST_TIMEOUT_S, len(gone), len(held), took))
    for s in socks:
        s.close()
    # the server counts a closed connection out a moment after closing it
    end = time.monotonic() + 5
    code = status_from(address, "127.0.0.1")
    while code != 200 and time.monotonic() < end:
        time.sleep(0.1)  # polling the server: nothing to block on
        code = status_from(address, "127.0.0.1")
    check(code == 200, "127.0.0.1 is answered once its connections are gone")


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
    # another user's job answers exactly as one that does not exist
    missing = get_json(base, "/api/jobs/J999999", TOKENS["alice"])
    code, body = get_json(base, "/api/jobs/" + bob_job, TOKENS["alice"])
    check((code, body) == missing == (404, {"error": {"code": 404, "message": "no such job"}}),
          "alice reading bob's job: as an unknown one: %s %s, %s" % (code, body, missing))
    code, body = get_json(base, "/api/jobs/%s/record" % bob_job, TOKENS["alice"])
    check((code, body) == get_json(base, "/api/jobs/J999999/record", TOKENS["alice"]) and code == 404,
          "alice reading bob's record: as an unknown one: %s %s" % (code, body))
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
    # every row of every grouping has the same fields, a day without spend too
    code, cost = get_json(base, "/api/cost?days=3", TOKENS["root"])
    fields = {"key", "usd", "on_demand_usd", "seconds", "energy_kwh", "co2e_g"}
    rows = [(by, r) for by in ("by_user", "by_group", "by_job", "by_type", "by_day")
            for r in cost.get(by, [])]
    check(code == 200 and len(cost.get("by_day", [])) == 3 and
          [r["usd"] for r in cost["by_day"][:2]] == [0, 0] and
          all(set(r) == fields for _, r in rows),
          "/api/cost?days=3: 3 days, each row of each grouping with %s; not: %s"
          % (sorted(fields), [(by, r) for by, r in rows if set(r) != fields]))
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
    # a name no JSON answer can hold is the request's fault, not the gateway's
    code, body = get_json(base, "/api/cost?user=ali%AEe&days=3", TOKENS["root"])
    check(code == 400 and body.get("error", {}).get("code") == 400,
          "a ?user= that is not UTF-8: %s %s" % (code, body))
    # "%00" is not decoded: a path is the one a proxy in front of the gateway sees
    code, body = get_json(base, "/api/status%00/x", TOKENS["root"])
    check(code == 404, "a path holding %%00 is not cut there: %s %s" % (code, body))
    code, body = get_json(base, "/api/status", TOKENS["root"])
    check(code == 200 and body["admin"] and "clients" in body["gateway"], "the admin's status: %s" % body)


def run_preempted_train(gw, c):
    """carol's train job, its instance taken by the market after its first
    checkpoint; it resumes and succeeds. Returns its id."""
    text = os.path.join(gw.dir, "text.txt")
    with open(text, "w") as f:
        f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
    r = c.req("session.set", defs=[
        {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
            "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
        {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
    require(r["ok"], "session.set", r)
    r = c.req("submit", kind="train", model="m", data="d",
              options={"steps": 5000, "batch": 4, "threads": 1, "checkpoint_every": 100})
    require(r["ok"], "submit a train job", r)
    job = r["job"]
    require(c.req("attach", job=job, after=0)["ok"], "attach " + job)
    ck = c.wait_event(lambda e: e["job"] == job and e["event"] == "checkpoint", "a checkpoint", 120)
    placed = [e for e in c.events if e["job"] == job and e["event"] == "placed"][-1]
    # taken without a notice, at once: a notice's lead could outlast the job
    r = c.req("inject", action="kill", instance=placed["instance"])
    check(r["ok"], "preemption injected after the checkpoint of step %s: %s" % (ck.get("step"), r))
    pre = c.wait_event(lambda e: e["job"] == job and e["event"] == "preempted", "the preemption", 60)
    c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and e["state"] == "running" and
                 e["seq"] > pre["seq"], "the job running again", 120)
    wait_end(c, job)
    return job


def type_bounds(table, itype, hours):
    """(least, most) kWh of hours on one instance of itype, utilisation 0..1."""
    t = table["types"][itype]
    g = table["gpus"][t["gpu"]] if t["gpus"] else {"idle_w": 0, "max_w": 0}
    cpu = table["cpu"]
    pue = table["providers"]["local"]["pue"]
    least = t["gpus"] * g["idle_w"] + t["vcpus"] * cpu["idle_w_per_vcpu"]
    most = t["gpus"] * g["max_w"] + t["vcpus"] * cpu["max_w_per_vcpu"]
    return hours * least * pue / 1000, hours * most * pue / 1000


def check_carbon(base, job):
    """The job's energy and emissions: each instance type's share within
    its table row's bounds for its hours, emissions at us-east-1's grid (the
    local provider's region), and the job, the API and /metrics agreeing."""
    with open(CARBON) as f:
        table = json.load(f)
    intensity = table["regions"][table["region_aliases"]["local-1"]]["g_per_kwh"]
    code, cost = get_json(base, "/api/cost", TOKENS["carol"])
    check(code == 200 and cost["by_type"], "carol's cost by type: %s" % cost)
    total = 0
    for row in cost.get("by_type", []):
        least, most = type_bounds(table, row["key"], row["seconds"] / 3600)
        check(row["seconds"] > 0 and least * (1 - 1e-9) <= row["energy_kwh"] <= most * (1 + 1e-9),
              "%s: %.6g kWh over %.1f s within the table's %.6g..%.6g" %
              (row["key"], row["energy_kwh"], row["seconds"], least, most))
        check(abs(row["co2e_g"] - row["energy_kwh"] * intensity) <= 1e-6 * max(1, row["co2e_g"]),
              "%s: %.6g g CO2e = kWh x %s g/kWh" % (row["key"], row["co2e_g"], intensity))
        total += row["energy_kwh"]
    code, j = get_json(base, "/api/jobs/" + job, TOKENS["carol"])
    check(code == 200 and j["energy_kwh"] > 0 and j["co2e_g"] > 0 and
          abs(j["energy_kwh"] - total) <= 1e-9 * max(1, total),
          "the job's energy %s kWh and CO2e %s g, the sum of its rows (%s)" %
          (j.get("energy_kwh"), j.get("co2e_g"), total))
    return total


def metric_value(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def check_metrics(base, energy):
    code, text = get(base, "/metrics")
    check(code == 200, "/metrics without a token: %s" % code)
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, "promtool check metrics passes: %s%s" % (p.stdout, p.stderr))
    check('spotlab_jobs{state="succeeded"} 3\n' in text, "three succeeded jobs in /metrics")
    for user in ("alice", "bob"):
        check('spotlab_spend_usd_total{user="%s",group=""} ' % user in text,
              "%s's spend in /metrics" % user)
    check((metric_value(text, 'spotlab_spend_usd_total{user="carol",group="ml"}') or 0) > 0,
          "carol's spend under her group")
    kwh = metric_value(text, 'spotlab_energy_kwh_total{user="carol",group="ml"}')
    check(kwh is not None and abs(kwh - energy) <= 1e-9 * max(1, energy),
          "carol's energy in /metrics: %s (the API's %s)" % (kwh, energy))
    check((metric_value(text, 'spotlab_co2e_grams_total{user="carol",group="ml"}') or 0) > 0,
          "carol's emissions in /metrics")
    check((metric_value(text, "spotlab_recoveries_total") or 0) >= 1 and
          (metric_value(text, "spotlab_recovery_duration_seconds_count") or 0) >= 1,
          "the recovery and its duration")
    check((metric_value(text, "spotlab_checkpoint_write_seconds_count") or 0) >= 1 and
          (metric_value(text, "spotlab_checkpoint_upload_seconds_count") or 0) >= 1,
          "checkpoint write and upload times")
    check(metric_value(text, "spotlab_steps_lost_total") is not None, "steps lost")
    check(metric_value(text, "spotlab_idle_shutdowns_total") is not None and
          'spotlab_budget_alerts_total{scope="user"}' in text, "idle shutdowns and budget alerts")
    check((metric_value(text, 'spotlab_kernel_request_duration_seconds_count{type="submit"}') or 0) >= 3,
          "the kernel protocol's submits timed")
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
        series = {q: None for q in (
            'spotlab_recoveries_total >= 1', 'spotlab_recovery_duration_seconds_count >= 1',
            'spotlab_checkpoint_upload_seconds_count >= 1', 'spotlab_checkpoint_write_seconds_count >= 1',
            'spotlab_steps_lost_total >= 0', 'spotlab_energy_kwh_total{user="carol",group="ml"} > 0',
            'spotlab_co2e_grams_total{user="carol",group="ml"} > 0',
            'sum by (group) (spotlab_spend_usd_total{group="ml"}) > 0',
            'spotlab_kernel_request_duration_seconds_count{type="submit"} >= 3')}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (found and spend and all(series.values())):
            r = prom_query(prom, 'spotlab_jobs{state="succeeded"}')
            res = (r or {}).get("data", {}).get("result", [])
            found = res if res and res[0]["value"][1] == "3" else None
            r2 = prom_query(prom, 'spotlab_spend_usd_total{user="alice"} > 0')
            spend = (r2 or {}).get("data", {}).get("result", []) or None
            for q in series:
                series[q] = series[q] or (prom_query(prom, q) or {}).get("data", {}).get("result")
            time.sleep(0.5)  # Prometheus's query API: polling is its interface
        check(found and found[0]["metric"].get("job") == "spotlab",
              "Prometheus scraped spotlab_jobs{state=succeeded} = 3: %s" % r)
        check(spend, "Prometheus has alice's spend")
        for q, res in series.items():
            check(res, "Prometheus answers %s" % q)
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
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2, user_options={"root": "admin = yes\n", "carol": "group = ml\n"},
                        extra_ini="[idle]\nworker_timeout = 10m\n[group.ml]\n",
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
        check_keepalive(address)
        check_connection_limits(address)
        carol = GatewayClient(gw.listen, TOKENS["carol"])
        t = run_preempted_train(gw, carol)
        energy = check_carbon(base, t)
        check_metrics(base, energy)
        check_prometheus(folder, address)
        alice.close()
        bob.close()
        carol.close()
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
