"""The EC2 client (aws_ec2, through aws-ec2-tool) against the EC2 stand-in.

Launches a tagged spot instance with user data and a client token (twice:
one instance), finds it by tag and by id, reads spot prices and placement
scores, rides out a throttled call, maps a capacity error, terminates the
instance, runs the dry runs and `--check aws` with a denied action, and
finally asks the stand-in whether every call it saw was correctly signed.

Usage: test_aws_ec2_live.py AWS_EC2_TOOL
"""

import base64
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from ec2_standin import (DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY,  # noqa: E402
                         Ec2Standin, StandinControl)

TOOL = sys.argv[1]
GATEWAY = "gw-live-7c1d"
USER_DATA = "#!/bin/sh\n# spotlab worker boot\nexec sleep 600\n"
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)
    else:
        print("ok:", what)


def tool(env, *args):
    """(exit status, JSON result or the lines of `check`)."""
    p = subprocess.run([TOOL, *args], env=env, capture_output=True, text=True, timeout=60)
    if p.stderr:
        sys.stderr.write(p.stderr)
    if args[0] == "check":
        return p.returncode, p.stdout.splitlines()
    out = p.stdout.strip()
    try:
        return p.returncode, json.loads(out) if out else None
    except ValueError:
        return p.returncode, out


