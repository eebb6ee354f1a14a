#!/usr/bin/python3
"""The EC2 stand-in (tests/pylib/ec2_standin.py) driven by boto3, so that
what it answers is what botocore parses.

usage: test_ec2_standin.py CASE [PRICES_CSV]

Each case starts its own stand-in (in-process, except `cli`) in a private
folder. Durations are EC2 seconds over a large time scale; every wait has a
deadline and polls for the event, never a fixed sleep.
"""
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import boto3
import botocore.exceptions
from botocore import UNSIGNED
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

import ec2_standin as E

PRICES = sys.argv[2] if len(sys.argv) > 2 else None
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(E.__file__)), "ec2_standin.py")


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def wait_for(pred, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Fail("timed out waiting for " + what)
        time.sleep(0.02)


def client(st, retries=1, mode="standard", **kw):
    args = dict(endpoint_url=st.url, region_name="us-east-1",
                aws_access_key_id=E.DEFAULT_ACCESS_KEY,
                aws_secret_access_key=E.DEFAULT_SECRET_KEY,
                config=kw.pop("config", None) or Config(
                    retries={"total_max_attempts": retries, "mode": mode}))
    args.update(kw)
    return boto3.client("ec2", **args)


def error_of(fn, *a, **kw):
    """The ClientError fn raises: (code, HTTP status, message)."""
    try:
        fn(*a, **kw)
    except botocore.exceptions.ClientError as e:
        return (e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"],
                e.response["Error"]["Message"])
    raise Fail("%s succeeded; an error was expected" % fn.__name__)


def describe(ec2, iid):
    return ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]


def state_of(ec2, iid):
    return describe(ec2, iid)["State"]["Name"]


def pid_gone(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            s = f.read()
    except OSError:
        return True
    return s[s.rfind(b")") + 2:].split()[0] in (b"Z", b"X")


def run_one(ec2, user_data="", **kw):
    args = dict(ImageId="ami-0123456789abcdef0", InstanceType="g5.xlarge", MinCount=1,
                MaxCount=1)
    if user_data:
        args["UserData"] = user_data
    args.update(kw)
    return ec2.run_instances(**args)["Instances"][0]["InstanceId"]


SPOT = {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time",
                                              "InstanceInterruptionBehavior": "terminate"}}


def imds_get(base, path, token=True):
    headers = {}
    if token:
        req = urllib.request.Request(base + "/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        headers["X-aws-ec2-metadata-token"] = urllib.request.urlopen(req, timeout=5).read().decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers),
                                    timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# ---------------------------------------------------------------- cases

def case_run_imds(st, tmp):
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    ud = """#!/bin/sh
E=$AWS_EC2_METADATA_SERVICE_ENDPOINT
T=$(curl -sf -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" "$E/latest/api/token")
curl -sf -H "X-aws-ec2-metadata-token: $T" "$E/latest/meta-data/instance-id" > %(o)s/id.tmp
curl -sf -H "X-aws-ec2-metadata-token: $T" "$E/latest/meta-data/placement/availability-zone" > %(o)s/zone.tmp
curl -s -o /dev/null -w '%%{http_code}' "$E/latest/meta-data/instance-id" > %(o)s/notoken.tmp
curl -s -o /dev/null -w '%%{http_code}' -H "X-aws-ec2-metadata-token: $T" "$E/latest/meta-data/spot/instance-action" > %(o)s/action.tmp
env | grep '^AWS_' | cut -d= -f1 | sort > %(o)s/env.tmp
echo "$PATH" | cut -d: -f1 > %(o)s/path.tmp
for f in %(o)s/*.tmp; do mv "$f" "${f%%.tmp}.txt"; done
touch %(o)s/done
""" % {"o": out}
    ec2 = client(st)
    r = ec2.run_instances(
        ImageId="resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
        InstanceType="g5.xlarge", MinCount=1, MaxCount=1, UserData=ud,
        Placement={"AvailabilityZone": "us-east-1b"}, InstanceMarketOptions=SPOT,
        InstanceInitiatedShutdownBehavior="terminate",
        IamInstanceProfile={"Name": "spotlab-worker"}, SecurityGroupIds=["sg-0123456789abcdef0"],
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": "spotlab:instance", "Value": "w-1"},
                                     {"Key": "spotlab:job", "Value": "7"}]}])
    inst = r["Instances"][0]
    iid = inst["InstanceId"]
    check(inst["State"]["Name"] == "pending", "a new instance is pending: %s" % inst["State"])
    check(inst["ImageId"].startswith("ami-") and len(inst["ImageId"]) == 21,
          "resolve:ssm resolves to an ami id: %s" % inst["ImageId"])
    wait_for(lambda: os.path.exists(os.path.join(out, "done")), "the user data to finish")
    read = lambda n: open(os.path.join(out, n + ".txt")).read().strip()
    check(read("id") == iid, "IMDS instance-id %r is the instance's %s" % (read("id"), iid))
    check(read("zone") == "us-east-1b", "IMDS zone: %r" % read("zone"))
    check(read("notoken") == "401", "a GET without a token is refused: %s" % read("notoken"))
    check(read("action") == "404", "no instance-action before a notice: %s" % read("action"))
    check(read("env") == "AWS_EC2_METADATA_SERVICE_ENDPOINT",
          "only the IMDS endpoint among AWS_* variables: %r" % read("env"))
    ctl = E.StandinControl(st.control_url)
    info = ctl.instance(iid)
    check(read("path") == os.path.join(info["dir"], "bin"), "PATH starts with the shims")
    code, text = imds_get(info["imds"], "/latest/user-data")
    check(code == 200 and text == ud, "IMDS serves the user data")
    # the script has exited; the instance runs on
    wait_for(lambda: ctl.instance(iid)["exit_code"] is not None, "the script's exit")
    check(ctl.instance(iid)["exit_code"] == 0, "the script succeeded: see %s" % info["log"])
    d = describe(ec2, iid)
    check(d["State"]["Name"] == "running", "running after its user data exits: %s" % d["State"])
    check(d["InstanceType"] == "g5.xlarge" and d["Placement"]["AvailabilityZone"] == "us-east-1b",
          "type and zone described")
    check(d["InstanceLifecycle"] == "spot" and d["SpotInstanceRequestId"].startswith("sir-"),
          "a spot instance")
    check({t["Key"]: t["Value"] for t in d["Tags"]} == {"spotlab:instance": "w-1",
                                                         "spotlab:job": "7"}, "tags")
    check(d["IamInstanceProfile"]["Arn"].endswith(":instance-profile/spotlab-worker"), "profile")
    check(d["SecurityGroups"][0]["GroupId"] == "sg-0123456789abcdef0", "security group")
    check(d["ImageId"] == inst["ImageId"], "same image described")
    check(d["SubnetId"] in st.subnets and st.subnets[d["SubnetId"]] == "us-east-1b",
          "the zone's subnet")


