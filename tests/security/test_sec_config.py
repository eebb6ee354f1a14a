#!/usr/bin/python3
"""The gateway's configuration and state folder, attacked as an unlucky operator would.

usage: test_sec_config.py CASE GATEWAY [WORKER TRAIN]

revoke  a user removed from the config and the gateway restarted: their token is refused,
        their data stay, everyone else (the embedded gateway's own user too) still gets in.
modes   a state folder left 0755 with a 0644 gateway.db: after a start and a training job,
        the folder is 0700 and nothing in it can be read by other users; a folder every
        user may write is refused.
errors  a config path that is no regular file or is empty, duplicate keys and sections, a
        group that does not exist, warn_before longer than a notebook_timeout: each exits
        non-zero with a message naming the problem, and a good state folder is left as it was.
"""
import hashlib
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile

from checks import check, exit_status, failures, require
from gateway_client import GatewayClient
from gateway_proc import GatewayProcess, kill_instances, token_sha256
from spotlab_home import stop_all, wait_exit

CASE, GATEWAY = sys.argv[1:3]
EXTRA = sys.argv[3:]
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-9876543210",
          "carol": "carol-token-5555555555"}


def gateway_env():
    env = dict(os.environ)
    env.pop("SPOTLAB_CONFIG", None)
    env.pop("SPOTLAB_DEBUG", None)
    return env


def hello(address, token, session="nb"):
    """The reply to a hello with token (no assertion: a refusal is a result here)."""
    c = GatewayClient(address)
    try:
        return c.req("hello", token=token, client="cli", session=session, timeout=30), c
    except TimeoutError:
        c.s.close()
        raise


def stop(gw):
    rc = gw.stop(30)
    check(rc == 0, "the gateway stopped cleanly (%s)" % rc)


# ---- revoke ----

def users_in(folder, users):
    return GatewayProcess(folder, GATEWAY, {u: TOKENS[u] for u in users})


def case_revoke():
    folder = tempfile.mkdtemp(prefix="sec-revoke-")
    gw = users_in(folder, ["alice", "bob"])
    try:
        gw.start()
        r, bob = hello(gw.listen, TOKENS["bob"])
        require(r["ok"] and r["user"] == "bob", "bob gets in while configured", r)
        r = bob.req("session.set", vars={"secret": {"t": "num", "v": 42}})
        check(r["ok"], "bob keeps a variable in his session", r)
        bob.s.close()
        stop(gw)

        gw = users_in(folder, ["alice"])
        gw.start()
        r, bob = hello(gw.listen, TOKENS["bob"])
        check(not r["ok"] and r["error"]["code"] == "SL_EAUTH" and
              "unknown token" in r["error"]["message"],
              "bob's token is refused once [user.bob] is gone", r)
        r = bob.req("session.get")
        check(not r["ok"] and r["error"]["code"] == "SL_EAUTH", "and nothing is served to him", r)
        bob.s.close()
        r, alice = hello(gw.listen, TOKENS["alice"])
        check(r["ok"] and r["user"] == "alice", "alice still gets in", r)
        alice.s.close()
        check(gw.wait_log("user bob is not in the configuration"), "the revocation is logged")
        check(TOKENS["bob"] not in gw.logtext(), "no token in the log")
        stop(gw)

        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(gw.state, "gateway.db"), uri=True)
        try:
            kept = db.execute("SELECT value FROM session_vars WHERE user='bob'").fetchall()
            users = [u for (u,) in db.execute("SELECT name FROM users")]
        finally:
            db.close()
        check(len(kept) == 1, "bob's data stay in the store: %s" % kept)
        check(users == ["alice"], "only configured users can log in: %s" % users)

        # named again, bob is back with his data
        gw = users_in(folder, ["alice", "bob"])
        gw.start()
        r, bob = hello(gw.listen, TOKENS["bob"])
        check(r["ok"], "bob gets in again once named again", r)
        if r["ok"]:
            r = bob.req("session.get")
            check(r["ok"] and r["vars"].get("secret", {}).get("v") == 42,
                  "with his session as he left it", r)
        bob.s.close()
        stop(gw)
    finally:
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop(5)
        shutil.rmtree(folder, ignore_errors=True)
    embedded_revoke()


