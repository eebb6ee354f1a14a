#!/usr/bin/env python3
"""The spotlab CLI's edges against a real spotlab-gateway (local provider,
real spotlab-worker instances running %%run scripts).

usage: test_cli.py GATEWAY WORKER CLI

Options a command does not take are refused, naming the option and the
command; an argument (or SPOTLAB_TOKEN) that is not UTF-8 text is a usage
error naming the argument, a token the gateway could not take is too long;
--notice is a duration as docs/admin.md writes one, from 1 s to 24 h.
Output that cannot be written is an error (exit 1, one message), and
`logs -f` stops at the first failed write (a full disk, a closed pipe with
SIGPIPE ignored). A job named by an alias of its id (J0000001) is followed
to its end, shown, rerun and cancelled. --json prints no protocol fields;
`gateway status --json` prints JSON also with no gateway, and a refused
token is not "not running". On a terminal the progress line fits the
terminal's width, TERM=dumb gets no escapes and Ctrl-C ends the line.
`logs -f` says once that the gateway went away and once that it is back.
A service that is no spotlab gateway gets one warning and a clear error.
Every wait has a deadline.
"""
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, failures, require  # noqa: E402
from procs import blocked_in  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402

GATEWAY, WORKER, CLI = (os.path.abspath(a) for a in sys.argv[1:4])
TOKENS = {"alice": "alice-token-1", "root": "root-token-3"}
# 400 lines of 300 characters at once (more than a terminal holds unread),
# then a short one every 0.2 s
PRINTER = ("pad=$(printf '%0290d' 0); i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo $pad line $i; done; "
           "while :; do i=$((i+1)); echo line $i; sleep 0.2; done")


def env_of(gw, user="alice", **extra):
    env = dict(os.environ, SPOTLAB_GATEWAY=gw.listen, SPOTLAB_TOKEN=TOKENS[user],
               SPOTLAB_HOME=os.path.join(gw.dir, "cli-home"))
    env.pop("SPOTLAB_DEBUG", None)
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


def cli(gw, *args, user="alice", stdout=subprocess.PIPE, timeout=60, **extra):
    """The CLI run to its end: (rc, stdout, stderr), as bytes."""
    p = subprocess.run([CLI, *args], stdout=stdout, stderr=subprocess.PIPE, timeout=timeout,
                       env=env_of(gw, user, **extra))
    return p.returncode, p.stdout or b"", p.stderr


def alias(job):
    """Another name the gateway takes for job: one more leading zero."""
    return "J0" + job[1:]


class Lines:
    """A stream read line by line in a thread, waited on with deadlines."""

    def __init__(self, f):
        self.lines = []
        self.cv = threading.Condition()
        self.t = threading.Thread(target=self._read, args=(f,), daemon=True)
        self.t.start()

    def _read(self, f):
        for line in iter(f.readline, b""):
            with self.cv:
                self.lines.append(line.decode(errors="replace"))
                self.cv.notify_all()

    def wait(self, pred, timeout):
        with self.cv:
            return self.cv.wait_for(lambda: any(pred(x) for x in self.lines), timeout)


