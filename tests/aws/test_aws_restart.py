#!/usr/bin/python3
"""A gateway killed mid-launch on the aws provider, and instances it does not know.

usage: test_aws_restart.py GATEWAY WORKER TRAIN KERNEL

The EC2 stand-in boots instances slowly, so a launch is still in flight
when the test SIGKILLs the gateway, the moment the stand-in records its
RunInstances call. While the gateway is down, the test starts two more
instances itself: one tagged with this gateway's id (spotlab:gateway) and
an instance name the gateway never chose, and one tagged with another
gateway's id. A new gateway on the same state folder then:
  - starts no second instance for the launch it was killed in: every
    spotlab:instance tag names one instance (the launch's ClientToken is
    reused, or the instance adopted);
  - terminates the unknown instance with its id, and leaves the other
    gateway's alone;
  - runs the job to its end, and once its worker idles out no instance of
    this gateway is left running.
"""
import os
import subprocess
import sys
import tempfile
import time

import boto3

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from aws_env import (AwsEnv, ACCESS_KEY_ID, AMI, REGION, SECRET_ACCESS_KEY, end_test)  # noqa: E402
from checks import check, exit_status, log  # noqa: E402
from notebook import FINAL, Monitor, write_text  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-restart-token-0123456789abcdef"
TIME_SCALE = 20
SLOW_BOOT_S = 400          # 20 s of wall time: the launch is pending when the gateway dies
BOOT_S = 40
MODEL = {"layers": 2, "heads": 2, "dim": 32, "ctx": 64}
STEPS = 200


def tagged(env, key, value):
    return [i for i in env.ec2.instances() if env.ec2.tag(i, key) == value]


def run_own(env, gateway_id, name):
    """RunInstances as someone else would call it: an instance tagged as spotlab's."""
    ec2 = boto3.session.Session(aws_access_key_id=ACCESS_KEY_ID,
                                aws_secret_access_key=SECRET_ACCESS_KEY,
                                region_name=REGION).client("ec2", endpoint_url=env.ec2.endpoint)
    r = ec2.run_instances(
        ImageId=AMI, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        Placement={"AvailabilityZone": "us-east-1b"},
        InstanceMarketOptions={"MarketType": "spot"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "spotlab:gateway", "Value": gateway_id},
            {"Key": "spotlab:instance", "Value": name},
            {"Key": "spotlab:job", "Value": ""}]}])
    return r["Instances"][0]["InstanceId"]