def embedded_start(home, ini):
    env = dict(gateway_env(), SPOTLAB_HOME=home, SPOTLAB_CONFIG=ini)
    r = subprocess.run([GATEWAY, "--embedded", "--daemon"], capture_output=True, text=True,
                       env=env, timeout=60)
    require(r.returncode == 0, "the embedded gateway starts", r)
    return int(open(os.path.join(home, "gateway.pid")).read())


def embedded_stop(pid):
    os.kill(pid, signal.SIGTERM)
    wait_exit([pid], 30)


def embedded_revoke():
    """The embedded gateway adds its own user (token in $SPOTLAB_HOME/token): it stays
    allowed across restarts while a user the file drops loses access."""
    home = tempfile.mkdtemp(prefix="sec-revoke-home-")
    ini = os.path.join(home, "gateway.ini")
    address = "ipc://%s/gateway.sock" % home
    try:
        with open(ini, "w") as f:
            f.write("[user.carol]\ntoken_sha256 = %s\n" % token_sha256(TOKENS["carol"]))
        pid = embedded_start(home, ini)
        own = open(os.path.join(home, "token")).read().strip()
        for token, who in ((own, "the local user"), (TOKENS["carol"], "carol")):
            r, c = hello(address, token)
            check(r["ok"], "%s gets in the embedded gateway" % who, r)
            c.s.close()
        embedded_stop(pid)
        with open(ini, "w") as f:
            f.write("[idle]\nworker_timeout = 5m\n")
        pid = embedded_start(home, ini)
        r, c = hello(address, own)
        check(r["ok"], "after a restart the local user still gets in", r)
        c.s.close()
        r, c = hello(address, TOKENS["carol"])
        check(not r["ok"] and r["error"]["code"] == "SL_EAUTH",
              "carol, dropped from the file, is refused", r)
        c.s.close()
        embedded_stop(pid)
    finally:
        stop_all(home)
        shutil.rmtree(home, ignore_errors=True)


# ---- modes ----

def loose_entries(root):
    """Every path under root (root too) that a group or other user could use.
    The worker may still be removing a finished job's folders: a path gone
    during the walk is not counted."""
    loose = []
    for d, dirs, files in os.walk(root):
        for name in [""] + dirs + files:
            p = os.path.join(d, name) if name else d
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                loose.append("%s %o" % (os.path.relpath(p, root), stat.S_IMODE(st.st_mode)))
    return loose