def usage_errors(gw):
    for args, flag in ((["jobs", "-f"], "-f"), (["jobs", "--follow"], "--follow"),
                       (["show", "J000001", "-f"], "-f"), (["status", "--notice", "5s"], "--notice"),
                       (["cancel", "J000001", "--json"], "--json"), (["rerun", "J000001", "--json"], "--json"),
                       (["inject", "kill", "i-1", "--json"], "--json"), (["status", "--force"], "--force"),
                       (["jobs", "--user", "bob"], "--user")):
        rc, out, err = cli(gw, *args)
        check(rc == 2 and flag.encode() in err and (b"%s takes no option" % args[0].encode()) in err,
              "spotlab %s: refused, naming the option and the command: %r" % (" ".join(args), err))
    rc, _, err = cli(gw, "sessions", "rm", "")
    check(rc == 2 and b"session name is empty" in err, "sessions rm '': a usage error: %r" % err)
    bad = b"x\xff"
    for args, role in (([b"logs", b"J\xff00001"], b"the job id"), ([b"show", bad], b"the job id"),
                       ([b"cancel", bad], b"the job id"), ([b"rerun", bad], b"the job id"),
                       ([b"inject", b"preempt", bad], b"the instance id"),
                       ([b"sessions", b"rm", bad], b"the session name"),
                       ([b"budget", b"set", b"group", bad, b"5"], b"the group or user name"),
                       ([b"sessions", b"--user", bad], b"the user name")):
        rc, _, err = cli(gw, *args)
        check(rc == 2 and role in err and b"not UTF-8 text" in err,
              "%s: a usage error naming %s: %r" % (args, role.decode(), err))
    p = subprocess.run([CLI, "status"], capture_output=True, timeout=60,
                       env=dict(env_of(gw), SPOTLAB_TOKEN=b"tok\xffen".decode("utf-8", "surrogateescape")))
    check(p.returncode == 2 and b"SPOTLAB_TOKEN is not UTF-8 text" in p.stderr,
          "a SPOTLAB_TOKEN that is not UTF-8: %r" % p.stderr)
    rc, _, err = cli(gw, "status", SPOTLAB_TOKEN="t" * 5000)
    check(rc == 2 and b"SPOTLAB_TOKEN is too long" in err and b"4095" in err,
          "a SPOTLAB_TOKEN too long for the gateway: %r" % err)
    for notice in ("500ms", "0s", "0.5s", "86401s", "2d"):
        rc, _, err = cli(gw, "inject", "preempt", "i-1", "--notice", notice)
        check(rc == 2 and b"from 1s to 86400s" in err, "--notice %s: out of range: %r" % (notice, err))
    for notice in ("0x10s", "1e3s", " 5s", "5 s", "-5s", "5.s", ".5s", "5sec"):
        rc, _, err = cli(gw, "inject", "preempt", "i-1", "--notice=" + notice)
        check(rc == 2 and b"takes a duration" in err, "--notice %r: not a duration: %r" % (notice, err))
    rc, _, err = cli(gw, "inject", "kill", "i-1", "--notice", "5s")
    check(rc == 2 and b"preempt only" in err, "--notice with kill: %r" % err)
    rc, _, err = cli(gw, "inject", "preempt", "i-nothere", "--notice", "1.5s")
    check(rc == 1 and b"no such instance" in err, "--notice 1.5s reaches the gateway: %r" % err)


def output_errors(gw, job):
    with open("/dev/full", "wb") as full:
        for args in (["status"], ["status", "--json"], ["jobs"], ["jobs", "--json"], ["cost"],
                     ["cost", "--json"], ["show", job], ["show", job, "--json"], ["logs", job],
                     ["logs", job, "--json"], ["help"], ["version"], ["instances", "--json"],
                     ["budget", "--json"], ["sessions"], ["gateway", "status"], ["gateway", "status", "--json"]):
            rc, _, err = cli(gw, *args, stdout=full)
            check(rc == 1 and err.count(b"spotlab: cannot write the output: No space left on device") == 1,
                  "spotlab %s > /dev/full: exit 1 with one message: %r" % (" ".join(args), err))


def json_outputs(gw):
    for cmd in ("status", "cost", "budget"):
        rc, out, err = cli(gw, cmd, "--json")
        o = json.loads(out) if rc == 0 else {}
        check(rc == 0 and o and not {"ok", "re", "type", "id", "auth"} & set(o),
              "%s --json: no protocol fields: %s" % (cmd, sorted(o)))
    rc, out, err = cli(gw, "sessions", "--user", "nobody", user="root")
    check(rc == 0 and b"No notebook session of nobody's" in out and b"yours" not in out,
          "sessions --user nobody names nobody: %r %r" % (out, err))
    rc, out, err = cli(gw, "data", "--user", "nobody", user="root")
    check(rc == 0 and b"of nobody's" in out and b"yours" not in out, "data --user nobody: %r %r" % (out, err))