def case_idempotency(st, tmp):
    ec2 = client(st)
    args = dict(ImageId="ami-0123456789abcdef0", InstanceType="g4dn.xlarge", MinCount=1,
                MaxCount=2, ClientToken="launch-42")
    first = [i["InstanceId"] for i in ec2.run_instances(**args)["Instances"]]
    again = [i["InstanceId"] for i in ec2.run_instances(**args)["Instances"]]
    check(len(first) == 2 and first == again, "same token, same instances: %s %s" % (first, again))
    ctl = E.StandinControl(st.control_url)
    check(len(ctl.get("instances")["instances"]) == 2, "no new instance for a repeated token")
    code, status, _ = error_of(ec2.run_instances, **dict(args, InstanceType="g5.xlarge"))
    check(code == "IdempotentParameterMismatch" and status == 400, "token reuse: %s" % code)
    third = [i["InstanceId"] for i in ec2.run_instances(**dict(args, ClientToken="other"))
             ["Instances"]]
    check(not set(third) & set(first), "another token, other instances")
    rs = ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["launch-42"]}])
    check(sorted(i["InstanceId"] for r in rs["Reservations"] for i in r["Instances"])
          == sorted(first), "client-token filter")
    calls = ctl.get("calls", action="RunInstances")["calls"]
    check([c["code"] for c in calls] == ["OK", "OK", "IdempotentParameterMismatch", "OK"],
          "RunInstances calls recorded: %s" % [c["code"] for c in calls])


