"""The EC2 stand-in's Query API actions, with injected failures and pagination
(a part of Ec2Standin, ec2_standin.py)."""
import base64
import binascii
import hashlib
import json
import os
import re
import secrets
import stat
import sys
import threading
import time
import xml.etree.ElementTree as ET

from ec2_standin_base import (
    CATALOG, DEFAULT_MESSAGES, Dropped, EARLY_CODES, Ec2Error, Instance, LINUX_PRODUCTS,
    MAX_LIVE_INSTANCES, MAX_USER_DATA_BYTES, OTHER_REGIONS, OWNER_ID, SHIM, STATE_CODES,
    ZONE_SCORES, _ImdsHandler, _ImdsServer, _fmt_price, _price_param, add, iso_ms, new_id,
    parse_time, utcnow, wildcard_match)


class Ec2Actions:
    """Methods of Ec2Standin, which mixes this in: they use its state and
    its lock."""

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
            if f.get("region") and f["region"] != self.region:
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
                   and (not f.get("region") or f["region"] == self.region_of(zone))
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
        # client tokens are per region, as EC2 keeps them
        if token is not None and (self.region, token) in self.client_tokens:
            seen_digest, rid = self.client_tokens[(self.region, token)]
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
        live = sum(1 for i in self.instances.values()
                   if i.state != "terminated" and i.region == self.region)
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
            self.client_tokens[(self.region, token)] = (digest, rid)
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
        inst = Instance(id=iid, dir=folder, private_ip=ip, region=self.region,
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
        # another region's instance is unknown here, as on EC2
        missing = [i for i in ids if i not in self.instances or not self.instances[i].visible
                   or self.instances[i].region != self.region]
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
                  else [i for i in self.instances.values()
                        if i.visible and i.region == self.region])
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
            zones = self.region_zones.get(r) or [r + z for z in "abc"]
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
