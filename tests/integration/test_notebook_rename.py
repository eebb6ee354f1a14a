"""A notebook renamed keeps its session: a real Notebook 6 server.

usage: test_notebook_rename.py PATH-TO-spotlab-kernel

A real Notebook server (Debian jupyter-notebook) starts the kernel for a
notebook; the test drives the server's REST API as the browser does (a
rename is a PATCH of the file and of the session) and talks to the kernel
through its connection file. The notebook's names reach the user's own
gateway (started by the kernel) before each rename. Checks:
  - renamed while its kernel runs: the kernel notices at the end of a later
    cell (%session names the new path), and the gateway moved what it held;
    a restart (same kernel id, the new path) finds every name;
  - renamed, then restarted at once (no cell in between): the new kernel
    moves the session from the path its id followed last;
  - renamed, then the kernel shut down and the notebook opened again (a new
    kernel id): the new path's session holds the names;
  - the history (a front end's history_request) follows the notebook too;
  - %sessions lists the session under its last path, marked as this
    notebook's, and none under the old ones;
  - before any gateway ran, a plain notebook's names (kept by the kernel in
    $SPOTLAB_HOME/pending) follow it as well.
Every wait has a deadline.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, require  # noqa: E402
from kernelspec_env import KERNEL_NAME, KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

from jupyter_client import BlockingKernelClient  # noqa: E402

TOKEN = "spotlab-rename-test"
EMPTY_NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, root, log):
        self.port = free_port()
        self.base = "http://127.0.0.1:%d/" % self.port
        env = dict(os.environ)
        env.pop("JPY_SESSION_NAME", None)
        self.proc = subprocess.Popen(
            ["/usr/bin/jupyter-notebook", "--no-browser", "--port=%d" % self.port, "--ip=127.0.0.1",
             "--NotebookApp.token=" + TOKEN, "--notebook-dir=" + root, "--NotebookApp.port_retries=0"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("GET", "api/status")
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    require(False, "the Notebook server answers")
                time.sleep(0.2)

    def api(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": "token " + TOKEN,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def open(self, path):
        """A session for the notebook at path, as the page opens one: (session id, kernel id)."""
        s = self.api("POST", "api/sessions", {"path": path, "type": "notebook", "name": "",
                                              "kernel": {"name": KERNEL_NAME}})
        return s["id"], s["kernel"]["id"]

    def rename(self, sid, old, new):
        """What the page does when the notebook is renamed: the file, then the session."""
        self.api("PATCH", "api/contents/" + urllib.parse.quote(old), {"path": new})
        self.api("PATCH", "api/sessions/" + sid, {"path": new})

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Kernel:
    """A client of the server's kernel kid, through its connection file."""

    def __init__(self, kid):
        path = os.path.join(os.environ["JUPYTER_RUNTIME_DIR"], "kernel-%s.json" % kid)
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            require(time.monotonic() < deadline, "the connection file of kernel " + kid)
            time.sleep(0.1)
        self.kc = BlockingKernelClient(connection_file=path)
        self.kc.load_connection_file()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code, timeout=120):
        out = []
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=out.append)
        text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
        text += "".join(m["content"]["data"].get("text/plain", "") for m in out
                        if m["msg_type"] in ("execute_result", "display_data"))
        if reply["content"]["status"] == "error":
            text += "%s: %s" % (reply["content"].get("ename"), reply["content"].get("evalue"))
        return reply["content"]["status"], text

    def history(self):
        """The inputs of the notebook's history (a front end's history_request, tail)."""
        msg_id = self.kc.history(hist_access_type="tail", n=50)
        reply = self.kc.get_shell_msg(timeout=30)
        require(reply["parent_header"].get("msg_id") == msg_id, "the history reply")
        return [h[2] for h in reply["content"].get("history", [])]

    def session(self):
        return self.run("%session")[1].strip()

    def close(self):
        self.kc.stop_channels()


def wait_session(k, want, timeout=40):
    """Cells until %session names want (the kernel asks the server at a cell's end, at most every 5 s)."""
    deadline = time.monotonic() + timeout
    while True:
        now = k.session()
        if now == "notebook session: " + want or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def restart(server, kid):
    server.api("POST", "api/kernels/%s/restart" % kid)
    return Kernel(kid)


def names(k):
    return k.run("%who")[1]


