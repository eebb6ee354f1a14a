#!/usr/bin/python3
"""A team gateway as a JupyterHub service, against a real JupyterHub.

usage: test_hub.py FAKE_GATEWAY FAKE_WORKER KERNEL

JupyterHub (Debian's, with configurable-http-proxy) runs with the
DummyAuthenticator and the SimpleLocalProcessSpawner, and starts the gateway
(spotlab-gateway with the scripted "fake" provider, so jobs end in seconds)
as a managed service: the gateway finds the hub through the environment the
hub gives it. Users and groups are made through the hub's REST API with a
test service's token, and each user's tokens come from the hub too:

- alice (group research), bob (teaching) and carol (both; the file's order
  picks research) say hello with hub tokens; the gateway names the user and
  group, and each group's idle timeouts (status) and instance types
  (%instances) apply;
- bob sees nothing of alice's job, and her session is not his;
- a token the hub does not know, a revoked one (once the cache lapses), a
  service's token, and one that would inject a header are refused with an
  error that says why; the file's own tokens still work;
- a gateway whose hub does not answer says so;
- spotlab-kernel with SPOTLAB_GATEWAY and JUPYTERHUB_API_TOKEN (no
  SPOTLAB_TOKEN), as a single-user server starts it, reaches the gateway
  as its hub user.

Every wait has a deadline."""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances, token_sha256  # noqa: E402

# the programs under test; test_hub_browser.py imports Hub and sets its own
FAKE_GATEWAY, FAKE_WORKER, KERNEL = ((os.path.abspath(a) for a in sys.argv[1:4]) if __name__ == "__main__"
                                     else ("", "", ""))
