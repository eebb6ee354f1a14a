#!/usr/bin/python3
"""The admin page in headless Chromium during a run with a preemption.

usage: test_admin_page.py GATEWAY WORKER TRAIN ARTIFACT_DIR

A real spotlab-gateway with [gateway] http and the local provider (real
spotlab-worker instances); alice (group research) runs a %%run job whose
instance is preempted with a notice, and the job resumes on new capacity.

Over plain HTTP: the page and its files are served without a token (they
hold no data) with a Content-Security-Policy, an ETag that answers 304, and
the API still refuses a request without a token; /api/users, /api/groups,
/api/preemptions and /api/cost?days= answer by role.

In Chromium (selenium): the page takes the admin's token and shows the job,
its instance, a spend figure and the preemption, with no SEVERE entry in
the browser's console; at 375 px wide nothing overflows the page. Then bob's
token sees none of alice's job, and a wrong token brings the sign-in form
back with an error. Screenshots go to ARTIFACT_DIR (admin-page-*.png).

Exit 77 only when Chromium, chromedriver or selenium are not installed.
Every wait has a deadline.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from checks import check, exit_status, failures, require  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402

GATEWAY, WORKER, TRAIN = (os.path.abspath(a) for a in sys.argv[1:4])
ARTIFACTS = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else os.getcwd()
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-2", "root": "root-token-3"}
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def missing_tools():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("python3 module selenium")
    return missing


def request(base, path, token=None, method="GET", headers=None):
    """(status, headers, body text) of one request."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    req = urllib.request.Request(base + path, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def api(base, path, token):
    code, _, body = request(base, path, token)
    try:
        return code, json.loads(body)
    except ValueError:
        return code, {"unparsed": body}


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
            if last:
                return last
        except Exception as e:  # the page may be between two refreshes
            last = e
        time.sleep(0.25)  # polling the page or the API: neither has an event to wait on
    print("timed out waiting for %s (last: %r)" % (what, last), file=sys.stderr)
    return None


def check_http(base, job):
    code, hdr, body = request(base, "/")
    csp = hdr.get("Content-Security-Policy", "")
    check(code == 200 and hdr.get("Content-Type", "").startswith("text/html") and
          "/admin/app.js" in body, "/ is the page, served without a token: %s %s" % (code, hdr.get("Content-Type")))
    check("default-src 'self'" in csp, "the page has a Content-Security-Policy: %r" % csp)
    check(job not in body and "alice" not in body, "the page itself holds no data")
    code, hdr2, body2 = request(base, "/admin/")
    check(code == 200 and body2 == body, "/admin/ is the same page")
    code, hdr, js = request(base, "/admin/app.js")
    etag = hdr.get("ETag")
    check(code == 200 and hdr.get("Content-Type", "").startswith("text/javascript") and etag and
          "no-cache" in hdr.get("Cache-Control", ""), "app.js: JavaScript with an ETag, revalidated: %s" % dict(hdr))
    code, _, again = request(base, "/admin/app.js", headers={"If-None-Match": etag or "x"})
    check(code == 304 and again == "", "app.js unchanged: 304 (%s)" % code)
    code, hdr, _ = request(base, "/admin/style.css")
    check(code == 200 and hdr.get("Content-Type", "").startswith("text/css"), "style.css is CSS")
    check(request(base, "/admin/nothing.js")[0] == 404, "an unknown file: 404")
    check(request(base, "/", method="POST")[0] == 405, "POST /: 405")
    for path in ("/api/jobs", "/api/users", "/api/groups", "/api/preemptions", "/api/cost?days=7"):
        code, _, body = request(base, path)
        check(code == 401, "%s without a token: 401 (%s)" % (path, code))


