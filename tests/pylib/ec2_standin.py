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

Several regions: `--region us-east-1,us-west-2` (or region=[...]) serves
each region on the same port, told apart by the region of each request's
SigV4 credential scope, as EC2's regional endpoints are; each region has
its own zones, subnets, instances, client tokens, prices and injected
capacity failures (a failure may name a region). The first region is the
default of the control API.

Invariants: all state is behind one lock (`Ec2Standin.lock`); what comes
with time (boot, the end of a notice, the grace, a process group emptying)
happens on the clock thread, and nothing blocks under the lock (metadata
servers are shut down on threads of their own). A process group is
signalled only while it has a live member. Bad input gets an EC2 error
reply or a control API error, never a crash.
"""
import argparse
import datetime
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from urllib.parse import parse_qsl, urlsplit

from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials

from ec2_standin_base import (
    API_VERSION, CATALOG, ControlError, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY,
    DEFAULT_SPOT_FRACTION, Dropped, Ec2Error, MARK, MAX_CALLS, MAX_SKEW_S, OWNER_ID,
    Params, XMLNS, _ApiHandler, _ApiServer, _SignedHeadersAuth, _killpg, _marked_pids,
    _price_value, _proc_group_alive, add, iso_s, read_prices_csv, utcnow, zone_id_prefix)
from ec2_standin_actions import Ec2Actions
from ec2_standin_control import Ec2Control


class Ec2Standin(Ec2Actions, Ec2Control):
    """EC2 on 127.0.0.1. start() listens (port 0: a free one), stop() ends
    every instance's processes and closes the servers.

    time_scale: EC2 seconds per real second. boot_seconds, grace_seconds
    (SIGTERM to SIGKILL on shutdown), terminated_visible_seconds: EC2
    seconds. prices: {"TYPE": usd, "TYPE/ZONE": usd} over prices_file (the
    csv of ../shared/data/aws: the midpoint of spot_min and spot_max of each
    region's rows) over the catalog's default; a ZONE may also be a region
    (all its zones). region: one name, a comma list or a list (several
    regions). session_token: required with the access key when given."""

    def __init__(self, state_dir, port=0, time_scale=60.0, boot_seconds=30.0,
                 region="us-east-1", access_key=DEFAULT_ACCESS_KEY,
                 secret_key=DEFAULT_SECRET_KEY, session_token=None, prices=None,
                 prices_file=None, zones="abc", grace_seconds=30.0,
                 terminated_visible_seconds=3600.0):
        if not time_scale or time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        if boot_seconds < 0 or grace_seconds < 0:
            raise ValueError("boot_seconds and grace_seconds must be >= 0")
        regions = region.split(",") if isinstance(region, str) else list(region)
        regions = [r.strip() for r in regions if r.strip()]
        if not regions or len(set(regions)) != len(regions):
            raise ValueError("regions %r: at least one, each once" % (region,))
        for r in regions:
            if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", r):
                raise ValueError("region %r is not a region name" % r)
        self.state_dir = os.path.abspath(state_dir)
        self.port = port
        self.time_scale = float(time_scale)
        self.boot_seconds = float(boot_seconds)
        self.grace_seconds = float(grace_seconds)
        self.visible_seconds = float(terminated_visible_seconds)
        self.regions = regions
        self.region_zones = {r: [r + z for z in zones] for r in regions}
        all_zones = [z for r in regions for z in self.region_zones[r]]
        self.all_subnets = {"subnet-%017x" % (i + 1): z for i, z in enumerate(all_zones)}
        self._request = threading.local()   # the region of the request being handled
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
        self.on_demands = {r: {t: c[5] for t, c in CATALOG.items()} for r in regions}
        self.start_time = utcnow()
        self.price_hist = {}        # (type, zone) -> [(datetime, price)], oldest first
        self._load_prices(prices_file, prices or {})
        self.httpd = None
        self.stopping = False
        self.threads = []

    # ---------------- regions

    @property
    def region(self):
        """The region of the request this thread handles (its credential
        scope's), else the first one."""
        return getattr(self._request, "region", None) or self.regions[0]

    @property
    def zones(self):
        return self.region_zones[self.region]

    @property
    def subnets(self):
        zones = set(self.zones)
        return {s: z for s, z in self.all_subnets.items() if z in zones}

    @property
    def on_demand(self):
        return self.on_demands[self.region]

    @property
    def all_zones(self):
        return [z for r in self.regions for z in self.region_zones[r]]

    def region_of(self, zone):
        return next((r for r in self.regions if zone in self.region_zones[r]), None)

    # ---------------- prices

    def _load_prices(self, prices_file, table):
        since = self.start_time - datetime.timedelta(hours=1)
        for region in self.regions:
            od_table = self.on_demands[region]
            base = {t: round(od * DEFAULT_SPOT_FRACTION, 4) for t, od in od_table.items()}
            if prices_file:
                for t, (od, price) in read_prices_csv(prices_file, region).items():
                    base[t] = price
                    od_table[t] = od
            per_zone = {}
            for key, price in table.items():
                t, _, z = key.partition("/")
                price = _price_value(price)
                if z == region:
                    for zone in self.region_zones[region]:
                        per_zone.setdefault((t, zone), price)
                elif z in self.region_zones[region]:
                    per_zone[(t, z)] = price
                elif not z:
                    base[t] = price
            for t, price in base.items():
                for z in self.region_zones[region]:
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
            "placement/region": inst.region,
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
                   "region": inst.region, "version": "2017-09-30"}
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
                "signature_ok": False, "access_key": None, "region": None, "code": None,
                "status": None, "request_id": request_id}
        self._request.region = None
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
                if action in self.denied or "%s@%s" % (action, self.region) in self.denied:
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
        finally:
            self._request.region = None

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
        if region not in self.regions or service != "ec2" or term != "aws4_request":
            raise Ec2Error("AuthFailure", "Credential should be scoped to a valid region, "
                           "service ec2 and aws4_request, not '%s/%s/%s'" % (region, service, term))
        # from here on the request is this region's
        self._request.region = region
        call["region"] = region
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
    ap.add_argument("--region", default="us-east-1",
                    help="the region, or several as a comma list (us-east-1,us-west-2)")
    ap.add_argument("--zones", default="abc", help="zone letters of each region")
    ap.add_argument("--access-key", default=DEFAULT_ACCESS_KEY)
    ap.add_argument("--secret-key", default=DEFAULT_SECRET_KEY)
    ap.add_argument("--session-token", default=None, help="required with the access key")
    ap.add_argument("--prices", default=None, help="csv of prices (../shared/data/aws)")
    ap.add_argument("--price", action="append", default=[], metavar="TYPE[/ZONE]=USD",
                    help="a spot price (repeatable); ZONE may be a region (all its zones)")
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