ADMIN_TOKEN = "hub-test-admin-" + os.urandom(12).hex()
FILE_TOKEN = "file-token-0123456789abcdef"
GROUPS = {"alice": ["research"], "bob": ["teaching"], "carol": ["teaching", "research"]}
GROUP_TIMEOUT_S = {"research": 7200, "teaching": 2700}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Hub:
    """JupyterHub in a private folder, with the gateway as its service."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="spotlab-hub-")
        os.chmod(self.dir, 0o700)
        self.port, self.hub_port, self.proxy_port = free_port(), free_port(), free_port()
        self.api = "http://127.0.0.1:%d/hub/api" % self.hub_port
        gwdir = os.path.join(self.dir, "gateway")
        os.mkdir(gwdir, 0o700)
        self.listen = "ipc://%s/k.sock" % gwdir
        self.gw_ini = os.path.join(gwdir, "gateway.ini")
        with open(self.gw_ini, "w") as f:
            # [hub] without url: the hub-managed service's JUPYTERHUB_API_URL
            f.write("[gateway]\nlisten = %s\nworkers = ipc://%s/w.sock\nstate_dir = %s/state\n"
                    "heartbeat_ms = 200\n[provider.fake]\nslots = 2\n"
                    "[hub]\ncache = 2s\n"
                    "[group.research]\nnotebook_timeout = 2h\n"
                    "[group.teaching]\nnotebook_timeout = 45m\nworker_timeout = 5m\n"
                    "instance_types = fake.small\n"
                    "[user.filey]\ntoken_sha256 = %s\n" % (self.listen, gwdir, gwdir,
                                                          token_sha256(FILE_TOKEN)))
        self.config = os.path.join(self.dir, "jupyterhub_config.py")
        with open(self.config, "w") as f:
            f.write(f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = "http://127.0.0.1:{self.port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{self.hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_port}"
c.ConfigurableHTTPProxy.pid_file = {os.path.join(self.dir, "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{self.dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = {os.path.join(self.dir, "cookie_secret")!r}
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = "simple"
c.Spawner.environment = {{"SPOTLAB_GATEWAY": {self.listen!r}}}
c.JupyterHub.services = [
    {{"name": "spotlab", "command": [{FAKE_GATEWAY!r}, "--config", {self.gw_ini!r}],
      "environment": {{"SPOTLAB_FAKE_WORKER": {FAKE_WORKER!r}, "SPOTLAB_DEBUG": "gateway"}}}},
    {{"name": "test-admin", "api_token": {ADMIN_TOKEN!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "test-admin", "services": ["test-admin"],
      "scopes": ["admin:users", "admin:groups", "tokens", "list:users"]}},
]
""")
        self.write_config()
        self.logpath = os.path.join(self.dir, "hub.log")
        self.log = open(self.logpath, "ab")
        env = dict(os.environ, NODE_PATH="/usr/share/nodejs")
        for k in ("SPOTLAB_CONFIG", "SPOTLAB_TOKEN", "SPOTLAB_GATEWAY", "JUPYTERHUB_API_TOKEN",
                  "JUPYTERHUB_API_URL"):
            env.pop(k, None)
        # /usr/bin first: Debian's node and configurable-http-proxy
        env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
        self.p = subprocess.Popen(["/usr/bin/python3", "-m", "jupyterhub", "-f", self.config],
                                  cwd=self.dir, stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=self.log, env=env, start_new_session=True)

    def write_config(self):
        """Changes to the files above before the hub starts: none here."""

    def logtext(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_log(self, needle, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.logtext():
                return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.1)  # polling a file: no event to wait on
        return False

    def request(self, method, path, body=None, token=ADMIN_TOKEN):
        """(status, decoded JSON or None) of a hub API call."""
        req = urllib.request.Request(self.api + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": "token " + token})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read()
                return r.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            return e.code, None

    def wait_ready(self, timeout=90):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.p.poll() is not None:
                return False
            try:
                if self.request("GET", "/")[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.2)  # the hub's port opens with no event to wait on
        return False

    def close(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        # what the hub leaves when it fails: the proxy (its own session) and
        # the gateway; workers outlive a stopped gateway by design
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pidfile in [os.path.join(self.dir, "proxy.pid")] + glob.glob(
                os.path.join(self.dir, "gateway", "state", "instances", "*", "fake.pid")):
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read().strip()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        kill_instances(os.path.join(self.dir, "gateway", "state"))
        self.log.close()
        if not failures:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print("hub folder kept: %s" % self.dir)


def hello(listen, token, session="nb"):
    """(client or None, hello's reply)."""
    c = GatewayClient(listen, session=session)
    r = c.req("hello", token=token, client="kernel", session=session, version="0.1.0", timeout=15)
    if not r.get("ok"):
        c.close()
        return None, r
    return c, r


def make_users(hub):
    for user, groups in GROUPS.items():
        st, _ = hub.request("POST", "/users/%s" % user)
        check(st == 201, "user %s made through the hub API (%s)" % (user, st))
    for group in GROUP_TIMEOUT_S:
        members = [u for u, gs in GROUPS.items() if group in gs]
        st, _ = hub.request("POST", "/groups/%s" % group)
        check(st == 201, "group %s made (%s)" % (group, st))
        st, _ = hub.request("POST", "/groups/%s/users" % group, {"users": members})
        check(st == 200, "group %s: %s (%s)" % (group, members, st))


def new_token(hub, user, **body):
    st, r = hub.request("POST", "/users/%s/tokens" % user, dict(body, note="spotlab test"))
    check(st == 201 and r and r.get("token"), "a hub token for %s (%s)" % (user, st))
    return r["token"], r["id"]


def case_users(hub, tokens):
    clients = {}
    for user, token in tokens.items():
        c, r = hello(hub.listen, token, session="nb-" + user)
        check(c is not None, "%s's hub token accepted: %r" % (user, r))
        if not c:
            continue
        want = "research" if "research" in GROUPS[user] else "teaching"
        check(r.get("user") == user and r.get("group") == want and not r.get("admin"),
              "hello names %s, group %s: %r" % (user, want, r))
        st = c.req("status")
        idle = st.get("idle", {})
        check(st["ok"] and idle.get("notebook_timeout_s") == GROUP_TIMEOUT_S[want],
              "%s's notebook timeout is %s's: %r" % (user, want, idle))
        check(idle.get("worker_timeout_s") == (300 if want == "teaching" else 600),
              "%s's worker timeout: %r" % (user, idle))
        types = {e["type"] for e in c.req("market").get("ranking", [])}
        check(types == ({"fake.small"} if want == "teaching" else {"fake.small", "fake.big"}),
              "%s's instance types are %s's: %s" % (user, want, sorted(types)))
        clients[user] = c
    return clients


def case_isolation(clients):
    a, b = clients["alice"], clients["bob"]
    r = a.req("session.set", vars={"lr": {"t": "num", "v": 0.001}}, defs=[
        {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {"layers": 1}}},
        {"name": "d", "kind": "data", "spec": {"type": "text", "args": ["moby-dick"], "options": {}}}])
    check(r["ok"], "alice defines a model: %r" % r)
    r = a.req("submit", kind="train", model="m", data="d", options={"steps": 3})
    check(r["ok"], "alice submits: %r" % r)
    job = r["job"]
    check(a.req("attach", job=job, after=0)["ok"], "alice attaches")
    a.wait_event(lambda e: e["job"] == job and e["event"] == "state" and e["state"] == "succeeded",
                 "alice's job succeeds", timeout=60)
    mine = [j["job"] for j in a.req("jobs", all=True)["jobs"]]
    check(job in mine, "alice lists her job")
    theirs = [j["job"] for j in b.req("jobs", all=True)["jobs"]]
    check(job not in theirs, "bob does not list alice's job: %r" % theirs)
    for t in ("attach", "logs", "cancel"):
        r = b.req(t, job=job, after=0)
        check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "bob's %s of alice's job: %r" % (t, r))
    costs = [j["job"] for j in b.req("cost")["jobs"]]
    check(job not in costs, "alice's job is not in bob's costs")
    check(not b.events, "bob received no event of alice's")
    s = b.req("session.get")
    check(s["ok"] and not s.get("defs") and not s.get("vars"), "bob's session is his own: %r" % s)


def refused(hub, token, code, words, what):
    c, r = hello(hub.listen, token)
    if c:
        c.close()
    err = r.get("error", {})
    check(c is None and err.get("code") == code and all(w in err.get("message", "") for w in words),
          "%s refused with %s %r: %r" % (what, code, words, r))


def case_refused(hub, tokens):
    refused(hub, "0123456789abcdef0123456789abcdef", "SL_EAUTH", ["JupyterHub does not accept"],
            "a token the hub never issued")
    refused(hub, "abc\r\nX-Injected: 1", "SL_EAUTH", ["unknown token"], "a token with CR LF")
    refused(hub, ADMIN_TOKEN, "SL_EAUTH", ["service"], "a service's token")
    # revoked: refused once the gateway's 2 s cache lapses
    token, tid = new_token(hub, "bob")
    c, r = hello(hub.listen, token)
    check(c is not None, "bob's second token works before it is revoked: %r" % r)
    if c:
        c.close()
    st, _ = hub.request("DELETE", "/users/bob/tokens/%s" % tid)
    check(st == 204, "token revoked at the hub (%s)" % st)
    end = time.monotonic() + 20
    while True:
        c, r = hello(hub.listen, token)
        if c is None or time.monotonic() > end:
            break
        c.close()
        time.sleep(0.25)  # the cache's lapse: a clock, not an event
    err = r.get("error", {})
    check(c is None and err.get("code") == "SL_EAUTH" and "revoked" in err.get("message", ""),
          "a revoked token is refused: %r" % r)
    # the file's tokens are as they were
    c, r = hello(hub.listen, FILE_TOKEN)
    check(c is not None and r.get("user") == "filey" and "group" not in r,
          "a token of the file still works: %r" % r)
    if c:
        c.close()


def case_hub_down():
    port = free_port()  # nothing listens there
    folder = tempfile.mkdtemp(prefix="spotlab-hubdown-")
    gw = GatewayProcess(folder, FAKE_GATEWAY, {"filey": FILE_TOKEN}, provider="fake",
                        extra_ini="[hub]\nurl = http://127.0.0.1:%d/hub/api/\ntimeout = 2s\n" % port,
                        env={"SPOTLAB_FAKE_WORKER": FAKE_WORKER, "JUPYTERHUB_API_URL": None})
    gw.start()
    try:
        c, r = hello(gw.listen, "a-hub-token-0123456789abcdef")
        err = r.get("error", {})
        check(c is None and err.get("code") == "SL_ECURL" and
              "cannot reach JupyterHub at http://127.0.0.1:%d/hub/api" % port in err.get("message", ""),
              "a hub that does not answer is named: %r" % r)
        check(gw.wait_log("cannot reach JupyterHub", 5), "the gateway's log says the hub is down")
        c, r = hello(gw.listen, FILE_TOKEN)
        check(c is not None and r.get("user") == "filey", "the file's token works: %r" % r)
        if c:
            c.close()
    finally:
        check(gw.stop() == 0, "the gateway stops cleanly")
        kill_instances(gw.state)
    # a hub URL from the environment with a control byte in it (it would split the request)
    os.makedirs(os.path.join(folder, "bad"))
    bad = GatewayProcess(os.path.join(folder, "bad"), FAKE_GATEWAY, {"filey": FILE_TOKEN},
                         provider="fake", extra_ini="[hub]\ntimeout = 2s\n")
    r = subprocess.run([FAKE_GATEWAY, "--config", bad.ini], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, SPOTLAB_FAKE_WORKER=FAKE_WORKER,
                                JUPYTERHUB_API_URL="http://127.0.0.1:%d/hub/api\x01x" % port))
    check(r.returncode == 2 and "JUPYTERHUB_API_URL = \"http://127.0.0.1:%d/hub/api\x01x\" is not an http://"
          % port in r.stderr, "a control byte in JUPYTERHUB_API_URL is refused: %r" % r.stderr[-300:])
    if not failures:
        shutil.rmtree(folder, ignore_errors=True)


