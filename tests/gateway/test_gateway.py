#!/usr/bin/python3
"""spotlab-gateway integration tests over real sockets, against the fake
provider (the cases with the real local provider are test_gateway_local.py).

usage: test_gateway.py CASE GATEWAY FAKE_GATEWAY FAKE_WORKER

FAKE_GATEWAY is spotlab-gateway with the test provider "fake" registered
([provider.fake]), which runs FAKE_WORKER (a scripted CURVE worker) per
instance. $SPOTLAB_TEST_CLI names
the spotlab command. Every wait has a deadline; nothing sleeps to wait for an
event.
"""
import getpass
import json
import os
import re
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import time

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, require, run_case  # noqa: E402
from gateway_proc import token_sha256  # noqa: E402
from gwcases import (CTX, TOKENS, Client, Gateway, attach, configure, define, gateway_cleanup,  # noqa: E402
                     state_is, submit, worker_socket)

CASE, GATEWAY, FAKE_GATEWAY, FAKE_WORKER = sys.argv[1:5]
configure(GATEWAY, FAKE_GATEWAY, FAKE_WORKER)


def seqs(events, job):
    return [e["seq"] for e in events if e.get("job") == job]


def cli_env(gw, user="alice"):
    env = dict(os.environ, SPOTLAB_GATEWAY=gw.listen, SPOTLAB_TOKEN=TOKENS[user],
               SPOTLAB_HOME=os.path.join(gw.dir, "cli-home"))
    env.pop("SPOTLAB_DEBUG", None)
    return env


# ---- cases ----

def case_auth(gw):
    c = Client(gw.listen)
    r = c.req("ping", timeout=20)
    check(not r["ok"] and r["error"]["code"] == "SL_EAUTH", "request before hello refused")
    r = c.req("hello", token="wrong-token", client="cli", session="")
    check(not r["ok"] and r["error"]["code"] == "SL_EAUTH", "wrong token refused")
    r = c.req("jobs")
    check(not r["ok"] and r["error"]["code"] == "SL_EAUTH", "still refused after a bad hello")
    r = c.req("hello", client="cli")
    check(not r["ok"] and r["error"]["code"] == "SL_EAUTH", "missing token refused")
    r = c.req("hello", token="t" * 4096, client="cli", session="")
    check(not r["ok"] and r["error"]["code"] == "SL_EAUTH" and "too long (4096 bytes" in r["error"]["message"],
          "a token longer than any is refused as that: %s" % r["error"])
    check(gw.wait_log("hello refused"), "refusal logged")
    check(TOKENS["alice"] not in gw.logtext() and "wrong-token" not in gw.logtext(),
          "tokens never logged")
    r = c.req("hello", token=TOKENS["alice"], client="kernel", session="nb")
    check(r["ok"] and r["user"] == "alice" and r["session"] == "nb", "right token accepted")
    check(c.req("ping")["ok"], "ping after hello")
    check(c.req("status")["ok"], "status after hello")


def case_isolation(gw):
    a = Client(gw.listen, "alice")
    b = Client(gw.listen, "bob")
    define(a)
    job = submit(a, steps=3)
    attach(a, job)
    a.wait_event(state_is(job, "succeeded"))
    nosuch = b.req("attach", job="J999999", after=0)
    check(not nosuch["ok"] and nosuch["error"]["code"] == "SL_ENAME", "unknown job is SL_ENAME")
    for t in ("attach", "cancel", "logs"):
        r = b.req(t, job=job, after=0)
        check(not r["ok"] and r["error"] == nosuch["error"], "bob %s of alice's job looks absent" % t)
    check(not b.events, "bob received no event of alice's job")
    jobs = b.req("jobs", all=True)["jobs"]
    check(all(j["job"] != job for j in jobs), "alice's job not in bob's list")
    s = b.req("session.get")
    check(s["ok"] and not s["defs"] and not s["vars"], "bob's session of the same name is his own")
    r = b.req("submit", kind="train", model="m", data="d")
    check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "bob cannot train alice's model")
    check(any(j["job"] == job for j in a.req("jobs", all=True)["jobs"]), "alice sees her job")
    inst = a.req("logs", job=job)["events"]
    placed = [e for e in inst if e["event"] == "placed"]
    if check(placed, "alice's job has a placed event in its log"):
        r = b.req("inject", action="kill", instance=placed[0]["instance"])
        check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "bob cannot kill alice's instance")


def case_malformed_kernel(gw):
    c = Client(gw.listen, "alice")
    s = c.signed  # requests that get past authentication carry hello's secret
    deep = b'{"a":' * 40 + b'1' + b'}' * 40
    cases = [
        ([b"not json"], "SL_EJSON"),
        ([deep], None),
        ([b'{"type":"ping","id":1,"pad":"' + b"x" * (2 << 20) + b'"}'], "SL_ELIMIT"),
        ([b'{"type":"ping"}'] * 10, "SL_ELIMIT"),
        ([b'{"type":"ping"}', b'{"type":"ping"}'], "SL_EWIRE"),
        ([b'[1,2,3]'], "SL_EWIRE"),
        ([b'{"id":5}'], "SL_EWIRE"),
        ([s(b'{"type":"frobnicate","id":6}')], "SL_ENAME"),
        ([s(b'{"type":"submit","id":7}')], "SL_ENAME"),
        ([s(b'{"type":"submit","id":8,"kind":"train","options":[]}')], "SL_ETYPE"),
        ([s(b'{"type":"attach","id":9}')], "SL_ENAME"),
        ([s(b'{"type":"cancel","id":10,"job":"J12x"}')], "SL_ENAME"),
        ([s(b'{"type":"session.set","id":11,"vars":{"x":3}}')], "SL_ETYPE"),
        ([s(b'{"type":"inject","id":12,"action":"explode"}')], "SL_ENAME"),
        ([b'{"type":"hello","id":13}'], "SL_EAUTH"),
        ([b'\xff\xfe'], "SL_EJSON"),
    ]
    for frames, code in cases:
        r = c.raw(frames)
        ok = not r["ok"] and (r["error"]["code"] == code if code else
                              r["error"]["code"] in ("SL_ELIMIT", "SL_EJSONDEPTH"))
        check(ok, "%r... answered %s" % (frames[0][:30], r.get("error")))
        check(c.req("ping")["ok"], "ping answered after %r..." % frames[0][:30])
    r = c.raw([s(b'{"type":"frobnicate","id":6}')])
    check(r["re"] == 6, "error reply echoes the id")
    # a number past 64 bits: the only fault; the refusal still names the request it answers
    r = c.raw([b'{"type":"submit","id":14,"kind":"run","options":{"steps":123456789012345678901234567890}}'])
    check(not r["ok"] and r["error"]["code"] == "SL_EJSON" and r["re"] == 14,
          "a number too big for 64 bits is refused, answering its request: %s" % r)
    # the failed hello above forgot nothing: alice is still signed in
    check(c.req("ping")["ok"], "gateway still serves after malformed input")


def running_hold_job(gw, c):
    define(c)
    job = submit(c, steps=50, hold=True)
    attach(c, job)
    c.wait_event(lambda e: e["job"] == job and e["event"] == "checkpoint")
    summary = c.req("attach", job=job, after=10 ** 9)["job"]
    return job, summary


def case_malformed_worker(gw):
    c = Client(gw.listen, "alice")
    job, summary = running_hold_job(gw, c)
    cfg_path = os.path.join(gw.state, "instances", summary["instance"], "worker.json")
    mode = stat.S_IMODE(os.stat(cfg_path).st_mode)
    check(mode == 0o600, "worker config is 0600 (%o)" % mode)
    s, cfg = worker_socket(cfg_path)
    # The instance's own worker is stopped while this socket speaks for it:
    # the newest connection wins, and its heartbeats would take the cancel.
    pid = int(open(os.path.join(os.path.dirname(cfg_path), "fake.pid")).read())
    os.kill(pid, signal.SIGSTOP)
    try:
        malformed_worker_as(gw, c, s, cfg, job, summary)
    finally:
        os.kill(pid, signal.SIGCONT)
        s.close(0)