def check_api(base, job):
    code, body = api(base, "/api/users", TOKENS["alice"])
    users = body.get("users", [])
    check(code == 200 and [u["user"] for u in users] == ["alice"] and users[0]["group"] == "research" and
          not users[0]["admin"] and sum(users[0]["jobs"].values()) == 1, "alice's /api/users is her alone: %s" % body)
    code, body = api(base, "/api/users", TOKENS["root"])
    names = sorted(u["user"] for u in body.get("users", []))
    check(code == 200 and names == ["alice", "bob", "root"], "the admin's /api/users: every user %s" % names)
    bob = [u for u in body.get("users", []) if u["user"] == "bob"]
    check(bob and bob[0]["jobs"] == {"succeeded": 1} and bob[0]["live_jobs"] == 0 and bob[0]["instances"] == 1,
          "bob's row: one job succeeded, his idle instance: %s" % bob)
    check(api(base, "/api/users?user=bob", TOKENS["alice"])[0] == 403, "alice asking for bob's user: 403")
    code, body = api(base, "/api/groups", TOKENS["alice"])
    gs = body.get("groups", [])
    check(code == 200 and [g["group"] for g in gs] == ["research"] and "members" not in gs[0] and
          gs[0]["notebook_timeout_s"] == 7200, "alice sees her group alone, without members: %s" % body)
    code, body = api(base, "/api/groups", TOKENS["bob"])
    check(code == 200 and body.get("groups") == [], "bob, in no group, sees none: %s" % body)
    code, body = api(base, "/api/groups", TOKENS["root"])
    gs = {g["group"]: g for g in body.get("groups", [])}
    check(code == 200 and sorted(gs) == ["research", "teaching"] and gs["research"]["members"] == ["alice"] and
          gs["teaching"]["members"] == [] and gs["teaching"]["worker_timeout_s"] == 300,
          "the admin sees every group with members: %s" % body)
    code, body = api(base, "/api/preemptions", TOKENS["alice"])
    rec = body.get("recent", [])
    check(code == 200 and body.get("count", 0) >= 1 and rec and rec[0]["job"] == job and rec[0]["notice"] and
          rec[0]["resumed_us"] and rec[0]["recovery_s"] is not None,
          "alice's preemption, with notice and its recovery: %s" % body)
    code, body = api(base, "/api/preemptions", TOKENS["bob"])
    check(code == 200 and body.get("count") == 0 and body.get("recent") == [], "bob sees no preemption: %s" % body)
    code, body = api(base, "/api/cost?days=7", TOKENS["root"])
    days = body.get("by_day", [])
    check(code == 200 and len(days) == 7 and days[-1]["key"] == time.strftime("%Y-%m-%d", time.gmtime()) and
          days[-1]["usd"] > 0, "cost?days=7: seven days, today's spend last: %s" % days)
    check(sorted(r["key"] for r in body.get("by_group", [])) == ["", "research"],
          "cost by group, bob's in no group (\"\"): %s" % body.get("by_group"))
    code, body = api(base, "/api/cost?days=7", TOKENS["bob"])
    check(code == 200 and [r["key"] for r in body.get("by_group", [])] == [""] and
          abs(sum(d["usd"] for d in body.get("by_day", [])) - body.get("month_spent_usd", -1)) < 1e-9,
          "bob's cost per day and group is his own: %s" % body)


def browser(width, height):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=%d,%d" % (width, height)):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def text_of(drv, elem_id):
    from selenium.webdriver.common.by import By
    return drv.find_element(By.ID, elem_id).text


def sign_in(drv, token):
    from selenium.webdriver.common.by import By
    if not wait_for(lambda: drv.find_element(By.ID, "token").is_displayed(), 20, "the sign-in form"):
        return False
    drv.find_element(By.ID, "token").send_keys(token)
    drv.find_element(By.CSS_SELECTOR, "#login-form button").click()
    return True


def sign_out(drv):
    from selenium.webdriver.common.by import By
    drv.find_element(By.ID, "signout").click()


def severe(entries, budgets_absent):
    """The SEVERE console entries, but for the one a gateway without
    /api/budgets causes (the page asks once and hides the panel)."""
    bad = []
    for e in entries:
        if e.get("level") != "SEVERE":
            continue
        msg = e.get("message", "")
        if budgets_absent and "/api/budgets" in msg and "404" in msg:
            continue
        bad.append(msg)
    return bad


def shoot(drv, name):
    path = os.path.join(ARTIFACTS, name)
    drv.save_screenshot(path)
    print("screenshot: %s" % path)


