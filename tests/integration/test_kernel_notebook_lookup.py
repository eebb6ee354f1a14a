"""A kernel started by classic Notebook learns its notebook from the server.

Notebook 6 does not name the notebook to its kernels (no JPY_SESSION_NAME);
spotlab-kernel finds the server's runtime file (nbserver-PID.json, PID being
JPY_PARENT_PID) and runs spotlab-kernel-session, which asks the server's
api/sessions for the session that holds the kernel. The server here is a
stand-in that answers as Notebook's REST API does (a list of sessions, each
with "path" and "kernel": {"id"}), checks the token, and lists the kernel's
session only from its second request on (a server records the session just
after starting the kernel). The real Notebook is in the frontends suite
(test_notebook_browser.py). Checks:
  - spotlab-kernel links no libcurl (the HTTP is the helper's), and
    spotlab-kernel-session is beside it;
  - the kernel's session is the notebook's path (%status), the server was
    asked with the token in a header, more than once;
  - a server that refuses (403): the kernel starts all the same, on its
    kernel id, and its log says why;
  - no runtime file (nbclient, jupyter console): nothing is asked.

usage: test_kernel_notebook_lookup.py PATH-TO-spotlab-kernel"""
import http.server
import json
import os
import subprocess
import sys
import threading
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402
from kernelspec_env import KERNEL_NAME, KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

from jupyter_client import KernelManager  # noqa: E402

TOKEN = "lookup-test-token"
NOTEBOOK = "work/lookup test.ipynb"


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, status):
        super().__init__(("127.0.0.1", 0), Handler)
        self.status = status
        self.kernel_id = None
        self.asked = []

    def start(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return "http://127.0.0.1:%d/" % self.server_address[1]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        s = self.server
        s.asked.append((self.path, self.headers.get("Authorization")))
        if s.status != 200 or self.headers.get("Authorization") != "token " + TOKEN:
            self.send_response(403)
            self.end_headers()
            return
        sessions = [{"id": "s0", "path": "other.ipynb", "kernel": {"id": "not-this-one"}}]
        if len(s.asked) >= 2 and s.kernel_id:
            sessions.append({"id": "s1", "path": NOTEBOOK, "kernel": {"id": s.kernel_id}})
        body = json.dumps(sessions).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def status_session(km):
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        reply = kc.execute_interactive("%status", timeout=60, output_hook=lambda m: out.append(m))
        text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
        line = next((l for l in text.splitlines() if l.startswith("session")), "")
        return reply["content"]["status"], line.split(None, 1)[1] if " " in line else ""
    finally:
        kc.stop_channels()


out = []


def run_case(env, status, write_file):
    """Starts a kernel as Notebook would; returns (session, server, kernel id)."""
    server = Server(status)
    url = server.start()
    path = os.path.join(os.environ["JUPYTER_RUNTIME_DIR"], "nbserver-%d.json" % os.getpid())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if write_file:
        with open(path, "w") as f:
            json.dump({"url": url, "token": TOKEN, "pid": os.getpid()}, f)
    # as Notebook's MultiKernelManager does: the kernel's id names its connection file
    kid = str(uuid.uuid4())
    km = KernelManager(kernel_name=KERNEL_NAME, connection_file=os.path.join(
        os.environ["JUPYTER_RUNTIME_DIR"], "kernel-%s.json" % kid))
    try:
        km.start_kernel(env={k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"})
        server.kernel_id = kid
        out.clear()
        st, session = status_session(km)
        check(st == "ok", "%status runs")
        return session, server, kid
    finally:
        km.shutdown_kernel(now=True)
        server.shutdown()
        if os.path.exists(path):
            os.unlink(path)


def main():
    exe = os.path.realpath(sys.argv[1])
    libs = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    check("libcurl" not in libs, "spotlab-kernel links no libcurl")
    check(os.access(os.path.join(os.path.dirname(exe), "spotlab-kernel-session"), os.X_OK),
          "spotlab-kernel-session is beside spotlab-kernel")
    env = KernelspecEnv(exe)
    try:
        with PrivateHome() as home:
            session, server, _ = run_case(env, 200, True)
            check(session == NOTEBOOK, "the session is the notebook's path: %r" % session)
            check(len(server.asked) >= 2 and all(p == "/api/sessions" for p, _ in server.asked),
                  "api/sessions was asked until it listed the kernel: %s" % server.asked)
            check(all(a == "token " + TOKEN for _, a in server.asked), "the token went in a header")

            session, server, kid = run_case(env, 403, True)
            check(session == kid, "a refusing server: the session is the kernel id (%r)" % session)
            log = open(os.path.join(home, "logs", "kernel.log")).read()
            check("cannot ask the Jupyter server for this kernel's notebook: spotlab-kernel-session: "
                  "the Jupyter server refused to list its sessions" in log,
                  "the kernel's log says why it has no notebook (asked %d times)" % len(server.asked))

            session, server, kid = run_case(env, 200, False)
            check(session == kid and not server.asked,
                  "no runtime file: nothing asked, the session is the kernel id (%r, %s)"
                  % (session, server.asked))
    finally:
        env.close()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