def malformed_worker_as(gw, c, s, cfg, job, summary):
    deep = b'{"a":' * 40 + b'1' + b'}' * 40
    bad = [[b"not json"], [deep], [b"x" * (2 << 20)], [b'{"type":"heartbeat"}'] * 10,
           [b'{"type":"teleport"}'], [b'{"type":"metric"}'], [b'{"type":"metric","job":"J1"}'],
           [b'{"type":"done","job":"%s","attempt":99,"status":"succeeded"}' % job.encode()],
           [b'{"type":"register","instance":"i-000000000000"}'], [b'[]']]
    for frames in bad:
        s.send_multipart(frames)
    check(gw.wait_log("dropped a malformed message"), "malformed worker message logged")
    # Each message that does not parse or is of an unknown type gets an error
    # (not json, too deep, too big, too many frames, unknown type, not an object).
    errors = []
    while s.poll(1000):
        m = json.loads(s.recv())
        if m.get("type") == "error":
            errors.append(m["error"]["code"])
    check(len(errors) >= 6, "error replies to malformed worker messages: %s" % errors)
    reg = {"type": "register", "instance": cfg["instance"],
           "jobs": [{"job": job, "attempt": summary["attempt"], "step": 1}]}
    s.send(json.dumps(reg).encode())
    if not check(s.poll(5000) and json.loads(s.recv())["type"] == "registered",
                 "a registered key still works after garbage"):
        return
    r = c.req("attach", job=job, after=10 ** 9)["job"]
    check(r["state"] == "running", "the job was not moved by bad messages (%s)" % r["state"])
    # this socket is now the instance's newest connection; it answers the cancel
    c.req("cancel", job=job)
    if not check(s.poll(5000), "cancel reached the worker connection"):
        return
    m = json.loads(s.recv())
    check(m.get("type") == "cancel" and m.get("job") == job, "cancel message %r" % m)
    s.send(json.dumps({"type": "done", "job": job, "attempt": summary["attempt"],
                       "status": "cancelled", "exit_code": 0, "step": 1}).encode())
    c.wait_event(state_is(job, "cancelled"))


def case_curve(gw):
    c = Client(gw.listen, "alice")
    pub, sec = zmq.curve_keypair()
    s = CTX.socket(zmq.DEALER)
    s.linger = 0
    key = open(os.path.join(gw.state, "gateway.key")).read().split()[0]
    check(stat.S_IMODE(os.stat(os.path.join(gw.state, "gateway.key")).st_mode) == 0o600,
          "gateway key file 0600")
    s.curve_serverkey = key.encode()
    s.curve_publickey, s.curve_secretkey = pub, sec
    s.connect(gw.workers)
    s.send(json.dumps({"type": "register", "instance": "i-0123456789ab", "jobs": []}).encode())
    check(gw.wait_log("refused a worker connection"), "refusal logged")
    check(not s.poll(500), "unregistered key gets nothing")
    check("i-0123456789ab registered" not in gw.logtext(), "no message reached the gateway")
    check(sec.decode() not in gw.logtext() and pub.decode() not in gw.logtext(), "keys not logged")
    s.close(0)
    # a registered key (the fake worker's, made at launch) works
    job, summary = running_hold_job(gw, c)
    check(summary["state"] == "running", "job running through a registered worker")
    s, cfg = worker_socket(os.path.join(gw.state, "instances", summary["instance"], "worker.json"))
    s.send(json.dumps({"type": "register", "instance": cfg["instance"], "jobs": [
        {"job": job, "attempt": summary["attempt"], "step": 1}]}).encode())
    check(s.poll(5000) and json.loads(s.recv())["type"] == "registered", "registered key accepted")
    s.close(0)
    c.req("cancel", job=job)


def case_dump_config(gw):
    ini = os.path.join(gw.dir, "in.ini")
    with open(ini, "w") as f:
        f.write("[gateway]\nlisten = tcp://127.0.0.1:7999\n[idle]\n"
                "worker_timeout = 90s\nwarn_before = 1500ms\n[budget]\nmonthly_usd = 123.45\n"
                "hard_cap = no\n[provider.local]\ntime_scale = 0.25\n[user.zed]\ntoken_sha256 = "
                + token_sha256("z") + "\ngroup = ops\n[group.ops]\nnotebook_timeout = 2h\n")
    env = dict(os.environ)
    env.pop("SPOTLAB_CONFIG", None)
    a = subprocess.run([GATEWAY, "--config", ini, "--workers", "tcp://127.0.0.1:7998",
                        "--dump-config"], capture_output=True, text=True, env=env)
    check(a.returncode == 0, "dump-config exits 0: " + a.stderr)
    out = os.path.join(gw.dir, "dump.ini")
    with open(out, "w") as f:
        f.write(a.stdout)
    b = subprocess.run([GATEWAY, "--config", out, "--dump-config"], capture_output=True,
                       text=True, env=env)
    check(b.returncode == 0 and a.stdout == b.stdout, "dump round-trips")
    for needle in ("listen = tcp://127.0.0.1:7999", "workers = tcp://127.0.0.1:7998",
                   "worker_timeout = 90s", "warn_before = 1500ms", "monthly_usd = 123.45",
                   "hard_cap = no", "[provider.local]", "time_scale = 0.25", "slots = 2",
                   "market = random:1", "[user.zed]", "group = ops", "[group.ops]",
                   "notebook_timeout = 2h", "\nhttp = \n", "; "):
        check(needle in a.stdout, "dump has %r" % needle)
    check("\nalert_at = \n" in a.stdout, "dump has alert_at")
    for gone in ("[provider.aws]",):
        check(gone not in a.stdout, "dump has no %r" % gone)
    env["SPOTLAB_CONFIG"] = out
    c = subprocess.run([GATEWAY, "--dump-config"], capture_output=True, text=True, env=env)
    check(c.stdout == a.stdout, "SPOTLAB_CONFIG names the file")
    env.pop("SPOTLAB_CONFIG")
    # a webhook's inline secret is left out of the dump (admin.md): such a dump does not
    # load as it is; with secret_file it does, from the same folder
    hook = ("[webhook.h]\nurl = https://hooks.example.org/x\nevents = job.failed\n")
    with open(os.path.join(gw.dir, "hook.key"), "w") as f:
        f.write("file-secret-123\n")
    for name, extra, loads in (("inline", "secret = inline-secret-456\n", False),
                               ("file", "secret_file = hook.key\n", True)):
        with open(ini, "w") as f:
            f.write(hook + extra)
        a = subprocess.run([GATEWAY, "--config", ini, "--dump-config"], capture_output=True,
                           text=True, env=env)
        check(a.returncode == 0 and "\n; secret = (set, not shown)\n" in a.stdout and
              "secret-123" not in a.stdout and "secret-456" not in a.stdout,
              "%s secret: the dump leaves it out: %r" % (name, a.stdout[-400:]))
        with open(out, "w") as f:
            f.write(a.stdout)
        b = subprocess.run([GATEWAY, "--config", out, "--dump-config"], capture_output=True,
                           text=True, env=env)
        if loads:
            check(b.returncode == 0 and b.stdout == a.stdout, "a dump with secret_file reads back")
        else:
            check(b.returncode == 2 and "[webhook.h] has no secret" in b.stderr,
                  "a dump of an inline secret does not load as is: %r" % b.stderr)