def case_modes():
    worker, train = os.path.abspath(EXTRA[0]), os.path.abspath(EXTRA[1])
    folder = tempfile.mkdtemp(prefix="sec-modes-")
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=1,
                        extra_ini="[idle]\nworker_timeout = 3s\n",
                        env={"SPOTLAB_WORKER_BIN": worker, "SPOTLAB_TRAIN_BIN": train,
                             "SPOTLAB_DEBUG": "gateway"})
    # as an older gateway (or a hand-made folder) left it
    os.mkdir(gw.state)
    os.chmod(gw.state, 0o755)
    db = os.path.join(gw.state, "gateway.db")
    open(db, "w").close()
    os.chmod(db, 0o644)
    os.mkdir(os.path.join(gw.state, "instances"))
    os.chmod(os.path.join(gw.state, "instances"), 0o755)
    text = os.path.join(folder, "text.txt")
    with open(text, "w") as f:
        f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
    try:
        # a folder every user may write (as /tmp) is refused, not tightened for all
        shared = os.path.join(folder, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        r = subprocess.run([GATEWAY, "--config", gw.ini, "--state-dir", shared],
                           capture_output=True, text=True, env=gateway_env(), timeout=60)
        check(r.returncode == 1 and "is writable by every user (mode 1777)" in r.stderr,
              "a world-writable state folder is refused", r)
        check(stat.S_IMODE(os.stat(shared).st_mode) == 0o1777 and not os.listdir(shared),
              "and left as it was")

        gw.start()
        c = GatewayClient(gw.listen, token=TOKENS["alice"], session="nb")
        r = c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
                "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "session.set", r)
        r = c.req("submit", kind="train", model="m", data="d",
                  options={"steps": 20, "batch": 4, "threads": 1, "checkpoint_every": 10})
        require(r["ok"], "a training job is submitted", r)
        job = r["job"]
        require(c.req("attach", job=job, after=0)["ok"], "attach")
        end = c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                           e["state"] in ("succeeded", "failed"), timeout=240)
        check(end["state"] == "succeeded", "the job ran: %r" % end)
        check(c.req("session.set", vars={"lr": {"t": "num", "v": 0.1}})["ok"],
              "a write after the job (the database is in use)")
        c.s.close()
        # while the gateway runs: the database with its -wal and -shm
        for name in ("gateway.db", "gateway.db-wal", "gateway.db-shm", "gateway.key"):
            p = os.path.join(gw.state, name)
            mode = stat.S_IMODE(os.stat(p).st_mode) if os.path.exists(p) else None
            check(mode == 0o600, "%s is 0600 (%s)" % (name, "%o" % mode if mode else "missing"))
        mode = stat.S_IMODE(os.stat(gw.state).st_mode)
        check(mode == 0o700, "the state folder is 0700 (%o)" % mode)
        ckpts = [f for _, _, fs in os.walk(gw.state) for f in fs if "ckpt" in f]
        check(ckpts, "the job left checkpoints under the state folder: %s" % ckpts[:3])
        loose = loose_entries(gw.state)
        check(not loose, "nothing under the state folder is open to others: %s" % loose[:10])
        check(gw.wait_log("the state folder %s was mode 755" % gw.state),
              "the tightening is logged")
        check(gw.wait_log("files under %s could be read by other users" % gw.state),
              "the loose files are logged")
        stop(gw)
        loose = loose_entries(gw.state)
        check(not loose, "nor after the gateway stopped: %s" % loose[:10])
    finally:
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop(5)
        kill_instances(gw.state)
        shutil.rmtree(folder, ignore_errors=True)


# ---- errors ----