def wait_run_call(env, timeout):
    """Polls the stand-in's call log until a RunInstances call appears; that call."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in env.ec2.calls():
            if c.get("action") == "RunInstances":
                return c
        time.sleep(0.02)  # the stand-in's log has no event to wait on; react within 20 ms
    raise TimeoutError("no RunInstances call within %ds" % timeout)


def check_aws(env):
    """spotlab-gateway --check aws with the gateway's configuration: every EC2
    call allowed, then RunInstances denied and named as a missing permission."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    run_env.update({k: v for k, v in env.gw.env.items() if v is not None})
    cmd = [GATEWAY, "--config", env.gw.ini, "--check", "aws"]
    p = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=120)
    log("--check aws:\n" + p.stdout)
    check(p.returncode == 0 and "missing" not in p.stdout and "RunInstances" in p.stdout,
          "--check aws passes with every permission (exit %d)" % p.returncode, p.stdout + p.stderr)
    check(SECRET_ACCESS_KEY not in p.stdout + p.stderr, "--check aws prints no secret")
    env.ec2.post("deny", {"action": "RunInstances"})
    p = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=120)
    env.ec2.post("deny", {"action": "RunInstances", "deny": False})
    env.ec2.post("reset_calls", {})  # the dry runs are not the launch the test waits for
    check(p.returncode != 0 and "missing IAM permission ec2:RunInstances" in p.stdout,
          "--check aws names the missing permission (exit %d)" % p.returncode, p.stdout + p.stderr)


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-restart-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    env = mon = None
    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN}, time_scale=TIME_SCALE,
                     boot_seconds=SLOW_BOOT_S, heartbeat_timeout_s=4,
                     extra_ini="[idle]\nworker_timeout = 4s\n")
        check_aws(env)
        env.gw.start()
        mon = Monitor(env.gw.listen, TOKEN)
        r = mon.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        assert r["ok"], r
        r = mon.submit(kind="train", model="m", data="d",
                    options={"steps": STEPS, "batch": 8, "seed": 1, "checkpoint_every": 50,
                             "spot": "yes"})
        assert r["ok"], r
        job = r["job"]
        call = wait_run_call(env, 120)
        env.gw.kill()
        mon.close()
        log("gateway killed after RunInstances call #%d (%s)" % (call["seq"], call.get("code")))
        token = call["params"].get("ClientToken")
        check(bool(token), "the launch carries a ClientToken (%s)" % token)
        # the stand-in answers the call even though its caller is gone
        deadline = time.monotonic() + 10
        while not env.ec2.instances() and time.monotonic() < deadline:
            time.sleep(0.05)  # the stand-in's state has no event to wait on
        first = env.ec2.instances()
        check(len(first) == 1, "the killed launch made one instance (%d)" % len(first))
        gw_id = env.ec2.tag(first[0], "spotlab:gateway") if first else None
        name = env.ec2.tag(first[0], "spotlab:instance") if first else None
        check(bool(gw_id) and bool(name), "it is tagged spotlab:gateway=%s spotlab:instance=%s"
              % (gw_id, name))
        log("pending instance %s (%s, %s)" % (first[0]["id"] if first else None, name,
                                              first[0]["state"] if first else None))
        ghost = run_own(env, gw_id or "unknown", "i-ghost-never-launched")
        other = run_own(env, "another-gateway-id", "i-someone-elses")
        log("while down: ghost %s, another gateway's %s" % (ghost, other))
        env.ec2.set_boot_seconds(BOOT_S)
        since = env.ec2.calls()[-1]["seq"]

        env.gw.start()
        mon = Monitor(env.gw.listen, TOKEN)
        mon.follow(job)
        mon.until(lambda: mon.state() in FINAL, "the end of the job", 240, end_ok=True)
        check(mon.state() == "succeeded", "the job succeeded after the restart (%s)" % mon.state())

        after = [c for c in env.ec2.calls() if c["seq"] > since]
        terms = [c for c in after if c.get("action") == "TerminateInstances"]
        named = lambda iid: any(iid in c["params"].values() for c in terms)
        check(named(ghost), "the new gateway terminated the unknown instance tagged with its id")
        check(not named(other), "it left the other gateway's instance alone")
        st = {i["id"]: i["state"] for i in env.ec2.instances()}
        check(st.get(ghost) in ("shutting-down", "terminated"), "the unknown instance is %s"
              % st.get(ghost))
        check(st.get(other) == "running", "the other gateway's instance still runs (%s)"
              % st.get(other))
        runs = [c for c in after if c.get("action") == "RunInstances"]
        again = [c for c in runs if c["params"].get("ClientToken") == token]
        log("after the restart: %d RunInstances (%d with the killed launch's token), %d "
            "TerminateInstances" % (len(runs), len(again), len(terms)))
        mine = [i for i in env.ec2.instances() if env.ec2.tag(i, "spotlab:gateway") == gw_id
                and i["id"] != ghost]
        names = [env.ec2.tag(i, "spotlab:instance") for i in mine]
        dup = sorted({n for n in names if names.count(n) > 1})
        check(not dup, "one instance per spotlab:instance tag (%d instances%s)"
              % (len(mine), ", duplicated %s" % dup if dup else ""))
        check(len(tagged(env, "spotlab:instance", name)) == 1,
              "the killed launch's instance %s exists once" % name)

        deadline = time.monotonic() + 90
        while True:
            live = [i for i in env.ec2.instances() if env.ec2.tag(i, "spotlab:gateway") == gw_id
                    and i["state"] != "terminated"]
            if not live or time.monotonic() > deadline:
                break
            mon.pump(0.2)
        check(not live, "no instance of this gateway is left running%s"
              % (": %s" % [(i["id"], i["state"]) for i in live] if live else ""))
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, (mon,), tail=8000)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