def case_config_errors(gw):
    env = dict(os.environ)
    env.pop("SPOTLAB_CONFIG", None)
    for text, line, needle in [("[gateway]\nlisten = tcp://x:1\nlsten = y\n", 3, "unknown key"),
                               ("[idle]\nworker_timeout = 5 minutes\n", 2, "not a duration"),
                               ("[budget]\nmonthly_usd = -1\n", 2, "out of range"),
                               ("\n\n[providers.local]\n", 3, "unknown section"),
                               ("[provider.local]\nslots = 1\nzones = a\n", 3,
                                'unknown key "zones" in [provider.local] (it accepts: slots'),
                               ("[provider.local]\nslots = 100\n", 2, "out of range"),
                               ("[gateway]\n[provider.gcp]\nregion = x\n", 2,
                                'unknown provider "gcp" (this gateway has: local, aws'),
                               ("[provider.aws]\npoll = soon\n", 2, 'poll: "soon" is not a duration'),
                               ("[gateway]\nhttp = http://127.0.0.1:7480\n", 2,
                                "http: \"http://127.0.0.1:7480\" is not HOST:PORT"),
                               ("[budget]\nalert_at = 50,x\n", 2,
                                'alert_at: "x" is not a percentage'),
                               ("[store]\nurl = ftp://x\n", 2, 'is not a file:/// or s3:// URL'),
                               ("[webhook.slack]\n", 1, "[webhook.slack] has no url"),
                               ("[webhook.a]\nurl = https://x/\nevents = job.done\n", 3,
                                'events: "job.done" is not an event'),
                               # libzmq would bind 70000 as 4464
                               ("[gateway]\nlisten = tcp://127.0.0.1:70000\n", 2,
                                "is not tcp://HOST:PORT with a port from 1 to 65535"),
                               ("[gateway]\nworkers = tcp://127.0.0.1:0x50\n", 2,
                                "is not tcp://HOST:PORT"),
                               ("[gateway]\nstate_dir =\n", 2, "state_dir: is empty"),
                               ("[gateway]\nheartbeat_ms = 0x100\n", 2,
                                'heartbeat_ms: "0x100" is not an integer'),
                               ("[idle]\nworker_timeout = 1e3\n", 2,
                                'worker_timeout: "1e3" is not a duration'),
                               ("; c\n[webhook.h]\nurl = http://127.0.0.1:9/\nevents = job.failed\n"
                                "secret = %s\n" % ("s" * 5000), 5, "line longer than 199 bytes"),
                               ("[budget]\nalert_at = 50,80,\n", 2,
                                "alert_at: a percentage is missing after the last comma"),
                               ("[user.bo b]\n", 1, '"bo b" is not a valid name (1 to 63 letters,'),
                               # text after a header is refused, never dropped
                               ("[gateway]\n[idle] junk\nworker_timeout = 1m\n", 2,
                                'malformed section header: "junk" after [idle]'),
                               # an empty item of a comma list
                               ("[webhook.a]\nurl = https://x/\nevents = job.failed,job.failed,,\n"
                                "secret = k\n", 3, "events: an event is missing between two commas"),
                               ("[group.g]\ninstance_types = ,,\n", 2,
                                "instance_types: an instance type is missing before the first comma"),
                               # a control byte in a value that goes into an HTTP request
                               ("[webhook.a]\nurl = https://x/\x01y\nevents = job.failed\nsecret = k\n",
                                2, 'url: "https://x/\\x01y" holds a control character'),
                               ("[store]\nregion = us-east-1\x01\n", 2, "region: \"us-east-1\\x01\" is not"
                                " a region name"),
                               ("[user.x]\n\x1b]0;title\x07 = 1\n", 2, 'unknown key "\\x1b]0;title\\x07"')]:
        ini = os.path.join(gw.dir, "bad.ini")
        with open(ini, "w") as f:
            f.write(text)
        r = subprocess.run([GATEWAY, "--config", ini, "--dump-config"], capture_output=True,
                           text=True, env=env)
        check(r.returncode == 2, "bad config exits 2")
        check("%s:%d:" % (ini, line) in r.stderr and needle in r.stderr,
              "message names file:line: %r" % r.stderr)
    r = subprocess.run([GATEWAY, "--frobnicate"], capture_output=True, text=True, env=env)
    check(r.returncode == 2 and "unknown argument" in r.stderr, "unknown argument")
    for flag, value, needle in [("--listen", "tcp://127.0.0.1:99999", "with a port from 1 to 65535"),
                                ("--state-dir", "", "--state-dir: state_dir: is empty"),
                                ("--config", "", "--config: the path is empty")]:
        r = subprocess.run([GATEWAY, flag, value, "--dump-config"], capture_output=True, text=True,
                           env=env)
        check(r.returncode == 2 and needle in r.stderr and not r.stdout,
              "%s %r: %r" % (flag, value, r.stderr))
    # an empty SPOTLAB_CONFIG is refused too, not read as "no file" (nothing sets it empty)
    r = subprocess.run([GATEWAY, "--dump-config"], capture_output=True, text=True,
                       env=dict(env, SPOTLAB_CONFIG=""))
    check(r.returncode == 2 and "SPOTLAB_CONFIG is set but empty" in r.stderr and not r.stdout,
          "SPOTLAB_CONFIG='': %r" % r.stderr)
    # --help explains every option it lists, --version among them
    r = subprocess.run([GATEWAY, "--help"], capture_output=True, text=True, env=env)
    check(r.returncode == 0, "--help exits 0")
    for flag in ("--embedded", "--daemon", "--config FILE", "--state-dir DIR", "--listen ADDR",
                 "--workers ADDR", "--dump-config", "--check NAME", "--help", "--version"):
        check(re.search(r"^  %s +\S" % re.escape(flag), r.stdout, re.M),
              "--help has a line for %s: %r" % (flag, r.stdout))
    r = subprocess.run([GATEWAY, "--version"], capture_output=True, text=True, env=env)
    check(r.returncode == 0 and r.stdout.startswith("spotlab-gateway "), "--version: %r" % r.stdout)
    # a line as long as inih reads is read whole
    ini = os.path.join(gw.dir, "long.ini")
    with open(ini, "w") as f:
        f.write("[webhook.h]\nurl = http://127.0.0.1:9/\nevents = job.failed\nsecret = %s\n"
                % ("s" * 190))
    r = subprocess.run([GATEWAY, "--config", ini, "--dump-config"], capture_output=True,
                       text=True, env=env)
    check(r.returncode == 0, "a 190-byte secret is read: %r" % r.stderr)
    # an instance type no provider offers is refused at start, at its line
    state = os.path.join(gw.dir, "types-state")
    with open(ini, "w") as f:
        f.write("[gateway]\nlisten = ipc://%s/g.sock\nworkers = ipc://%s/w.sock\nstate_dir = %s\n"
                "[group.students]\ninstance_types = g4dn.xlarg\n" % (state, state, state))
    r = subprocess.run([GATEWAY, "--config", ini], capture_output=True, text=True, env=env,
                       timeout=30)
    check(r.returncode == 2 and "%s:6: [group.students] instance_types: g4dn.xlarg is not an"
          " instance type the providers offer (they offer: g4dn.xlarge," % ini in r.stderr,
          "an unknown instance type stops the start: %r" % r.stderr[-500:])
    # a file a provider reads that is missing or malformed stops the start; slots = 0 turns the
    # local provider off, and the gateway serves
    with open(os.path.join(gw.dir, "bad.json"), "w") as f:
        f.write('{"metadata": {"gap_seconds": 60}, "data": 5}')
    for option, needle in [("catalog = %s/none.csv" % gw.dir, "provider local: %s/none.csv" % gw.dir),
                           ("market = trace:%s/bad.json" % gw.dir, "provider local: %s/bad.json" % gw.dir)]:
        with open(ini, "w") as f:
            f.write("[gateway]\nlisten = ipc://%s/g.sock\nworkers = ipc://%s/w.sock\nstate_dir = %s\n"
                    "[provider.local]\n%s\n" % (state, state, state, option))
        r = subprocess.run([GATEWAY, "--config", ini], capture_output=True, text=True, env=env,
                           timeout=30)
        check(r.returncode == 2 and needle in r.stderr,
              "a provider that cannot open stops the start (%s): %r" % (option, r.stderr[-400:]))
        check(not os.path.exists(os.path.join(state, "g.sock")), "and serves nothing")
    with open(ini, "w") as f:
        f.write("[gateway]\nlisten = ipc://%s/g.sock\nworkers = ipc://%s/w.sock\nstate_dir = %s\n"
                "[provider.local]\nslots = 0\n" % (state, state, state))
    p = subprocess.Popen([GATEWAY, "--config", ini], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        end = time.monotonic() + 20
        while not os.path.exists(os.path.join(state, "g.sock")) and p.poll() is None and \
                time.monotonic() < end:
            time.sleep(0.05)  # the socket file appears once the gateway serves
        check(p.poll() is None and os.path.exists(os.path.join(state, "g.sock")),
              "slots = 0: the gateway serves, with no provider")
    finally:
        p.terminate()
        err = p.communicate(timeout=20)[1]
    check(p.returncode == 0 and "provider local is off" in err, "and says the provider is off: %r" % err[-400:])


def case_embedded(gw):
    home = os.path.join(gw.dir, "home")
    env = dict(os.environ, SPOTLAB_HOME=home)
    env.pop("SPOTLAB_CONFIG", None)
    # what a gateway killed while it wrote its token leaves, and one being
    # written now by a process that still runs (this one)
    os.mkdir(home, 0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = os.path.join(home, "token.tmp.%d" % gone.pid)
    live = os.path.join(home, "http.address.tmp.%d" % os.getpid())
    for path in (left, live):
        with open(path, "w") as f:
            f.write("half")
    r = subprocess.run([GATEWAY, "--embedded", "--daemon"], capture_output=True, text=True,
                       env=env, timeout=30)
    check(r.returncode == 0, "daemon starts: " + r.stderr)
    pid_text = open(os.path.join(home, "gateway.pid")).read()
    check(pid_text.endswith("\n"), "gateway.pid is whole: %r" % pid_text)
    pid = int(pid_text)
    check(not os.path.exists(left), "a killed writer's temporary file is removed at start")
    check(os.path.exists(live), "a running writer's temporary file stays")
    os.unlink(live)
    try:
        for name in ("token", "gateway.key"):
            mode = stat.S_IMODE(os.stat(os.path.join(home, name)).st_mode)
            check(mode == 0o600, "%s is 0600 (%o)" % (name, mode))
        token = open(os.path.join(home, "token")).read().strip()
        c = Client("ipc://%s/gateway.sock" % home, token=token, session="")
        st = c.req("status")
        check(st["ok"] and st["gateway"]["embedded"] and st["gateway"]["state_dir"] == home,
              "status of the embedded gateway")
        check(st["gateway"]["workers"] == "ipc://%s/workers.sock" % home, "embedded workers socket")
        r = c.req("hello", token=token, client="cli", session="")
        check(r["user"] == getpass.getuser(), "local user is %s" % r["user"])
        second = subprocess.run([GATEWAY, "--embedded"], capture_output=True, text=True, env=env,
                                timeout=30)
        check(second.returncode == 1 and "already running" in second.stderr and
              str(pid) in second.stderr, "second gateway refused: " + second.stderr)
        check(c.req("ping")["ok"], "first gateway unaffected")
        c.close()
    finally:
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)  # waiting for another process's exit: no event to wait on
    else:
        check(False, "daemon exits on SIGTERM")
    check(not os.path.exists(os.path.join(home, "gateway.pid")), "pid file removed on exit")


def case_jobs(gw):
    c = Client(gw.listen, "alice")
    define(c)
    job = submit(c, steps=5, checkpoint_every=2, spot="yes")
    summary = attach(c, job)
    check(summary["job"] == job and summary["user"] == "alice", "attach summary")
    c.wait_event(state_is(job, "succeeded"))
    evs = [e for e in c.events if e["job"] == job]
    check([e["seq"] for e in evs] == list(range(1, len(evs) + 1)), "seq 1.. without gaps")
    states = [e["state"] for e in evs if e["event"] == "state"]
    check(states == ["queued", "provisioning", "starting", "running", "succeeded"],
          "states %s" % states)
    placed = [e for e in evs if e["event"] == "placed"][0]
    check(placed["instance_type"] == "fake.small" and placed["spot"] and
          abs(placed["price_usd_per_hour"] - 0.30) < 1e-9 and placed["attempt"] == 1,
          "placed on the cheapest spot type %r" % placed)
    metrics = [e for e in evs if e["event"] == "metric"]
    check([m["step"] for m in metrics] == [1, 2, 3, 4, 5] and metrics[0]["steps"] == 5,
          "one metric per step (spotlab-train's closing done adds none): %s" %
          [m["step"] for m in metrics])
    ck = [e for e in evs if e["event"] == "checkpoint"]
    check([e["step"] for e in ck] == [2, 4] and ck[0]["durable"], "checkpoints %r" % ck)
    logs = c.req("logs", job=job, after=0, limit=3)
    check(logs["ok"] and len(logs["events"]) == 3 and logs["more"], "logs paging")
    logs = c.req("logs", job=job, after=0)
    check(logs["events"] == evs, "logs equal the live stream")
    # the idle worker is reused
    job2 = submit(c, steps=2)
    attach(c, job2)
    c.wait_event(state_is(job2, "succeeded"))
    p2 = [e for e in c.events if e["job"] == job2 and e["event"] == "placed"][0]
    check(p2["instance"] == placed["instance"], "idle worker reused")
    check("provisioning" not in [e.get("state") for e in c.events if e["job"] == job2],
          "no provisioning for a reused worker")
    s = c.req("session.get")
    check(s["models"].get("m", {}).get("job") == job2 or s["models"].get("m", {}).get("job") == job,
          "session knows the trained model: %r" % s["models"])
    # attach later replays everything, then nothing more
    c2 = Client(gw.listen, "alice")
    attach(c2, job)
    c2.wait_event(lambda e: e["seq"] == len(evs))
    check([e["seq"] for e in c2.events] == list(range(1, len(evs) + 1)), "replay complete")
    r = c.req("cost")
    check(r["ok"] and r["on_demand_usd"] >= r["spent_usd"] >= 0 and
          abs(r["saved_usd"] - (r["on_demand_usd"] - r["spent_usd"])) < 1e-9, "cost %r" % r)
    js = {j["job"]: j for j in c.req("jobs")["jobs"]}
    check(js[job]["state"] == "succeeded" and js[job]["step"] == 5, "jobs list")
    # a run job reports its output; a cancelled queued/held job ends cancelled
    r = c.req("submit", kind="run", script="echo hi", options={"steps": 1})
    attach(c, r["job"])
    out = c.wait_event(lambda e: e["job"] == r["job"] and e["event"] == "output")
    check(out["text"] == "script: echo hi", "run output")
    c.wait_event(state_is(r["job"], "succeeded"))
    hold = submit(c, steps=50, hold=True)
    attach(c, hold)
    c.wait_event(lambda e: e["job"] == hold and e["event"] == "checkpoint")
    time.sleep(1)  # accrued, and not yet written to the ledger (every 5 s)
    r = c.req("cost")
    rows = sum(j["cost_usd"] for j in r["jobs"])
    check(r["ok"] and rows > 0 and abs(r["spent_usd"] - rows) <= 1e-6 * rows and
          abs(r["month_spent_usd"] - rows) <= 1e-6 * rows,
          "while a job runs, the total is the sum of the jobs' costs: %s, %s, rows %s"
          % (r["spent_usd"], r["month_spent_usd"], rows))
    check(c.req("cancel", job=hold)["ok"], "cancel accepted")
    c.wait_event(state_is(hold, "cancelled"))
    r = c.req("cancel", job=hold)
    check(not r["ok"] and r["error"]["code"] == "SL_ESTATE", "cancel of a finished job")
    # options no offer fits are refused at submit, naming the one
    r = c.req("submit", kind="train", model="m", data="d", options={"instance": "p9.huge"})
    check(not r["ok"] and r["error"]["code"] == "SL_ENAME" and
          r["error"]["message"].startswith("instance=p9.huge: no such type is offered (offered: fake."),
          "a type not offered is refused at submit: %r" % r)
    m = c.req("market", gpus=2)
    check([t["type"] for t in m["types"]] == ["fake.big"], "market filters by gpus")
    st = c.req("status")
    check(st["ok"] and len(st["workers"]) >= 1 and st["budget"]["monthly_usd"] == 2000, "status")


def case_preempt(gw):
    c = Client(gw.listen, "alice")
    job, summary = running_hold_job(gw, c)
    r = c.req("inject", action="preempt", instance=summary["instance"], notice_s=2)
    check(r["ok"], "inject accepted %r" % r)
    c.wait_event(state_is(job, "succeeded"), timeout=40)
    evs = [e for e in c.events if e["job"] == job]
    kinds = [e["event"] for e in evs]
    check("notice" in kinds and "preempted" in kinds and "resumed" in kinds, "kinds %s" % kinds)
    pre = [e for e in evs if e["event"] == "preempted"][0]
    check(pre["notice"] and pre["step"] >= 1, "preempted with notice at the checkpoint %r" % pre)
    res = [e for e in evs if e["event"] == "resumed"][0]
    check(res["from_step"] == pre["step"], "resumed from the last checkpoint")
    placed = [e for e in evs if e["event"] == "placed"]
    check(len(placed) == 2 and placed[1]["attempt"] == 2 and
          placed[1]["instance"] != placed[0]["instance"], "second attempt on new capacity")
    states = [e["state"] for e in evs if e["event"] == "state"]
    i = states.index("preempted")
    check(states[i:i + 2] == ["preempted", "queued"], "preempted -> queued")
    final = c.req("attach", job=job, after=10 ** 9)["job"]
    check(final["attempt"] == 2 and final["step"] == 50, "final summary %r" % final)
    # a hard kill without notice: the job resumes too
    job2, s2 = running_hold_job(gw, c)
    c.req("inject", action="kill", instance=s2["instance"])
    c.wait_event(state_is(job2, "succeeded"), timeout=40)
    pre = [e for e in c.events if e["job"] == job2 and e["event"] == "preempted"][0]
    check(not pre["notice"], "hard loss has no notice")


def case_process_retries(gw):
    """A job whose process is killed by a signal resumes from its checkpoint on
    the same worker; one that keeps dying without a new checkpoint fails after
    [gateway] process_retries (3) resumes."""
    c = Client(gw.listen, "alice")
    define(c)
    once = submit(c, steps=20, checkpoint_every=5, die_at=12, die_attempts=1)
    attach(c, once)
    c.wait_event(state_is(once, "succeeded"), timeout=40)
    evs = [e for e in c.events if e["job"] == once]
    reasons = [e["reason"] for e in evs if e["event"] == "state" and e["state"] == "preempted"]
    check(len(reasons) == 1 and "killed by signal 9 (retry 1 of 3)" in reasons[0],
          "one resume after the kill: %s" % reasons)
    placed = [e["instance"] for e in evs if e["event"] == "placed"]
    res = [e for e in evs if e["event"] == "resumed"]
    check(len(placed) == 2 and placed[0] == placed[1] and res and res[0]["from_step"] == 10,
          "resumed from step 10 on the same worker: %s %s" % (placed, res))
    always = submit(c, steps=20, checkpoint_every=5, die_at=12)
    attach(c, always)
    end = c.wait_event(lambda e: e["job"] == always and e["event"] == "state" and
                       e["state"] in ("succeeded", "failed"), timeout=40)
    reasons = [e["reason"] for e in c.events if e["job"] == always and e["event"] == "state" and
               e["state"] == "preempted"]
    check(end["state"] == "failed" and "killed by signal 9" in end["reason"] and
          [r[-13:] for r in reasons] == ["retry 1 of 3)", "retry 2 of 3)", "retry 3 of 3)"],
          "a job that keeps dying fails after 3 resumes: %s %s" % (end, reasons))


def case_preempt_run(gw):
    """A %%run job preempted with and without notice resumes like a train job,
    without step numbers: it has none."""
    c = Client(gw.listen, "alice")
    for how in ("preempt", "kill"):
        r = c.req("submit", kind="run", script="echo hi", options={"hold": True, "steps": 3})
        check(r["ok"], "run job submitted %r" % r)
        job = r["job"]
        attach(c, job)
        c.wait_event(lambda e: e["job"] == job and e["event"] == "output")
        now = c.req("attach", job=job, after=10 ** 9)["job"]
        running = [e for e in c.events if e["job"] == job and e["event"] == "state" and
                   e["state"] == "running"]
        check(now["state"] == "running" and len(running) == 1 and
              running[0]["reason"] == "process started",
              "%s: running once its process started, with no metric: %r" % (how, now["state"]))
        inst = [e for e in c.events if e["job"] == job and e["event"] == "placed"][-1]["instance"]
        r = c.req("inject", action=how, instance=inst, notice_s=2)
        check(r["ok"], "inject %s accepted %r" % (how, r))
        c.wait_event(state_is(job, "succeeded"), timeout=40)
        evs = [e for e in c.events if e["job"] == job]
        check([e["seq"] for e in evs] == list(range(1, len(evs) + 1)), "%s: seq without gaps" % how)
        kinds = [e["event"] for e in evs]
        check(kinds.count("preempted") == 1 and kinds.count("resumed") == 1,
              "%s: one preempted and one resumed event: %s" % (how, kinds))
        if "preempted" not in kinds or "resumed" not in kinds:
            continue
        pre = evs[kinds.index("preempted")]
        check(pre["step"] is None and pre["notice"] == (how == "preempt") and pre["instance"] == inst,
              "%s: preempted without a step, notice %s: %r" % (how, how == "preempt", pre))
        placed = [e for e in evs if e["event"] == "placed"]
        res = evs[kinds.index("resumed")]
        check(len(placed) == 2 and placed[1]["attempt"] == 2 and
              res["instance_type"] == placed[1]["instance_type"] and res["zone"] == placed[1]["zone"],
              "%s: resumed on the second placement %r" % (how, res))
        check("from_step" in res and res["from_step"] is None and
              isinstance(res["after_s"], (int, float)) and res["after_s"] >= 0,
              "%s: resumed has no step and a wait: %r" % (how, res))
        i = kinds.index("resumed")
        after = [e.get("state") for e in evs[i + 1:] if e["event"] == "state"]
        check(placed[1]["seq"] < res["seq"] and after == ["starting", "running", "succeeded"],
              "%s: resumed comes after the placement, then starting, running: %s" % (how, after))
        out = [e["text"] for e in evs if e["event"] == "output"]
        check(out[-1] == "line 3 of attempt 2", "%s: the script ran again: %s" % (how, out))
        final = c.req("attach", job=job, after=10 ** 9)["job"]
        check(final["attempt"] == 2 and final["state"] == "succeeded", "%s: summary %r" % (how, final))


def case_replay(gw):
    """A job with more events than a socket queues: a client that reads
    nothing while the job runs, one that attaches after it ended and is slow
    to read, and `spotlab logs -f` each see every event once, in order."""
    a = Client(gw.listen, "alice")
    slow = Client(gw.listen, "alice", small=True)
    define(a)
    job = submit(a, steps=6000, per_tick=200, checkpoint_every=1000)
    attach(a, job)
    attach(slow, job)
    a.wait_event(state_is(job, "succeeded"), timeout=100)
    last = a.req("jobs")["jobs"][0]["last_seq"]
    check(last > 6000, "the job has %d events" % last)
    check(seqs(a.events, job) == list(range(1, last + 1)), "the live stream: every event once")
    # slow read nothing while the job ran: its events waited at the gateway
    slow.wait_event(lambda e: e["job"] == job and e["seq"] >= last, timeout=60)
    got = seqs(slow.events, job)
    check(got == list(range(1, last + 1)), "a client that read nothing while the job ran: "
          "%d events, first gap after %s" % (len(got), next((x for i, x in enumerate(got)
                                                           if x != i + 1), None)))
    # attach to the finished job, then read nothing for a while
    late = Client(gw.listen, "alice", small=True)
    late.nid += 1
    late.s.send(json.dumps({"type": "attach", "id": late.nid, "job": job, "after": 0,
                            "auth": late.auth}).encode())
    time.sleep(0.5)  # a client busy elsewhere: it reads nothing for a while
    check(late.reply(late.nid)["ok"], "attach to the finished job")
    late.wait_event(lambda e: e["job"] == job and e["seq"] >= last, timeout=60)
    check(seqs(late.events, job) == list(range(1, last + 1)), "the replay: every event once")
    # from a later seq: only the events after it
    mid = Client(gw.listen, "alice", small=True)
    attach(mid, job, after=last - 2500)
    mid.wait_event(lambda e: e["job"] == job and e["seq"] >= last, timeout=60)
    check(seqs(mid.events, job) == list(range(last - 2499, last + 1)), "a replay after a seq")
    r = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "logs", job, "-f", "--json"],
                       env=cli_env(gw), capture_output=True, text=True, timeout=100)
    got = [json.loads(line)["seq"] for line in r.stdout.splitlines()]
    check(r.returncode == 0 and got == list(range(1, last + 1)),
          "spotlab logs -f: exit %d, %d events, stderr %r" % (r.returncode, len(got), r.stderr[-300:]))