def check_page(base, job, instance, bob_job, bob_inst):
    budgets_absent = request(base, "/api/budgets", TOKENS["root"])[0] == 404
    drv = browser(1280, 1800)
    try:
        drv.get(base + "/")
        require(sign_in(drv, TOKENS["root"]), "the page asks for a token")
        check(wait_for(lambda: job in text_of(drv, "jobs-table"), 30, "the job in the jobs table"),
              "the page shows job %s" % job)
        check(wait_for(lambda: instance in text_of(drv, "fleet-table"), 30, "the instance in the fleet"),
              "the page shows instance %s" % instance)
        spend = wait_for(lambda: re.fullmatch(r"\$\d+\.\d+", text_of(drv, "spend-month")) and
                         text_of(drv, "spend-month") != "$0.00" and text_of(drv, "spend-month"), 30, "a spend figure")
        check(spend, "the page shows this month's spend: %r" % spend)
        count = wait_for(lambda: text_of(drv, "preempt-count").isdigit() and
                         int(text_of(drv, "preempt-count")) >= 1 and text_of(drv, "preempt-count"), 30,
                         "the preemption count")
        check(count, "the page counts the preemption: %r" % count)
        idle = wait_for(lambda: drv.execute_script(
            "return Array.from(document.querySelectorAll('#fleet-table tr.idle')).map(r => r.innerText)"), 10,
            "an idle row")
        check(idle and len(idle) == 1 and bob_inst in idle[0] and re.search(r"\d+ (s|min)", idle[0]),
              "bob's idle instance is highlighted with how long it has been idle: %s" % idle)
        check(wait_for(lambda: job in text_of(drv, "preempt-table") and "after " in text_of(drv, "preempt-table"),
                       30, "the preemption's row"), "the preemption's row names the job and its recovery")
        check("root (admin)" in text_of(drv, "who") and "updated " in text_of(drv, "updated"),
              "who is signed in and when the page last updated")
        check(wait_for(lambda: "research" in text_of(drv, "groups-table") and
                       "alice" in text_of(drv, "users-table"), 10, "the user and group tables"),
              "the users and groups tables")
        check(drv.execute_script("return document.querySelectorAll('#chart svg rect.bar').length") == 30,
              "the spend chart has 30 days")
        code, buds = api(base, "/api/budgets", TOKENS["root"])
        if code == 200 and buds.get("budgets"):
            check(wait_for(lambda: drv.find_element("id", "budgets-card").is_displayed() and
                           buds["budgets"][0]["scope"] in text_of(drv, "budgets-table"), 10, "the budgets"),
                  "the budget panel shows /api/budgets")
        else:
            check(not drv.find_element("id", "budgets-card").is_displayed(),
                  "no budget panel when /api/budgets has none (%s)" % code)
        check(not drv.find_element("id", "banner").is_displayed(), "no error banner")
        bad = severe(drv.get_log("browser"), budgets_absent)
        check(not bad, "no SEVERE entry in the browser console: %s" % bad)
        shoot(drv, "admin-page-desktop.png")

        drv.set_window_size(375, 1600)
        check(wait_for(lambda: drv.execute_script("return window.innerWidth") <= 400, 10, "a narrow window"),
              "the window is 375 px wide")
        over = drv.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        check(over <= 0, "at 375 px nothing overflows the page sideways (%s px)" % over)
        shoot(drv, "admin-page-375.png")
        drv.set_window_size(1280, 1800)

        sign_out(drv)
        require(sign_in(drv, TOKENS["bob"]), "sign in as bob")
        check(wait_for(lambda: "bob" in text_of(drv, "who") and text_of(drv, "tile-jobs") == "0", 20, "bob's page"),
              "bob's page loads")
        check(wait_for(lambda: bob_job in text_of(drv, "jobs-table") and bob_inst in text_of(drv, "fleet-table"),
                       20, "bob's own job and instance"), "bob sees his own job and instance")
        check(job not in text_of(drv, "jobs-table") and instance not in text_of(drv, "fleet-table") and
              text_of(drv, "preempt-count") == "0" and "alice" not in text_of(drv, "users-table"),
              "bob sees none of alice's job, instance, preemption or user")
        bad = severe(drv.get_log("browser"), budgets_absent)
        check(not bad, "no SEVERE entry as bob: %s" % bad)

        sign_out(drv)
        require(sign_in(drv, "not-a-token"), "sign in with a wrong token")
        check(wait_for(lambda: "refused the token" in text_of(drv, "banner") and
                       drv.find_element("id", "token").is_displayed(), 20, "the refusal"),
              "a wrong token: the error banner and the sign-in form again")
        shoot(drv, "admin-page-refused.png")
    except Exception:
        shoot(drv, "admin-page-failed.png")
        raise
    finally:
        drv.quit()