def snapshot(root):
    """Each path under root with its mode, size, mtime and content hash."""
    snap = {}
    for d, dirs, files in os.walk(root):
        for name in [""] + dirs + files:
            p = os.path.join(d, name) if name else d
            st = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            snap[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return snap


def run_bad(args, env, what, needle, good, before):
    """Runs the gateway as it would serve, expecting it to refuse at once."""
    try:
        r = subprocess.run([GATEWAY] + args, capture_output=True, text=True, env=env,
                           timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        check(False, "%s: the gateway refuses to start (it ran on)" % what)
        return
    check(r.returncode == 2, "%s: exit status 2 (%s)" % (what, r.returncode), r)
    check(needle in r.stderr and r.stderr.startswith("spotlab-gateway: "),
          "%s: the message says %r" % (what, needle), r)
    check(snapshot(good) == before, "%s: the good state folder is untouched" % what)


def case_errors():
    folder = tempfile.mkdtemp(prefix="sec-config-")
    try:
        gw = GatewayProcess(folder, GATEWAY, {"alice": TOKENS["alice"]})
        gw.start()
        r, c = hello(gw.listen, TOKENS["alice"])
        c.req("session.set", vars={"x": {"t": "num", "v": 1}})
        c.s.close()
        stop(gw)
        good = gw.state
        before = snapshot(good)
        env = gateway_env()
        serve = ["--state-dir", good, "--listen", gw.listen, "--workers", gw.workers]

        # a path that is no regular file, by --config and by SPOTLAB_CONFIG
        os.mkfifo(os.path.join(folder, "fifo.ini"))
        for path, needle in ((folder, "a folder, not a config file"),
                             (os.path.join(folder, "fifo.ini"), "a FIFO, not a config file"),
                             ("/dev/null", "a device, not a config file"),
                             (os.path.join(folder, "missing.ini"), "No such file")):
            run_bad(["--config", path] + serve, env, "--config " + path, path + ": " + needle,
                    good, before)
            run_bad(serve, dict(env, SPOTLAB_CONFIG=path), "SPOTLAB_CONFIG=" + path,
                    path + ": " + needle, good, before)
        # an empty path is no file either: refused, never the built-in defaults
        run_bad(["--config", ""] + serve, env, "--config ''", "--config: the path is empty", good,
                before)
        run_bad(serve, dict(env, SPOTLAB_CONFIG=""), "SPOTLAB_CONFIG=''",
                "SPOTLAB_CONFIG is set but empty", good, before)
        r = subprocess.run([GATEWAY, "--config", folder, "--dump-config"], capture_output=True,
                           text=True, env=env, timeout=30)
        check(r.returncode == 2 and "a folder, not a config file" in r.stderr,
              "--dump-config of a folder fails too", r)

        base = ("[gateway]\nlisten = %s\nworkers = %s\nstate_dir = %s\n[user.alice]\n"
                "token_sha256 = %s\n" % (gw.listen, gw.workers, good,
                                         token_sha256(TOKENS["alice"])))
        bob = "token_sha256 = %s\n" % token_sha256(TOKENS["bob"])
        lines = base.count("\n")
        twice = base.replace("[user.alice]", "state_dir = %s\n[user.alice]" % good)
        for what, text, at, needle in [
                ("a duplicate key", base + "[budget]\nmonthly_usd = 10\nmonthly_usd = 5000\n",
                 lines + 3, 'duplicate key "monthly_usd" in [budget] (first set on line %d)'
                 % (lines + 2)),
                ("a duplicate key in [gateway]", twice, 5,
                 'duplicate key "state_dir" in [gateway] (first set on line 4)'),
                ("a duplicate section", base + "[gateway]\nmax_instances = 2\n", lines + 1,
                 "duplicate section [gateway] (first on line 1)"),
                ("a duplicate user section", base + "[user.alice]\ngroup = ops\n[group.ops]\n",
                 lines + 1, "duplicate section [user.alice] (first on line 5)"),
                ("a group that does not exist",
                 base + "[user.bob]\n" + bob + "group = reserch\n[group.research]\n", lines + 3,
                 "[user.bob] group = reserch: there is no [group.reserch] section"),
                ("two users with one token", base + "[user.bob]\ntoken_sha256 = %s\n"
                 % token_sha256(TOKENS["alice"]), lines + 2,
                 "[user.bob] has the same token_sha256 as [user.alice]"),
                ("warn_before longer than notebook_timeout",
                 base + "[idle]\nnotebook_timeout = 10m\nwarn_before = 15m\n", lines + 3,
                 "[idle] warn_before (15m) is longer than notebook_timeout (10m)"),
                ("the default warn_before longer than notebook_timeout",
                 base + "[idle]\nnotebook_timeout = 1m\n", lines + 2,
                 "[idle] warn_before (5m, the default) is longer than notebook_timeout (1m)"),
                ("a group's notebook_timeout shorter than warn_before",
                 base + "[idle]\nwarn_before = 10m\n[group.fast]\nnotebook_timeout = 5m\n"
                 "[user.bob]\n" + bob + "group = fast\n", lines + 4,
                 "[group.fast] notebook_timeout (5m) is shorter than [idle] warn_before (10m)"),
                ("an indented line",
                 base + "[idle]\nworker_timeout = 1m\n  notebook_timeout = 1h\n", lines + 3,
                 'an indented line continues the value of "worker_timeout"')]:
            ini = os.path.join(folder, "bad.ini")
            with open(ini, "w") as f:
                f.write(text)
            run_bad(["--config", ini], env, what, "%s:%d: %s" % (ini, at, needle), good, before)

        # the good config still starts on the untouched state
        gw.start()
        r, c = hello(gw.listen, TOKENS["alice"])
        check(r["ok"], "the good config still serves alice", r)
        if r["ok"]:
            r = c.req("session.get")
            check(r["ok"] and r["vars"].get("x", {}).get("v") == 1, "with her session", r)
        c.s.close()
        stop(gw)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    os.umask(0o022)  # as an operator's shell has it: what the gateway makes private, it does
    cases = {"revoke": case_revoke, "modes": case_modes, "errors": case_errors}
    try:
        cases[CASE]()
    except Exception as e:  # a timeout or a failed step is a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