class Lines:
    """A child's stdout read line by line, each wait with a deadline."""
    def __init__(self, p):
        self.p, self.buf, self.lines = p, b"", []

    def wait(self, pred, timeout):
        end = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if pred(line):
                    return line
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise TimeoutError("line not seen; have %s" % self.lines[-5:])
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                raise TimeoutError("output ended; have %s" % self.lines[-5:])
            self.buf += chunk
            *done, self.buf = self.buf.split(b"\n")
            self.lines += [d.decode() for d in done]


def attempt_charged(gw, job, timeout=10):
    """The wall seconds of job's last attempt, and the seconds its cost row charges for it,
    in wall seconds (the provider's time_scale undone)."""
    scale = float(re.search(r"^time_scale = (\S+)$", open(gw.ini).read(), re.M).group(1))
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(gw.state, "gateway.db"), uri=True)
    jid = int(job.lstrip("J"))
    end = time.monotonic() + timeout
    try:
        while True:
            a = db.execute("SELECT attempt, started_us, ended_us FROM attempts WHERE job=?"
                           " ORDER BY attempt DESC LIMIT 1", (jid,)).fetchone()
            c = a and db.execute("SELECT seconds FROM cost WHERE job=? AND attempt=?", (jid, a[0])).fetchone()
            if a and a[2] and c or time.monotonic() > end:
                break
            time.sleep(0.1)  # the attempt's end and its last charge are written as the job ends
    finally:
        db.close()
    if not (a and a[2] and c):
        return 0, 0
    return (a[2] - a[1]) / 1e6, c[0] / scale


