#!/usr/bin/python3
"""A stand-in for Amazon EC2 on loopback, for spotlab's tests.

It speaks the EC2 Query API (version 2016-11-15) as the API reference
documents it: form-encoded requests signed with SigV4, XML replies in the
2016-11-15 namespace, errors as <Response><Errors><Error>... with the
documented HTTP statuses. Every signature is checked with botocore against
the test credentials, and every call is recorded. Instances run on this
machine: once booted, an instance's user data script runs as a process
group of its own, with its own IMDSv2 endpoint and `shutdown`/`poweroff`
shims, until the instance is terminated, stopped or interrupted. Durations
(boot, the two-minute spot notice, the shutdown grace, how long terminated
instances stay visible) are EC2 seconds divided by time_scale.

Used two ways: `/usr/bin/python3 ec2_standin.py --state-dir DIR ...` prints
one JSON line {"port":N,"control":URL} once listening; or in-process,
`Ec2Standin(state_dir, ...).start()`. Tests steer it through the control
API under /_standin/ (StandinControl below). docs/internals/ec2-standin.md
describes the actions, the control API and what is simulated.

Invariants: all state is behind one lock (`Ec2Standin.lock`); what comes
with time (boot, the end of a notice, the grace, a process group emptying)
happens on the clock thread, and nothing blocks under the lock (metadata
servers are shut down on threads of their own). A process group is
signalled only while it has a live member. Bad input gets an EC2 error
reply or a control API error, never a crash.
"""
import argparse
import base64
import binascii
import csv
import datetime
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

API_VERSION = "2016-11-15"
XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
OWNER_ID = "123456789012"
DEFAULT_ACCESS_KEY = "AKIDEXAMPLE"
DEFAULT_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
MAX_BODY_BYTES = 1 << 20
MAX_USER_DATA_BYTES = 16384
MAX_SKEW_S = 300                    # SigV4: X-Amz-Date within 5 minutes
SPOT_NOTICE_S = 120                 # EC2 seconds between the notice and the action
IMDS_TTL_MAX_S = 21600
MAX_CALLS = 10000                   # recorded calls kept (oldest dropped first)
MAX_LIVE_INSTANCES = 256            # each one holds a metadata server and its threads
LINUX_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")

# HTTP statuses of the codes this stand-in sends. The reference puts client
# errors in the 400 series and server errors in the 500 series; the ones
# named here are what EC2 sends on the wire. Any other code: 400.
ERROR_STATUS = {
    "AuthFailure": 401,
    "SignatureDoesNotMatch": 403,
    "UnauthorizedOperation": 403,
    "DryRunOperation": 412,
    "InsufficientInstanceCapacity": 500,
    "InternalError": 500,
    "InternalFailure": 500,
    "RequestLimitExceeded": 503,
    "Unavailable": 503,
    "ServiceUnavailable": 503,
}
# Injected codes that strike before permissions, DryRun and parameters are
# looked at (throttling, outages, credentials); the others strike where EC2
# would decide them, after DryRun and the parameter checks.
EARLY_CODES = {"RequestLimitExceeded", "InternalError", "InternalFailure", "Unavailable",
               "ServiceUnavailable", "AuthFailure", "ExpiredToken", "RequestExpired",
               "SignatureDoesNotMatch", "UnauthorizedOperation", "drop"}
DEFAULT_MESSAGES = {
    "RequestLimitExceeded": "Request limit exceeded.",
    "InternalError": "An internal error has occurred.",
    "Unavailable": "The server is overloaded and cannot handle the request.",
    "AuthFailure": "AWS was not able to validate the provided access credentials",
    "ExpiredToken": "The security token included in the request is expired",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "Unsupported": "The requested configuration is currently not supported. "
                   "Please check the documentation for supported configurations.",
    "InvalidParameterValue": "Invalid value for a parameter.",
}

STATE_CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48,
               "stopping": 64, "stopped": 80}

# The types this stand-in offers, with what DescribeInstanceTypes tells of
# them: vCPUs, memory (MiB), GPUs (count, model, MiB each) and the Linux
# on-demand price in us-east-1 (USD per hour).
CATALOG = {
    "t3.micro": (2, 1024, 0, "", 0, 0.0104),
    "m5.large": (2, 8192, 0, "", 0, 0.096),
    "c5.xlarge": (4, 8192, 0, "", 0, 0.17),
    "g4dn.xlarge": (4, 16384, 1, "T4", 16384, 0.526),
    "g4dn.12xlarge": (48, 196608, 4, "T4", 16384, 3.912),
    "g5.xlarge": (4, 16384, 1, "A10G", 24576, 1.006),
    "g5.12xlarge": (48, 196608, 4, "A10G", 24576, 5.672),
    "p3.2xlarge": (8, 62464, 1, "V100", 16384, 3.06),
    "p3.16xlarge": (64, 499712, 8, "V100", 16384, 24.48),
    "p4d.24xlarge": (96, 1179648, 8, "A100", 40960, 32.7726),
    "p5.48xlarge": (192, 2097152, 8, "H100", 81920, 98.32),
}
DEFAULT_SPOT_FRACTION = 0.35        # spot price without a table: this share of on-demand
ZONE_SCORES = (9, 7, 5, 8, 6, 4)    # default placement score of zones a, b, c, ...
OTHER_REGIONS = ("us-east-2", "us-west-2", "eu-west-1", "eu-central-1")
DIRECTIONS = {"north": "n", "south": "s", "east": "e", "west": "w", "central": "c",
              "northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw"}


class Ec2Error(Exception):
    """An error reply: code, message and HTTP status."""

    def __init__(self, code, message=None, status=None):
        super().__init__(message or code)
        self.code = code
        self.message = message or DEFAULT_MESSAGES.get(code, code)
        self.status = status or ERROR_STATUS.get(code, 400)


class Dropped(Exception):
    """The connection is to be closed without a reply."""


class ControlError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- helpers

