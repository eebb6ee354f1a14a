"""The aws provider on loopback, for tests: s3rver as the S3 store, the EC2
stand-in (ec2_standin.py) as EC2 and its instances, and a spotlab-gateway
with [provider.aws] and [store] url = s3://BUCKET/spotlab, all in one
private folder.

Only the gateway gets AWS credentials and endpoints (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_EC2, AWS_ENDPOINT_URL_S3); the
stand-in, and so every instance it runs, starts with no AWS_* variable at
all, so a credential that reaches an instance can only have come through
the gateway. s3rver knows one access key id, S3RVER, and is started to
accept any secret: S3 signing is checked against botocore in the unit
tests, EC2 signing by the stand-in, which verifies every call with
botocore and the secret given here, and records the outcome in its call
log.

A missing piece (s3rver, boto3, the stand-in) raises: the aws suites fail
rather than skip.
"""
import glob
import json
import os
import re
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import boto3
import botocore.config

from gateway_proc import GatewayProcess, token_sha256

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "s3"))  # s3_fixture, for AwsEnv's fault proxy
S3RVER = os.path.join(REPO, ".deps", "node_modules", ".bin", "s3rver")
STANDIN = os.path.join(HERE, "ec2_standin.py")
PYTHON = "/usr/bin/python3"

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
TYPES = ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge")
AMI = "resolve:ssm:/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
BUCKET = "spotlab-test"
PREFIX = "spotlab"
# s3rver's one account; the secret is this test's own, so it can be searched for
ACCESS_KEY_ID = "S3RVER"
SECRET_ACCESS_KEY = "spotlabTestSecret/9fQ2+kZr7Lw0vXy3Bn5Mc8Hd1Ja4"
# what an instance must never see
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                   "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_PROFILE",
                   "AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def free_port():
    """A TCP port free on 127.0.0.1 right now (for the gateway's worker socket, whose
    address goes into the instances' user data and so must be known before it starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra=None):
    """This process's environment without any AWS_* variable, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("SPOTLAB_CONFIG", None)
    env.update(extra or {})
    return env