def case_restart(gw):
    c = Client(gw.listen, "alice")
    job, summary = running_hold_job(gw, c)
    last = max(e["seq"] for e in c.events if e["job"] == job)
    # spotlab logs -f follows the job across the restart
    cli = subprocess.Popen([os.environ["SPOTLAB_TEST_CLI"], "logs", job, "-f", "--json"],
                           env=cli_env(gw), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = Lines(cli)
    try:
        out.wait(lambda line: json.loads(line)["seq"] == last, 20)
        c.close()
        gw.stop()
        time.sleep(3)  # the instance runs on with no gateway: that time is charged too
        gw.start()
        c = Client(gw.listen, "alice")
        attach(c, job, after=last)
        c.wait_event(lambda e: e["job"] == job and e["event"] == "gateway")
        check(gw.wait_log("worker %s registered" % summary["instance"], 20), "worker re-registered")
        now = c.req("attach", job=job, after=10 ** 9)["job"]
        check(now["state"] == "running" and now["attempt"] == summary["attempt"],
              "job still running on its worker after the restart: %r" % now)
        c.req("cancel", job=job)
        end = c.wait_event(state_is(job, "cancelled"))
        check(not [e for e in c.events if e["job"] == job and e["event"] == "preempted"],
              "not re-queued")
        out.wait(lambda line: json.loads(line)["seq"] == end["seq"], 30)
        wall, charged = attempt_charged(gw, job)
        check(wall > 3 and 0.95 * wall <= charged <= 1.05 * wall + 1,
              "the attempt is charged for all of its %.1f s, the gateway's downtime included: %.1f s"
              % (wall, charged))
        cli.wait(10)
        got = [json.loads(line) for line in out.lines]
        check([e["seq"] for e in got] == list(range(1, end["seq"] + 1)) and
              any(e["event"] == "gateway" for e in got) and cli.returncode == 1,
              "spotlab logs -f across a gateway restart: every event once, exit 1 for a cancelled"
              " job (%s, %s)" % (cli.returncode, [e["seq"] for e in got][-5:]))
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def case_crash(gw):
    """A gateway killed while a job runs (its last seconds of accrual not yet in the cost
    table): once it is back, the job's cost is what the cost table charged for it, the whole
    attempt's wall time and no second more."""
    c = Client(gw.listen, "alice")
    define(c)
    job = submit(c, steps=10 ** 7)  # a metric every tick: the job's row is saved with each
    attach(c, job)
    c.wait_event(lambda e: e["job"] == job and e["event"] == "metric" and e.get("step", 0) >= 3)
    summary = c.req("attach", job=job, after=10 ** 9)["job"]
    c.close()
    time.sleep(2)  # accrued in memory and on the job's row; in the table every 5 s
    gw.kill()
    time.sleep(1)
    gw.start()
    c = Client(gw.listen, "alice")
    attach(c, job, after=10 ** 9)
    check(gw.wait_log("worker %s registered" % summary["instance"], 20), "worker re-registered")
    time.sleep(1)
    c.req("cancel", job=job)
    c.wait_event(state_is(job, "cancelled"))
    wall, charged = attempt_charged(gw, job)
    check(wall > 3 and 0.95 * wall <= charged <= 1.05 * wall + 1,
          "the attempt is charged for its %.1f s, the crash's downtime included: %.1f s" % (wall, charged))
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(gw.state, "gateway.db"), uri=True)
    jid = int(job.lstrip("J"))
    row = db.execute("SELECT cost_usd FROM jobs WHERE id=?", (jid,)).fetchone()[0]
    ledger = db.execute("SELECT SUM(usd) FROM cost WHERE job=?", (jid,)).fetchone()[0]
    db.close()
    listed = [j for j in c.req("cost")["jobs"] if j["job"] == job]
    check(ledger > 0 and abs(row - ledger) <= 1e-9 + 1e-6 * ledger and listed and
          abs(listed[0]["cost_usd"] - ledger) <= 1e-9 + 1e-6 * ledger,
          "the job's cost is the cost table's: row %s, listed %s, table %s"
          % (row, listed and listed[0]["cost_usd"], ledger))
    c.close()