def case_describe_filters(st, tmp):
    ec2 = client(st)
    spec = lambda tags: [{"ResourceType": "instance",
                          "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    ec2.run_instances(ImageId="ami-0123456789abcdef0", InstanceType="g5.xlarge", MinCount=3,
                      MaxCount=3, TagSpecifications=spec({"spotlab:job": "1", "team": "a"}))
    ec2.run_instances(ImageId="ami-0123456789abcdef0", InstanceType="p3.2xlarge", MinCount=2,
                      MaxCount=2, TagSpecifications=spec({"spotlab:job": "2"}))
    plain = ec2.run_instances(ImageId="ami-0123456789abcdef0", InstanceType="t3.micro",
                              MinCount=2, MaxCount=2)["Instances"]
    ids = lambda resp: sorted(i["InstanceId"] for r in resp["Reservations"] for i in r["Instances"])
    f = lambda name, *values: {"Name": name, "Values": list(values)}
    check(len(ids(ec2.describe_instances(Filters=[f("tag:spotlab:job", "1")]))) == 3, "tag:KEY")
    check(len(ids(ec2.describe_instances(Filters=[f("tag-key", "spotlab:job")]))) == 5, "tag-key")
    check(len(ids(ec2.describe_instances(Filters=[f("tag:spotlab:job", "1", "2"),
                                                  f("instance-type", "p3.*")]))) == 2,
          "values OR, filters AND, wildcards")
    wait_for(lambda: len(ids(ec2.describe_instances(
        Filters=[f("instance-state-name", "running")]))) == 7, "all seven running")
    ec2.create_tags(Resources=[plain[0]["InstanceId"]], Tags=[{"Key": "spotlab:job", "Value": "3"}])
    check(ids(ec2.describe_instances(Filters=[f("tag:spotlab:job", "3")]))
          == [plain[0]["InstanceId"]], "CreateTags then tag filter")
    ec2.terminate_instances(InstanceIds=[plain[1]["InstanceId"]])
    wait_for(lambda: ids(ec2.describe_instances(Filters=[f("instance-state-name", "terminated")]))
             == [plain[1]["InstanceId"]], "the terminated one")
    pages = list(ec2.get_paginator("describe_instances").paginate(PaginationConfig={"PageSize": 5}))
    check(len(pages) == 2 and sum(len(ids(p)) for p in pages) == 7
          and len(set(sum((ids(p) for p in pages), []))) == 7,
          "MaxResults/NextToken pagination: %d pages" % len(pages))
    check(error_of(ec2.describe_instances, Filters=[f("no-such-filter", "x")])[0]
          == "InvalidParameterValue", "an unknown filter is refused")
    check(error_of(ec2.describe_instances, InstanceIds=["i-0000000000000000f"])[0]
          == "InvalidInstanceID.NotFound", "an unknown id is refused")
    check(error_of(ec2.describe_instances, InstanceIds=["bogus"])[0]
          == "InvalidInstanceID.Malformed", "a malformed id is refused")
    check(error_of(ec2.describe_instances, MaxResults=5, NextToken="garbage")[0]
          == "InvalidPaginationToken", "a bad token is refused")


def case_terminate(st, tmp):
    ec2 = client(st)
    ud = "#!/bin/sh\n%s\nsleep 300 &\necho $! > child.pid\nwait\n"
    polite = run_one(ec2, ud % "")
    stubborn = run_one(ec2, ud % "trap '' TERM")
    ctl = E.StandinControl(st.control_url)
    folders = {i: ctl.instance(i)["dir"] for i in (polite, stubborn)}
    pid_file = lambda i: os.path.join(folders[i], "child.pid")
    wait_for(lambda: all(os.path.exists(pid_file(i)) and open(pid_file(i)).read().strip()
                         for i in folders), "both scripts to start their child")
    procs = {i: (ctl.instance(i)["pid"], int(open(pid_file(i)).read())) for i in folders}
    t0 = time.monotonic()
    r = ec2.terminate_instances(InstanceIds=[polite, stubborn])["TerminatingInstances"]
    check([x["CurrentState"]["Name"] for x in r] == ["shutting-down"] * 2
          and [x["PreviousState"]["Name"] for x in r] == ["running"] * 2,
          "running -> shutting-down: %s" % r)
    wait_for(lambda: state_of(ec2, stubborn) == "terminated", "the stubborn one's end")
    elapsed = time.monotonic() - t0
    grace = st.real_s(st.grace_seconds)
    check(elapsed >= grace * 0.9, "SIGTERM ignored: terminated only after the grace "
          "(%.2fs < %.2fs)" % (elapsed, grace))
    wait_for(lambda: state_of(ec2, polite) == "terminated", "the polite one's end")
    for i, (leader, child) in procs.items():
        check(pid_gone(leader) and pid_gone(child), "%s's process group is gone" % i)
        check(not E._proc_group_alive(leader), "%s's group is empty" % i)
    d = describe(ec2, polite)
    check(d["StateReason"]["Code"] == "Client.UserInitiatedShutdown", "reason: %s" % d["StateReason"])
    r = ec2.terminate_instances(InstanceIds=[polite])["TerminatingInstances"][0]
    check(r["CurrentState"]["Name"] == "terminated" == r["PreviousState"]["Name"],
          "terminating a terminated instance changes nothing")
    # a pending instance ends without having run anything; terminated
    # instances leave DescribeInstances after a while
    ctl.post("boot_seconds", {"seconds": 3600})
    st.visible_seconds = 30
    early = run_one(ec2, "#!/bin/sh\ntouch ran\n")
    ec2.terminate_instances(InstanceIds=[early])
    wait_for(lambda: state_of(ec2, early) == "terminated", "the pending one's end")
    check(not os.path.exists(os.path.join(ctl.instance(early)["dir"], "ran")),
          "a pending instance never ran its user data")

    def gone():
        try:
            ec2.describe_instances(InstanceIds=[early])
            return False
        except botocore.exceptions.ClientError as e:
            return e.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    wait_for(gone, "the terminated instance to leave DescribeInstances")
    check(describe(ec2, polite)["State"]["Name"] == "terminated", "the others are still shown")


def notice_script(out):
    return """#!/bin/sh
E=$AWS_EC2_METADATA_SERVICE_ENDPOINT
T=$(curl -sf -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 300" "$E/latest/api/token")
while :; do
  code=$(curl -s -o %(o)s/a.json -w '%%{http_code}' -H "X-aws-ec2-metadata-token: $T" "$E/latest/meta-data/spot/instance-action")
  echo "$code" >> %(o)s/codes
  if [ "$code" = 200 ]; then mv %(o)s/a.json %(o)s/notice.json; break; fi
  sleep 0.02
done
sleep 300
""" % {"o": out}


def case_interrupt_notice(st, tmp):
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    ec2 = client(st)
    iid = run_one(ec2, notice_script(out), InstanceMarketOptions=SPOT,
                  TagSpecifications=[{"ResourceType": "instance",
                                      "Tags": [{"Key": "spotlab:instance", "Value": "w-9"}]}])
    ctl = E.StandinControl(st.control_url)
    codes = os.path.join(out, "codes")
    wait_for(lambda: os.path.exists(codes) and "404" in open(codes).read(),
             "the script to poll instance-action")
    imds = ctl.instance(iid)["imds"]
    check(imds_get(imds, "/latest/meta-data/events/recommendations/rebalance")[0] == 404,
          "no rebalance recommendation yet")
    ctl.post("rebalance", {"instance": "w-9"})
    code, text = imds_get(imds, "/latest/meta-data/events/recommendations/rebalance")
    check(code == 200 and "noticeTime" in json.loads(text), "rebalance: %s %s" % (code, text))
    t0 = time.time()
    r = ctl.post("interrupt", {"instance": iid, "notice": True})
    delay = 120 / st.time_scale
    check(abs(r["in_seconds"] - delay) < 1e-6, "two scaled minutes: %s" % r)
    notice_path = os.path.join(out, "notice.json")
    wait_for(lambda: os.path.exists(notice_path), "the instance to see the notice")
    notice = json.load(open(notice_path))
    check(notice["action"] == "terminate", "the action: %s" % notice)
    when = datetime.datetime.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    check(t0 + delay - 1.5 <= when <= t0 + delay + 1.5, "the notice names the end: %s" % notice)
    code, text = imds_get(imds, "/latest/meta-data/spot/termination-time")
    check(code == 200 and text == notice["time"], "termination-time agrees")
    wait_for(lambda: state_of(ec2, iid) == "terminated", "the interruption", timeout=15 + delay)
    check(time.time() - t0 >= delay * 0.95, "not terminated before the notice ran out")
    d = describe(ec2, iid)
    check(d["StateReason"]["Code"] == "Server.SpotInstanceTermination", "reason: %s" % d)
    check(pid_gone(ctl.instance(iid)["pid"]), "the instance's processes are gone")
    try:
        ctl.post("interrupt", {"instance": iid})
        raise Fail("a terminated instance cannot be interrupted")
    except E.ControlError as e:
        check(e.status in (404, 409), "refused: %s" % e)


def case_interrupt_hard(st, tmp):
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    ec2 = client(st)
    iid = run_one(ec2, notice_script(out), InstanceMarketOptions=SPOT,
                  TagSpecifications=[{"ResourceType": "instance",
                                      "Tags": [{"Key": "spotlab:instance", "Value": "w-3"}]}])
    ondemand = run_one(ec2, "#!/bin/sh\nsleep 300\n")
    ctl = E.StandinControl(st.control_url)
    codes = os.path.join(out, "codes")
    wait_for(lambda: os.path.exists(codes) and "404" in open(codes).read(), "the script to poll")
    pid = ctl.instance(iid)["pid"]
    r = ctl.post("interrupt", {"instance": "w-3", "notice": False})
    check(r["instance"] == iid and r["notice"] is None, "by the spotlab:instance tag: %s" % r)
    wait_for(lambda: state_of(ec2, iid) == "terminated", "the hard loss", timeout=5)
    check(pid_gone(pid) and not E._proc_group_alive(pid), "killed at once")
    check(not os.path.exists(os.path.join(out, "notice.json")) and ctl.instance(iid)["notice"] is None,
          "no notice ever")
    check(describe(ec2, iid)["StateReason"]["Code"] == "Server.SpotInstanceTermination", "reason")
    try:
        ctl.post("interrupt", {"instance": ondemand})
        raise Fail("an on-demand instance is not interrupted")
    except E.ControlError as e:
        check(e.status == 409, "on-demand: %s" % e)
    check(state_of(ec2, ondemand) in ("pending", "running"), "the on-demand one is untouched")


def sign_raw(st, body, secret=E.DEFAULT_SECRET_KEY, when=None):
    """A request to the stand-in signed with botocore at a chosen time."""
    req = AWSRequest(method="POST", url=st.url + "/", data=body,
                     headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    signer = SigV4Auth(Credentials(E.DEFAULT_ACCESS_KEY, secret), "ec2", "us-east-1")
    if when is None:
        signer.add_auth(req)
    else:
        req.context["timestamp"] = when.strftime("%Y%m%dT%H%M%SZ")
        req.headers["X-Amz-Date"] = req.context["timestamp"]
        req.headers["host"] = "127.0.0.1:%d" % st.port
        sig = signer.signature(signer.string_to_sign(req, signer.canonical_request(req)), req)
        signer._inject_signature_to_request(req, sig)
    return req


def send_raw(st, req, body=None):
    r = urllib.request.Request(req.url, data=body if body is not None else req.body,
                               method="POST", headers=dict(req.headers.items()))
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def case_auth(st, tmp):
    ctl = E.StandinControl(st.control_url)
    unsigned = client(st, config=Config(signature_version=UNSIGNED,
                                        retries={"total_max_attempts": 1}))
    check(error_of(unsigned.describe_instances)[:2] == ("AuthFailure", 401), "unsigned")
    bad = client(st, aws_secret_access_key="not-the-secret")
    check(error_of(bad.describe_instances)[:2] == ("SignatureDoesNotMatch", 403), "wrong secret")
    stranger = client(st, aws_access_key_id="AKIDSTRANGER")
    check(error_of(stranger.describe_instances)[:2] == ("AuthFailure", 401), "unknown key")
    elsewhere = client(st, region_name="eu-west-1")
    check(error_of(elsewhere.describe_instances)[0] == "AuthFailure", "scoped to another region")
    body = b"Action=DescribeAvailabilityZones&Version=2016-11-15"
    status, text = send_raw(st, sign_raw(st, body))
    check(status == 200 and "<zoneName>us-east-1a</zoneName>" in text, "a raw signed request")
    status, text = send_raw(st, sign_raw(st, body), body + b"&ZoneName.1=us-east-1b")
    check(status == 403 and "SignatureDoesNotMatch" in text, "a body changed after signing")
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)
    status, text = send_raw(st, sign_raw(st, body, when=old))
    check(status == 400 and "<Code>RequestExpired</Code>" in text, "an expired X-Amz-Date: %s" % text)
    # temporary credentials: the token is part of them
    ctl.post("credentials", {"access_key": "ASIATEMPKEY", "secret_key": "temp-secret",
                             "session_token": "the-token"})
    temp = client(st, aws_access_key_id="ASIATEMPKEY", aws_secret_access_key="temp-secret",
                  aws_session_token="the-token")
    temp.describe_availability_zones()
    notoken = client(st, aws_access_key_id="ASIATEMPKEY", aws_secret_access_key="temp-secret")
    check(error_of(notoken.describe_availability_zones)[0] == "AuthFailure", "token missing")
    wrong = client(st, aws_access_key_id="ASIATEMPKEY", aws_secret_access_key="temp-secret",
                   aws_session_token="another-token")
    check(error_of(wrong.describe_availability_zones)[0] == "AuthFailure", "wrong token")
    ctl.post("credentials", {"access_key": "ASIATEMPKEY", "expired": True})
    check(error_of(temp.describe_availability_zones)[0] == "ExpiredToken", "expired token")
    calls = ctl.get("calls")["calls"]
    seen = [(c["action"], c["signature_ok"], c["code"]) for c in calls]
    want = [("DescribeInstances", False, "AuthFailure"),
            ("DescribeInstances", False, "SignatureDoesNotMatch"),
            ("DescribeInstances", False, "AuthFailure"),
            ("DescribeInstances", False, "AuthFailure"),
            ("DescribeAvailabilityZones", True, "OK"),
            ("DescribeAvailabilityZones", False, "SignatureDoesNotMatch"),
            ("DescribeAvailabilityZones", True, "RequestExpired"),
            ("DescribeAvailabilityZones", True, "OK"),
            ("DescribeAvailabilityZones", False, "AuthFailure"),
            ("DescribeAvailabilityZones", False, "AuthFailure"),
            ("DescribeAvailabilityZones", True, "ExpiredToken")]
    check(seen == want, "calls recorded:\n%s" % "\n".join(map(str, seen)))
    check(calls[1]["access_key"] == E.DEFAULT_ACCESS_KEY and calls[2]["access_key"] == "AKIDSTRANGER",
          "the key each call named")
    check(ctl.post("reset_calls") and ctl.get("calls")["calls"] == [], "reset_calls")


def case_errors(st, tmp):
    ec2 = client(st)
    ctl = E.StandinControl(st.control_url)
    ctl.post("fail", {"code": "InsufficientInstanceCapacity", "type": "g5.xlarge",
                      "zone": "us-east-1a", "count": 1})
    code, status, msg = error_of(run_one, ec2, Placement={"AvailabilityZone": "us-east-1a"})
    check((code, status) == ("InsufficientInstanceCapacity", 500) and "g5.xlarge" in msg,
          "ICE: %s %s %s" % (code, status, msg))
    run_one(ec2, Placement={"AvailabilityZone": "us-east-1a"})      # the count is spent
    ctl.post("fail", {"code": "InsufficientInstanceCapacity", "type": "g5.xlarge",
                      "zone": "us-east-1a", "count": -1})
    for _ in range(2):
        check(error_of(run_one, ec2, Placement={"AvailabilityZone": "us-east-1a"})[0]
              == "InsufficientInstanceCapacity", "until cleared")
    iid = run_one(ec2)
    check(describe(ec2, iid)["Placement"]["AvailabilityZone"] != "us-east-1a",
          "no zone asked: EC2 picks one with capacity")
    run_one(ec2, InstanceType="p3.2xlarge", Placement={"AvailabilityZone": "us-east-1a"})
    ctl.post("fail", {"clear": True})
    run_one(ec2, Placement={"AvailabilityZone": "us-east-1a"})

    # throttling: a retrying client gets through after two refusals
    ctl.post("reset_calls")
    ctl.post("fail", {"code": "RequestLimitExceeded", "action": "DescribeInstances", "count": 2})
    client(st, retries=3).describe_instances()
    seen = [(c["code"], c["status"]) for c in ctl.get("calls", action="DescribeInstances")["calls"]]
    check(seen == [("RequestLimitExceeded", 503)] * 2 + [("OK", 200)], "throttled: %s" % seen)

    ctl.post("fail", {"code": "MaxSpotInstanceCountExceeded"})
    check(error_of(run_one, ec2, InstanceMarketOptions=SPOT)[0] == "MaxSpotInstanceCountExceeded",
          "spot limit")
    low = {"MarketType": "spot", "SpotOptions": {"MaxPrice": "0.01"}}
    code, _, msg = error_of(run_one, ec2, InstanceMarketOptions=low)
    check(code == "SpotMaxPriceTooLow" and "0.01" in msg, "a max price under the market: %s" % msg)
    for injected, status in (("Unsupported", 400), ("InvalidParameterValue", 400),
                             ("InternalError", 500), ("AuthFailure", 401), ("ExpiredToken", 400),
                             ("Unavailable", 503)):
        ctl.post("fail", {"code": injected, "action": "RunInstances"})
        got = error_of(run_one, ec2)
        check(got[:2] == (injected, status), "%s injected: %s" % (injected, got))
    ctl.post("fail", {"code": "drop", "action": "DescribeAvailabilityZones"})
    try:
        ec2.describe_availability_zones()
        raise Fail("a dropped connection is an error")
    except botocore.exceptions.ConnectionClosedError:
        pass
    ec2.describe_availability_zones()
    check(ctl.get("calls", action="DescribeAvailabilityZones")["calls"][0]["code"] == "drop",
          "the drop is recorded")
    ctl.post("fail", {"code": "InternalError", "action": "*", "count": 1, "status": 502,
                      "message": "gateway hiccup"})
    check(error_of(ec2.describe_instance_types)[:3] == ("InternalError", 502, "gateway hiccup"),
          "any action, chosen status and message")
    for bad in ({}, {"code": "X", "count": 0}, {"code": "X", "status": 200}):
        try:
            ctl.post("fail", bad)
            raise Fail("fail %s is refused" % bad)
        except E.ControlError as e:
            check(e.status == 400, "fail %s: %s" % (bad, e))
    check(error_of(run_one, ec2, ImageId="not-an-ami")[0] == "InvalidAMIID.Malformed", "bad ami")
    check(error_of(run_one, ec2, InstanceType="x9.huge")[0] == "InvalidParameterValue", "bad type")
    check(error_of(run_one, ec2, MinCount=3, MaxCount=2)[0] == "InvalidParameterValue", "counts")
    check(error_of(run_one, ec2, SubnetId="subnet-0000000000000abcd")[0]
          == "InvalidSubnetID.NotFound", "unknown subnet")
    stop = {"MarketType": "spot", "SpotOptions": {"InstanceInterruptionBehavior": "stop"}}
    check(error_of(run_one, ec2, InstanceMarketOptions=stop)[0] == "InvalidParameterCombination",
          "stop needs a persistent request")


def case_dryrun(st, tmp):
    ec2 = client(st)
    iid = run_one(ec2)
    ctl = E.StandinControl(st.control_url)
    calls = [
        ("RunInstances", lambda **kw: run_one(ec2, **kw)),
        ("DescribeInstances", ec2.describe_instances),
        ("TerminateInstances", lambda **kw: ec2.terminate_instances(InstanceIds=[iid], **kw)),
        ("CreateTags", lambda **kw: ec2.create_tags(Resources=[iid],
                                                    Tags=[{"Key": "k", "Value": "v"}], **kw)),
        ("DescribeSpotPriceHistory", ec2.describe_spot_price_history),
        ("GetSpotPlacementScores", lambda **kw: ec2.get_spot_placement_scores(
            InstanceTypes=["g5.xlarge", "g4dn.xlarge", "p3.2xlarge"], TargetCapacity=1, **kw)),
        ("DescribeAvailabilityZones", ec2.describe_availability_zones),
        ("DescribeInstanceTypes", ec2.describe_instance_types),
    ]
    for action, fn in calls:
        check(error_of(fn, DryRun=True)[:2] == ("DryRunOperation", 412), "%s DryRun" % action)
        ctl.post("deny", {"action": action})
        check(error_of(fn, DryRun=True)[:2] == ("UnauthorizedOperation", 403),
              "%s DryRun, denied" % action)
        check(error_of(fn)[:2] == ("UnauthorizedOperation", 403), "%s denied" % action)
        ctl.post("deny", {"action": action, "deny": False})
    check(len(ctl.get("instances")["instances"]) == 1, "no dry run launched anything")
    check(state_of(ec2, iid) in ("pending", "running"), "no dry run terminated anything")
    check(describe(ec2, iid).get("Tags") is None, "no dry run tagged anything")


def case_market(st, tmp):
    ec2 = client(st)
    ctl = E.StandinControl(st.control_url)
    three = ["g5.xlarge", "g4dn.xlarge", "p3.2xlarge"]
    for few in (["g5.xlarge"], ["g5.xlarge", "g4dn.xlarge"], ["g5.xlarge"] * 3):
        check(error_of(ec2.get_spot_placement_scores, InstanceTypes=few, TargetCapacity=1)[0]
              == "InvalidParameterValue", "%d distinct types are refused" % len(set(few)))
    regional = ec2.get_spot_placement_scores(InstanceTypes=three, TargetCapacity=2,
                                             RegionNames=["us-east-1", "us-west-2"])
    rows = regional["SpotPlacementScores"]
    check(sorted(r["Region"] for r in rows) == ["us-east-1", "us-west-2"]
          and all(1 <= r["Score"] <= 10 and "AvailabilityZoneId" not in r for r in rows),
          "region scores: %s" % rows)
    for t in three:
        ctl.post("fail", {"code": "InsufficientInstanceCapacity", "type": t, "zone": "us-east-1b",
                          "count": -1})
    ctl.post("scores", {"scores": {"us-east-1c": 2}})
    zonal = ec2.get_spot_placement_scores(InstanceTypes=three, TargetCapacity=1,
                                          SingleAvailabilityZone=True, RegionNames=["us-east-1"])
    scores = {r["AvailabilityZoneId"]: r["Score"] for r in zonal["SpotPlacementScores"]}
    check(set(scores) == {"use1-az1", "use1-az2", "use1-az3"}, "zone ids: %s" % scores)
    check(scores["use1-az2"] == 1 and scores["use1-az3"] == 2 and scores["use1-az1"] > 2,
          "no capacity scores 1, a set score holds: %s" % scores)
    pages = list(ec2.get_paginator("get_spot_placement_scores").paginate(
        InstanceTypes=three, TargetCapacity=1, SingleAvailabilityZone=True,
        PaginationConfig={"PageSize": 10}))
    check(len(pages) == 2 and sum(len(p["SpotPlacementScores"]) for p in pages) == 15,
          "paginated zone scores over five regions")

    hist = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"],
                                           ProductDescriptions=["Linux/UNIX"])["SpotPriceHistory"]
    check(sorted(h["AvailabilityZone"] for h in hist) == st.zones, "one price per zone")
    want = 0.4 if not PRICES else (0.3970 + 0.4177) / 2
    check(all(abs(float(h["SpotPrice"]) - want) < 1e-6 for h in hist),
          "the starting price %s: %s" % (want, hist))
    ctl.post("prices", {"type": "g5.xlarge", "zone": "us-east-1c", "price": 0.55})
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    hist = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"], StartTime=since,
                                           AvailabilityZone="us-east-1c")["SpotPriceHistory"]
    check([float(h["SpotPrice"]) for h in hist] == [0.55, want],
          "newest first, with the price in effect at StartTime: %s" % hist)
    check(ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"],
                                          ProductDescriptions=["Windows"])["SpotPriceHistory"]
          == [], "no Windows prices")
    cap = {"MarketType": "spot", "SpotOptions": {"MaxPrice": "0.5"}}
    check(error_of(run_one, ec2, InstanceMarketOptions=cap,
                   Placement={"AvailabilityZone": "us-east-1c"})[0] == "SpotMaxPriceTooLow",
          "the new price counts")
    ctl.post("fail", {"clear": True})
    iid = run_one(ec2, InstanceMarketOptions=cap)
    check(describe(ec2, iid)["Placement"]["AvailabilityZone"] != "us-east-1c",
          "EC2 picks a zone under the max price")

    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    check([(z["ZoneName"], z["ZoneId"], z["State"]) for z in zones]
          == [("us-east-1a", "use1-az1", "available"), ("us-east-1b", "use1-az2", "available"),
              ("us-east-1c", "use1-az3", "available")], "zones: %s" % zones)
    types = ec2.describe_instance_types(InstanceTypes=["p3.2xlarge", "g5.12xlarge"])["InstanceTypes"]
    gpus = {t["InstanceType"]: t["GpuInfo"]["Gpus"][0] for t in types}
    check(gpus["p3.2xlarge"]["Name"] == "V100" and gpus["p3.2xlarge"]["Count"] == 1
          and gpus["g5.12xlarge"]["Count"] == 4
          and gpus["g5.12xlarge"]["MemoryInfo"]["SizeInMiB"] == 24576, "GPU info: %s" % gpus)
    check(error_of(ec2.describe_instance_types, InstanceTypes=["x9.huge"])[0]
          == "InvalidInstanceType", "an unknown type")