class Lines:
    """The lines a child prints on its stdout, each waited for with a deadline."""

    def __init__(self, p, what):
        self.p, self.what, self.buf = p, what, b""
        os.set_blocking(p.stdout.fileno(), False)

    def next(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("%s printed no line within %ds (exit %s): %r"
                                   % (self.what, timeout, self.p.poll(), self.buf[-500:]))
            select.select([fd], [], [], left)
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                continue
            if not chunk:
                raise RuntimeError("%s exited (%s) before it printed a line: %r"
                                   % (self.what, self.p.wait(), self.buf[-500:]))
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def rest_to(self, log):
        """Copies what the child prints from now on to log (a file open for binary
        writing), on a thread, so that a full pipe never blocks it."""
        fd = self.p.stdout.fileno()
        os.set_blocking(fd, True)
        log.write(self.buf)
        log.flush()

        def pump():
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                try:
                    log.write(chunk)
                    log.flush()
                except ValueError:  # the log was closed at the end
                    return
        threading.Thread(target=pump, daemon=True).start()


class S3Server:
    """s3rver on 127.0.0.1, its objects in folder, with BUCKET created."""

    def __init__(self, folder):
        if not os.access(S3RVER, os.X_OK):
            raise RuntimeError("s3rver is missing (%s): npm install s3rver into .deps" % S3RVER)
        self.dir = os.path.join(folder, "s3")
        os.makedirs(self.dir, exist_ok=True)
        self.log = open(os.path.join(folder, "s3rver.log"), "ab")
        self.p = subprocess.Popen([S3RVER, "-d", self.dir, "-a", "127.0.0.1", "-p", "0",
                                   "--allow-mismatched-signatures"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=self.log, env=clean_env())
        lines, line = Lines(self.p, "s3rver"), ""
        while "listening on" not in line:  # s3rver prints an empty line first
            line = lines.next(30)
        lines.rest_to(self.log)
        self.port = int(re.search(r":(\d+)\s*$", line).group(1))
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.s3 = boto3.session.Session(
            aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
            region_name=REGION).client(
            "s3", endpoint_url=self.endpoint,
            config=botocore.config.Config(s3={"addressing_style": "path"}))
        self.s3.create_bucket(Bucket=BUCKET)

    def objects(self, prefix=""):
        """Every object under prefix: [{Key, Size, ...}] across pages."""
        out, token = [], None
        while True:
            kw = {"Bucket": BUCKET, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            r = self.s3.list_objects_v2(**kw)
            out += r.get("Contents", [])
            if not r.get("IsTruncated"):
                return out
            token = r["NextContinuationToken"]

    def get(self, key):
        """(body bytes, user metadata) of key."""
        r = self.s3.get_object(Bucket=BUCKET, Key=key)
        return r["Body"].read(), r.get("Metadata", {})

    def close(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p.stdout.close()
        self.log.close()


class Ec2Standin:
    """ec2_standin.py: EC2's Query API and its instances as local processes, with a
    control API under /_standin/ (docs/internals/ec2-standin.md)."""

    def __init__(self, folder, time_scale, boot_seconds, notice_poll_ms=100, regions=(REGION,)):
        if not os.path.exists(STANDIN):
            raise RuntimeError("the EC2 stand-in is missing (%s)" % STANDIN)
        self.dir = os.path.join(folder, "ec2")
        os.makedirs(self.dir, exist_ok=True)
        self.logpath = os.path.join(folder, "ec2-standin.log")
        self.log = open(self.logpath, "ab")
        # no AWS_* variable: instances inherit this environment (the stand-in drops
        # AWS_* from theirs too); it learns the test credentials from its arguments
        # a relative SPOTLAB_ROOT: each instance's user data works in the folder
        # the stand-in starts it in (its own)
        env = clean_env({"SPOTLAB_NOTICE_POLL_MS": str(notice_poll_ms), "SPOTLAB_ROOT": "."})
        env.pop("SPOTLAB_DEBUG", None)
        self.p = subprocess.Popen([PYTHON, STANDIN, "--state-dir", self.dir, "--port", "0",
                                   "--time-scale", str(time_scale), "--boot-seconds",
                                   str(boot_seconds), "--region", ",".join(regions),
                                   "--zones", "ab",
                                   "--access-key", ACCESS_KEY_ID,
                                   "--secret-key", SECRET_ACCESS_KEY],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=self.log, env=env, start_new_session=True)
        lines = Lines(self.p, "the EC2 stand-in")
        hello = json.loads(lines.next(30))
        lines.rest_to(self.log)
        self.port = hello["port"]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.control = hello["control"].rstrip("/")

    def _call(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.control + "/" + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError("stand-in %s %s: %d %s" % (method, path, e.code,
                                                          e.read()[:500])) from None
        return json.loads(text) if text.strip() else None

    def get(self, path):
        return self._call("GET", path)

    def post(self, path, body):
        return self._call("POST", path, body)

    def instances(self):
        r = self.get("instances")
        return r["instances"] if isinstance(r, dict) else r

    def calls(self):
        r = self.get("calls")
        return r["calls"] if isinstance(r, dict) else r

    def tag(self, inst, key):
        tags = inst.get("tags") or {}
        if isinstance(tags, list):
            tags = {t.get("Key", t.get("key")): t.get("Value", t.get("value")) for t in tags}
        return tags.get(key)

    def by_spotlab(self, name):
        """The stand-in's record of the instance tagged spotlab:instance=name, the newest
        when several carry it."""
        hits = [i for i in self.instances() if self.tag(i, "spotlab:instance") == name]
        return hits[-1] if hits else None

    def interrupt(self, instance_id, notice):
        return self.post("interrupt", {"instance": instance_id, "notice": bool(notice)})

    def fail(self, **rule):
        return self.post("fail", rule)

    def set_boot_seconds(self, s):
        return self.post("boot_seconds", {"seconds": s})

    def close(self):
        """Ends the stand-in and every instance process it started (its session)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        kill_under(self.dir)
        self.p.stdout.close()
        self.log.close()


def proc_env(pid):
    """{name: value} of a live process's environment, or None."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def pids_under(folder):
    """Live processes whose command line or working folder lies under folder."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/stat" % d) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            cwd = os.readlink("/proc/%s/cwd" % d)
        except (OSError, IndexError):
            continue
        if folder.encode() + b"/" in cmd or cwd == folder or cwd.startswith(folder + "/"):
            pids.append(int(d))
    return pids


def kill_under(folder):
    for pid in pids_under(folder):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class AwsGateway(GatewayProcess):
    """spotlab-gateway with [provider.aws] against the stand-in and [store] on s3rver;
    kill() and start() again on the same state folder."""

    def __init__(self, folder, exe, users, ec2_endpoint, s3_endpoint, worker_exe, train_exe,
                 poll="1s", keep=3, types=TYPES, zones=ZONES, orphan_timeout="60s",
                 capacity_memory="10m", heartbeat_timeout_s=5, register_timeout_s=60, extra_ini="",
                 store_ini="",
                 env=None, regions=None):
        self.dir = folder
        os.makedirs(folder, exist_ok=True)
        self.exe = exe
        self.state = os.path.join(folder, "state")
        self.listen = "ipc://%s/k.sock" % folder
        self.worker_port = free_port()
        self.workers = "tcp://127.0.0.1:%d" % self.worker_port
        self.ini = os.path.join(folder, "gateway.ini")
        self.logpath = os.path.join(folder, "gateway.log")
        self.keep = keep
        with open(self.ini, "w") as f:
            f.write("[gateway]\nlisten = %s\nworkers = %s\nstate_dir = %s\nheartbeat_ms = 200\n"
                    "heartbeat_timeout = %ds\nregister_timeout = %ds\n"
                    % (self.listen, self.workers, self.state, heartbeat_timeout_s,
                       register_timeout_s))
            # several regions: regions = ..., and the bucket's region said outright
            where = ("regions = %s\n" % ", ".join(regions) if regions
                     else "region = %s\n" % REGION)
            f.write("[provider.aws]\n%szones = %s\ninstance_types = %s\nami = %s\n"
                    "worker_prefix =\nadvertise = %s\norphan_timeout = %s\npoll = %s\n"
                    "capacity_memory = %s\n"
                    % (where, ",".join(zones), ",".join(types), AMI, self.workers,
                       orphan_timeout, poll, capacity_memory))
            # with several regions the bucket's is the first of them (admin.md, [store])
            f.write("[store]\nurl = s3://%s/%s\nkeep = %d\n%s" % (BUCKET, PREFIX, keep, store_ini))
            f.write("[worker]\nmetrics_per_s = 100000\n")
            for name, token in users.items():
                f.write("[user.%s]\ntoken_sha256 = %s\n" % (name, token_sha256(token)))
            f.write(extra_ini)
        # the gateway's environment alone carries the credentials; no shared files,
        # no profile and no metadata service to fall back on
        self.env = {k: None for k in os.environ if k.startswith("AWS_")}
        self.env.update({
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_ENDPOINT_URL_EC2": ec2_endpoint, "AWS_ENDPOINT_URL_S3": s3_endpoint,
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(folder, "no-credentials"),
            "AWS_CONFIG_FILE": os.path.join(folder, "no-config"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "SPOTLAB_WORKER_BIN": worker_exe, "SPOTLAB_TRAIN_BIN": train_exe,
            "SPOTLAB_DEBUG": None})
        self.env.update(env or {})
        self.p = None
        self.log = None
        self.starts = 0

    def start(self):
        if self.starts == 0:
            self._bundle_from_cache()
        super().start()

    def stop(self, timeout=20):
        code = super().stop(timeout)
        self._bundle_to_cache()
        return code

    # The worker bundle (gateway/bundle.c) takes seconds to build, and every test
    # of a run would build the same one. With SPOTLAB_TEST_BUNDLE_CACHE set (meson
    # sets it), a gateway's first start finds the archive and manifest the last
    # stopped one left there; the gateway hashes the programs and the archive and
    # builds anew when anything differs, as after any restart on its own state.
    BUNDLE_FILES = ("spotlab-worker.tar.gz", "inputs")

    def _bundle_from_cache(self):
        cache = os.environ.get("SPOTLAB_TEST_BUNDLE_CACHE")
        mine = os.path.join(self.state, "bundle")
        if not cache or os.path.exists(mine) or not all(
                os.path.isfile(os.path.join(cache, n)) for n in self.BUNDLE_FILES):
            return
        os.makedirs(self.state, mode=0o700, exist_ok=True)
        os.makedirs(mine, mode=0o700)
        for n in self.BUNDLE_FILES:
            shutil.copyfile(os.path.join(cache, n), os.path.join(mine, n))
            os.chmod(os.path.join(mine, n), 0o600)  # as the gateway keeps its state

    def _bundle_to_cache(self):
        cache = os.environ.get("SPOTLAB_TEST_BUNDLE_CACHE")
        mine = os.path.join(self.state, "bundle")
        if not cache or not all(os.path.isfile(os.path.join(mine, n)) for n in self.BUNDLE_FILES):
            return
        os.makedirs(cache, exist_ok=True)
        for n in self.BUNDLE_FILES:  # the manifest last: it names the archive's hash
            tmp = os.path.join(cache, "%s.%d" % (n, os.getpid()))
            shutil.copyfile(os.path.join(mine, n), tmp)
            os.replace(tmp, os.path.join(cache, n))


def kill_with_upload_open(env, proxy, uid, key, records, let_through):
    """The gateway of env killed (SIGKILL) while its multipart upload uid of key
    is open, as the fault proxy in front of S3 saw it begin: its state folder
    holds one record (records: a glob under the state folder) naming the
    upload's key and id; then let_through() (the proxy stops holding the
    parts), the gateway starts again, and the proxy sees it abort that upload
    within 60 s (TimeoutError otherwise)."""
    from checks import check, log
    env.gw.kill()
    env.gw.stop()  # closes its log
    log("gateway killed while its upload %.20s… of %s was open" % (uid, key))
    found = glob.glob(os.path.join(env.gw.state, records))
    check(len(found) == 1, "the open upload is recorded in the state folder: %s" % found)
    if found:
        with open(found[0]) as f:
            check(f.read().split("\n")[:2] == [key[len(PREFIX) + 1:], uid],
                  "the record names the upload's key and id")
    let_through()
    env.gw.start()
    deadline = time.monotonic() + 60
    while key not in proxy.aborted:
        if time.monotonic() > deadline:
            raise TimeoutError("the abort of the killed run's upload: not within 60s")
        time.sleep(0.1)  # the proxy's books have no event to wait on
    check(uid not in proxy.uploads, "started again, the gateway aborted the upload the killed run left")


def end_test(root, env, clients=(), tail=6000, instance_logs=False):
    """The end of an aws test script, whatever happened in it (a test's
    finally): closes the clients (monitors, notebooks; None skipped); when a
    check failed, prints the tail of the gateway's log and, with
    instance_logs, of each instance's console and worker logs; closes env
    (and its fault proxy in front of S3); keeps root when a check failed or
    SPOTLAB_AWS_KEEP is set, and removes it otherwise."""
    from checks import failures
    for c in clients:
        if c:
            c.close()
    if failures and env and env.gw:
        print("---- gateway log tail\n%s" % env.gw.logtail(tail))
        alive = instance_logs and env.ec2 and env.ec2.p.poll() is None
        for i in env.ec2.instances() if alive else []:
            for name in ("console.log", "worker.log"):
                try:
                    with open(os.path.join(i["dir"], name), "rb") as f:
                        print("---- %s %s\n%s" % (i["id"], name, f.read()[-1500:].decode(errors="replace")))
                except OSError:
                    pass
    if env:
        env.close()
    if failures or os.environ.get("SPOTLAB_AWS_KEEP"):
        print("state kept in %s (bucket %s)" % (root, BUCKET))
    else:
        shutil.rmtree(root, ignore_errors=True)


class AwsEnv:
    """s3rver + the EC2 stand-in + spotlab-gateway (aws provider, S3 store) under root.

    boot_seconds: the stand-in's boot time (simulated seconds, divided by time_scale).
    regions: several regions (the stand-in serves each, the gateway has regions = ...,
    the bucket is in the first); None: REGION alone.
    s3_faults: the gateway and the workers reach S3 through the fault proxy of
    tests/s3/s3_fixture.py (self.proxy, stopped by close()) with these rules in its
    always list, [(predicate(method, target), action)]; None: s3rver itself."""

    def __init__(self, root, gateway_exe, worker_exe, train_exe, users, time_scale=60,
                 boot_seconds=60, regions=None, s3_faults=None, **gateway_kw):
        self.root = root
        self.s3 = None
        self.ec2 = None
        self.gw = None
        self.proxy = None
        try:
            self.s3 = S3Server(root)
            self.ec2 = Ec2Standin(root, time_scale, boot_seconds, regions=regions or (REGION,))
            s3_endpoint = self.s3.endpoint
            if s3_faults is not None:
                from s3_fixture import FaultProxy
                self.proxy = FaultProxy(self.s3.port)
                self.proxy.always.extend(s3_faults)
                s3_endpoint = self.proxy.url
            self.gw = AwsGateway(os.path.join(root, "gw"), gateway_exe, users, self.ec2.endpoint,
                                 s3_endpoint, worker_exe, train_exe, regions=regions,
                                 **gateway_kw)
        except BaseException:
            self.close()
            raise

    def store_prefix(self, job=""):
        return "%s/%s" % (PREFIX, job + "/" if job else "")

    def wait_instances_gone(self, timeout):
        """Waits until the stand-in lists every instance as terminated; the ones that
        are not, at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            live = [i for i in self.ec2.instances() if i.get("state") != "terminated"]
            if not live or time.monotonic() > deadline:
                return live
            time.sleep(0.2)  # the stand-in's state has no event to wait on

    def secret_hits(self, skip=("s3",)):
        """Files under root (but the S3 objects themselves) holding the secret access
        key: [path]."""
        needle = SECRET_ACCESS_KEY.encode()
        hits = []
        for dirpath, dirs, files in os.walk(self.root):
            if os.path.relpath(dirpath, self.root).split(os.sep)[0] in skip:
                dirs[:] = []
                continue
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as f:
                        if needle in f.read():
                            hits.append(path)
                except OSError:
                    pass
        return hits

    def instance_env_leaks(self):
        """{pid: [AWS variable, ...]} of the live processes the stand-in's instances run
        that carry a credential or an AWS endpoint variable, or the secret itself."""
        out = {}
        for pid in pids_under(self.ec2.dir):
            env = proc_env(pid)
            if env is None:
                continue
            bad = [k for k in CREDENTIAL_VARS if k in env]
            bad += ["%s (holds the secret)" % k for k, v in env.items()
                    if SECRET_ACCESS_KEY in v]
            if bad:
                out[pid] = bad
        return out

    def multipart_rows(self):
        """The gateway store's multipart table: (upload_id, key, instance) rows."""
        db = sqlite3.connect(os.path.join(self.gw.state, "gateway.db"), timeout=10)
        try:
            return db.execute("SELECT upload_id, key, instance FROM multipart").fetchall()
        finally:
            db.close()

    def close(self):
        if self.gw is not None and self.gw.alive():
            try:
                self.gw.stop(10)
            except Exception as e:  # cleanup goes on
                print("gateway stop:", e, file=sys.stderr)
        if self.ec2 is not None:
            self.ec2.close()
        if self.s3 is not None:
            self.s3.close()
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)