def case_session_move(gw):
    """session.move (a notebook renamed): the names, models and jobs of the
    session go to the new name, a running job's later checkpoints update the
    model there, a session already at the new name is put aside, another
    user's session of the old name stays; it outlives a gateway restart.
    sessions (and spotlab sessions) lists a user's sessions that hold anything."""
    a = Client(gw.listen, "alice", session="old.ipynb")
    job, summary = running_hold_job(gw, a)
    b = Client(gw.listen, "bob", session="old.ipynb")
    r = b.req("session.set", vars={"mine": {"t": "num", "v": 7}})
    require(r["ok"], "bob's own session of that name", r)
    there = Client(gw.listen, "alice", session="new.ipynb")
    require(there.req("session.set", vars={"x": {"t": "num", "v": 1}})["ok"], "a session at the new name")
    there.close()
    r = a.req("session.move", to="new.ipynb")
    check(r["ok"] and r["moved"] and r["aside"].startswith("new.ipynb (replaced "),
          "session.move moves, putting the session there aside: %s" % r)
    aside = r.get("aside", "")
    got = a.req("session.get")  # the connection is on the new name now
    check(got["ok"] and got["vars"].get("lr") == {"t": "num", "v": 0.001} and "x" not in got["vars"] and
          {d["name"] for d in got["defs"]} == {"m", "d"} and got["models"].get("m", {}).get("job") == job,
          "the new name holds the names and the model: %s" % got)
    step = got["models"].get("m", {}).get("step", 0)
    old = Client(gw.listen, "alice", session="old.ipynb")
    r = old.req("session.get")
    check(r["ok"] and not r["vars"] and not r["defs"] and not r["models"], "the old name is empty: %s" % r)
    check(any(j["job"] == job and j.get("session") == "new.ipynb" for j in old.req("jobs", all=True)["jobs"]),
          "the job is the new name's")
    r = Client(gw.listen, "alice", session=aside).req("session.get")
    check(r["ok"] and r["vars"] == {"x": {"t": "num", "v": 1}}, "the session put aside keeps its names: %s" % r)
    r = b.req("session.get")
    check(r["ok"] and r["vars"] == {"mine": {"t": "num", "v": 7}}, "bob's session of the old name stays: %s" % r)
    # the job, preempted and resumed, trains to its end: its checkpoints update the model at the new name
    require(a.req("inject", action="kill", instance=summary["instance"])["ok"], "kill the job's instance")
    a.wait_event(state_is(job, "succeeded"), timeout=40)
    now = a.req("session.get")["models"].get("m", {})
    last = max(e["step"] for e in a.events if e["job"] == job and e["event"] == "checkpoint")
    check(now.get("job") == job and now.get("step") == last > step and not old.req("session.get")["models"],
          "the job's later checkpoints update the model at the new name: %s (last checkpoint %d)" % (now, last))
    r = old.req("session.move", to="elsewhere.ipynb")
    check(r["ok"] and r["moved"] is False, "moving an empty session moves nothing: %s" % r)
    # the sessions that hold anything, newest first: the moved one, the one put aside; not bob's
    r = a.req("sessions")
    listed = {e["name"]: e for e in r.get("sessions", [])}
    check(r["ok"] and set(listed) == {"new.ipynb", aside} and r["sessions"][0]["name"] == "new.ipynb" and
          {k: listed["new.ipynb"][k] for k in ("vars", "defs", "models", "jobs")} ==
          {"vars": 1, "defs": 2, "models": 1, "jobs": 1} and listed["new.ipynb"]["last_active_us"] > 0 and
          listed[aside]["vars"] == 1, "sessions lists alice's sessions that hold anything: %s" % r)
    r = b.req("sessions")
    check(r["ok"] and [e["name"] for e in r["sessions"]] == ["old.ipynb"], "bob sees his own: %s" % r)
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions"], env=cli_env(gw), capture_output=True,
                         text=True, timeout=30)
    lines = cli.stdout.splitlines()
    check(cli.returncode == 0 and lines[0].split() == ["SESSION", "LAST", "ACTIVE", "NAMES", "MODELS", "JOBS"] and
          lines[1].split()[:1] == ["new.ipynb"] and lines[1].split()[-3:] == ["3", "1", "1"] and
          any(line.strip().startswith(aside) for line in lines),
          "spotlab sessions prints them: %r %r" % (cli.stdout, cli.stderr))
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "--json"], env=cli_env(gw),
                         capture_output=True, text=True, timeout=30)
    check(cli.returncode == 0 and [e["name"] for e in json.loads(cli.stdout)] == ["new.ipynb", aside],
          "spotlab sessions --json: %r" % cli.stdout)
    for bad, code in (({}, "SL_ETYPE"), ({"to": ""}, "SL_ETYPE"), ({"to": "x" * 300}, "SL_ELIMIT"),
                      ({"to": 5}, "SL_ETYPE")):
        r = old.req("session.move", **bad)
        check(not r["ok"] and r["error"]["code"] == code, "session.move %s: %s" % (str(bad)[:40], r))
    for c in (a, b, old):
        c.close()
    gw.stop()
    gw.start()
    r = Client(gw.listen, "alice", session="new.ipynb").req("session.get")
    check(r["ok"] and r["vars"].get("lr") and r["models"].get("m", {}).get("job") == job,
          "the moved session outlives a gateway restart: %s" % r)
    check(r["models"].get("m", {}).get("step") == last, "with the model's last checkpoint: %s" % r)


