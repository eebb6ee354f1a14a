"""A fake gateway, metadata service and bucket for spotlab-worker integration
tests.

The gateway is a ZeroMQ ROUTER with CURVE server keys made for the test; the
metadata service is a loopback HTTP server answering like EC2's IMDSv2; the
bucket answers the presigned URLs the fake gateway hands out. Every wait has
a deadline and fails the test with what was received so far."""
import hashlib
import http.server
import json
import os
import subprocess
import tempfile
import threading
import time

import zmq


class Metadata:
    """IMDSv2: PUT /latest/api/token, then GETs with the token header."""

    def __init__(self):
        self.notice = None          # dict served on spot/instance-action
        self.rebalance = None
        self.tokens_issued = 0
        self.bad_requests = []
        self.token = None
        self.cond = threading.Condition()
        meta = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body=b""):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                if self.path != "/latest/api/token" or \
                        self.headers.get("X-aws-ec2-metadata-token-ttl-seconds") != "21600":
                    meta.bad_requests.append(("PUT", self.path))
                    return self._send(400)
                with meta.cond:
                    meta.tokens_issued += 1
                    meta.token = "tok%d" % meta.tokens_issued
                    meta.cond.notify_all()
                self._send(200, meta.token.encode())

            def do_GET(self):
                if meta.token is None or self.headers.get("X-aws-ec2-metadata-token") != meta.token:
                    return self._send(401)
                if self.path == "/latest/meta-data/spot/instance-action":
                    body = meta.notice
                elif self.path == "/latest/meta-data/events/recommendations/rebalance":
                    body = meta.rebalance
                else:
                    meta.bad_requests.append(("GET", self.path))
                    return self._send(404)
                if body is None:
                    return self._send(404)
                self._send(200, json.dumps(body).encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def post_notice(self, lead, action="terminate"):
        """Serves a spot notice whose deadline is lead seconds away; returns
        the deadline (wall clock, whole seconds as IMDS gives them)."""
        deadline = time.time() + lead
        self.notice = {"action": action,
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))}
        return deadline

    def expire_token(self):
        with self.cond:
            self.token = "expired"

    def wait_tokens(self, n, timeout):
        with self.cond:
            if not self.cond.wait_for(lambda: self.tokens_issued >= n, timeout):
                raise AssertionError("only %d metadata tokens issued" % self.tokens_issued)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Gateway:
    def __init__(self, address, refuse=0):
        self.ctx = zmq.Context.instance()
        self.public, self.secret = zmq.curve_keypair()
        self.address = address
        self.received = []
        # refuse > 0: a ZAP handler refuses that many handshakes, then admits
        # every key (a gateway that did not know the instance yet)
        self.refuse = refuse
        self.zap_refused = self.zap_admitted = 0
        self.zap_thread = None
        if refuse:
            self.zap = self.ctx.socket(zmq.REP)
            self.zap.linger = 0
            self.zap.bind("inproc://zeromq.zap.01")
            self.zap_stop = threading.Event()
            self.zap_thread = threading.Thread(target=self._zap_loop, daemon=True)
            self.zap_thread.start()
        # Answer a register the way a gateway that recorded everything does
        # (a worker registers again after ten silent heartbeat intervals);
        # cases about registration itself turn it off and answer by hand.
        self.answer_register = False
        self.ident = None
        self.open()

    def _zap_loop(self):
        while not self.zap_stop.is_set():
            if not self.zap.poll(100):
                continue
            req = self.zap.recv_multipart()
            refuse = self.zap_refused < self.refuse
            if refuse:
                self.zap_refused += 1
            else:
                self.zap_admitted += 1
            self.zap.send_multipart([b"1.0", req[1], b"400" if refuse else b"200",
                                     b"unknown key" if refuse else b"OK",
                                     b"" if refuse else b"i-0123456789ab", b""])
        self.zap.close()

    def open(self):
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.curve_server = True
        self.sock.curve_secretkey = self.secret
        if self.refuse:
            self.sock.zap_domain = b"spotlab"
        self.sock.linger = 0
        self.sock.bind(self.address)

    def restart(self):
        self.sock.close()
        self.open()

    def recv(self, pred, timeout=20.0, what="message"):
        """Returns the first message matching pred, recording every message."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                tail = [m.get("type") for m in self.received[-20:]]
                raise AssertionError("timed out waiting for %s; last received: %s" % (what, tail))
            if not self.sock.poll(int(left * 1000) + 1):
                continue
            frames = self.sock.recv_multipart()
            self.ident = frames[0]
            msg = json.loads(frames[-1])
            self.received.append(msg)
            if self.answer_register and msg.get("type") == "register":
                self.send({"type": "registered", "heartbeat_ms": 100})
            if pred(msg):
                return msg

    def send(self, msg):
        self.sock.send_multipart([self.ident, json.dumps(msg).encode()])

    def close(self):
        self.sock.close()
        if self.zap_thread:
            self.zap_stop.set()
            self.zap_thread.join()
            self.zap_thread = None


class Bucket:
    """Loopback HTTP for presigned URLs: PUTs are answered, GETs find nothing,
    DELETEs succeed. hold: the first PUT whose path holds it waits (for 30 s
    at most) until `release` is set; `held` is set once it waits, and
    `held_path` is that PUT's path. slow: (text, seconds), every PUT whose
    path holds text is answered that much later (a slow store)."""

    def __init__(self, hold=None, slow=None):
        self.puts = []
        self.held, self.release = threading.Event(), threading.Event()
        self.held_path = None
        bucket = self

        def on_put(path):
            if slow and slow[0] in path:
                time.sleep(slow[1])  # a slow store: the answer is what is late
            if hold and hold in path and not bucket.held.is_set():
                bucket.held_path = path.split("?")[0]
                bucket.held.set()
                bucket.release.wait(30)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, code, body=b"", headers=()):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_PUT(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                bucket.puts.append(self.path.split("?")[0])
                on_put(self.path)
                self.reply(200, headers=[("ETag", '"%s"' % hashlib.md5(body).hexdigest())])

            def do_GET(self):
                self.reply(404, b"<Error><Code>NoSuchKey</Code><Message>none</Message></Error>")

            do_HEAD = do_GET

            def do_DELETE(self):
                self.reply(204)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = "http://127.0.0.1:%d/bkt" % self.server.server_address[1]

    def presigned(self, gw, m):
        """Answers the presign m, just received by gw, with this bucket's URLs."""
        gw.send({"type": "presigned", "id": m["id"],
                 "urls": ["%s/%s" % (self.base, r["key"]) for r in m["requests"]]})

    def serve_job(self, gw, job, types, timeout, what, sign_orphan=True):
        """The next message of job among types; presigns meanwhile are answered
        (those of the orphan URLs only with sign_orphan: else a gateway that
        never signs them)."""
        while True:
            m = gw.recv(lambda m: m["type"] == "presign" or of(job, *types)(m), timeout, what)
            if m["type"] != "presign":
                return m
            if sign_orphan or not is_orphan_presign(m):
                self.presigned(gw, m)

    def serve_until_held(self, gw, job, sign_orphan=True, timeout=60):
        """Answers presigns until the held PUT waits; job's done, or no held PUT
        within timeout seconds, fails."""
        end = time.monotonic() + timeout
        keys = []
        while not self.held.is_set():
            left = end - time.monotonic()
            assert left > 0, ("no PUT to hold within %d s; presigns for %s; PUTs %s; last received %s"
                              % (timeout, keys, self.puts, [m.get("type") for m in gw.received[-20:]]))
            m = gw.recv(lambda m: m["type"] == "presign" or of(job, "done")(m), min(30, left),
                        "the presign of the PUT to hold")
            assert m["type"] == "presign", m
            keys.append([r["key"] for r in m["requests"]])
            if sign_orphan or not is_orphan_presign(m):
                self.presigned(gw, m)
            self.held.wait(1)

    def close(self):
        self.release.set()
        self.server.shutdown()


