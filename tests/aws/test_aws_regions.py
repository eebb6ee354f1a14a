#!/usr/bin/python3
"""A gateway whose aws provider spans two regions (regions = us-east-1, us-west-2).

usage: test_aws_regions.py GATEWAY WORKER TRAIN KERNEL

The EC2 stand-in serves both regions; the bucket is in us-east-1, the first of them
(no [store] region).
  - `spotlab-gateway --check aws` checks each region in its own section, and
    a RunInstances denied in us-west-2 alone is named in that section;
  - with no spot capacity anywhere in us-east-1, a spot train job launches
    in us-west-2, every RunInstances refused in us-east-1 went there, and
    the job runs to its end from there (its worker reaches the gateway and
    the bucket in us-east-1);
  - its data file goes to the bucket first (_data/alice/SHA256, its
    x-amz-meta-sha256 the file's) and the job trains on that copy: the
    notebook's file is removed once the job is taken;
  - once its worker idles out, no instance of this gateway is left running
    in either region.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from aws_env import AwsEnv, PREFIX, SECRET_ACCESS_KEY, end_test  # noqa: E402
from checks import check, exit_status, log  # noqa: E402
from notebook import FINAL, Monitor, write_text  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-regions-token-0123456789abcdef"
EAST, WEST = "us-east-1", "us-west-2"
ZONES = (EAST + "a", EAST + "b", WEST + "a", WEST + "b")
MODEL = {"layers": 2, "heads": 2, "dim": 32, "ctx": 64}
def check_aws(env):
    """--check aws with the gateway's configuration: a section per region."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    run_env.update({k: v for k, v in env.gw.env.items() if v is not None})
    cmd = [GATEWAY, "--config", env.gw.ini, "--check", "aws"]
    p = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=120)
    log("--check aws:\n" + p.stdout)
    sections = p.stdout.split("\n\n")
    check(p.returncode == 0 and len(sections) == 2 and sections[0].startswith("region: " + EAST)
          and sections[1].startswith("region: " + WEST) and "missing" not in p.stdout
          and all("RunInstances: ok" in s for s in sections),
          "--check aws passes in each region (exit %d)" % p.returncode, p.stdout + p.stderr)
    calls = [c for c in env.ec2.calls() if c.get("action") == "RunInstances"]
    check({c.get("region") for c in calls} == {EAST, WEST},
          "its dry runs went to both regions (%s)" % sorted({c.get("region") for c in calls}))
    env.ec2.post("deny", {"action": "RunInstances", "region": WEST})
    p = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=120)
    env.ec2.post("deny", {"action": "RunInstances", "region": WEST, "deny": False})
    sections = p.stdout.split("\n\n")
    check(p.returncode != 0 and len(sections) == 2 and "missing" not in sections[0]
          and "missing IAM permission ec2:RunInstances" in sections[1],
          "a permission missing in us-west-2 alone is named there (exit %d)" % p.returncode,
          p.stdout + p.stderr)
    check(SECRET_ACCESS_KEY not in p.stdout + p.stderr, "--check aws prints no secret")
    env.ec2.post("reset_calls", {})


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-regions-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    env = mon = None
    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN}, time_scale=20,
                     boot_seconds=40, regions=(EAST, WEST), zones=ZONES,
                     heartbeat_timeout_s=4, extra_ini="[idle]\nworker_timeout = 4s\n")
        check_aws(env)
        # no spot capacity of any type anywhere in us-east-1, the bucket's region
        env.ec2.fail(code="InsufficientInstanceCapacity", region=EAST, count=-1)
        env.gw.start()
        mon = Monitor(env.gw.listen, TOKEN)
        r = mon.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        assert r["ok"], r
        r = mon.submit(kind="train", model="m", data="d",
                    options={"steps": 60, "batch": 8, "seed": 1, "checkpoint_every": 20,
                             "spot": "yes"})
        assert r["ok"], r
        job = r["job"]
        with open(text, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        os.unlink(text)  # the instance reads the bucket's copy, never the notebook's file
        mon.follow(job)
        mon.until(lambda: mon.state() in FINAL, "the end of the job", 240, end_ok=True)
        check(mon.state() == "succeeded", "the job succeeded (%s)" % mon.state())
        body, meta = env.s3.get("%s/_data/alice/%s" % (PREFIX, sha))
        check(hashlib.sha256(body).hexdigest() == sha and meta.get("sha256") == sha,
              "the data file is in the bucket as _data/alice/%.12s…, its SHA-256 with it" % sha)

        runs = [c for c in env.ec2.calls() if c.get("action") == "RunInstances"]
        east = [c for c in runs if c.get("region") == EAST]
        west_ok = [c for c in runs if c.get("region") == WEST and c.get("code") == "OK"]
        check(east and all(c.get("code") == "InsufficientInstanceCapacity" for c in east),
              "us-east-1 was tried first and refused every launch (%d calls)" % len(east))
        check(len(west_ok) >= 1, "the launch went to us-west-2 (%d)" % len(west_ok))
        mine = [i for i in env.ec2.instances() if env.ec2.tag(i, "spotlab:gateway")]
        check(mine and all(i.get("region") == WEST for i in mine),
              "the job's instances ran in us-west-2: %s"
              % [(i["id"], i.get("region"), i.get("zone")) for i in mine])
        placed = [e for e in mon.mine("placed")]
        check(bool(placed), "the job was placed")
        check(all(c.get("signature_ok") for c in env.ec2.calls()), "every call signed correctly")

        deadline = time.monotonic() + 90
        while True:
            live = [i for i in env.ec2.instances() if env.ec2.tag(i, "spotlab:gateway")
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