def case_session_delete(gw):
    """session.delete (and spotlab sessions rm): refused while a job of the
    session runs; then the session's names and models are gone, its jobs
    stay (costs, records) under "NAME (deleted TIME)", and their store
    objects (checkpoints) are removed; another user's session of that name
    and the user's other sessions stay."""
    a = Client(gw.listen, "alice", session="del.ipynb")
    job, summary = running_hold_job(gw, a)
    b = Client(gw.listen, "bob", session="del.ipynb")
    require(b.req("session.set", vars={"mine": {"t": "num", "v": 7}})["ok"], "bob's own session of that name")
    k = Client(gw.listen, "alice", session="keep.ipynb")
    require(k.req("session.set", vars={"x": {"t": "num", "v": 1}})["ok"], "alice's other session")
    r = k.req("session.delete", session="del.ipynb")
    check(not r["ok"] and r["error"]["code"] == "SL_ESTATE" and job in r["error"]["message"] and
          "cancel it first" in r["error"]["message"], "refused while its job runs: %s" % r)
    require(a.req("inject", action="kill", instance=summary["instance"])["ok"], "kill the job's instance")
    a.wait_event(state_is(job, "succeeded"), timeout=40)
    # the fake workers write nothing: the objects their checkpoints name are put in the store here
    keys = {e["path"] for e in a.events if e["job"] == job and e["event"] == "checkpoint"}
    require(keys and all(key.startswith(job + "/") for key in keys), "the job's checkpoints", keys)
    for key in keys | {job + "/files/notes.txt"}:
        os.makedirs(os.path.dirname(os.path.join(gw.state, "store", key)), exist_ok=True)
        with open(os.path.join(gw.state, "store", key), "w") as f:
            f.write("x")
    folder = os.path.join(gw.state, "store", job)
    other = os.path.join(gw.state, "store", "J999999")
    os.makedirs(other)  # another job's: left alone
    cost_before = k.req("cost")
    r = k.req("session.delete", session="del.ipynb")
    check(r["ok"] and r["deleted"] == "del.ipynb" and r["jobs_purged"] == 1 and
          r["jobs_kept_as"].startswith("del.ipynb (deleted "), "session.delete: %s" % r)
    kept_as = r.get("jobs_kept_as", "")
    got = a.req("session.get")
    check(got["ok"] and not got["vars"] and not got["defs"] and not got["models"],
          "the session holds nothing: %s" % got)
    listed = [e["name"] for e in k.req("sessions")["sessions"]]
    check("del.ipynb" not in listed and kept_as not in listed and "keep.ipynb" in listed,
          "sessions no longer lists it: %s" % listed)
    mine = [j for j in k.req("jobs", all=True)["jobs"] if j["job"] == job]
    check(mine and mine[0].get("session") == kept_as and mine[0]["state"] == "succeeded",
          "the job stays, under %r: %s" % (kept_as, mine))
    cost_after = k.req("cost")
    check(cost_after.get("spent_usd") == cost_before.get("spent_usd"), "costs unchanged: %s %s" %
          ({x: cost_before.get(x) for x in ("spent_usd",)}, {x: cost_after.get(x) for x in ("spent_usd",)}))
    deadline = time.monotonic() + 15
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.05)  # removed on the gateway's thread: no event to wait on
    check(not os.path.exists(folder) and os.path.isdir(other),
          "the job's store objects are removed, and only those")
    db = sqlite3.connect(os.path.join(gw.state, "gateway.db"))
    left = db.execute("SELECT COUNT(*) FROM checkpoints c JOIN jobs j ON c.job = j.id WHERE j.session = ?",
                      (kept_as,)).fetchone()[0]
    db.close()
    check(left == 0, "their checkpoint rows are gone (%d left)" % left)
    check(wait_purge_table(gw, 0), "the job is no longer to purge once its objects are gone")
    check(b.req("session.get")["vars"] == {"mine": {"t": "num", "v": 7}}, "bob's session of that name stays")
    check(k.req("session.get")["vars"] == {"x": {"t": "num", "v": 1}}, "alice's other session stays")
    r = k.req("session.delete", session="del.ipynb")
    check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "deleting it again: %s" % r)
    for bad, code in (({}, "SL_ETYPE"), ({"session": ""}, "SL_ETYPE"), ({"session": 5}, "SL_ETYPE"),
                      ({"session": "x" * 300}, "SL_ELIMIT")):
        r = k.req("session.delete", **bad)
        check(not r["ok"] and r["error"]["code"] == code, "session.delete %s: %s" % (str(bad)[:40], r))
    for c in (a, b, k):
        c.close()
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "rm", "keep.ipynb"], env=cli_env(gw),
                         capture_output=True, text=True, timeout=30)
    check(cli.returncode == 0 and 'session "keep.ipynb" deleted' in cli.stdout,
          "spotlab sessions rm: %r %r" % (cli.stdout, cli.stderr))
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "rm", "keep.ipynb"], env=cli_env(gw),
                         capture_output=True, text=True, timeout=30)
    check(cli.returncode == 1 and "no session" in cli.stderr, "again: %r" % cli.stderr)
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "rm"], env=cli_env(gw),
                         capture_output=True, text=True, timeout=30)
    check(cli.returncode == 2 and "usage" in cli.stderr, "without a name: %r" % cli.stderr)
    # another user's sessions: an admin's (carol) to list and delete, nobody else's
    b = Client(gw.listen, "bob", session="other.ipynb")
    for req in (dict(type_="sessions", user="alice"),
                dict(type_="session.delete", user="alice", session="keep.ipynb")):
        r = b.req(**req)
        check(not r["ok"] and r["error"]["code"] == "EPERM" and "only an admin" in r["error"]["message"],
              "bob may not %s alice's sessions: %s" % (req["type_"], r))
    c = Client(gw.listen, "carol", session="admin.ipynb")
    listed = [e["name"] for e in c.req("sessions", user="bob")["sessions"]]
    check(listed == ["del.ipynb"], "an admin lists bob's sessions: %s" % listed)
    r = c.req("session.delete", user="bob", session="del.ipynb")
    check(r["ok"] and r["deleted"] == "del.ipynb", "an admin deletes bob's session: %s" % r)
    b2 = Client(gw.listen, "bob", session="del.ipynb")
    check(not b2.req("session.get")["vars"], "bob's session holds nothing then")
    b2.close()
    check(not c.req("sessions", user="bob")["sessions"], "and bob has none left")
    for bad, code in (({"user": ""}, "SL_ETYPE"), ({"user": 5}, "SL_ETYPE")):
        r = c.req("sessions", **bad)
        check(not r["ok"] and r["error"]["code"] == code, "sessions %s: %s" % (bad, r))
    require(b.req("session.set", vars={"y": {"t": "num", "v": 2}})["ok"], "bob's other session")
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "--user", "bob", "--json"],
                         env=cli_env(gw, "carol"), capture_output=True, text=True, timeout=30)
    check(cli.returncode == 0 and [e["name"] for e in json.loads(cli.stdout)] == ["other.ipynb"],
          "spotlab sessions --user bob: %r %r" % (cli.stdout, cli.stderr))
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "rm", "other.ipynb", "--user", "bob"],
                         env=cli_env(gw, "carol"), capture_output=True, text=True, timeout=30)
    check(cli.returncode == 0 and 'session "other.ipynb" deleted' in cli.stdout,
          "spotlab sessions rm NAME --user bob: %r %r" % (cli.stdout, cli.stderr))
    cli = subprocess.run([os.environ["SPOTLAB_TEST_CLI"], "sessions", "--user", "carol"],
                         env=cli_env(gw, "bob"), capture_output=True, text=True, timeout=30)
    check(cli.returncode == 1 and "only an admin" in cli.stderr, "bob's --user refused: %r" % cli.stderr)
    b.close()
    c.close()
    # a gateway stopped before its purge was done goes on with it at its next start
    gw.stop()
    left = os.path.join(gw.state, "store", "J000777")
    os.makedirs(left)
    with open(os.path.join(left, "ckpt-00000010.tc"), "w") as f:
        f.write("x")
    db = sqlite3.connect(os.path.join(gw.state, "gateway.db"))
    db.execute("INSERT INTO purge(job, queued_us) VALUES(777, 1)")
    db.commit()
    db.close()
    gw.start()
    deadline = time.monotonic() + 15
    while os.path.exists(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not os.path.exists(left) and wait_purge_table(gw, 0) and os.path.isdir(other),
          "the purge left by the last run is done at the start")


def wait_purge_table(gw, rows, timeout=10):
    """Whether the gateway's purge table comes down to rows within timeout."""
    deadline = time.monotonic() + timeout
    while True:
        db = sqlite3.connect(os.path.join(gw.state, "gateway.db"))
        n = db.execute("SELECT COUNT(*) FROM purge").fetchone()[0]
        db.close()
        if n == rows or time.monotonic() > deadline:
            return n == rows
        time.sleep(0.05)


def start_refused(gw):
    """Starts gw, which is to exit: its exit status (None: still running after 30 s) and log."""
    gw.start()
    try:
        code = gw.p.wait(30)
    except subprocess.TimeoutExpired:
        code = None
    return code, gw.logtext()


def case_damaged_store(gw):
    """A restart on a state folder whose instances table has a damaged page: the
    gateway does not start (one that did would neither find its running worker
    nor stop it), writes nothing to it and says why; nor on an emptied database
    beside an earlier key; with the page mended it starts and finds the job on
    its worker."""
    c = Client(gw.listen, "alice")
    job, summary = running_hold_job(gw, c)
    c.close()
    check(gw.stop() == 0, "the gateway stopped")
    db_path = os.path.join(gw.state, "gateway.db")
    db = sqlite3.connect(db_path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='instances'").fetchone()[0]
    db.close()
    with open(db_path, "r+b") as f:
        f.seek((root - 1) * page_size)
        good = f.read(page_size)
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)
    code, log = start_refused(gw)
    check(code not in (None, 0), "a gateway on a damaged instances table exits (%s)" % code)
    check("%s is damaged (SQLite: " % db_path in log and ".recover" in log,
          "it says why, and how to recover: %r" % log[-400:])
    gw.stop()
    with open(db_path, "r+b") as f:
        f.seek((root - 1) * page_size)
        check(f.read(page_size) == b"\xff" * page_size, "the damaged database was not written to")
        f.seek((root - 1) * page_size)
        f.write(good)
    # an empty database beside the key of an earlier start lost its records: refused
    with open(db_path, "rb") as f:
        whole = f.read()
    open(db_path, "wb").close()
    code, log = start_refused(gw)
    check(code == 1 and "%s is empty, while gateway.key is from an earlier start" % db_path in log,
          "an emptied database is refused (%s): %r" % (code, log[-400:]))
    check(os.path.getsize(db_path) == 0, "and left as it was")
    gw.stop()
    with open(db_path, "wb") as f:
        f.write(whole)
    gw.start()
    c = Client(gw.listen, "alice")
    check(gw.wait_log("worker %s registered" % summary["instance"], 20), "worker registered again")
    now = c.req("attach", job=job, after=10 ** 9)["job"]
    check(now["state"] == "running" and now["instance"] == summary["instance"],
          "the job runs on its worker: %r" % now)
    c.req("cancel", job=job)
    c.wait_event(state_is(job, "cancelled"))
    c.close()