def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def iso_ms(dt):
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (dt.microsecond // 1000)


def iso_s(dt):
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    """An ISO 8601 timestamp as the SDKs send it (Z, an offset, or a
    fraction), or epoch seconds; None when it is not one."""
    t = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return datetime.datetime.fromtimestamp(float(t), datetime.timezone.utc)
    if t.endswith("Z") or t.endswith("z"):
        t = t[:-1] + "+00:00"
    try:
        dt = datetime.datetime.fromisoformat(t)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.astimezone(datetime.timezone.utc)


def zone_id_prefix(region):
    """us-east-1 -> use1, ap-southeast-2 -> apse2: the prefix of EC2's
    zone ids (use1-az1)."""
    parts = region.split("-")
    if len(parts) < 3:
        return re.sub(r"[^a-z0-9]", "", region)
    middle = "".join(DIRECTIONS.get(p, p[:1]) for p in parts[1:-1])
    return parts[0] + middle + parts[-1]


def new_id(prefix, hex_digits=17):
    return prefix + secrets.token_hex((hex_digits + 1) // 2)[:hex_digits]


def add(parent, tag, value=None):
    """Appends <tag>value</tag>; None leaves the element empty."""
    el = ET.SubElement(parent, tag)
    if isinstance(value, bool):
        el.text = "true" if value else "false"
    elif value is not None:
        el.text = str(value)
    return el


def wildcard_match(pattern, value):
    # EC2 filters take * and ? as wildcards; fnmatch's [ ] must stay literal
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


class Params:
    """A request's flat query parameters (Filter.1.Value.2=...)."""

    def __init__(self, pairs):
        self.d = dict(pairs)

    def get(self, key, default=None):
        return self.d.get(key, default)

    def required(self, key):
        v = self.d.get(key)
        if v is None or v == "":
            raise Ec2Error("MissingParameter", "The request must contain the parameter %s" % key)
        return v

    def boolean(self, key, default=False):
        v = self.d.get(key)
        if v is None:
            return default
        if v.lower() in ("true", "1"):
            return True
        if v.lower() in ("false", "0"):
            return False
        raise Ec2Error("InvalidParameterValue", "Value (%s) for parameter %s is invalid. "
                       "Expected a boolean." % (v, key))

    def integer(self, key, default=None, lo=None, hi=None):
        v = self.d.get(key)
        if v is None:
            return default
        if not re.fullmatch(r"-?\d{1,12}", v):
            raise Ec2Error("InvalidParameterValue", "Value (%s) for parameter %s is invalid. "
                           "Expected an integer." % (v, key))
        n = int(v)
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            raise Ec2Error("InvalidParameterValue", "Value (%s) for parameter %s is invalid. "
                           "Expected a value from %s to %s." % (v, key, lo, hi))
        return n

    def _indexed(self, prefix):
        out = {}
        pat = re.compile(re.escape(prefix) + r"\.(\d+)(?:\.(.+))?$")
        for k, v in self.d.items():
            m = pat.match(k)
            if m:
                out.setdefault(int(m.group(1)), {})[m.group(2)] = v
        return [out[i] for i in sorted(out)]

    def list(self, prefix):
        """The values of prefix.1, prefix.2, ... in index order."""
        return [item[None] for item in self._indexed(prefix) if None in item]

    def structs(self, prefix):
        """prefix.N.rest=value as one Params per N, in index order."""
        return [Params((k, v) for k, v in item.items() if k is not None)
                for item in self._indexed(prefix)]

    def sub(self, prefix):
        n = len(prefix) + 1
        return Params((k[n:], v) for k, v in self.d.items() if k.startswith(prefix + "."))

    def filters(self):
        out = []
        for f in self.structs("Filter"):
            name = f.get("Name")
            if not name:
                raise Ec2Error("InvalidParameterValue", "A filter has no Name")
            out.append((name, f.list("Value")))
        return out


class _SignedHeadersAuth(SigV4Auth):
    """SigV4 over exactly the headers a request names in SignedHeaders (the
    server's view): botocore's own selection would drop some a client may
    sign, such as user-agent."""

    def headers_to_sign(self, request):
        out = HTTPHeaders()
        for name, value in request.headers.items():
            out[name.lower()] = value
        return out


def _proc_group_alive(pgid):
    """Whether any process other than a zombie is in group pgid (/proc):
    kill(-pgid, 0) also succeeds on zombies nobody reaps."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


MARK = "SPOTLAB_STANDIN_INSTANCE"


def _marked_pids(instance_id):
    """Live processes started on the instance, in any process group: each
    inherits the mark set in its user data's environment (a program that
    moves its children to groups of their own must not outlive the machine)."""
    mark = ("%s=%s" % (MARK, instance_id)).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if mark in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def _killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


SHIM = """#!%(python)s
# %(name)s on a stand-in EC2 instance: asks EC2 to end the instance, as the
# operating system would; the instance's shutdown behavior decides between
# stopped and terminated. `shutdown -c` cancels nothing and succeeds.
import json, sys, urllib.request
if sys.argv[1:2] == ["-c"]:
    sys.exit(0)
req = urllib.request.Request(%(url)r, method="POST",
                             data=json.dumps({"instance": %(instance)r}).encode(),
                             headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=10).read()
except Exception as e:
    print("%(name)s: %%s" %% e, file=sys.stderr)
    sys.exit(1)
"""


# ---------------------------------------------------------------- instances

class Instance:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.state = "pending"
        self.reason = ""            # StateTransitionReason
        self.state_reason = None    # (code, message)
        self.proc = None
        self.pgid = None
        self.exit_code = None
        self.start_error = None
        self.final_state = None
        self.boot_due = None
        self.notice = None          # {"action", "time"}
        self.notice_due = None
        self.rebalance = None
        self.kill_due = None
        self.hide_due = None
        self.visible = True
        self.ended = None
        self.imds = None
        self.imds_tokens = {}
        self.imds_log = []

    def to_json(self):
        return {
            "id": self.id, "reservation": self.reservation_id, "state": self.state,
            "type": self.type, "zone": self.zone, "subnet": self.subnet_id,
            "image": self.image_id, "spot": self.spot, "spot_type": self.spot_type,
            "max_price": self.max_price, "interruption_behavior": self.interruption_behavior,
            "shutdown_behavior": self.shutdown_behavior, "tags": dict(self.tags),
            "client_token": self.client_token, "launch_time": iso_ms(self.launch_time),
            "dir": self.dir, "log": os.path.join(self.dir, "console.log"),
            "imds": self.imds_url, "pid": self.proc.pid if self.proc else None,
            "pgid": self.pgid, "exit_code": self.exit_code, "start_error": self.start_error,
            "notice": self.notice, "rebalance": self.rebalance, "visible": self.visible,
            "state_reason": list(self.state_reason) if self.state_reason else None,
            "imds_requests": list(self.imds_log[-50:]),
        }


class _ImdsHandler(BaseHTTPRequestHandler):
    """One instance's metadata service (IMDSv2 tokens, as EC2 answers)."""
    protocol_version = "HTTP/1.1"
    server_version = "EC2ws"
    timeout = 30

    def log_message(self, fmt, *args):
        pass

    def _reply(self, status, body=b"", ctype="text/plain", extra=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        st, inst = self.server.standin, self.server.instance
        with st.lock:
            inst.imds_log.append({"method": self.command, "path": self.path, "status": status})
            del inst.imds_log[:-200]

    def _drain(self):
        n = self.headers.get("Content-Length")
        if n and n.isdigit() and int(n) <= 65536:
            self.rfile.read(int(n))

    def do_PUT(self):
        self._drain()
        if self.path != "/latest/api/token":
            return self._reply(404, "Not Found")
        if self.headers.get("X-Forwarded-For"):
            return self._reply(403, "Forbidden")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not re.fullmatch(r"\d{1,6}", ttl) or not 1 <= int(ttl) <= IMDS_TTL_MAX_S:
            return self._reply(400, "Bad Request")
        token = secrets.token_urlsafe(36)
        inst = self.server.instance
        with self.server.standin.lock:
            now = time.monotonic()
            inst.imds_tokens = {t: e for t, e in inst.imds_tokens.items() if e > now}
            while len(inst.imds_tokens) >= 64:
                del inst.imds_tokens[min(inst.imds_tokens, key=inst.imds_tokens.get)]
            inst.imds_tokens[token] = now + int(ttl)
        self._reply(200, token, extra=[("X-aws-ec2-metadata-token-ttl-seconds", ttl)])

    def do_GET(self):
        st, inst = self.server.standin, self.server.instance
        token = self.headers.get("X-aws-ec2-metadata-token")
        with st.lock:
            valid = token is not None and inst.imds_tokens.get(token, 0) > time.monotonic()
            if not valid and (token is not None or inst.http_tokens == "required"):
                answer = (401, "Unauthorized", "text/plain")
            else:
                answer = st._imds_answer(inst, urlsplit(self.path).path)
        self._reply(*answer)

    do_HEAD = do_GET

    def do_POST(self):
        self._drain()
        self._reply(405, "Method Not Allowed")


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # a client that hangs up or stalls is its own business, not a fault here
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _ImdsServer(_QuietServer):
    request_queue_size = 64


# ---------------------------------------------------------------- the API server

class _ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "AmazonEC2"
    timeout = 30

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self._handle()

    do_POST = do_GET
    do_PUT = do_GET
    do_DELETE = do_GET

    def _send(self, status, body, ctype, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _handle(self):
        st = self.server.standin
        n = self.headers.get("Content-Length", "0")
        if self.headers.get("Transfer-Encoding") or not n.isdigit() or int(n) > MAX_BODY_BYTES:
            self.close_connection = True
            return self._send(413 if n.isdigit() else 411,
                              st._error_xml("InvalidRequest", "a body needs a Content-Length "
                                            "of at most %d bytes" % MAX_BODY_BYTES, "-"),
                              "text/xml;charset=UTF-8")
        body = self.rfile.read(int(n)) if int(n) else b""
        path = urlsplit(self.path).path
        if path == "/_standin" or path.startswith("/_standin/"):
            status, obj = st.control(self.command, path, self.path, body)
            return self._send(status, (json.dumps(obj) + "\n").encode(), "application/json")
        try:
            status, xml, request_id = st.handle_ec2(self.command, self.path, self.headers, body)
        except Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self._send(status, xml, "text/xml;charset=UTF-8", [("x-amzn-RequestId", request_id)])


class _ApiServer(_QuietServer):
    request_queue_size = 128


class Ec2Standin:
    """EC2 on 127.0.0.1. start() listens (port 0: a free one), stop() ends
    every instance's processes and closes the servers.

    time_scale: EC2 seconds per real second. boot_seconds, grace_seconds
    (SIGTERM to SIGKILL on shutdown), terminated_visible_seconds: EC2
    seconds. prices: {"TYPE": usd, "TYPE/ZONE": usd} over prices_file (the
    csv of ../shared/data/aws: the midpoint of spot_min and spot_max of this
    region's rows) over the catalog's default. session_token: required with
    the access key when given."""

    def __init__(self, state_dir, port=0, time_scale=60.0, boot_seconds=30.0,
                 region="us-east-1", access_key=DEFAULT_ACCESS_KEY,
                 secret_key=DEFAULT_SECRET_KEY, session_token=None, prices=None,
                 prices_file=None, zones="abc", grace_seconds=30.0,
                 terminated_visible_seconds=3600.0):
        if not time_scale or time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        if boot_seconds < 0 or grace_seconds < 0:
            raise ValueError("boot_seconds and grace_seconds must be >= 0")
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region):
            raise ValueError("region %r is not a region name" % region)
        self.state_dir = os.path.abspath(state_dir)
        self.port = port
        self.time_scale = float(time_scale)
        self.boot_seconds = float(boot_seconds)
        self.grace_seconds = float(grace_seconds)
        self.visible_seconds = float(terminated_visible_seconds)
        self.region = region
        self.zones = [region + z for z in zones]
        self.zone_prefix = zone_id_prefix(region)
        self.subnets = {"subnet-%017x" % (i + 1): z for i, z in enumerate(self.zones)}
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.credentials = {access_key: {"secret": secret_key, "token": session_token,
                                         "expired": False}}
        self.instances = {}         # id -> Instance, launch order
        self.reservations = {}      # id -> [instance ids]
        self.client_tokens = {}     # token -> (param digest, reservation id)
        self.calls = []
        self.call_seq = 0
        self.failures = []          # injected errors, in the order they were asked for
        self.failure_seq = 0
        self.denied = set()
        self.scores = {}
        self.on_demand = {t: c[5] for t, c in CATALOG.items()}
        self.start_time = utcnow()
        self.price_hist = {}        # (type, zone) -> [(datetime, price)], oldest first
        self._load_prices(prices_file, prices or {})
        self.httpd = None
        self.stopping = False
        self.threads = []

    # ---------------- prices

    def _load_prices(self, prices_file, table):
        base = {t: round(od * DEFAULT_SPOT_FRACTION, 4) for t, od in self.on_demand.items()}
        if prices_file:
            for t, (od, price) in read_prices_csv(prices_file, self.region).items():
                base[t] = price
                self.on_demand[t] = od
        per_zone = {}
        for key, price in table.items():
            t, _, z = key.partition("/")
            price = _price_value(price)
            if z:
                per_zone[(t, z)] = price
            else:
                base[t] = price
        since = self.start_time - datetime.timedelta(hours=1)
        for t, price in base.items():
            for z in self.zones:
                self.price_hist[(t, z)] = [(since, per_zone.get((t, z), price))]
        for (t, z), price in per_zone.items():
            self.price_hist.setdefault((t, z), [(since, price)])

    def current_price(self, itype, zone):
        hist = self.price_hist.get((itype, zone))
        return hist[-1][1] if hist else None

    def offered_types(self):
        return sorted({t for t, _ in self.price_hist} | set(CATALOG))

    # ---------------- lifecycle

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def control_url(self):
        return self.url + "/_standin"

    def real_s(self, ec2_seconds):
        return ec2_seconds / self.time_scale

    def start(self):
        os.makedirs(os.path.join(self.state_dir, "instances"), exist_ok=True)
        self.httpd = _ApiServer(("127.0.0.1", self.port), _ApiHandler)
        self.httpd.standin = self
        self.port = self.httpd.server_address[1]
        for target in (lambda: self.httpd.serve_forever(poll_interval=0.1), self._clock):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        """Kills every instance's processes (a stand-in that stops takes its
        machines with it) and closes the servers."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            insts = list(self.instances.values())
        for inst in insts:
            with self.lock:
                if self._alive(inst):
                    self._signal(inst, signal.SIGKILL)
            if inst.proc:
                try:
                    inst.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            if inst.imds:
                inst.imds.shutdown()
                inst.imds.server_close()
                inst.imds = None
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
        for t in self.threads:
            t.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---------------- the clock

    def _clock(self):
        with self.cond:
            while not self.stopping:
                now = time.monotonic()
                try:
                    due = self._tick(now)
                except Exception:
                    traceback.print_exc()
                    due = None
                # processes are also watched for exits: a short poll at most
                wait = 0.05 if due is None else min(0.05, max(0.0, due - now))
                self.cond.wait(wait)

    def _tick(self, now):
        dues = []
        for inst in list(self.instances.values()):
            if inst.proc is not None and inst.exit_code is None:
                inst.exit_code = inst.proc.poll()
            if inst.state == "pending" and inst.boot_due is not None:
                if now >= inst.boot_due:
                    self._boot(inst)
                else:
                    dues.append(inst.boot_due)
            if inst.notice_due is not None and inst.state in ("pending", "running"):
                if now >= inst.notice_due:
                    inst.notice_due = None
                    final = "terminated" if inst.interruption_behavior == "terminate" else "stopped"
                    self._begin_shutdown(inst, final, "Server.SpotInstanceTermination",
                                         "Spot instance termination")
                else:
                    dues.append(inst.notice_due)
            if inst.state in ("shutting-down", "stopping"):
                if inst.kill_due is not None and now >= inst.kill_due:
                    inst.kill_due = None
                    if self._alive(inst):
                        self._signal(inst, signal.SIGKILL)
                elif inst.kill_due is not None:
                    dues.append(inst.kill_due)
                if not self._alive(inst):
                    self._finish_shutdown(inst)
            if inst.state == "terminated" and inst.visible and inst.hide_due is not None:
                if now >= inst.hide_due:
                    inst.visible = False
                else:
                    dues.append(inst.hide_due)
        return min(dues) if dues else None

    def _alive(self, inst):
        """Whether the instance's process group has a live member. Only then
        may it be signalled: once empty, its number may be another's."""
        if inst.proc is None:
            return False
        if inst.proc.poll() is None:
            return True
        if inst.exit_code is None:
            inst.exit_code = inst.proc.returncode
        return _proc_group_alive(inst.pgid) or bool(_marked_pids(inst.id))

    def _signal(self, inst, sig):
        """sig to everything running on the instance: its user data's group
        and every process that carries the instance's mark."""
        _killpg(inst.pgid, sig)
        for pid in _marked_pids(inst.id):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _boot(self, inst):
        inst.state = "running"
        inst.boot_due = None
        if not inst.user_data.startswith(b"#!"):
            return      # not a script: nothing on this "machine" runs it
        path = os.path.join(inst.dir, "user-data")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = inst.imds_url
        env[MARK] = inst.id
        env["PATH"] = os.path.join(inst.dir, "bin") + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        log = open(os.path.join(inst.dir, "console.log"), "ab")
        try:
            inst.proc = subprocess.Popen([path], cwd=inst.dir, env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            inst.pgid = inst.proc.pid
        except OSError as e:
            # a script that cannot start leaves the machine running, as on EC2
            inst.start_error = str(e)
            log.write(("user data did not start: %s\n" % e).encode())
        finally:
            log.close()

    def _begin_shutdown(self, inst, final, code, message, hard=False):
        """Moves a live instance towards `final` (terminated or stopped):
        SIGTERM to its process group now (SIGKILL when hard), SIGKILL after
        the grace; the state settles once the group is gone."""
        inst.state = "shutting-down" if final == "terminated" else "stopping"
        inst.final_state = final
        inst.state_reason = (code, "%s: %s" % (code, message))
        when = utcnow().strftime("%Y-%m-%d %H:%M:%S GMT")
        inst.reason = ("User initiated (%s)" % when if code.startswith("Client.User")
                       else "Service initiated (%s)" % when if code.startswith("Server.")
                       else "Instance initiated (%s)" % when)
        inst.boot_due = None
        inst.notice_due = None
        if self._alive(inst):
            self._signal(inst, signal.SIGKILL if hard else signal.SIGTERM)
            inst.kill_due = None if hard else time.monotonic() + self.real_s(self.grace_seconds)
        self.cond.notify_all()

    def _finish_shutdown(self, inst):
        inst.state = inst.final_state
        inst.ended = utcnow()
        inst.kill_due = None
        if inst.state == "terminated":
            inst.hide_due = time.monotonic() + self.real_s(self.visible_seconds)
        srv, inst.imds = inst.imds, None
        if srv:
            # shutdown() waits for the server's loop: never under the lock
            threading.Thread(target=lambda: (srv.shutdown(), srv.server_close()),
                             daemon=True).start()

    # ---------------- the metadata service

    def _imds_answer(self, inst, path):
        """(status, body, content type) for a GET with a good token; called
        under the lock."""
        text = "text/plain"
        meta = {
            "ami-id": inst.image_id, "instance-id": inst.id, "instance-type": inst.type,
            "local-ipv4": inst.private_ip, "hostname": inst.private_dns,
            "local-hostname": inst.private_dns, "reservation-id": inst.reservation_id,
            "instance-life-cycle": "spot" if inst.spot else "on-demand",
            "placement/availability-zone": inst.zone,
            "placement/availability-zone-id": self._zone_id(inst.zone),
            "placement/region": self.region,
        }
        if path == "/latest/user-data":
            if not inst.user_data:
                return 404, "Not Found", text
            return 200, inst.user_data, "application/octet-stream"
        if path == "/latest/dynamic/instance-identity/document":
            doc = {"accountId": OWNER_ID, "architecture": "x86_64",
                   "availabilityZone": inst.zone, "imageId": inst.image_id,
                   "instanceId": inst.id, "instanceType": inst.type,
                   "pendingTime": iso_s(inst.launch_time), "privateIp": inst.private_ip,
                   "region": self.region, "version": "2017-09-30"}
            return 200, json.dumps(doc, indent=2), "application/json"
        if not path.startswith("/latest/meta-data"):
            return 404, "Not Found", text
        key = path[len("/latest/meta-data"):].strip("/")
        if key in meta:
            return 200, meta[key], text
        if key in ("spot/instance-action", "spot/termination-time"):
            if not inst.notice:
                return 404, "Not Found", text
            if key == "spot/termination-time":
                return 200, inst.notice["time"], text
            return 200, json.dumps(inst.notice, separators=(",", ":")), text
        if key == "events/recommendations/rebalance":
            if not inst.rebalance:
                return 404, "Not Found", text
            return 200, json.dumps({"noticeTime": inst.rebalance}), text
        if key.startswith("tags/instance") and inst.metadata_tags:
            name = key[len("tags/instance"):].strip("/")
            if not name:
                return 200, "\n".join(inst.tags), text
            if name in inst.tags:
                return 200, inst.tags[name], text
            return 404, "Not Found", text
        listing = {"": ["ami-id", "events/", "hostname", "instance-id", "instance-life-cycle",
                        "instance-type", "local-hostname", "local-ipv4", "placement/",
                        "reservation-id"] + (["spot/"] if inst.notice else []),
                   "placement": ["availability-zone", "availability-zone-id", "region"],
                   "spot": ["instance-action", "termination-time"] if inst.notice else None,
                   "events": ["recommendations/"], "events/recommendations": ["rebalance"]}
        if listing.get(key):
            return 200, "\n".join(listing[key]), text
        return 404, "Not Found", text

    def _zone_id(self, zone):
        region = zone[:-1]
        letter = zone[-1]
        return "%s-az%d" % (zone_id_prefix(region), ord(letter) - ord("a") + 1)

    # ---------------- requests

    def handle_ec2(self, method, raw_path, headers, body):
        """One EC2 request: (status, XML bytes, request id); raises Dropped
        when an injected failure drops the connection."""
        request_id = str(uuid.uuid4())
        call = {"seq": 0, "time": time.time(), "action": None, "params": {},
                "signature_ok": False, "access_key": None, "code": None, "status": None,
                "request_id": request_id}
        with self.lock:
            self.call_seq += 1
            call["seq"] = self.call_seq
            self.calls.append(call)
            del self.calls[:-MAX_CALLS]
        try:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                raise Ec2Error("MalformedQueryString", "The body is not UTF-8")
            pairs = parse_qsl(urlsplit(raw_path).query, keep_blank_values=True)
            if method == "POST":
                pairs += parse_qsl(text, keep_blank_values=True)
            params = Params(pairs)
            action = params.get("Action")
            call["action"] = action
            call["params"] = {k: v for k, v in params.d.items() if k not in ("Action", "Version")}
            when = self._check_signature(method, raw_path, headers, body, call)
            call["signature_ok"] = True
            # a good signature on a stale request: refused, but not forged
            if abs((utcnow() - when).total_seconds()) > MAX_SKEW_S:
                raise Ec2Error("RequestExpired", "Request has expired. Timestamp date is %s"
                               % headers.get("X-Amz-Date"))
            with self.lock:
                self._check_credentials(call["access_key"])
                if not action:
                    raise Ec2Error("MissingAction", "The request must contain the parameter Action")
                fn = getattr(self, "_a_" + action, None)
                if fn is None:
                    raise Ec2Error("InvalidAction", "The action %s is not valid for this web "
                                   "service." % action)
                version = params.get("Version")
                if not version:
                    raise Ec2Error("MissingParameter", "The request must contain the parameter "
                                   "Version")
                if version != API_VERSION:
                    raise Ec2Error("NoSuchVersion", "An invalid version was specified: %s "
                                   "(this endpoint speaks %s)" % (version, API_VERSION))
                self._inject(action, early=True)
                if action in self.denied:
                    raise Ec2Error("UnauthorizedOperation", "You are not authorized to perform "
                                   "this operation. User: arn:aws:iam::%s:user/spotlab-test is "
                                   "not authorized to perform: ec2:%s" % (OWNER_ID, action))
                root = ET.Element(action + "Response", xmlns=XMLNS)
                add(root, "requestId", request_id)
                fn(params, root)
            call["code"], call["status"] = "OK", 200
            return 200, self._xml(root), request_id
        except Dropped:
            call["code"], call["status"] = "drop", 0
            raise
        except Ec2Error as e:
            call["code"], call["status"] = e.code, e.status
            return e.status, self._error_xml(e.code, e.message, request_id), request_id
        except Exception:
            traceback.print_exc()
            call["code"], call["status"] = "InternalError", 500
            return 500, self._error_xml("InternalError", "An internal error has occurred.",
                                        request_id), request_id

    @staticmethod
    def _xml(root):
        return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")

    def _error_xml(self, code, message, request_id):
        root = ET.Element("Response")
        err = ET.SubElement(ET.SubElement(root, "Errors"), "Error")
        add(err, "Code", code)
        add(err, "Message", message)
        add(root, "RequestID", request_id)
        return self._xml(root)

    def _check_signature(self, method, raw_path, headers, body, call):
        """Checks the SigV4 Authorization header against the known
        credentials; returns the request's X-Amz-Date as a datetime."""
        auth = headers.get("Authorization")
        if not auth:
            raise Ec2Error("AuthFailure", "AWS was not able to validate the provided access "
                           "credentials (the request is not signed)")
        m = re.fullmatch(r"AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)"
                         r"\s*,\s*Signature=([0-9a-f]{64})\s*", auth)
        if not m:
            raise Ec2Error("AuthFailure", "AWS was not able to validate the provided access "
                           "credentials (the Authorization header is not AWS4-HMAC-SHA256)")
        scope, signed, signature = m.groups()
        parts = scope.split("/")
        if len(parts) != 5:
            raise Ec2Error("AuthFailure", "The credential scope %r is malformed" % scope)
        akid, day, region, service, term = parts
        call["access_key"] = akid
        with self.lock:
            cred = dict(self.credentials.get(akid) or {})
        if not cred:
            raise Ec2Error("AuthFailure", "AWS was not able to validate the provided access "
                           "credentials")
        if region != self.region or service != "ec2" or term != "aws4_request":
            raise Ec2Error("AuthFailure", "Credential should be scoped to a valid region, "
                           "service ec2 and aws4_request, not '%s/%s/%s'" % (region, service, term))
        amz_date = headers.get("X-Amz-Date", "")
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
                tzinfo=datetime.timezone.utc)
        except ValueError:
            raise Ec2Error("AuthFailure", "The request needs an X-Amz-Date header "
                           "(YYYYMMDDTHHMMSSZ)")
        names = signed.split(";")
        if "host" not in names or "x-amz-date" not in names:
            raise Ec2Error("AuthFailure", "SignedHeaders must include host and x-amz-date")
        sent = HTTPHeaders()
        for name in names:
            values = headers.get_all(name)
            if not values:
                raise Ec2Error("SignatureDoesNotMatch", "The signed header %s is missing" % name)
            for v in values:
                sent[name] = v
        request = AWSRequest(method=method, url="http://%s%s" % (headers.get("Host"), raw_path),
                             data=body)
        request.headers = sent
        request.context["timestamp"] = amz_date
        signer = _SignedHeadersAuth(Credentials(akid, cred["secret"], cred["token"]), "ec2",
                                    self.region)
        expected = signer.signature(signer.string_to_sign(
            request, signer.canonical_request(request)), request)
        if day != amz_date[:8] or not hmac.compare_digest(expected, signature):
            raise Ec2Error("SignatureDoesNotMatch", "The request signature we calculated does "
                           "not match the signature you provided. Check your AWS Secret Access "
                           "Key and signing method. Consult the service documentation for "
                           "details.")
        declared = headers.get("X-Amz-Content-SHA256")
        if declared is not None and declared != hashlib.sha256(body).hexdigest():
            raise Ec2Error("SignatureDoesNotMatch", "The X-Amz-Content-SHA256 header does not "
                           "match the body")
        token = headers.get("X-Amz-Security-Token")
        if cred["token"] is not None and token != cred["token"]:
            raise Ec2Error("AuthFailure", "The security token included in the request is invalid")
        if cred["token"] is None and token is not None:
            raise Ec2Error("AuthFailure", "The security token included in the request is invalid")
        return when

    def _check_credentials(self, akid):
        if self.credentials[akid]["expired"]:
            raise Ec2Error("ExpiredToken")

    # ---------------- injected failures

    def _inject(self, action, early, itype=None, zone=None):
        for f in list(self.failures):
            if (f["code"] in EARLY_CODES) != early:
                continue
            if f["action"] not in ("*", action):
                continue
            if f["type"] and f["type"] != itype:
                continue
            if f["zone"] and f["zone"] != zone:
                continue
            if f["count"] > 0:
                f["count"] -= 1
                if f["count"] == 0:
                    self.failures.remove(f)
            f["fired"] += 1
            if f["code"] == "drop":
                raise Dropped()
            raise Ec2Error(f["code"], f["message"] or self._default_message(f["code"], itype, zone),
                           f["status"])

    def _would_fail(self, action, itype, zone):
        return any(f["code"] not in EARLY_CODES and f["action"] in ("*", action)
                   and (not f["type"] or f["type"] == itype) and (not f["zone"] or f["zone"] == zone)
                   for f in self.failures)

    def _default_message(self, code, itype, zone):
        if code == "InsufficientInstanceCapacity":
            others = [z for z in self.zones if z != zone]
            return ("We currently do not have sufficient %s capacity in the Availability Zone "
                    "you requested (%s). Our system will be working on provisioning additional "
                    "capacity. You can currently get %s capacity by not specifying an "
                    "Availability Zone in your request or choosing %s."
                    % (itype, zone, itype, ", ".join(others)))
        return DEFAULT_MESSAGES.get(code, code)

    def _dry_run(self, p):
        if p.boolean("DryRun"):
            raise Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag "
                           "is set.")

    # ---------------- pagination

    @staticmethod
    def _page(items, p, lo, hi, default_max=None):
        """(this page, next token or None). The token names the offset and
        the request it belongs to."""
        max_results = p.integer("MaxResults", None, lo, hi)
        digest = hashlib.sha256(json.dumps(sorted(
            (k, v) for k, v in p.d.items()
            if k not in ("NextToken", "MaxResults", "Action", "Version"))).encode()).hexdigest()[:16]
        start = 0
        token = p.get("NextToken")
        if token:
            try:
                doc = json.loads(base64.urlsafe_b64decode(token.encode()))
                start = int(doc["o"])
                if doc["k"] != digest or start < 0:
                    raise ValueError
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise Ec2Error("InvalidPaginationToken", "The pagination token is not valid "
                               "for this request")
        size = max_results or default_max
        if size is None:
            return items[start:], None
        page = items[start:start + size]
        if start + size >= len(items):
            return page, None
        nxt = base64.urlsafe_b64encode(json.dumps({"o": start + size, "k": digest}).encode())
        return page, nxt.decode()

    # ---------------- actions

    def _a_RunInstances(self, p, root):
        if p.sub("LaunchTemplate").d:
            raise Ec2Error("Unsupported", "Launch templates are not simulated by this endpoint")
        image = self._image(p.required("ImageId"))
        itype = p.get("InstanceType")
        if not itype:
            raise Ec2Error("MissingParameter", "The request must contain the parameter "
                           "InstanceType")
        if itype not in self.offered_types():
            raise Ec2Error("InvalidParameterValue", "Invalid value '%s' for InstanceType." % itype)
        min_count = p.integer("MinCount", None, 1, 1000)
        max_count = p.integer("MaxCount", None, 1, 1000)
        if min_count is None or max_count is None:
            raise Ec2Error("MissingParameter", "The request must contain the parameters MinCount "
                           "and MaxCount")
        if min_count > max_count:
            raise Ec2Error("InvalidParameterValue", "MinCount (%d) is greater than MaxCount (%d)"
                           % (min_count, max_count))
        zone = p.get("Placement.AvailabilityZone") or None
        if zone is not None and zone not in self.zones:
            raise Ec2Error("InvalidParameterValue", "Invalid availability zone: [%s]" % zone)
        subnet = p.get("SubnetId") or None
        if subnet is not None:
            if subnet not in self.subnets:
                raise Ec2Error("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist"
                               % subnet)
            if zone is not None and self.subnets[subnet] != zone:
                raise Ec2Error("InvalidParameterValue", "The subnet %s is in %s, not in the "
                               "requested Availability Zone %s" % (subnet, self.subnets[subnet],
                                                                  zone))
            zone = self.subnets[subnet]
        user_data = b""
        if p.get("UserData"):
            try:
                user_data = base64.b64decode(p.get("UserData"), validate=True)
            except (binascii.Error, ValueError):
                raise Ec2Error("InvalidParameterValue", "Invalid BASE64 encoding of user data.")
            if len(user_data) > MAX_USER_DATA_BYTES:
                raise Ec2Error("InvalidParameterValue", "User data is limited to %d bytes."
                               % MAX_USER_DATA_BYTES)
        spot, spot_type, behavior, max_price = self._market_options(p, itype)
        shutdown = p.get("InstanceInitiatedShutdownBehavior", "stop")
        if shutdown not in ("stop", "terminate"):
            raise Ec2Error("InvalidParameterValue", "Value (%s) for parameter "
                           "instanceInitiatedShutdownBehavior is invalid." % shutdown)
        tags = self._tag_specs(p)
        profile = self._iam_profile(p)
        groups = p.list("SecurityGroupId")
        for g in groups:
            if not re.fullmatch(r"sg-[0-9a-f]{8,17}", g):
                raise Ec2Error("InvalidGroupId.Malformed", "Invalid id: \"%s\"" % g)
        http_tokens = p.get("MetadataOptions.HttpTokens", "required")
        metadata_tags = p.get("MetadataOptions.InstanceMetadataTags", "disabled")
        if http_tokens not in ("required", "optional") or metadata_tags not in ("enabled",
                                                                                 "disabled"):
            raise Ec2Error("InvalidParameterValue", "MetadataOptions: HttpTokens is required or "
                           "optional, InstanceMetadataTags enabled or disabled")
        token = p.get("ClientToken")
        if token is not None and (len(token) > 64 or not token.isascii() or not token):
            raise Ec2Error("InvalidParameterValue", "ClientToken is 1 to 64 ASCII characters")
        self._dry_run(p)
        digest = hashlib.sha256(json.dumps(sorted(
            (k, v) for k, v in p.d.items()
            if k not in ("ClientToken", "DryRun", "Action", "Version"))).encode()).hexdigest()
        if token is not None and token in self.client_tokens:
            seen_digest, rid = self.client_tokens[token]
            if seen_digest != digest:
                raise Ec2Error("IdempotentParameterMismatch", "The client token %s was used with "
                               "a different request" % token)
            return self._reservation_xml(root, rid, self.reservations[rid], top=True)
        if zone is None:
            zone = self._choose_zone(itype, max_price if spot else None)
        if spot:
            price = self.current_price(itype, zone)
            if price is not None and max_price < price:
                raise Ec2Error("SpotMaxPriceTooLow", "Your Spot request price of %s is lower "
                               "than the minimum required Spot request fulfillment price of %s."
                               % (_fmt_price(max_price), _fmt_price(price)))
        self._inject("RunInstances", early=False, itype=itype, zone=zone)
        live = sum(1 for i in self.instances.values() if i.state != "terminated")
        if live + max_count > MAX_LIVE_INSTANCES:
            raise Ec2Error("InstanceLimitExceeded", "You have requested more instances (%d) than "
                           "your current instance limit of %d allows."
                           % (live + max_count, MAX_LIVE_INSTANCES))
        if subnet is None:
            subnet = next(s for s, z in self.subnets.items() if z == zone)
        rid = new_id("r-")
        ids = []
        for index in range(max_count):
            inst = self._new_instance(
                reservation_id=rid, image_id=image, type=itype, zone=zone, subnet_id=subnet,
                spot=spot, spot_type=spot_type, interruption_behavior=behavior,
                max_price=max_price if spot else None, shutdown_behavior=shutdown,
                tags=dict(tags), user_data=user_data, iam_profile=profile,
                security_groups=groups or ["sg-%017x" % 1], client_token=token or "",
                launch_index=index, http_tokens=http_tokens,
                metadata_tags=metadata_tags == "enabled")
            ids.append(inst.id)
        self.reservations[rid] = ids
        if token is not None:
            self.client_tokens[token] = (digest, rid)
        self.cond.notify_all()
        self._reservation_xml(root, rid, ids, top=True)

    def _image(self, image):
        if image.startswith("resolve:ssm:"):
            name = image[len("resolve:ssm:"):]
            if not re.fullmatch(r"/?[A-Za-z0-9_.\-/]{1,1011}(:\d+)?", name):
                raise Ec2Error("InvalidParameterValue", "Invalid SSM parameter name in ImageId: "
                               "%s" % name)
            return "ami-" + hashlib.sha256(name.encode()).hexdigest()[:17]
        if not re.fullmatch(r"ami-([0-9a-f]{8}|[0-9a-f]{17})", image):
            raise Ec2Error("InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")"
                           % image)
        return image

    def _market_options(self, p, itype):
        market = p.get("InstanceMarketOptions.MarketType")
        if market is None:
            if p.sub("InstanceMarketOptions").d:
                raise Ec2Error("MissingParameter", "InstanceMarketOptions needs MarketType")
            return False, None, None, None
        if market == "capacity-block":
            raise Ec2Error("Unsupported", "Capacity Blocks are not simulated by this endpoint")
        if market != "spot":
            raise Ec2Error("InvalidParameterValue", "Invalid MarketType: %s" % market)
        so = p.sub("InstanceMarketOptions.SpotOptions")
        spot_type = so.get("SpotInstanceType", "one-time")
        behavior = so.get("InstanceInterruptionBehavior", "terminate")
        if spot_type not in ("one-time", "persistent"):
            raise Ec2Error("InvalidParameterValue", "Invalid SpotInstanceType: %s" % spot_type)
        if behavior not in ("terminate", "stop", "hibernate"):
            raise Ec2Error("InvalidParameterValue", "Invalid InstanceInterruptionBehavior: %s"
                           % behavior)
        if spot_type == "one-time" and behavior != "terminate":
            raise Ec2Error("InvalidParameterCombination", "An interruption behavior of %s needs "
                           "a persistent Spot request" % behavior)
        od = self.on_demand.get(itype) or 3 * (self.current_price(itype, self.zones[0]) or 1.0)
        max_price = od
        if so.get("MaxPrice") is not None:
            max_price = _price_param(so.get("MaxPrice"))
        return True, spot_type, behavior, max_price

    def _tag_specs(self, p):
        tags = {}
        for spec in p.structs("TagSpecification"):
            rtype = spec.get("ResourceType")
            if rtype not in ("instance", "volume", "network-interface", "spot-instances-request"):
                raise Ec2Error("InvalidParameterValue", "'%s' is not a valid taggable resource "
                               "type for this operation." % rtype)
            these = self._tags(spec.structs("Tag"))
            if rtype == "instance":
                tags.update(these)
        return tags

    @staticmethod
    def _tags(items, need_value=True):
        tags = {}
        for t in items:
            key = t.get("Key")
            if not key or len(key) > 128 or key.lower().startswith("aws:"):
                raise Ec2Error("InvalidParameterValue", "Tag key %r is empty, longer than 128 "
                               "characters or reserved (aws:)" % key)
            value = t.get("Value", "")
            if len(value) > 256:
                raise Ec2Error("InvalidParameterValue", "Tag value of %s is longer than 256 "
                               "characters" % key)
            if key in tags:
                raise Ec2Error("InvalidParameterValue", "Duplicate tag key '%s' specified." % key)
            tags[key] = value
        if len(tags) > 50:
            raise Ec2Error("TagLimitExceeded", "The maximum number of tags per resource is 50")
        return tags

    @staticmethod
    def _iam_profile(p):
        arn, name = p.get("IamInstanceProfile.Arn"), p.get("IamInstanceProfile.Name")
        if arn and name:
            raise Ec2Error("InvalidParameterCombination", "The parameter 'iamInstanceProfile.name'"
                           " may not be used in combination with 'iamInstanceProfile.arn'")
        if name:
            arn = "arn:aws:iam::%s:instance-profile/%s" % (OWNER_ID, name)
        if arn and not arn.startswith("arn:aws:iam::"):
            raise Ec2Error("InvalidParameterValue", "Value (%s) for parameter "
                           "iamInstanceProfile.arn is invalid." % arn)
        return arn

    def _choose_zone(self, itype, max_price):
        """The zone EC2 picks when the request names none: one with capacity
        (no injected failure) and, for spot, a price under the maximum."""
        def ok(z):
            price = self.current_price(itype, z)
            return (not self._would_fail("RunInstances", itype, z)
                    and (max_price is None or price is None or price <= max_price))
        return next((z for z in self.zones if ok(z)), self.zones[0])

    def _new_instance(self, **kw):
        iid = new_id("i-")
        while iid in self.instances:
            iid = new_id("i-")
        zone_index = self.zones.index(kw["zone"])
        host = (len(self.instances) % 250) + 4
        ip = "10.0.%d.%d" % (zone_index, host)
        suffix = "ec2.internal" if self.region == "us-east-1" else self.region + ".compute.internal"
        folder = os.path.join(self.state_dir, "instances", iid)
        os.makedirs(os.path.join(folder, "bin"), mode=0o700)
        inst = Instance(id=iid, dir=folder, private_ip=ip,
                        private_dns="ip-%s.%s" % (ip.replace(".", "-"), suffix),
                        vpc_id="vpc-%017x" % 1, launch_time=utcnow(),
                        spot_request_id=("sir-" + secrets.token_hex(4)) if kw["spot"] else None,
                        **kw)
        with open(os.path.join(folder, "user-data"), "wb") as f:
            f.write(kw["user_data"])
        os.chmod(os.path.join(folder, "user-data"), 0o700)
        for name in ("shutdown", "poweroff", "halt"):
            shim = os.path.join(folder, "bin", name)
            with open(shim, "w") as f:
                f.write(SHIM % {"python": sys.executable or "/usr/bin/python3", "name": name,
                                "url": self.control_url + "/shutdown", "instance": iid})
            os.chmod(shim, stat.S_IRWXU)
        srv = _ImdsServer(("127.0.0.1", 0), _ImdsHandler)
        srv.standin, srv.instance = self, inst
        inst.imds = srv
        inst.imds_url = "http://127.0.0.1:%d" % srv.server_address[1]
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True).start()
        inst.boot_due = time.monotonic() + self.real_s(self.boot_seconds)
        self.instances[iid] = inst
        return inst

    def _reservation_xml(self, parent, rid, ids, top=False):
        res = parent if top else ET.SubElement(parent, "item")
        add(res, "reservationId", rid)
        add(res, "ownerId", OWNER_ID)
        add(res, "groupSet")
        items = add(res, "instancesSet")
        for iid in ids:
            self._instance_xml(items, self.instances[iid])

    def _instance_xml(self, parent, inst):
        it = ET.SubElement(parent, "item")
        add(it, "instanceId", inst.id)
        add(it, "imageId", inst.image_id)
        st = add(it, "instanceState")
        add(st, "code", STATE_CODES[inst.state])
        add(st, "name", inst.state)
        add(it, "privateDnsName", inst.private_dns if inst.state != "terminated" else "")
        add(it, "dnsName", "")
        add(it, "reason", inst.reason)
        add(it, "amiLaunchIndex", inst.launch_index)
        add(it, "productCodes")
        add(it, "instanceType", inst.type)
        add(it, "launchTime", iso_ms(inst.launch_time))
        pl = add(it, "placement")
        add(pl, "availabilityZone", inst.zone)
        add(pl, "groupName", "")
        add(pl, "tenancy", "default")
        add(add(it, "monitoring"), "state", "disabled")
        if inst.state != "terminated":
            add(it, "subnetId", inst.subnet_id)
            add(it, "vpcId", inst.vpc_id)
            add(it, "privateIpAddress", inst.private_ip)
        add(it, "sourceDestCheck", True)
        gs = add(it, "groupSet")
        for g in inst.security_groups:
            add(add(gs, "item"), "groupId", g)
        if inst.state_reason:
            sr = add(it, "stateReason")
            add(sr, "code", inst.state_reason[0])
            add(sr, "message", inst.state_reason[1])
        add(it, "architecture", "x86_64")
        add(it, "rootDeviceType", "ebs")
        add(it, "rootDeviceName", "/dev/xvda")
        add(it, "blockDeviceMapping")
        add(it, "virtualizationType", "hvm")
        add(it, "clientToken", inst.client_token)
        if inst.tags:
            ts = add(it, "tagSet")
            for k, v in inst.tags.items():
                item = add(ts, "item")
                add(item, "key", k)
                add(item, "value", v)
        add(it, "hypervisor", "xen")
        if inst.spot:
            add(it, "instanceLifecycle", "spot")
            add(it, "spotInstanceRequestId", inst.spot_request_id)
        if inst.iam_profile:
            ip = add(it, "iamInstanceProfile")
            add(ip, "arn", inst.iam_profile)
            add(ip, "id", "AIPA" + hashlib.sha256(inst.iam_profile.encode()).hexdigest()[:17]
                .upper())
        add(it, "ebsOptimized", False)
        add(it, "enaSupport", True)
        mo = add(it, "metadataOptions")
        add(mo, "state", "applied")
        add(mo, "httpTokens", inst.http_tokens)
        add(mo, "httpPutResponseHopLimit", 2)
        add(mo, "httpEndpoint", "enabled")
        add(mo, "instanceMetadataTags", "enabled" if inst.metadata_tags else "disabled")

    def _lookup(self, ids):
        for iid in ids:
            if not re.fullmatch(r"i-([0-9a-f]{8}|[0-9a-f]{17})", iid):
                raise Ec2Error("InvalidInstanceID.Malformed", "Invalid id: \"%s\"" % iid)
        missing = [i for i in ids if i not in self.instances or not self.instances[i].visible]
        if missing:
            raise Ec2Error("InvalidInstanceID.NotFound", "The instance ID%s '%s' do%s not exist"
                           % ("s" if len(missing) > 1 else "", ", ".join(missing),
                              "" if len(missing) > 1 else "es"))
        return [self.instances[i] for i in ids]

    def _a_DescribeInstances(self, p, root):
        ids = p.list("InstanceId")
        filters = p.filters()
        if ids and p.get("MaxResults") is not None:
            raise Ec2Error("InvalidParameterCombination", "The parameter instancesSet cannot be "
                           "used with the parameter maxResults")
        tests = [self._instance_filter(name, values) for name, values in filters]
        self._dry_run(p)
        self._inject("DescribeInstances", early=False)
        chosen = (self._lookup(ids) if ids
                  else [i for i in self.instances.values() if i.visible])
        chosen = [i for i in chosen if all(t(i) for t in tests)]
        page, nxt = self._page(chosen, p, 5, 1000)
        rs = add(root, "reservationSet")
        i = 0
        while i < len(page):
            j = i
            while j < len(page) and page[j].reservation_id == page[i].reservation_id:
                j += 1
            self._reservation_xml(rs, page[i].reservation_id, [x.id for x in page[i:j]])
            i = j
        if nxt:
            add(root, "nextToken", nxt)

    def _instance_filter(self, name, values):
        def match(v):
            return v is not None and any(wildcard_match(pat, str(v)) for pat in values)
        fields = {
            "instance-state-name": lambda i: i.state,
            "instance-state-code": lambda i: STATE_CODES[i.state],
            "instance-id": lambda i: i.id,
            "instance-type": lambda i: i.type,
            "availability-zone": lambda i: i.zone,
            "image-id": lambda i: i.image_id,
            "subnet-id": lambda i: i.subnet_id,
            "client-token": lambda i: i.client_token,
            "reservation-id": lambda i: i.reservation_id,
            "instance-lifecycle": lambda i: "spot" if i.spot else None,
            "spot-instance-request-id": lambda i: i.spot_request_id,
        }
        if name.startswith("tag:"):
            key = name[4:]
            return lambda i: match(i.tags.get(key))
        if name == "tag-key":
            return lambda i: any(match(k) for k in i.tags)
        if name == "tag-value":
            return lambda i: any(match(v) for v in i.tags.values())
        if name not in fields:
            raise Ec2Error("InvalidParameterValue", "The filter '%s' is invalid" % name)
        get = fields[name]
        return lambda i: match(get(i))

    def _a_TerminateInstances(self, p, root):
        ids = p.list("InstanceId")
        if not ids:
            raise Ec2Error("MissingParameter", "The request must contain the parameter InstanceId")
        insts = self._lookup(ids)
        self._dry_run(p)
        self._inject("TerminateInstances", early=False)
        out = add(root, "instancesSet")
        for inst in insts:
            before = inst.state
            if inst.state in ("pending", "running", "stopping", "stopped"):
                self._begin_shutdown(inst, "terminated", "Client.UserInitiatedShutdown",
                                     "User initiated shutdown")
            it = add(out, "item")
            add(it, "instanceId", inst.id)
            cur = add(it, "currentState")
            add(cur, "code", STATE_CODES[inst.state])
            add(cur, "name", inst.state)
            prev = add(it, "previousState")
            add(prev, "code", STATE_CODES[before])
            add(prev, "name", before)

    def _a_CreateTags(self, p, root):
        resources = p.list("ResourceId")
        if not resources:
            raise Ec2Error("MissingParameter", "The request must contain the parameter ResourceId")
        tags = self._tags(p.structs("Tag"))
        if not tags:
            raise Ec2Error("MissingParameter", "The request must contain the parameter Tag")
        for r in resources:
            if not re.fullmatch(r"[a-z]+-[0-9a-z]{8,17}", r):
                raise Ec2Error("InvalidID", "The ID '%s' is not valid" % r)
        insts = self._lookup([r for r in resources if r.startswith("i-")])
        self._dry_run(p)
        self._inject("CreateTags", early=False)
        for inst in insts:
            merged = dict(inst.tags)
            merged.update(tags)
            if len(merged) > 50:
                raise Ec2Error("TagLimitExceeded", "The maximum number of tags per resource is 50")
        for inst in insts:
            inst.tags.update(tags)
        add(root, "return", True)

    def _a_DescribeSpotPriceHistory(self, p, root):
        types = p.list("InstanceType")
        offered = self.offered_types()
        unknown = [t for t in types if t not in offered]
        if unknown:
            raise Ec2Error("InvalidParameterValue", "The following supplied instance types do "
                           "not exist: [%s]" % ", ".join(unknown))
        products = p.list("ProductDescription") or ["Linux/UNIX"]
        zone = p.get("AvailabilityZone")
        start, end = p.get("StartTime"), p.get("EndTime")
        start = self._time_param("StartTime", start)
        end = self._time_param("EndTime", end)
        if start and end and start > end:
            raise Ec2Error("InvalidParameterValue", "StartTime is after EndTime")
        filters = p.filters()
        for name, _ in filters:
            if name not in ("availability-zone", "instance-type", "product-description"):
                raise Ec2Error("InvalidParameterValue", "The filter '%s' is invalid" % name)
        self._dry_run(p)
        self._inject("DescribeSpotPriceHistory", early=False)
        rows = []
        for t in types or offered:
            for z in self.zones:
                if zone and z != zone:
                    continue
                hist = self.price_hist.get((t, z), [])
                picked = [h for h in hist if (start is None or h[0] >= start)
                          and (end is None or h[0] <= end)]
                before = [h for h in hist if start is not None and h[0] < start
                          and (end is None or h[0] <= end)]
                if before:
                    picked.insert(0, before[-1])
                for prod in products:
                    if prod not in LINUX_PRODUCTS:
                        continue
                    for when, price in picked:
                        row = {"availability-zone": z, "instance-type": t,
                               "product-description": prod, "time": when, "price": price}
                        if all(any(wildcard_match(v, row[n]) for v in vals)
                               for n, vals in filters):
                            rows.append(row)
        rows.sort(key=lambda r: (-r["time"].timestamp(), r["instance-type"],
                                 r["availability-zone"], r["product-description"]))
        page, nxt = self._page(rows, p, 5, 1000, default_max=1000)
        out = add(root, "spotPriceHistorySet")
        for r in page:
            it = add(out, "item")
            add(it, "instanceType", r["instance-type"])
            add(it, "productDescription", r["product-description"])
            add(it, "spotPrice", _fmt_price(r["price"]))
            add(it, "timestamp", iso_ms(r["time"]))
            add(it, "availabilityZone", r["availability-zone"])
        add(root, "nextToken", nxt or "")

    @staticmethod
    def _time_param(name, value):
        if value is None:
            return None
        t = parse_time(value)
        if t is None:
            raise Ec2Error("InvalidParameterValue", "Value (%s) for parameter %s is invalid."
                           % (value, name))
        return t

    def _a_GetSpotPlacementScores(self, p, root):
        types = p.list("InstanceType")
        reqs = p.sub("InstanceRequirementsWithMetadata").d
        capacity = p.get("TargetCapacity")
        if capacity is None:
            raise Ec2Error("MissingParameter", "The request must contain the parameter "
                           "TargetCapacity")
        p.integer("TargetCapacity", None, 1, 2000000000)
        if types and reqs:
            raise Ec2Error("InvalidParameterCombination", "InstanceTypes cannot be used with "
                           "InstanceRequirementsWithMetadata")
        if not types and not reqs:
            raise Ec2Error("MissingParameter", "The request must name InstanceTypes or "
                           "InstanceRequirementsWithMetadata")
        # EC2 scores only a choice among several types: fewer than three is refused
        if types and len(set(types)) < 3:
            raise Ec2Error("InvalidParameterValue", "At least 3 instance types are needed to "
                           "calculate a Spot placement score; %d given" % len(set(types)))
        unit = p.get("TargetCapacityUnitType", "units")
        if unit not in ("units", "vcpu", "memory-mib"):
            raise Ec2Error("InvalidParameterValue", "Invalid TargetCapacityUnitType: %s" % unit)
        single = p.boolean("SingleAvailabilityZone")
        regions = p.list("RegionName") or [self.region] + [r for r in OTHER_REGIONS
                                                           if r != self.region]
        for r in regions:
            if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", r):
                raise Ec2Error("InvalidParameterValue", "Invalid region name: %s" % r)
        self._dry_run(p)
        self._inject("GetSpotPlacementScores", early=False)
        rows = []
        for r in regions:
            zones = [r + z for z in "abc"] if r != self.region else self.zones
            zscores = [(z, self._zone_score(z, types)) for z in zones]
            if single:
                rows += [(r, self._zone_id(z), s) for z, s in zscores]
            else:
                rows.append((r, None, self.scores.get(r, max(s for _, s in zscores))))
        rows.sort(key=lambda row: (-row[2], row[0], row[1] or ""))
        page, nxt = self._page(rows, p, 10, 1000)
        out = add(root, "spotPlacementScoreSet")
        for region, zone_id, score in page:
            it = add(out, "item")
            add(it, "region", region)
            if zone_id:
                add(it, "availabilityZoneId", zone_id)
            add(it, "score", score)
        if nxt:
            add(root, "nextToken", nxt)

    def _zone_score(self, zone, types):
        if zone in self.scores:
            return self.scores[zone]
        if types and all(self._would_fail("RunInstances", t, zone) for t in types):
            return 1
        return ZONE_SCORES[(ord(zone[-1]) - ord("a")) % len(ZONE_SCORES)]

    def _a_DescribeAvailabilityZones(self, p, root):
        names, ids = p.list("ZoneName"), p.list("ZoneId")
        for n in names:
            if n not in self.zones:
                raise Ec2Error("InvalidParameterValue", "The zone '%s' does not exist." % n)
        for i in ids:
            if i not in [self._zone_id(z) for z in self.zones]:
                raise Ec2Error("InvalidParameterValue", "The zone id '%s' does not exist." % i)
        fields = {"zone-name": lambda z: z, "zone-id": self._zone_id,
                  "region-name": lambda z: self.region, "state": lambda z: "available",
                  "zone-type": lambda z: "availability-zone",
                  "opt-in-status": lambda z: "opt-in-not-required"}
        filters = p.filters()
        for name, _ in filters:
            if name not in fields:
                raise Ec2Error("InvalidParameterValue", "The filter '%s' is invalid" % name)
        self._dry_run(p)
        self._inject("DescribeAvailabilityZones", early=False)
        out = add(root, "availabilityZoneInfo")
        for z in self.zones:
            if (names and z not in names) or (ids and self._zone_id(z) not in ids):
                continue
            if not all(any(wildcard_match(v, fields[n](z)) for v in vals) for n, vals in filters):
                continue
            it = add(out, "item")
            add(it, "zoneState", "available")
            add(it, "optInStatus", "opt-in-not-required")
            add(it, "messageSet")
            add(it, "regionName", self.region)
            add(it, "zoneName", z)
            add(it, "zoneId", self._zone_id(z))
            add(it, "groupName", self.region)
            add(it, "networkBorderGroup", self.region)
            add(it, "zoneType", "availability-zone")

    def _a_DescribeInstanceTypes(self, p, root):
        types = p.list("InstanceType")
        unknown = [t for t in types if t not in CATALOG]
        if unknown:
            raise Ec2Error("InvalidInstanceType", "The following supplied instance types do not "
                           "exist: [%s]" % ", ".join(unknown))
        filters = p.filters()
        for name, _ in filters:
            if name not in ("instance-type", "current-generation"):
                raise Ec2Error("InvalidParameterValue", "The filter '%s' is invalid" % name)
        self._dry_run(p)
        self._inject("DescribeInstanceTypes", early=False)
        chosen = [t for t in (types or sorted(CATALOG))
                  if all(any(wildcard_match(v, t if n == "instance-type" else "true")
                             for v in vals) for n, vals in filters)]
        page, nxt = self._page(chosen, p, 5, 100)
        out = add(root, "instanceTypeSet")
        for t in page:
            vcpus, mem, gpus, model, gpu_mem, _ = CATALOG[t]
            it = add(out, "item")
            add(it, "instanceType", t)
            add(it, "currentGeneration", True)
            uc = add(it, "supportedUsageClasses")
            add(uc, "item", "on-demand")
            add(uc, "item", "spot")
            add(add(it, "supportedRootDeviceTypes"), "item", "ebs")
            add(it, "bareMetal", False)
            add(it, "hypervisor", "nitro")
            add(add(add(it, "processorInfo"), "supportedArchitectures"), "item", "x86_64")
            add(add(it, "vCpuInfo"), "defaultVCpus", vcpus)
            add(add(it, "memoryInfo"), "sizeInMiB", mem)
            if gpus:
                gi = add(it, "gpuInfo")
                g = add(add(gi, "gpus"), "item")
                add(g, "name", model)
                add(g, "manufacturer", "NVIDIA")
                add(g, "count", gpus)
                add(add(g, "memoryInfo"), "sizeInMiB", gpu_mem)
                add(gi, "totalGpuMemoryInMiB", gpus * gpu_mem)
        if nxt:
            add(root, "nextToken", nxt)

    # ---------------- the control API

    def control(self, method, path, raw_path, body):
        """(status, JSON object) for a control request."""
        name = path[len("/_standin"):].strip("/")
        try:
            doc = {}
            if method == "POST" and body.strip():
                doc = json.loads(body)
                if not isinstance(doc, dict):
                    raise ControlError(400, "the body must be a JSON object")
            with self.cond:
                if method == "GET":
                    fn = getattr(self, "_c_get_" + name if name else "_c_get_summary", None)
                    query = dict(parse_qsl(urlsplit(raw_path).query))
                    if fn is None:
                        raise ControlError(404, "no GET /_standin/%s" % name)
                    return 200, fn(query)
                if method == "POST":
                    fn = getattr(self, "_c_" + name, None) if re.fullmatch(r"[a-z_]+", name) else None
                    if fn is None:
                        raise ControlError(404, "no POST /_standin/%s" % name)
                    out = fn(doc)
                    self.cond.notify_all()
                    return 200, out
                raise ControlError(405, "GET or POST")
        except ControlError as e:
            return e.status, {"error": str(e)}
        except (ValueError, TypeError, KeyError) as e:
            return 400, {"error": "bad request: %s" % e}

    def _c_get_summary(self, query):
        return {"port": self.port, "region": self.region, "zones": self.zones,
                "subnets": self.subnets, "time_scale": self.time_scale,
                "boot_seconds": self.boot_seconds, "grace_seconds": self.grace_seconds,
                "failures": self.failures, "denied": sorted(self.denied),
                "scores": self.scores}

    def _c_get_instances(self, query):
        return {"instances": [i.to_json() for i in self.instances.values()]}

    def _c_get_calls(self, query):
        since = int(query.get("since", 0))
        action = query.get("action")
        return {"calls": [c for c in self.calls if c["seq"] > since
                          and (action is None or c["action"] == action)]}

    def _c_reset_calls(self, doc):
        self.calls.clear()
        return {"ok": True}

    def _c_fail(self, doc):
        if doc.get("clear"):
            self.failures.clear()
            return {"ok": True}
        code = doc.get("code")
        if not isinstance(code, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9.]*", code):
            raise ControlError(400, "fail needs a code (an EC2 error code, or drop)")
        count = doc.get("count", 1)
        if not isinstance(count, int) or count == 0 or count < -1:
            raise ControlError(400, "count is a positive number of calls, or -1 (until cleared)")
        status = doc.get("status")
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise ControlError(400, "status is an HTTP error status (400-599)")
        action = doc.get("action") or ("RunInstances" if code not in EARLY_CODES else "*")
        self.failure_seq += 1
        f = {"id": self.failure_seq, "code": code, "action": action, "type": doc.get("type"),
             "zone": doc.get("zone"), "count": count, "message": doc.get("message"),
             "status": status, "fired": 0}
        self.failures.append(f)
        return {"ok": True, "failure": f}

    def _resolve(self, ref):
        if not isinstance(ref, str) or not ref:
            raise ControlError(400, "instance: an instance id or a spotlab:instance tag value")
        if ref in self.instances:
            return self.instances[ref]
        found = [i for i in self.instances.values()
                 if i.tags.get("spotlab:instance") == ref and i.state not in ("terminated",)]
        if not found:
            raise ControlError(404, "no instance %s" % ref)
        return found[-1]

    def _c_interrupt(self, doc):
        inst = self._resolve(doc.get("instance"))
        if not inst.spot and not doc.get("force"):
            raise ControlError(409, "%s is not a spot instance (force: true interrupts it "
                               "anyway)" % inst.id)
        if inst.state not in ("pending", "running"):
            raise ControlError(409, "%s is %s" % (inst.id, inst.state))
        if doc.get("notice", True):
            delay = self.real_s(SPOT_NOTICE_S)
            at = utcnow() + datetime.timedelta(seconds=delay)
            inst.notice = {"action": inst.interruption_behavior or "terminate", "time": iso_s(at)}
            inst.notice_due = time.monotonic() + delay
            return {"instance": inst.id, "notice": inst.notice, "in_seconds": delay}
        final = ("stopped" if inst.interruption_behavior in ("stop", "hibernate")
                 else "terminated")
        self._begin_shutdown(inst, final, "Server.SpotInstanceTermination",
                             "Spot instance termination", hard=True)
        return {"instance": inst.id, "notice": None}

    def _c_rebalance(self, doc):
        inst = self._resolve(doc.get("instance"))
        inst.rebalance = iso_s(utcnow())
        return {"instance": inst.id, "noticeTime": inst.rebalance}

    def _c_shutdown(self, doc):
        inst = self._resolve(doc.get("instance"))
        if inst.state != "running":
            raise ControlError(409, "%s is %s" % (inst.id, inst.state))
        self._begin_shutdown(inst, "terminated" if inst.shutdown_behavior == "terminate"
                             else "stopped", "Client.InstanceInitiatedShutdown",
                             "Instance initiated shutdown")
        return {"instance": inst.id, "state": inst.state}

    def _c_deny(self, doc):
        action = doc.get("action")
        if not isinstance(action, str) or not re.fullmatch(r"[A-Za-z]+", action):
            raise ControlError(400, "deny needs an action name")
        if doc.get("deny", True):
            self.denied.add(action)
        else:
            self.denied.discard(action)
        return {"denied": sorted(self.denied)}

    def _c_prices(self, doc):
        items = doc.get("prices", [doc])
        if not isinstance(items, list):
            raise ControlError(400, "prices: a list of {type, zone?, price}")
        now = utcnow()
        checked = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise ControlError(400, "each price needs a type")
            zone = item.get("zone")
            if zone is not None and zone not in self.zones:
                raise ControlError(400, "no zone %s" % zone)
            try:
                price = _price_value(item.get("price"))
            except ValueError as e:
                raise ControlError(400, str(e))
            checked.append((item["type"], [zone] if zone else self.zones, price))
        for t, zones, price in checked:
            for z in zones:
                self.price_hist.setdefault((t, z), []).append((now, price))
        return {"ok": True}

    def _c_scores(self, doc):
        scores = doc.get("scores")
        if not isinstance(scores, dict) or not all(
                isinstance(v, int) and 1 <= v <= 10 for v in scores.values()):
            raise ControlError(400, "scores: {region or zone: 1..10}")
        self.scores.update(scores)
        return {"scores": self.scores}

    def _c_boot_seconds(self, doc):
        s = doc.get("seconds")
        if not isinstance(s, (int, float)) or isinstance(s, bool) or s < 0:
            raise ControlError(400, "seconds: EC2 seconds >= 0")
        self.boot_seconds = float(s)
        return {"boot_seconds": self.boot_seconds}

    def _c_credentials(self, doc):
        akid, secret = doc.get("access_key"), doc.get("secret_key")
        if not isinstance(akid, str) or not akid:
            raise ControlError(400, "credentials need an access_key")
        if akid not in self.credentials and not isinstance(secret, str):
            raise ControlError(400, "a new access key needs a secret_key")
        cred = self.credentials.setdefault(akid, {"secret": secret, "token": None,
                                                  "expired": False})
        if isinstance(secret, str):
            cred["secret"] = secret
        if "session_token" in doc:
            cred["token"] = doc["session_token"]
        cred["expired"] = bool(doc.get("expired", False))
        return {"access_key": akid, "expired": cred["expired"]}


