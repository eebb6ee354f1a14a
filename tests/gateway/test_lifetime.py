#!/usr/bin/python3
"""The per-user (embedded) gateway's lifetime, with real processes: the
gateway, the local provider's spotlab-worker instances and the spotlab CLI.

usage: test_lifetime.py CASE GATEWAY WORKER CLI

idle: with no client and no job for [idle] gateway_timeout the gateway stops
  its workers and exits 0, its state kept; started again as a kernel starts
  it (--embedded --daemon), a client of the same session finds its
  variables and jobs.
job: a running job keeps the gateway up past the timeout; it stops only once
  the job has ended and the timeout has passed again.
stop: `spotlab gateway stop` refuses while a job is live, then (the job
  cancelled) stops the gateway and its workers at once and returns once the
  process has exited; `spotlab gateway status` before and after.
force: `spotlab gateway stop --force` with a job running stops the gateway and
  its idle worker; the job's worker goes on running it.
Every wait has a deadline.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures, run_case  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import session_pids  # noqa: E402
from spotlab_home import stop_all  # noqa: E402

CASE, GATEWAY, WORKER, CLI = sys.argv[1:5]


class Embedded:
    """spotlab-gateway --embedded under a private SPOTLAB_HOME, as this
    test's child (so its exit status is known)."""

    def __init__(self, timeout):
        self.home = tempfile.mkdtemp(prefix="spotlab-life-")
        self.ini = self.home + ".ini"
        with open(self.ini, "w") as f:
            f.write("[gateway]\nheartbeat_ms = 200\n[idle]\ngateway_timeout = %s\n"
                    "[provider.local]\nslots = 2\ntime_scale = 60\n" % timeout)
        self.env = dict(os.environ, SPOTLAB_HOME=self.home, SPOTLAB_CONFIG=self.ini,
                        SPOTLAB_WORKER_BIN=os.path.abspath(WORKER), SPOTLAB_DEBUG="gateway")
        self.env.pop("SPOTLAB_GATEWAY", None)
        self.env.pop("SPOTLAB_TOKEN", None)
        self.listen = "ipc://%s/gateway.sock" % self.home
        self.p = None

    def start(self):
        log = open(os.path.join(self.home, "test-gateway.log"), "ab")
        self.p = subprocess.Popen([GATEWAY, "--embedded"], stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=log, env=self.env)
        log.close()
        self.wait_file("gateway.pid")

    def start_daemon(self):
        """As the kernel starts it: returns once its sockets are bound."""
        r = subprocess.run([GATEWAY, "--embedded", "--daemon"], env=self.env, timeout=60,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        check(r.returncode == 0, "--embedded --daemon started: %s" % r.stderr)
        self.p = None

    def wait_file(self, name, timeout=30):
        end = time.monotonic() + timeout
        while not os.path.exists(os.path.join(self.home, name)):
            if time.monotonic() > end or (self.p and self.p.poll() is not None):
                raise TimeoutError("no %s; log: %s" % (name, self.logtext()[-3000:]))
            time.sleep(0.05)  # another process's file: no event to wait on

    def token(self):
        with open(os.path.join(self.home, "token")) as f:
            return f.readline().strip()

    def client(self, session="nb"):
        return GatewayClient(self.listen, token=self.token(), session=session)

    def logtext(self):
        text = ""
        for name in ("test-gateway.log", "gateway.log"):
            try:
                with open(os.path.join(self.home, name), "rb") as f:
                    text += f.read().decode(errors="replace")
            except OSError:
                pass
        return text

    def cli(self, *args):
        return subprocess.run([CLI] + list(args), env=self.env, capture_output=True, text=True,
                              timeout=60)

    def wait_exit(self, timeout):
        """The gateway child's exit status, or None if it still runs."""
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def cleanup(self):
        if failures:
            print("gateway log:\n" + self.logtext()[-8000:], file=sys.stderr)
        if self.p and self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        stop_all(self.home)
        shutil.rmtree(self.home, ignore_errors=True)
        os.unlink(self.ini)


def wait_gone(pid, timeout):
    """Waits for every process of the session led by pid to exit."""
    end = time.monotonic() + timeout
    while session_pids(pid) and time.monotonic() < end:
        time.sleep(0.05)  # another session's processes: no event to wait on
    return not session_pids(pid)


def run_job(c, script):
    r = c.req("submit", kind="run", script=script, options={})
    assert r["ok"], r
    job = r["job"]
    assert c.req("attach", job=job, after=0)["ok"]
    return job


def state_is(job, *states):
    return lambda e: e["job"] == job and e["event"] == "state" and e["state"] in states


def worker_pid(gw, c, job):
    inst = [e for e in c.events if e["job"] == job and e["event"] == "placed"][-1]["instance"]
    with open(os.path.join(gw.home, "instances", inst, "instance.json")) as f:
        return inst, int(json.load(f)["pid"])


def records(gw):
    """The instances whose record or key pair is on disk."""
    folder = os.path.join(gw.home, "instances")
    return sorted(i for i in (os.listdir(folder) if os.path.isdir(folder) else [])
                  if any(os.path.exists(os.path.join(folder, i, f)) for f in ("instance.json", "worker.json")))


def case_idle(gw):
    gw.start()
    c = gw.client("nb-idle")
    check(c.req("session.set", vars={"lr": {"t": "num", "v": 0.001}})["ok"], "session.set")
    job = run_job(c, "true")
    c.wait_event(state_is(job, "succeeded", "failed", "cancelled"), "the job's end", 120)
    inst, pid = worker_pid(gw, c, job)
    check(bool(session_pids(pid)), "the idle worker %s runs" % inst)
    t_close = time.monotonic()
    c.close()
    rc = gw.wait_exit(60)
    waited = time.monotonic() - t_close
    check(rc == 0, "the idle gateway exited 0 (%s)" % rc)
    check(waited >= 2.5, "it waited its timeout (3 s) first: %.1f s" % waited)
    log = gw.logtext()
    check("no client and no job for 3 s ([idle] gateway_timeout): stopping 1 workers" in log,
          "the log says why it stopped")
    check(wait_gone(pid, 20), "the worker's processes are gone: %s" % session_pids(pid))
    check(not os.path.exists(os.path.join(gw.home, "gateway.pid")), "no pid file is left")
    check(os.path.exists(os.path.join(gw.home, "gateway.db")), "the state is kept")
    gw.start_daemon()
    c = gw.client("nb-idle")
    r = c.req("session.get")
    check(r["ok"] and "lr" in json.dumps(r), "the session's variables are back: %s" % r)
    r = gw.cli("gateway", "status")
    check(r.returncode == 0 and "stops itself after 3s with no client and no job" in r.stdout,
          "status names the timeout as set (3 s, not 0 min): %r" % r.stdout)
    jobs = c.req("jobs")["jobs"]
    check([j["job"] for j in jobs] == [job] and jobs[0]["state"] == "succeeded",
          "the job is remembered: %s" % jobs)
    c.close()


def case_job(gw):
    gw.start()
    c = gw.client("nb-job")
    job = run_job(c, "sleep 6")
    c.wait_event(state_is(job, "running"), "the job running", 120)
    t_close = time.monotonic()
    c.close()
    rc = gw.wait_exit(90)
    waited = time.monotonic() - t_close
    check(rc == 0, "the gateway exited 0 once idle (%s)" % rc)
    check(waited >= 6 + 1.5, "the running job kept it up past its 2 s timeout: %.1f s" % waited)
    log = gw.logtext()
    end, stop = log.find("%s -> succeeded" % job), log.find("no client and no job")
    check(0 <= end < stop, "the job ended (succeeded) before the gateway stopped (%d, %d)"
          % (end, stop))


def case_stop(gw, force=False):
    gw.start()
    r = gw.cli("gateway", "status")
    check(r.returncode == 0 and "running: pid %d" % gw.p.pid in r.stdout
          and "never stops itself" in r.stdout, "status while running: %r" % r.stdout)
    c = gw.client("nb-stop")
    long = run_job(c, "sleep 600")
    c.wait_event(state_is(long, "running"), "the long job running", 120)
    short = run_job(c, "true")  # on a second worker, idle once it is done
    c.wait_event(state_is(short, "succeeded", "failed", "cancelled"), "the short job's end", 120)
    (busy_inst, busy), (idle_inst, idle) = [worker_pid(gw, c, j) for j in (long, short)]
    check(busy != idle, "two workers: %s" % [busy, idle])
    r = gw.cli("gateway", "stop")
    check(r.returncode == 1 and "1 job is still live" in r.stderr and "force" in r.stderr,
          "refused while a job is live: %r %r" % (r.stdout, r.stderr))
    check(gw.p.poll() is None, "the gateway still runs")
    check(session_pids(busy) and session_pids(idle), "both workers still run")
    if force:
        c.close()
        r = gw.cli("gateway", "stop", "--force")
        check(r.returncode == 0 and "1 idle worker stopped" in r.stdout
              and "job %s (running" % long in r.stdout and "the gateway has exited" in r.stdout,
              "stop --force: %r %r" % (r.stdout, r.stderr))
        check(gw.p.poll() == 0, "the gateway had exited (0) when stop returned: %s" % gw.p.poll())
        check(not session_pids(idle), "the idle worker is gone: %s" % session_pids(idle))
        check(bool(session_pids(busy)), "the running job's worker still runs it")
        check(records(gw) == [busy_inst], "only the running worker's record is left: %s (busy %s)"
              % (records(gw), busy_inst))
        return
    check(c.req("cancel", job=long)["ok"], "cancel")
    c.wait_event(state_is(long, "cancelled"), "the long job cancelled", 60)
    c.close()
    r = gw.cli("gateway", "stop")
    check(r.returncode == 0 and "2 idle workers stopped" in r.stdout
          and "the gateway has exited" in r.stdout, "stop: %r %r" % (r.stdout, r.stderr))
    check(gw.p.poll() == 0, "the gateway had exited (0) when stop returned: %s" % gw.p.poll())
    check(not session_pids(busy) and not session_pids(idle), "no worker process is left: %s"
          % [session_pids(busy), session_pids(idle)])
    check(not records(gw), "nor a stopped worker's record or keys: %s" % records(gw))
    left = [f for f in ("gateway.sock", "workers.sock") if os.path.exists(os.path.join(gw.home, f))]
    check(not left, "the stopped gateway removed its socket files: %s" % left)
    r = gw.cli("gateway", "status")
    check(r.returncode == 1 and "not running" in r.stdout, "status once stopped: %r" % r.stdout)
    r = gw.cli("status")
    check(r.returncode != 0 and "no gateway is running (no socket file)" in r.stderr and
          "spotlab-gateway --embedded --daemon" in r.stderr,
          "spotlab status once stopped says how to start one: %r" % r.stderr)


def case_token(gw):
    """The token file as a hand or a crash may leave it: a token the clients cannot send as
    it is (a blank inside, bytes that are not ASCII, too short) is replaced, with a warning;
    a long one is kept whole. The CLI (which reads the file up to its first blank) and a
    client that sends the whole line both get in."""
    path = os.path.join(gw.home, "token")
    for content, kept in ((b"abcdefghijklmnop qrstuvwxyz\n", False),
                          (b"\xff\xfe" + b"k" * 30 + b"\n", False),
                          (b"short\n", False),
                          (b"t" * 300 + b"\n", True),
                          (b"u" * 4095 + b"\n", True)):
        with open(path, "wb") as f:
            f.write(content)
        seen = len(gw.logtext())
        gw.start()
        with open(path, "rb") as f:
            now = f.read()
        token = now.split(b"\n")[0]
        check((now == content) == kept, "token file %r %s: %r" % (content[:20], "kept" if kept
                                                                   else "replaced", now[:40]))
        check(len(token) >= 16 and all(0x21 <= b <= 0x7e for b in token), "a usable token: %r"
              % token[:40])
        if not kept:
            check("is not a token of 16 or more printable characters" in gw.logtext()[seen:],
                  "the replacement is logged")
        c = gw.client("nb-token")
        check(c.req("ping")["ok"], "a client with the file's token gets in")
        c.close()
        r = gw.cli("status")
        check(r.returncode == 0, "the CLI gets in: %s %s" % (r.stdout[-300:], r.stderr[-300:]))
        gw.p.terminate()
        check(gw.wait_exit(20) is not None, "the gateway stopped")


def main():
    timeout = {"idle": "3s", "job": "2s", "stop": "0", "force": "0", "token": "0"}[CASE]
    gw = Embedded(timeout)
    case = {"idle": case_idle, "job": case_job, "stop": case_stop, "token": case_token,
            "force": lambda g: case_stop(g, force=True)}[CASE]
    return run_case(case, gw, cleanup=lambda failed: gw.cleanup())


if __name__ == "__main__":
    sys.exit(main())