def case_reregister(gw):
    """What a worker says when it registers again: registered names the newest
    step recorded of its job, and a done listed in ended (one a gateway that
    died never heard) ends the job instead of having it re-queued."""
    c = Client(gw.listen, "alice")
    job, summary = running_hold_job(gw, c)
    evs = c.req("logs", job=job, after=0)["events"]
    steps = [e["step"] for e in evs if e["event"] == "metric"]
    ckpts = [e["step"] for e in evs if e["event"] == "checkpoint"]
    s, cfg = worker_socket(os.path.join(gw.state, "instances", summary["instance"], "worker.json"))
    att = summary["attempt"]
    s.send(json.dumps({"type": "register", "instance": cfg["instance"],
                       "jobs": [{"job": job, "attempt": att, "step": 1}]}).encode())
    reply = json.loads(s.recv()) if s.poll(5000) else {}
    check(reply.get("type") == "registered" and
          reply.get("jobs") == [{"job": job, "attempt": att, "metric_step": max(steps),
                                 "checkpoint_step": max(ckpts)}],
          "registered names the newest step and checkpoint recorded (%s, %s): %r" % (max(steps), max(ckpts), reply))
    done = {"type": "done", "job": job, "attempt": att, "status": "succeeded", "exit_code": 0,
            "message": "", "step": 3}
    for _ in range(2):  # the second time it is old news
        s.send(json.dumps({"type": "register", "instance": cfg["instance"], "jobs": [],
                           "ended": [done]}).encode())
        got = []
        while s.poll(5000):
            got.append(json.loads(s.recv()))
            if got[-1]["type"] == "registered":
                break
        check([m["type"] for m in got] == ["done_recorded", "registered"] and
              got[0]["job"] == job and got[0]["attempt"] == att,
              "registered, after done_recorded for the listed done: %r" % got)
    c.wait_event(state_is(job, "succeeded"))
    states = [e["state"] for e in c.req("logs", job=job, after=0)["events"] if e["event"] == "state"]
    check(states[-1] == "succeeded" and "preempted" not in states and states.count("succeeded") == 1,
          "the listed done ended the job once, nothing re-queued it: %s" % states)
    s.close(0)


def case_fairness(gw):
    users = {u: Client(gw.listen, u) for u in ("alice", "bob", "carol")}
    for c in users.values():
        define(c)
    # alice's first job holds the only slot while everyone queues
    first, _ = running_hold_job(gw, users["alice"])
    jobs = {}
    for u, n in (("alice", 2), ("bob", 2), ("carol", 1)):
        for i in range(n):
            j = submit(users[u], steps=1)
            jobs[j] = u
            attach(users[u], j)
    users["alice"].req("cancel", job=first)
    starts = []
    for u, c in users.items():
        for j in [j for j, owner in jobs.items() if owner == u]:
            starts.append(c.wait_event(state_is(j, "starting")))
    # each user's client sees only their own jobs; the gateway's clock orders them
    order = [jobs[e["job"]] for e in sorted(starts, key=lambda e: e["time_us"])]
    check(order == ["alice", "bob", "carol", "alice", "bob"], "round robin order %s" % order)


IDLE_INI = ("[idle]\nnotebook_timeout = 3s\nwarn_before = 1s\nworker_timeout = 1h\n"
            "[group.fast]\nworker_timeout = 2s\n")
IDLE_USERS = {"bob": "group = fast\n"}


def idle_notice(action):
    return lambda n: n.get("event") == "idle" and n.get("what") == "notebook" and \
        n.get("action") == action


def run_job(c, **opts):
    job = submit(c, **opts)
    attach(c, job)
    c.wait_event(state_is(job, "succeeded"), timeout=40)
    return [e for e in c.events if e["job"] == job and e["event"] == "placed"][-1]["instance"]


def case_idle(gw):
    # a job that runs longer than every idle timeout, in a session that says nothing
    long_c = Client(gw.listen, "alice", session="long")
    long_job, long_summary = running_hold_job(gw, long_c)
    # bob's group stops idle workers after 2 s (before his notebook's 3 s)
    bob = Client(gw.listen, "bob", session="b")
    define(bob)
    bob_inst = run_job(bob, steps=3)
    check(gw.wait_log("%s: idle worker shut down" % bob_inst, 20), "idle worker terminated")
    check(not [i for i in bob.req("instances")["instances"] if i["instance"] == bob_inst],
          "the idle worker is gone")
    # alice's notebook: a job ends, then no cell runs
    c = Client(gw.listen, "alice", session="nb")
    define(c)
    t0 = time.monotonic()
    inst = run_job(c, steps=3)
    warn = c.wait_notice(idle_notice("warning"), timeout=20)
    check(warn["session"] == "nb" and 0 <= warn["in_s"] <= 1, "warning ahead %r" % warn)
    stop = c.wait_notice(idle_notice("shutdown"), timeout=20)
    check(time.monotonic() - t0 >= 3 and stop["time_us"] >= warn["time_us"],
          "shutdown after the timeout, after the warning")
    check(gw.wait_log("%s: idle notebook shut down" % inst, 10) or
          gw.wait_log("instance %s gone: idle notebook shut down" % inst, 1),
          "the notebook's worker was terminated")
    insts = c.req("instances")["instances"]
    check(not [i for i in insts if i["instance"] == inst], "no worker left for the notebook")
    # the job that outlived every timeout is still running on its worker
    now = long_c.req("attach", job=long_job, after=10 ** 9)["job"]  # reads what was sent meanwhile
    check(not long_c.notices, "a session with a running job gets no idle notice %r" % long_c.notices)
    check(now["state"] == "running" and now["instance"] == long_summary["instance"] and
          now["attempt"] == 1, "the long job was not stopped: %r" % now)
    check(not [e for e in long_c.events if e["event"] in ("preempted", "idle")],
          "no preemption of the long job")
    # the next cell brings capacity back
    inst2 = run_job(c, steps=3)
    check(inst2 != inst, "a new worker for the next job")
    long_c.req("cancel", job=long_job)
    long_c.wait_event(state_is(long_job, "cancelled"))


def case_auto_checkpoint(gw):
    c = Client(gw.listen, "alice")
    define(c)
    job = submit(c, steps=400, checkpoint_every="auto")
    attach(c, job)
    c.wait_event(state_is(job, "succeeded"), timeout=60)
    evs = [e for e in c.events if e["job"] == job]
    iv = [e for e in evs if e["event"] == "checkpoint_interval"]
    check(len(iv) >= 1, "a checkpoint_interval event")
    if not iv:
        return
    measured = [e for e in iv if abs(e["write_s"] - 0.12) < 1e-6]
    check(len(measured) >= 1, "an interval from measured write times %r" % iv)
    if not measured:
        return
    e = measured[0]
    # fake.small: 3600 s mean time to preemption; writes of 1+1 ms at time_scale 60
    check(abs(e["mtbp_s"] - 3600) < 1e-6 and abs(e["write_s"] - 0.12) < 1e-6 and
          abs(e["seconds"] - (2 * e["write_s"] * e["mtbp_s"]) ** 0.5) < 1e-6 and e["steps"] >= 1,
          "Young/Daly fields %r" % e)
    # between interval changes, checkpoints follow the announced interval (the
    # first one after a change may still be on the old one)
    segments = 0
    for k, e in enumerate(iv):
        end = iv[k + 1]["seq"] if k + 1 < len(iv) else 10 ** 9
        cps = [x["step"] for x in evs if x["event"] == "checkpoint" and e["seq"] < x["seq"] < end]
        check(all(s % e["steps"] == 0 for s in cps[1:]),
              "checkpoints at multiples of %d: %s" % (e["steps"], cps))
        segments += len(cps) >= 3
    check(segments >= 1, "some interval was followed for several checkpoints")


CASES = {"auth": case_auth, "isolation": case_isolation,
         "malformed-kernel": case_malformed_kernel, "malformed-worker": case_malformed_worker,
         "curve": case_curve, "dump-config": case_dump_config,
         "config-errors": case_config_errors, "embedded": case_embedded, "jobs": case_jobs,
         "preempt": case_preempt, "preempt-run": case_preempt_run, "restart": case_restart, "crash": case_crash,
         "damaged-store": case_damaged_store,
         "replay": case_replay, "fairness": case_fairness, "reregister": case_reregister,
         "process-retries": case_process_retries, "idle": case_idle,
         "auto-checkpoint": case_auto_checkpoint, "session-move": case_session_move,
         "session-delete": case_session_delete}


def main():
    slots = 1 if CASE == "fairness" else 3 if CASE == "idle" else 2
    gw = Gateway(slots=slots, extra_ini=IDLE_INI if CASE == "idle" else "",
                 user_options=IDLE_USERS if CASE == "idle"
                 else {"carol": "admin = yes\n"} if CASE == "session-delete" else None)
    return run_case(CASES[CASE], gw, cleanup=lambda failed: gateway_cleanup(gw, failed))


if __name__ == "__main__":
    sys.exit(main())