def case_kernel(hub, token):
    """spotlab-kernel as a single-user server starts it: SPOTLAB_GATEWAY from
    Spawner.environment, JUPYTERHUB_API_TOKEN from the hub, no SPOTLAB_TOKEN."""
    from jupyter_client import KernelManager
    from kernelspec_env import KernelspecEnv
    home = tempfile.mkdtemp(prefix="spotlab-hubkernel-")
    saved = {k: os.environ.get(k) for k in ("SPOTLAB_TOKEN", "SPOTLAB_GATEWAY", "SPOTLAB_HOME",
                                             "JUPYTERHUB_API_TOKEN", "JPY_SESSION_NAME")}
    os.environ.pop("SPOTLAB_TOKEN", None)
    os.environ.update(SPOTLAB_GATEWAY=hub.listen, SPOTLAB_HOME=home, JUPYTERHUB_API_TOKEN=token,
                      JPY_SESSION_NAME="hub-notebook.ipynb")
    try:
        with KernelspecEnv(KERNEL):
            km = KernelManager(kernel_name="spotlab")
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=60)
                out = []
                reply = kc.execute_interactive("%status", output_hook=out.append, timeout=60)
                text = "".join(m["content"].get("text", "") for m in out
                               if m["msg_type"] == "stream")
                text += "".join(m["content"].get("data", {}).get("text/plain", "") for m in out
                                if m["msg_type"] in ("display_data", "execute_result"))
                check(reply["content"]["status"] == "ok", "%%status runs: %r %r" % (reply["content"], text))
                check(hub.wait_log('hello from alice, JupyterHub token, group research (kernel, '
                                   'session "hub-notebook.ipynb")', 10),
                      "the kernel said hello as alice with her hub token")
                check("alice" in text, "%%status names the hub user: %r" % text)
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(home, ignore_errors=True)


def main():
    hub = Hub()
    clients = {}
    try:
        if not check(hub.wait_ready(), "JupyterHub answers on %s" % hub.api):
            print(hub.logtext()[-6000:])
            return 1
        check(hub.wait_log("hello takes JupyterHub tokens, checked at %s" % hub.api, 30),
              "the gateway, a hub-managed service, found the hub through its environment")
        make_users(hub)
        tokens = {"alice": new_token(hub, "alice")[0],
                  # the scopes a single-user server's own token holds
                  "bob": new_token(hub, "bob", roles=["server"])[0],
                  "carol": new_token(hub, "carol")[0]}
        clients = case_users(hub, tokens)
        if "alice" in clients and "bob" in clients:
            case_isolation(clients)
        case_refused(hub, tokens)
        case_hub_down()
        case_kernel(hub, tokens["alice"])
    finally:
        for c in clients.values():
            c.close()
        if failures:
            print(hub.logtext()[-8000:])
        hub.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
