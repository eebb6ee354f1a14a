"""The EC2 stand-in's control API under /_standin/ (a part of Ec2Standin,
ec2_standin.py)."""
import datetime
import json
import re
import time
from urllib.parse import parse_qsl, urlsplit

from ec2_standin_base import (
    ControlError, EARLY_CODES, SPOT_NOTICE_S, _price_value, iso_s, utcnow)


class Ec2Control:
    """Methods of Ec2Standin, which mixes this in: they use its state and
    its lock."""

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
                "subnets": self.subnets,
                "regions": {r: {"zones": self.region_zones[r],
                                "subnets": {s: z for s, z in self.all_subnets.items()
                                            if z in self.region_zones[r]}}
                            for r in self.regions},
                "time_scale": self.time_scale,
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
        region = doc.get("region")
        if region is not None and region not in self.regions:
            raise ControlError(400, "no region %s" % region)
        self.failure_seq += 1
        f = {"id": self.failure_seq, "code": code, "action": action, "type": doc.get("type"),
             "zone": doc.get("zone"), "region": region, "count": count,
             "message": doc.get("message"), "status": status, "fired": 0}
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
        region = doc.get("region")
        if region is not None:
            if region not in self.regions:
                raise ControlError(400, "no region %s" % region)
            action = "%s@%s" % (action, region)     # in that region only
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
            zone, region = item.get("zone"), item.get("region")
            if zone is not None and zone not in self.all_zones:
                raise ControlError(400, "no zone %s" % zone)
            if region is not None and region not in self.regions:
                raise ControlError(400, "no region %s" % region)
            try:
                price = _price_value(item.get("price"))
            except ValueError as e:
                raise ControlError(400, str(e))
            zones = ([zone] if zone else self.region_zones[region] if region
                     else self.all_zones)
            checked.append((item["type"], zones, price))
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