def main():
    with tempfile.TemporaryDirectory() as state, Ec2Standin(
            state, time_scale=600.0, boot_seconds=30.0) as ec2:
        ctl = StandinControl(ec2.control_url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=DEFAULT_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=DEFAULT_SECRET_KEY,
                   AWS_REGION="us-east-1", AWS_ENDPOINT_URL_EC2=ec2.url,
                   AWS_EC2_METADATA_DISABLED="true",
                   AWS_SHARED_CREDENTIALS_FILE=os.path.join(state, "none"),
                   AWS_CONFIG_FILE=os.path.join(state, "none"), NO_PROXY="127.0.0.1")

        # Launch: spot, tags, user data, a client token; the same token again
        # is the same instance.
        run = ["run", "g5.xlarge", "--spot", "--max-price", "0.9", "--token", "J000001-a1",
               "--user-data", USER_DATA, "--tag", "spotlab:gateway=" + GATEWAY,
               "--tag", "spotlab:instance=aws-0001-1", "--tag", "spotlab:job=1"]
        rc, first = tool(env, *run)
        check(rc == 0 and first["id"].startswith("i-"), "run: %s" % first)
        rc, again = tool(env, *run)
        check(rc == 0 and again["id"] == first["id"], "the same client token, the same instance")
        check(first["spot"] and first["tag_gateway"] == GATEWAY and first["tag_job"] == "1"
              and first["tag_instance"] == "aws-0001-1", "run's reply carries spot and the tags")
        mine = [i for i in ctl.get("instances")["instances"] if i["id"] == first["id"]]
        check(len(ctl.get("instances")["instances"]) == 1, "one instance in the stand-in")
        calls = ctl.get("calls", action="RunInstances")["calls"]
        params = calls[0]["params"] if calls else {}
        check(base64.b64decode(params.get("UserData", "")).decode() == USER_DATA,
              "user data arrives base64-encoded and intact")
        check(params.get("InstanceMarketOptions.MarketType") == "spot"
              and params.get("InstanceMarketOptions.SpotOptions.MaxPrice") == "0.900000"
              and params.get("InstanceInitiatedShutdownBehavior") == "terminate",
              "spot options and shutdown behaviour sent")
        check(bool(mine), "the stand-in knows the instance")

        # Describe by tag (all pages) and by id.
        rc, found = tool(env, "describe", "--tag", "spotlab:gateway=" + GATEWAY)
        check(rc == 0 and [i["id"] for i in found] == [first["id"]], "describe by tag")
        rc, none = tool(env, "describe", "--tag", "spotlab:gateway=another")
        check(rc == 0 and none == [], "describe by another gateway's tag finds nothing")
        rc, by_id = tool(env, "describe", "--id", first["id"])
        check(rc == 0 and len(by_id) == 1 and by_id[0]["type"] == "g5.xlarge"
              and by_id[0]["zone"].startswith("us-east-1"), "describe by id")

        # Spot prices: one newest price per (type, zone).
        rc, prices = tool(env, "prices", "g5.xlarge", "g4dn.xlarge")
        pairs = [(p["type"], p["zone"]) for p in prices] if rc == 0 else []
        check(rc == 0 and len(pairs) >= 2 and len(pairs) == len(set(pairs))
              and all(p["usd_per_hour"] > 0 for p in prices)
              and {p["type"] for p in prices} == {"g5.xlarge", "g4dn.xlarge"},
              "spot prices: %s" % prices)

        # Placement scores per zone.
        rc, scores = tool(env, "scores", "1", "g5.xlarge", "g4dn.xlarge", "p3.2xlarge")
        check(rc == 0 and scores and all(1 <= s["score"] <= 10 and s["zone_id"]
                                         and s["region"] == "us-east-1" for s in scores),
              "placement scores: %s" % scores)
        rc, few = tool(env, "scores", "1", "g5.xlarge", "g4dn.xlarge")
        check(rc == 1 and few["error"] == "EINVAL", "scores need three types")

        # A throttled call is retried inside the client; a capacity error
        # maps to EAGAIN with EC2's code and message.
        ctl.post("fail", {"code": "RequestLimitExceeded", "count": 1,
                          "action": "DescribeInstances"})
        rc, found = tool(env, "describe", "--id", first["id"])
        check(rc == 0 and len(found) == 1, "RequestLimitExceeded once: retried, answered")
        ctl.post("fail", {"code": "InsufficientInstanceCapacity", "count": 1,
                          "action": "RunInstances"})
        rc, err = tool(env, "run", "p3.2xlarge", "--spot", "--token", "J000002-a1")
        check(rc == 1 and err["error"] == "EAGAIN" and err["code"] == "InsufficientInstanceCapacity"
              and err["message"] and err["status"] >= 400, "capacity error: %s" % err)
        ctl.post("fail", {"clear": True})

        # Dry runs; a denied action is SL_EAUTH with UnauthorizedOperation.
        for action in ("RunInstances", "DescribeInstances", "DescribeSpotPriceHistory",
                       "GetSpotPlacementScores"):
            rc, res = tool(env, "dry-run", action)
            check(rc == 0 and res == {"dry_run_ok": True}, "dry run %s: %s" % (action, res))
        rc, res = tool(env, "run", "g5.xlarge", "--spot", "--dry-run", "--tag", "spotlab:job=1")
        check(rc == 0 and res == {"dry_run_ok": True}, "a launch's dry run")
        check(len(ctl.get("instances")["instances"]) == 1, "dry runs launched nothing")
        ctl.post("deny", {"action": "GetSpotPlacementScores"})
        rc, res = tool(env, "dry-run", "GetSpotPlacementScores")
        check(rc == 1 and res["error"] == "SL_EAUTH" and res["code"] == "UnauthorizedOperation",
              "denied dry run: %s" % res)

        # --check aws: every line, the denied action named as a missing
        # permission, exit status 1; TerminateInstances checked on the
        # running spotlab instance.
        rc, lines = tool(env, "check")
        print("\n".join("  | " + ln for ln in lines))
        check(rc == 1, "check fails while an action is denied")
        check("credentials: environment" in lines, "check names the credential source")
        check(not any(DEFAULT_SECRET_KEY in ln or DEFAULT_ACCESS_KEY in ln for ln in lines),
              "check prints no key")
        check("GetSpotPlacementScores: missing IAM permission ec2:GetSpotPlacementScores" in lines,
              "the denied action is a missing permission")
        for ok in ("DescribeInstances", "DescribeSpotPriceHistory", "RunInstances",
                   "CreateTags (on launch)", "TerminateInstances"):
            check(ok + ": ok" in lines, ok + " allowed")
        ctl.post("deny", {"action": "GetSpotPlacementScores", "deny": False})
        ctl.post("deny", {"action": "TerminateInstances"})
        rc, lines = tool(env, "check")
        check(rc == 1 and "TerminateInstances: missing IAM permission ec2:TerminateInstances"
              in lines, "TerminateInstances denied on a tagged instance")
        ctl.post("deny", {"action": "TerminateInstances", "deny": False})
        rc, lines = tool(env, "check")
        check(rc == 0 and "result: ok" in lines, "check passes with nothing denied")

        # A launch EC2 refuses for another reason: said plainly, and the
        # steps after it not checked (their answer would mislead).
        rc, lines = tool(env, "check", "--ami", "image-7")
        check(rc == 1 and any(ln.startswith("RunInstances: EC2 error InvalidAMIID.Malformed: ")
                              for ln in lines)
              and "CreateTags (on launch): not checked: RunInstances failed" in lines,
              "a malformed image is reported, later steps skipped")
        # No credentials at all: one line saying so, SL_EAUTH.
        bare = {k: v for k, v in env.items() if not k.startswith("AWS_SECRET")
                and not k.startswith("AWS_ACCESS")}
        rc, lines = tool(bare, "check")
        check(rc == 1 and any(ln.startswith("credentials: ") for ln in lines)
              and "result: SL_EAUTH" in lines, "no credentials: %s" % lines)

        # Terminate: the instance is going or gone, its reason kept.
        rc, res = tool(env, "terminate", first["id"])
        check(rc == 0, "terminate: %s" % res)
        rc, by_id = tool(env, "describe", "--id", first["id"])
        check(rc == 0 and by_id and by_id[0]["state"] in ("shutting-down", "terminated"),
              "terminated: %s" % by_id)
        rc, live = tool(env, "describe", "--tag", "spotlab:gateway=" + GATEWAY)
        check(rc == 0 and all(i["state"] != "terminated" for i in live),
              "describe by tag leaves terminated instances out")
        rc, err = tool(env, "terminate", "i-0fffffffffffffff0")
        check(rc == 1 and err["error"] == "ENOENT", "terminating an unknown id: %s" % err)

        # A wrong secret: AuthFailure or SignatureDoesNotMatch, SL_EAUTH.
        bad = dict(env, AWS_SECRET_ACCESS_KEY="not-the-secret")
        rc, err = tool(bad, "describe")
        check(rc == 1 and err["error"] == "SL_EAUTH", "a wrong secret is SL_EAUTH: %s" % err)

        calls = ctl.get("calls")["calls"]
        wrong = [c for c in calls if not c["signature_ok"]]
        check(len(calls) > 20 and len(wrong) == 1 and wrong[0]["action"] == "DescribeInstances",
              "every call signed correctly but the wrong secret's (%d calls)" % len(calls))
        check(all(c["access_key"] == DEFAULT_ACCESS_KEY for c in calls if c["signature_ok"]),
              "calls carry the access key")

    print("%d failed" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