def case_shutdown_shim(st, tmp):
    ec2 = client(st)
    ud = "#!/bin/bash\nsleep 300 &\necho $! > child.pid\n%s -h now\nsleep 300\n"
    ends = run_one(ec2, ud % "shutdown", InstanceInitiatedShutdownBehavior="terminate")
    stops = run_one(ec2, ud % "poweroff")
    ctl = E.StandinControl(st.control_url)
    wait_for(lambda: state_of(ec2, ends) == "terminated", "shutdown to terminate it")
    wait_for(lambda: state_of(ec2, stops) == "stopped", "poweroff to stop it")
    for iid in (ends, stops):
        d = describe(ec2, iid)
        check(d["StateReason"]["Code"] == "Client.InstanceInitiatedShutdown", "reason: %s" % d)
        info = ctl.instance(iid)
        child = int(open(os.path.join(info["dir"], "child.pid")).read())
        check(pid_gone(info["pid"]) and pid_gone(child), "%s's processes are gone" % iid)
    r = ec2.terminate_instances(InstanceIds=[stops])["TerminatingInstances"][0]
    check(r["PreviousState"]["Name"] == "stopped", "a stopped instance can be terminated")
    wait_for(lambda: state_of(ec2, stops) == "terminated", "the stopped one's end")


def case_cli(st, tmp):
    state = os.path.join(tmp, "cli")
    args = [sys.executable, SCRIPT, "--state-dir", state, "--time-scale", "600",
            "--boot-seconds", "6", "--price", "g5.xlarge=0.3"]
    if PRICES:
        args += ["--prices", PRICES]
    bad = subprocess.run([sys.executable, SCRIPT, "--state-dir", state, "--time-scale", "0"],
                         capture_output=True, text=True, timeout=30)
    check(bad.returncode == 2 and "time_scale" in bad.stderr, "a bad time scale: %s" % bad.stderr)
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        hello = json.loads(p.stdout.readline())
        check(hello["control"] == "http://127.0.0.1:%d/_standin" % hello["port"], "hello: %s" % hello)

        class Where:
            url = "http://127.0.0.1:%d" % hello["port"]
        ec2 = client(Where)
        hist = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
        check({h["SpotPrice"] for h in hist} == {"0.300000"}, "--price wins: %s" % hist)
        iid = run_one(ec2, "#!/bin/sh\nsleep 300\n")
        ctl = E.StandinControl(hello["control"])
        wait_for(lambda: ctl.instance(iid)["pid"], "the instance's process")
        pid = ctl.instance(iid)["pid"]
        check(ctl.get()["time_scale"] == 600, "summary")
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=20) == 0, "exits 0 on SIGTERM: %s" % p.stderr.read())
        wait_for(lambda: pid_gone(pid), "the instance to end with the stand-in")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def case_regions(st, tmp):
    east, west = client(st), client(st, region_name="us-west-2")
    ctl = E.StandinControl(st.control_url)
    check([z["ZoneName"] for z in west.describe_availability_zones()["AvailabilityZones"]]
          == ["us-west-2a", "us-west-2b", "us-west-2c"], "us-west-2 has its own zones")
    hist = west.describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
    check(sorted(h["AvailabilityZone"] for h in hist) == ["us-west-2a", "us-west-2b", "us-west-2c"]
          and {h["SpotPrice"] for h in hist} == {"0.300000"},
          "us-west-2's prices (TYPE/REGION): %s" % hist)
    hist = east.describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
    check({h["AvailabilityZone"][:9] for h in hist} == {"us-east-1"}
          and "0.300000" not in {h["SpotPrice"] for h in hist}, "us-east-1's own: %s" % hist)
    check(error_of(client(st, region_name="eu-west-1").describe_instances)[0] == "AuthFailure",
          "a region it does not serve is refused")

    # no spot capacity anywhere in us-east-1: its launches fail, us-west-2's do not
    ctl.post("fail", {"code": "InsufficientInstanceCapacity", "region": "us-east-1",
                      "count": -1})
    check(error_of(run_one, east, InstanceMarketOptions=SPOT)[0] == "InsufficientInstanceCapacity",
          "us-east-1 has no capacity")
    iid = run_one(west, "#!/bin/sh\nsleep 300\n", InstanceMarketOptions=SPOT, ClientToken="tok-1")
    ctl.post("fail", {"clear": True})
    d = describe(west, iid)
    check(d["Placement"]["AvailabilityZone"] == "us-west-2a"
          and d["SubnetId"] in ctl.get()["regions"]["us-west-2"]["subnets"],
          "launched in us-west-2: %s" % d["Placement"])
    check(ctl.instance(iid)["region"] == "us-west-2", "the control API names its region")
    check(east.describe_instances()["Reservations"] == [], "us-east-1 does not list it")
    check(error_of(east.describe_instances, InstanceIds=[iid])[0] == "InvalidInstanceID.NotFound",
          "nor knows its id")
    other = run_one(east, ClientToken="tok-1")
    check(other != iid and describe(east, other)["Placement"]["AvailabilityZone"][:9] == "us-east-1",
          "client tokens are per region")
    imds = wait_for(lambda: ctl.instance(iid)["pid"] and ctl.instance(iid)["imds"], "the boot")
    check(imds_get(imds, "/latest/meta-data/placement/region") == (200, "us-west-2"),
          "its metadata names its region")

    ctl.post("deny", {"action": "RunInstances", "region": "us-west-2"})
    check(error_of(run_one, west, DryRun=True)[0] == "UnauthorizedOperation"
          and error_of(run_one, east, DryRun=True)[0] == "DryRunOperation",
          "a denial in one region only")
    ctl.post("deny", {"action": "RunInstances", "region": "us-west-2", "deny": False})
    ctl.post("prices", {"type": "g5.xlarge", "region": "us-west-2", "price": 0.25})
    hist = west.describe_spot_price_history(InstanceTypes=["g5.xlarge"], AvailabilityZone="us-west-2b")
    check(float(hist["SpotPriceHistory"][0]["SpotPrice"]) == 0.25, "a region's price change")
    check(error_of(east.terminate_instances, InstanceIds=[iid])[0] == "InvalidInstanceID.NotFound",
          "another region cannot terminate it")
    west.terminate_instances(InstanceIds=[iid])
    wait_for(lambda: state_of(west, iid) == "terminated", "its end")
    check(state_of(east, other) in ("pending", "running"), "us-east-1's instance runs on")