def main():
    exe = os.path.realpath(sys.argv[1])
    if not os.access("/usr/bin/jupyter-notebook", os.X_OK):
        print("missing /usr/bin/jupyter-notebook: install jupyter-notebook (./spotlab setup)", file=sys.stderr)
        return 1
    root = tempfile.mkdtemp(prefix="spotlab-rename-")
    for name in ("first.ipynb", "plain.ipynb"):
        with open(os.path.join(root, name), "w") as f:
            json.dump(EMPTY_NOTEBOOK, f)
    env = KernelspecEnv(exe)
    server = None
    try:
        with PrivateHome() as home:
            log = open(os.path.join(home, "notebook-server.log"), "w")
            server = Server(root, log)
            # no gateway yet: a plain notebook's names (kept by the kernel) follow it too
            psid, pkid = server.open("plain.ipynb")
            k = Kernel(pkid)
            require(k.run("a = 1")[0] == "ok", "a plain cell")
            server.rename(psid, "plain.ipynb", "plain2.ipynb")
            now = wait_session(k, "plain2.ipynb")
            check(now == "notebook session: plain2.ipynb", "a plain notebook follows its rename: %r" % now)
            k.close()
            k = restart(server, pkid)
            who = names(k)
            check("a" in who and not os.path.exists(os.path.join(home, "gateway.db")),
                  "without a gateway, a plain notebook renamed keeps its names: %r" % who)
            k.close()
            server.api("DELETE", "api/sessions/" + psid)

            sid, kid = server.open("first.ipynb")
            k = Kernel(kid)
            check(k.session() == "notebook session: first.ipynb", "the session is the notebook's path")
            st, out = k.run("x = 41\nmodel m = gpt(layers=1)\n%jobs")  # %jobs: the user's own gateway starts
            require(st == "ok", "the first cell runs, with the gateway", out)

            # renamed while its kernel runs
            server.rename(sid, "first.ipynb", "dir-less name.ipynb")
            now = wait_session(k, "dir-less name.ipynb")
            check(now == "notebook session: dir-less name.ipynb", "the kernel follows the rename: %r" % now)
            st, _ = k.run("y = x + 1")
            k.close()
            k = restart(server, kid)
            who = names(k)
            check("x" in who and "y" in who and "m" in who and "42" in who,
                  "restarted on the new path, every name is there: %r" % who)
            hist = k.history()
            check(any("x = 41" in h for h in hist) and any("y = x + 1" in h for h in hist),
                  "the history followed the notebook: %r" % hist)

            # renamed, then restarted at once: the record of the kernel's id moves the session
            server.rename(sid, "dir-less name.ipynb", "third.ipynb")
            k.close()
            k = restart(server, kid)
            check(k.session() == "notebook session: third.ipynb", "the restarted kernel is on the new path")
            who = names(k)
            check("x" in who and "y" in who and "m" in who, "renamed then restarted: the names followed: %r" % who)

            # renamed, then shut down and opened again: a new kernel id finds the names
            server.rename(sid, "third.ipynb", "fourth.ipynb")
            now = wait_session(k, "fourth.ipynb")
            check(now == "notebook session: fourth.ipynb", "the kernel follows the second rename: %r" % now)
            k.close()
            server.api("DELETE", "api/sessions/" + sid)
            sid, kid2 = server.open("fourth.ipynb")
            check(kid2 != kid, "the notebook opened again has a new kernel")
            k = Kernel(kid2)
            who = names(k)
            check("x" in who and "y" in who and "m" in who,
                  "renamed, shut down, opened again: the names are there: %r" % who)
            listed = k.run("%sessions")[1].splitlines()
            mine = [line for line in listed if line.startswith("* ")]
            check(len(mine) == 1 and mine[0].split()[1] == "fourth.ipynb" and
                  not any(n in line for line in listed for n in ("first.ipynb", "third.ipynb")),
                  "%%sessions marks this notebook's, and the old paths hold nothing: %r" % listed)
            for bad in ("%sessions rm fourth.ipynb", "%sessions rm", "%sessions rm nothing here.ipynb",
                        "%sessions remove x"):
                check(k.run(bad)[0] == "error", "%s is refused" % bad)
            # another session of this user's, made by switching to it and back, deleted from here
            k.run("%session other.ipynb")
            k.run("%session fourth.ipynb")
            status, out = k.run("%sessions rm other.ipynb")
            listed = k.run("%sessions")[1]
            check(status == "ok" and 'session "other.ipynb" deleted' in out and "other.ipynb" not in listed and
                  "fourth.ipynb" in listed, "%%sessions rm deletes another session: %r %r" % (out, listed))
            k.close()
            kernel_log = open(os.path.join(home, "logs", "kernel.log")).read()
            check("session first.ipynb moved to dir-less name.ipynb" in kernel_log and
                  "session dir-less name.ipynb moved to third.ipynb" in kernel_log,
                  "the kernel's log says where each session went")
            server.api("DELETE", "api/sessions/" + sid)
            server.stop()
            server = None
            from checks import failures
            if failures:
                print("kernel log:\n" + kernel_log[-5000:], file=sys.stderr)
    finally:
        if server:
            server.stop()
        env.close()
        shutil.rmtree(root, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
