"""The EC2 stand-in's shared pieces: constants, errors, request parameters,
process helpers, instances and their metadata service, the HTTP servers, and
price parsing. ec2_standin.py is the stand-in itself (its docstring says what
it does)."""
import csv
import datetime
import fnmatch
import json
import os
import re
import secrets
import socket
import sys
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.compat import HTTPHeaders

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
            "type": self.type, "region": self.region, "zone": self.zone,
            "subnet": self.subnet_id,
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