def gateway_status(gw):
    rc, out, err = cli(gw, "gateway", "status", "--json", SPOTLAB_TOKEN="not-a-token-it-knows")
    o = json.loads(out) if out.strip().startswith(b"{") else {}
    check(rc == 1 and o.get("running") is True and o.get("token_accepted") is False,
          "gateway status --json, a wrong token: it runs, refusing the token: %r %r" % (out, err))
    rc, out, err = cli(gw, "gateway", "status", SPOTLAB_TOKEN="not-a-token-it-knows")
    check(rc == 1 and b"not running" not in out and b"refused the token" in out,
          "gateway status, a wrong token: not \"not running\": %r" % out)
    nowhere = "ipc://%s/none.sock" % gw.dir
    rc, out, err = cli(gw, "gateway", "status", "--json", SPOTLAB_GATEWAY=nowhere)
    o = json.loads(out) if out.strip().startswith(b"{") else {}
    check(rc == 1 and o.get("running") is False and "no spotlab gateway" in o.get("reason", ""),
          "gateway status --json with none: JSON, exit 1: %r %r" % (out, err))


def alias_ids(gw, c):
    r = c.req("submit", kind="run", script="echo hello from the job", options={})
    require(r["ok"], "submit a short job", r)
    job = r["job"]
    rc, out, err = cli(gw, "logs", "-f", alias(job), timeout=120)
    check(rc == 0 and b"hello from the job" in out, "logs -f %s follows %s to its end: %r %r"
          % (alias(job), job, out[-300:], err))
    rc, out, err = cli(gw, "logs", "-f", alias(job), "--json", timeout=60)
    states = [json.loads(x).get("state") for x in out.splitlines() if x.strip()]
    check(rc == 0 and "succeeded" in states, "logs -f --json of the alias: %r" % err)
    rc, out, err = cli(gw, "show", alias(job), "--json")
    check(rc == 0 and json.loads(out).get("job") == job, "show %s: %r" % (alias(job), err))
    rc, out, err = cli(gw, "rerun", alias(job), timeout=120)
    check(rc == 0 and b"a rerun of" in out, "rerun %s: %r %r" % (alias(job), out, err))
    return job


def wait_output(c, job, timeout=120):
    c.req("attach", job=job, after=0)
    c.wait_event(lambda e: e["job"] == job and e["event"] == "output", "output of %s" % job, timeout)


def follow_write_errors(gw, job):
    with open("/dev/full", "wb") as full:
        rc, _, err = cli(gw, "logs", "-f", job, stdout=full, timeout=30)
    check(rc == 1 and b"cannot write the output" in err, "logs -f > /dev/full stops at once: %r" % err)
    # `| head -1` with SIGPIPE ignored (restore_signals=False keeps Python's SIG_IGN)
    p = subprocess.Popen([CLI, "logs", "-f", job], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env_of(gw), restore_signals=False)
    p.stdout.readline()
    p.stdout.close()
    try:
        rc = p.wait(30)
        err = p.stderr.read()
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc, err = None, p.stderr.read()
    check(rc == 1 and b"cannot write the output: Broken pipe" in err,
          "logs -f | head -1 (SIGPIPE ignored) stops at the first failed write: %r %r" % (rc, err))