def main():
    missing = missing_tools()
    if missing:
        print("skipped: missing %s; install chromium chromium-driver python3-selenium (./spotlab setup)"
              % ", ".join(missing))
        return 77
    os.makedirs(ARTIFACTS, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="gw-admin-page-")
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=3,
                        user_options={"root": "admin = yes\n", "alice": "group = research\n"},
                        extra_ini="[idle]\nworker_timeout = 10m\n[group.research]\nnotebook_timeout = 2h\n"
                                  "[group.teaching]\nworker_timeout = 5m\n",
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN, "SPOTLAB_DEBUG": None})
    with open(gw.ini) as f:  # [gateway] comes first in the file GatewayProcess writes
        ini = f.read().replace("[gateway]\n", "[gateway]\nhttp = 127.0.0.1:0\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini)
    gw.start()
    alice = None
    try:
        require(gw.wait_log("HTTP API and /metrics on http://127.0.0.1:", 20), "the HTTP server listens",
                gw.logtail())
        with open(os.path.join(gw.state, "http.address")) as f:
            base = "http://" + f.read().strip()
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        r = alice.req("submit", kind="run", script="sleep 600", options={})
        require(r["ok"], "alice submits a %%run job", r)
        job = r["job"]
        require(alice.req("attach", job=job, after=0)["ok"], "attach %s" % job)
        running = alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                                   e["state"] == "running", "%s running" % job, 60)
        first = [e for e in alice.events if e["job"] == job and e["event"] == "placed"][-1]["instance"]
        r = alice.req("inject", action="preempt", instance=first, notice_s=1)
        require(running and r["ok"], "a preemption with notice injected on %s" % first, r)
        alice.wait_event(lambda e: e["job"] == job and e["event"] == "resumed", "%s resumed" % job, 90)
        alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and e["state"] == "running",
                         "%s running again" % job, 60)
        instance = alice.req("attach", job=job, after=10 ** 9)["job"]["instance"]
        check(instance and instance != first, "the job runs again on new capacity: %s" % instance)
        bob = GatewayClient(gw.listen, TOKENS["bob"])
        r = bob.req("submit", kind="run", script="true", options={})
        require(r["ok"] and bob.req("attach", job=r["job"], after=0)["ok"], "bob submits a short job", r)
        bob_job = r["job"]
        end = bob.wait_event(lambda e: e["job"] == bob_job and e["event"] == "state" and
                             e["state"] in ("succeeded", "failed", "cancelled"), "the end of %s" % bob_job, 60)
        check(end["state"] == "succeeded", "bob's job succeeded: %s" % end)
        bob_inst = [e for e in bob.events if e["job"] == bob_job and e["event"] == "placed"][-1]["instance"]
        bob.close()
        require(wait_for(lambda: any(i["instance"] == bob_inst and i["state"] == "idle" and "idle_s" in i
                                     for i in api(base, "/api/instances", TOKENS["root"])[1]["instances"]),
                         30, "bob's instance idle"), "bob's instance is idle, with its idle time")
        check_http(base, job)
        require(wait_for(lambda: api(base, "/api/cost", TOKENS["root"])[1].get("month_spent_usd", 0) > 0, 60,
                         "spend in the ledger"), "the job's spend reached the ledger")
        check_api(base, job)
        check_page(base, job, instance, bob_job, bob_inst)
        alice.req("cancel", job=job)
    finally:
        if alice:
            alice.close()
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)  # workers outlive a stopped gateway by design
        shutil.rmtree(folder, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