def _price_value(v):
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError("a price is a number of USD per hour")
    price = float(v)
    if not 0 < price < 1e6:
        raise ValueError("a price is a number of USD per hour above 0")
    return price


def _price_param(text):
    try:
        return _price_value(text if re.fullmatch(r"\d+(\.\d+)?", text or "") else None)
    except ValueError:
        raise Ec2Error("InvalidParameterValue", "Invalid MaxPrice: %s" % text)


def _fmt_price(price):
    return "%.6f" % price


def read_prices_csv(path, region):
    """{type: (on-demand, spot midpoint)} from the rows of one region of a
    price table (instance_type,gpus,gpu_model,gpu_mem_gib,region,on_demand,
    spot_min,spot_max; # comments). ValueError names the file and line."""
    out = {}
    with open(path, newline="") as f:
        lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()
                 and not line.startswith("#")]
    rows = csv.reader(line for _, line in lines)
    header = None
    for (n, _), row in zip(lines, rows):
        if header is None:
            header = row
            need = {"instance_type", "region", "on_demand", "spot_min", "spot_max"}
            if not need <= set(header):
                raise ValueError("%s:%d: the header lacks %s" % (path, n,
                                                                 ", ".join(sorted(need - set(header)))))
            continue
        rec = dict(zip(header, row))
        if rec.get("region") != region:
            continue
        try:
            od, lo, hi = (float(rec[k]) for k in ("on_demand", "spot_min", "spot_max"))
        except (KeyError, TypeError, ValueError):
            raise ValueError("%s:%d: on_demand, spot_min and spot_max must be numbers" % (path, n))
        if not 0 < lo <= hi:
            raise ValueError("%s:%d: spot_min must be above 0 and at most spot_max" % (path, n))
        out[rec["instance_type"]] = (od, round((lo + hi) / 2, 6))
    return out


