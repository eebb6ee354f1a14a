"""spotlab-gateway started by a test: a private folder holds its INI file, its state
and its log; start() and stop() or kill() it as often as the test needs."""
import glob
import hashlib
import json
import os
import signal
import subprocess
import time


def token_sha256(token):
    return hashlib.sha256(token.encode()).hexdigest()


class GatewayProcess:
    def __init__(self, folder, exe, users, provider="local", slots=2, time_scale=60,
                 market_capacity=None, heartbeat_timeout_s=5, register_timeout_s=20,
                 extra_ini="", env=None, user_options=None):
        """users: {name: token}; user_options: {name: "key = value\n..."}, more lines of
        that user's section (a section may appear only once). market_capacity: spot capacity that never changes (a
        one-tick trace), or None for the provider's own market. env: variables to set
        for the gateway; a None value removes one."""
        self.dir = folder
        self.exe = exe
        self.state = os.path.join(folder, "state")
        self.listen = "ipc://%s/k.sock" % folder
        self.workers = "ipc://%s/w.sock" % folder
        self.ini = os.path.join(folder, "gateway.ini")
        self.logpath = os.path.join(folder, "gateway.log")
        market = ""
        if market_capacity is not None:
            trace = os.path.join(folder, "market.json")
            with open(trace, "w") as f:
                json.dump({"metadata": {"gap_seconds": 3600}, "data": [market_capacity]}, f)
            market = "market = trace:%s\n" % trace
        with open(self.ini, "w") as f:
            f.write("[gateway]\nlisten = %s\nworkers = %s\nstate_dir = %s\nheartbeat_ms = 200\n"
                    "heartbeat_timeout = %ds\nregister_timeout = %ds\n"
                    % (self.listen, self.workers, self.state, heartbeat_timeout_s, register_timeout_s))
            f.write("[provider.%s]\nslots = %d\ntime_scale = %d\n%s" % (provider, slots, time_scale, market))
            for name, token in users.items():
                f.write("[user.%s]\ntoken_sha256 = %s\n" % (name, token_sha256(token)))
                f.write((user_options or {}).get(name, ""))
            f.write(extra_ini)
        self.env = dict(env or {})
        self.p = None
        self.log = None
        self.starts = 0

    def start(self):
        env = dict(os.environ)
        env.pop("SPOTLAB_CONFIG", None)
        for k, v in self.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        self.log = open(self.logpath, "ab")
        self.p = subprocess.Popen([self.exe, "--config", self.ini], stdin=subprocess.DEVNULL,
                                  stdout=self.log, stderr=self.log, env=env)
        self.starts += 1

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def stop(self, timeout=20):
        """SIGTERM, then SIGKILL after timeout seconds; the exit status, or None if it
        was never started."""
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if self.log:
            self.log.close()
            self.log = None
        return self.p.returncode if self.p else None

    def kill(self):
        self.p.kill()
        self.p.wait(30)

    def logtext(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def logtail(self, n=6000):
        return self.logtext()[-n:]

    def wait_log(self, needle, timeout=10):
        return wait_text(self.logpath, needle, timeout)


def wait_text(path, needle, timeout):
    """Whether needle appears in the file at path within timeout seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path, "rb") as f:
                if needle in f.read().decode(errors="replace"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)  # polling a file: no event to wait on
    return False


def session_pids(sid):
    """The live processes of session sid (a local instance's worker leads its own)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[3]) == sid:
                pids.append(int(d))
    return pids


def signal_instance(record, sig):
    """Sends sig to every process of the local instance whose instance.json is record;
    how many there were."""
    try:
        with open(record) as f:
            sid = int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError):
        return 0
    pids = session_pids(sid)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return len(pids)


def kill_instances(state):
    """Ends every local instance of a gateway's state folder with its whole session
    (workers outlive a stopped gateway by design)."""
    for rec in glob.glob(os.path.join(state, "instances", "*", "instance.json")):
        signal_instance(rec, signal.SIGKILL)