def on_pty(gw, job, cols, **extra):
    """logs -f job on a terminal of cols columns, interrupted (SIGINT) once
    a few lines came: (rc, whether SIGINT came in a write, everything written)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen([CLI, "logs", "-f", job], stdin=slave, stdout=slave, stderr=slave,
                         env=env_of(gw, **dict({"TERM": "xterm"}, **extra)), start_new_session=True)
    os.close(slave)
    out = b""
    end = time.monotonic() + 60
    interrupted = in_write = False
    while time.monotonic() < end:
        if not interrupted and out.count(b"line ") >= 4:
            # the job's earlier lines fill the terminal while nothing reads
            # them: Ctrl-C then comes while the CLI waits in a write
            in_write = blocked_in(p.pid, 1, 5)  # x86-64 write
            os.kill(p.pid, signal.SIGINT)
            interrupted = True
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
        elif p.poll() is not None:
            break
    if p.poll() is None:
        p.kill()
    rc = p.wait()
    os.close(master)
    return rc, in_write, out.decode(errors="replace")


def terminal(gw, job):
    rc, in_write, out = on_pty(gw, job, 20)
    # a progress line is what is cleared again (a line of its own ends in a newline)
    bars = [b for b in re.findall(r"([^\r\n\033]*)\r\033\[K", out) if b]
    check(bars and all(len(b) <= 19 for b in bars),
          "a 20-column terminal: the progress line fits in 19 columns: %r"
          % ([b for b in bars if len(b) > 19] or bars[-3:]))
    check(re.search(r"line \d+\r\n", out), "a line of the job's output ends its line: %r" % out[-200:])
    check(rc == 1 and out.endswith("\n"), "Ctrl-C ends the progress line with a newline: rc %s %r"
          % (rc, out[-80:]))
    # Ctrl-C comes while the job's earlier lines are being written: it ends
    # following all the same, and a write it interrupted is no failed write
    check(in_write, "Ctrl-C came while the CLI waited in a write")
    check("cannot write" not in out, "Ctrl-C during a write is no write error: %r" % out[-200:])
    rc, in_write, out = on_pty(gw, job, 80, TERM="dumb")
    check("\033" not in out and "line " in out, "TERM=dumb: no escapes: %r" % out[-200:])
    check(rc == 1 and "cannot write" not in out and out.endswith("spotlab logs: interrupted\r\n"),
          "TERM=dumb: Ctrl-C ends following: rc %s %r" % (rc, out[-200:]))


def gateway_gone(gw, job):
    p = subprocess.Popen([CLI, "logs", "-f", "--json", job], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env_of(gw))
    out, err = Lines(p.stdout), Lines(p.stderr)
    try:
        check(out.wait(lambda x: '"output"' in x, 60), "logs -f follows the job")
        gw.stop()
        check(err.wait(lambda x: "gateway unreachable" in x, 30), "logs -f says the gateway went away")
        # the gateway stays down for a span of several of the CLI's pings
        # (every 5 s), each unanswered: a span to let pass, no event to wait for
        time.sleep(12)
        gw.start()
        check(err.wait(lambda x: "the gateway is back" in x, 60), "logs -f says the gateway is back: %r"
              % err.lines)
        rc, _, e = cli(gw, "cancel", alias(job))
        check(rc == 0, "cancel %s: %r" % (alias(job), e))
        rc = p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err.t.join(10)
    gone = [x for x in err.lines if "unreachable" in x]
    back = [x for x in err.lines if "is back" in x]
    check(len(gone) == 1 and len(back) == 1, "one line each: %r" % err.lines)
    check(rc == 1 and any("cancelled" in x for x in err.lines), "logs -f ends with the job: %r" % err.lines)


def not_a_gateway(gw):
    """A ZeroMQ service that answers anything with 400 frames that are no
    protocol message."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    s.linger = 0
    port = s.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            if s.poll(100):
                rid = s.recv_multipart()[0]
                for _ in range(400):
                    s.send_multipart([rid, b"HTTP/1.1 400 Bad Request"])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rc, _, err = cli(gw, "status", SPOTLAB_GATEWAY="tcp://127.0.0.1:%d" % port)
    finally:
        stop.set()
        t.join(5)
        s.close()
        ctx.term()
    text = err.decode(errors="replace")
    check(rc == 1 and text.count("malformed") <= 2 and "more malformed messages" in text,
          "one warning, then a count: %r" % text[:600])
    check("does not answer as a spotlab gateway" in text, "the error says it is no spotlab gateway: %r"
          % text[-400:])


def main():
    folder = tempfile.mkdtemp(prefix="kgw-cli-")
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2, user_options={"root": "admin = yes\n"},
                        extra_ini="[idle]\nworker_timeout = 10m\n",
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_DEBUG": None})
    gw.start()
    try:
        c = GatewayClient(gw.listen, TOKENS["alice"])
        usage_errors(gw)
        not_a_gateway(gw)
        json_outputs(gw)
        gateway_status(gw)
        done = alias_ids(gw, c)
        output_errors(gw, done)
        r = c.req("submit", kind="run", script=PRINTER, options={})
        require(r["ok"], "submit a job that prints 400 long lines, then a line every 0.2 s", r)
        printer = r["job"]
        wait_output(c, printer)
        follow_write_errors(gw, printer)
        terminal(gw, printer)
        c.close()
        gateway_gone(gw, printer)
    finally:
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)  # workers outlive a stopped gateway by design
        shutil.rmtree(folder, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