CASES = {
    "run-imds": (case_run_imds, {}),
    "idempotency": (case_idempotency, {}),
    "describe-filters": (case_describe_filters, {}),
    "terminate": (case_terminate, {"time_scale": 60, "boot_seconds": 3, "grace_seconds": 30}),
    "interrupt-notice": (case_interrupt_notice, {"time_scale": 120}),
    "interrupt-hard": (case_interrupt_hard, {}),
    "auth": (case_auth, {}),
    "errors": (case_errors, {}),
    "dryrun": (case_dryrun, {}),
    "market": (case_market, {}),
    "shutdown-shim": (case_shutdown_shim, {}),
    "cli": (case_cli, None),
    "regions": (case_regions, {"region": "us-east-1,us-west-2",
                               "prices": {"g5.xlarge/us-west-2": 0.3}}),
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        print("usage: %s CASE [PRICES_CSV]; cases: %s" % (sys.argv[0], " ".join(CASES)),
              file=sys.stderr)
        return 2
    if PRICES and not os.path.isfile(PRICES):
        print("FAIL %s: the price file %s is missing" % (sys.argv[1], PRICES), file=sys.stderr)
        return 1
    fn, opts = CASES[sys.argv[1]]
    tmp = tempfile.mkdtemp(prefix="ec2-standin-")
    st = None
    try:
        if opts is not None:
            kw = dict(time_scale=600, boot_seconds=6, grace_seconds=30)
            kw.update(opts)
            prices = {} if PRICES else {"g5.xlarge": 0.4}
            prices.update(kw.pop("prices", {}))
            st = E.Ec2Standin(os.path.join(tmp, "ec2"), prices=prices, prices_file=PRICES,
                              **kw).start()
        fn(st, tmp)
    except Fail as e:
        print("FAIL %s: %s" % (sys.argv[1], e), file=sys.stderr)
        return 1
    finally:
        if st:
            st.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok %s" % sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