class StandinControl:
    """A client of the control API (tests): get("instances"), post("fail", {...})."""

    def __init__(self, control_url):
        self.base = control_url.rstrip("/")

    def _do(self, req):
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise ControlError(e.code, json.loads(e.read() or b"{}").get("error", str(e)))

    def get(self, name="", **query):
        q = "&".join("%s=%s" % (k, urllib.request.quote(str(v))) for k, v in query.items())
        return self._do(self.base + ("/" + name if name else "") + ("?" + q if q else ""))

    def post(self, name, body=None):
        return self._do(urllib.request.Request(
            self.base + "/" + name, data=json.dumps(body or {}).encode(), method="POST",
            headers={"Content-Type": "application/json"}))

    def instance(self, iid):
        for i in self.get("instances")["instances"]:
            if i["id"] == iid:
                return i
        raise KeyError(iid)


def _exit_with_parent():
    """SIGTERM when the process that started this one dies (Linux), so a
    test that crashes does not leave instances running."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv=None):
    ap = argparse.ArgumentParser(description="A stand-in for Amazon EC2 on 127.0.0.1 "
                                 "(docs/internals/ec2-standin.md).")
    ap.add_argument("--state-dir", required=True, help="instances' folders go under here")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--time-scale", type=float, default=60.0, help="EC2 seconds per second")
    ap.add_argument("--boot-seconds", type=float, default=30.0, help="pending to running (EC2 s)")
    ap.add_argument("--grace-seconds", type=float, default=30.0,
                    help="SIGTERM to SIGKILL on shutdown (EC2 s)")
    ap.add_argument("--terminated-visible-seconds", type=float, default=3600.0,
                    help="how long DescribeInstances shows a terminated instance (EC2 s)")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--zones", default="abc", help="zone letters of the region")
    ap.add_argument("--access-key", default=DEFAULT_ACCESS_KEY)
    ap.add_argument("--secret-key", default=DEFAULT_SECRET_KEY)
    ap.add_argument("--session-token", default=None, help="required with the access key")
    ap.add_argument("--prices", default=None, help="csv of prices (../shared/data/aws)")
    ap.add_argument("--price", action="append", default=[], metavar="TYPE[/ZONE]=USD",
                    help="a spot price (repeatable)")
    ap.add_argument("--no-exit-with-parent", action="store_true")
    args = ap.parse_args(argv)
    table = {}
    for item in args.price:
        key, _, value = item.partition("=")
        table[key] = value
    try:
        st = Ec2Standin(args.state_dir, port=args.port, time_scale=args.time_scale,
                        boot_seconds=args.boot_seconds, region=args.region,
                        access_key=args.access_key, secret_key=args.secret_key,
                        session_token=args.session_token, prices=table,
                        prices_file=args.prices, zones=args.zones,
                        grace_seconds=args.grace_seconds,
                        terminated_visible_seconds=args.terminated_visible_seconds)
        st.start()
    except (OSError, ValueError) as e:
        print("ec2_standin: %s" % e, file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if not args.no_exit_with_parent:
        _exit_with_parent()
    print(json.dumps({"port": st.port, "control": st.control_url}), flush=True)
    while not done.wait(0.5):
        pass
    st.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