def is_orphan_presign(m):
    return any("/orphan/" in r["key"] for r in m["requests"])


class Worker:
    def __init__(self, worker_exe, train_exe, gw, tmp, metadata_url="", extra=None, store=None, log=None,
                 env=None):
        self.public, self.secret = zmq.curve_keypair()
        self.store = store or os.path.join(tmp, "store")
        self.work = tempfile.mkdtemp(dir=tmp, prefix="work")
        cfg = {
            "gateway": gw.address, "gateway_public": gw.public.decode(),
            "public": self.public.decode(), "secret": self.secret.decode(),
            "instance": "i-0123456789ab", "type": "local.cpu", "zone": "local-a", "spot": True,
            "metadata": metadata_url, "work_dir": self.work, "store": "file://" + self.store,
            "train": train_exe, "metrics_per_s": 100000, "output_lines_per_s": 100000,
        }
        cfg.update(extra or {})
        self.config = os.path.join(self.work, "worker.json")
        fd = os.open(self.config, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, json.dumps(cfg).encode())
        os.close(fd)
        env = dict(os.environ, SPOTLAB_NOTICE_POLL_MS="50", **(env or {}))
        self.log = open(log, "w") if log else None  # else the test's stderr
        self.proc = subprocess.Popen([worker_exe, "--config", self.config], env=env, stderr=self.log)

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None


def text_file(tmp):
    path = os.path.join(tmp, "tiny.txt")
    with open(path, "w") as f:
        for i in range(200):
            f.write("Call me Ishmael. Some years ago, never mind how long precisely %d.\n" % i)
    return path


def train_assign(job, data, steps, attempt=1, restore=None, checkpoint_every=10, options=None):
    assign = {
        "type": "assign", "job": job, "attempt": attempt, "kind": "train",
        "spec": {
            "model": {"name": "m", "kind": "model",
                      "spec": {"type": "gpt", "args": [],
                               "options": {"layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
            "data": {"type": "text", "args": [data]},
            "options": {"steps": steps, "batch": 4, "lr": 0.003, "seed": 1, "threads": 1},
        },
        "restore": restore, "checkpoint_every": checkpoint_every, "env": {},
    }
    assign["spec"]["options"].update(options or {})
    return assign


def of(job, *types):
    return lambda m: m.get("job") == job and m.get("type") in types
