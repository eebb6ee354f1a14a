#!/usr/bin/python3
"""A notebook trains on the aws provider with an S3 store, through loopback
stand-ins (tests/pylib/aws_env.py): s3rver, the EC2 stand-in and its
instances as local processes, and a real spotlab-gateway, spotlab-worker
(from the worker bundle the gateway publishes to the store) and
spotlab-train, driven by a real spotlab-kernel through jupyter_client.

usage: test_aws_e2e.py GATEWAY WORKER TRAIN KERNEL

  (c) the cheapest type and zone (g4dn.xlarge in us-east-1a, by the prices
      the stand-in reports) answers InsufficientInstanceCapacity: the first
      launch moves to another zone or type;
  (a) a spot notice through the stand-in's metadata service: zero steps
      lost (the job resumes from the newest step it reported);
  (b) an interruption without notice (the instance's processes killed): the
      job resumes from its newest checkpoint in S3;
  then the job finishes, the cell says so, and:
  - every instance the stand-in ran is terminated (idle timeout);
  - every EC2 call was signed correctly (the stand-in checks each with
    botocore) with the gateway's key;
  - every checkpoint left in S3 reads back with boto3, its x-amz-meta-sha256
    matches its bytes, spotlab-train --check accepts it, and at most `keep`
    remain for the job;
  - no AWS credential reaches an instance (environment, user data, logs) or
    a log line, and no presigned URL reaches the gateway's log.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from aws_env import AwsEnv, ACCESS_KEY_ID, CREDENTIAL_VARS, end_test  # noqa: E402
from checks import check, exit_status, log  # noqa: E402
from kernelspec_env import KernelspecEnv  # noqa: E402
from notebook import FINAL, Monitor, Notebook, write_text  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-e2e-token-0123456789abcdef"
STEPS, EVERY, KEEP = 3000, 25, 2
TIME_SCALE = 20            # the 120 s notice lasts 6 s, a 40 s boot 2 s
BOOT_S = 40
DEFS_CELL = 'model m = gpt(layers=2, heads=2, dim=32, ctx=64)\ndata d = text("%s")'
TRAIN_CELL = ("train m on d steps=%d batch=8 lr=3e-3 seed=5 checkpoint_every=%d spot=yes"
              % (STEPS, EVERY))
FIRST = ("g4dn.xlarge", "us-east-1a")


def run_calls(env):
    """The stand-in's RunInstances calls: [(type, zone, code, time)]."""
    out = []
    for c in env.ec2.calls():
        if c.get("action") == "RunInstances":
            p = c.get("params", {})
            out.append((p.get("InstanceType"), p.get("Placement.AvailabilityZone"), c.get("code"),
                        c.get("time")))
    return out


class Watch:
    """Runs on every gateway message: samples the environment of the instances'
    processes while they run."""

    def __init__(self, env):
        self.env = env
        self.leaks = {}
        self.samples = 0
        self.next = 0

    def __call__(self, m):
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + 0.5
        self.leaks.update(self.env.instance_env_leaks())
        self.samples += 1


def preempt(env, mon, notice):
    """Interrupts the job's instance through the stand-in; its EC2 id."""
    mon.until(lambda: mon.instance() is not None, "the job placed", 120)
    name = mon.instance()
    rec = env.ec2.by_spotlab(name)
    if rec is None:
        raise RuntimeError("the stand-in has no instance tagged spotlab:instance=%s" % name)
    r = env.ec2.interrupt(rec["id"], notice)
    log("interrupt %s (%s) %s: %s" % (rec["id"], name, "with notice" if notice else "without notice",
                                      r))
    return rec["id"], name


def case_notice(env, mon):
    mon.until(lambda: mon.step() >= 4 * EVERY + 7, "step %d" % (4 * EVERY + 7), 180)
    n_pre, n_res = len(mon.mine("preempted")), len(mon.mine("resumed"))
    preempt(env, mon, True)
    mon.until(lambda: len(mon.mine("preempted")) > n_pre and len(mon.mine("resumed")) > n_res,
              "the resume after the notice", 180)
    pre = mon.mine("preempted")[-1]
    res = mon.mine("resumed")[-1]
    notices = mon.mine("notice")
    att = mon.attempts()
    reached = max(att[-2]) if len(att) >= 2 and att[-2] else -1
    at_notice = max((e["step"] for e in mon.mine()[:mon.mine().index(notices[-1])]
                     if e["event"] == "metric" and isinstance(e.get("step"), int)),
                    default=-1) if notices else -1
    log("(a) notice at step %d; last step reported %d; preempted at %s; resumed from %d"
        % (at_notice, reached, pre.get("step"), res["from_step"]))
    check(bool(notices) and pre.get("notice") is True, "(a) the preemption came with a notice")
    check(res["from_step"] == reached and reached >= at_notice,
          "(a) zero steps lost: resumed from %d, the last step reported before the instance "
          "went %d (step at the notice %d)" % (res["from_step"], reached, at_notice))


def case_kill(env, mon):
    n_ck = len(mon.mine("checkpoint"))
    mon.until(lambda: len(mon.mine("checkpoint")) >= n_ck + 2, "two more checkpoints", 180)
    n_pre, n_res = len(mon.mine("preempted")), len(mon.mine("resumed"))
    preempt(env, mon, False)
    mon.until(lambda: len(mon.mine("preempted")) > n_pre and len(mon.mine("resumed")) > n_res,
              "the resume after the loss", 180)
    evs = mon.mine()
    pi = evs.index(mon.mine("preempted")[-1])
    pre, res = evs[pi], mon.mine("resumed")[-1]
    cks = [e for e in evs[:pi] if e["event"] == "checkpoint"]
    newest = cks[-1]
    log("(b) lost without notice; newest checkpoint %s (step %d); resumed from %d"
        % (newest.get("path"), newest["step"], res["from_step"]))
    check(pre.get("notice") is False, "(b) the loss had no notice")
    check(res["from_step"] == newest["step"],
          "(b) resumed from the newest checkpoint in S3 (step %d): %d"
          % (newest["step"], res["from_step"]))


def check_capacity(env, mon):
    calls = run_calls(env)
    log("RunInstances calls: %s" % [c[:3] for c in calls])
    ice = [c for c in calls if c[2] == "InsufficientInstanceCapacity"]
    ok = [c for c in calls if c[2] == "OK"]
    check(ice and ice[0][:2] == FIRST,
          "(c) the first launch asked for %s in %s and got InsufficientInstanceCapacity" % FIRST)
    check(ok and all(c[:2] != FIRST for c in ok),
          "(c) every instance launched in another zone or type (%s)"
          % sorted({c[:2] for c in ok}))
    if ice and ok:
        # InsufficientInstanceCapacity says "try elsewhere", not "try again": at most
        # one call with an SDK's three tries before the launch moves on
        asked = [c for c in calls if c[3] < ok[0][3] and c[:2] == FIRST]
        check(len(asked) <= 3 and ok[0][3] - ice[0][3] < 5,
              "(c) the launch moved on at once: %d calls for %s in %s, moved after %.1f s"
              % (len(asked), FIRST[0], FIRST[1], ok[0][3] - ice[0][3]))


def check_store(env, job):
    objs = env.s3.objects(env.store_prefix(job))
    ckpts = [o["Key"] for o in objs if os.path.basename(o["Key"]).startswith("ckpt-")]
    check(ckpts and len(ckpts) <= KEEP, "at most keep=%d checkpoints remain in S3 for %s: %s"
          % (KEEP, job, ckpts))
    folder = tempfile.mkdtemp(prefix="ckpt-", dir=env.root)
    files, bad = [], []
    for key in ckpts:
        body, meta = env.s3.get(key)
        if meta.get("sha256") != hashlib.sha256(body).hexdigest():
            bad.append((key, meta.get("sha256")))
        path = os.path.join(folder, os.path.basename(key))
        with open(path, "wb") as f:
            f.write(body)
        files.append(path)
    check(ckpts and not bad, "every checkpoint reads back with boto3 and matches its "
          "x-amz-meta-sha256%s" % (": %s" % bad if bad else ""))
    p = subprocess.run([TRAIN, "--check", *files], capture_output=True, text=True, timeout=120) \
        if files else None
    check(p is not None and p.returncode == 0 and all(": ok step " in line for line in
                                                      p.stdout.splitlines()),
          "spotlab-train --check accepts them", p)
    bundle = [o["Key"] for o in env.s3.objects(env.store_prefix("_spotlab"))]
    check(bundle, "the worker bundle is in the store under _spotlab/ (%s)" % bundle)


def check_session_delete(env, mon, job):
    """The notebook's session deleted: its job's objects leave the bucket."""
    session = [j for j in mon.req("jobs", all=True)["jobs"] if j["job"] == job][0]["session"]
    r = mon.req("session.delete", session=session)
    check(r["ok"] and r["jobs_purged"] == 1, "the notebook's session deleted: %s" % r)
    deadline = time.monotonic() + 30
    while env.s3.objects(env.store_prefix(job)) and time.monotonic() < deadline:
        time.sleep(0.2)  # removed on the gateway's thread: no event to wait on
    left = [o["Key"] for o in env.s3.objects(env.store_prefix(job))]
    check(not left and env.s3.objects(env.store_prefix("_spotlab")),
          "the job's objects are gone from S3, the worker bundle stays%s" % (": %s left" % left if left else ""))


def check_calls(env):
    calls = env.ec2.calls()
    bad = [(c["seq"], c["action"], c["code"]) for c in calls
           if not c.get("signature_ok") or c.get("access_key") != ACCESS_KEY_ID]
    check(calls and not bad, "all %d EC2 calls were signed correctly with the gateway's key%s"
          % (len(calls), ": bad %s" % bad[:10] if bad else ""))
    insts = env.ec2.instances()
    untagged = [i["id"] for i in insts if not all(env.ec2.tag(i, k) for k in
                                                  ("spotlab:gateway", "spotlab:instance"))]
    check(insts and not untagged, "every instance carries the spotlab tags%s"
          % (": not %s" % untagged if untagged else ""))
    names = [env.ec2.tag(i, "spotlab:instance") for i in insts]
    check(len(names) == len(set(names)), "one instance per spotlab:instance tag")


def check_secrets(env, watch):
    hits = env.secret_hits()
    check(not hits, "the secret access key is in no file: user data, instance logs, worker "
          "configs, the gateway's state and log%s" % (": %s" % hits if hits else ""))
    check(watch.samples > 0 and not watch.leaks,
          "no instance process had an AWS credential or endpoint variable (%d samples)%s"
          % (watch.samples, ": %s" % watch.leaks if watch.leaks else ""))
    udata = []
    for i in env.ec2.instances():
        path = os.path.join(i["dir"], "user-data")
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
        udata += [(i["id"], v) for v in CREDENTIAL_VARS if v in text]
    check(not udata, "no user data names an AWS credential variable%s"
          % (": %s" % udata if udata else ""))
    gwlog = env.gw.logtext()
    check("X-Amz-Signature" not in gwlog and "X-Amz-Credential" not in gwlog,
          "no presigned URL in the gateway's log")


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-e2e-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    env = nb = mon = None
    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN}, time_scale=TIME_SCALE,
                     boot_seconds=BOOT_S, keep=KEEP, heartbeat_timeout_s=4,
                     extra_ini="[idle]\nworker_timeout = 4s\n")
        log("folder %s; s3rver %s; EC2 stand-in %s" % (root, env.s3.endpoint, env.ec2.endpoint))
        # the cheapest type and zone by far, and out of capacity
        env.ec2.post("prices", {"prices": [
            {"type": FIRST[0], "zone": FIRST[1], "price": 0.08},
            {"type": FIRST[0], "zone": "us-east-1b", "price": 0.19}]})
        env.ec2.fail(code="InsufficientInstanceCapacity", action="RunInstances", type=FIRST[0],
                     zone=FIRST[1], count=-1)
        env.gw.start()
        os.environ.update(SPOTLAB_GATEWAY=env.gw.listen, SPOTLAB_TOKEN=TOKEN,
                          SPOTLAB_HOME=os.path.join(root, "home"))
        mon = Monitor(env.gw.listen, TOKEN)
        watch = Watch(env)
        mon.hook = watch
        with KernelspecEnv(KERNEL):
            nb = Notebook()
            content, _ = nb.run(DEFS_CELL % text, timeout=60)
            check(content["status"] == "ok", "the definitions cell ran", content)
            nb.start(TRAIN_CELL)
            job = nb.wait_job(60)
            log("job %s" % job)
            mon.follow(job)
            mon.until(lambda: mon.step() > 0, "the first step", 240)
            log("first step on %s" % mon.instance())
            check_capacity(env, mon)
            case_notice(env, mon)
            case_kill(env, mon)
            mon.until(lambda: mon.state() in FINAL, "the end of the job", 300, end_ok=True)
            check(mon.state() == "succeeded", "the job succeeded (%s)" % mon.state())
            reply = nb.wait_reply(60)
            check(reply is not None and reply["status"] == "ok" and "succeeded" in nb.display,
                  "the notebook's cell ended ok and shows the job succeeded", nb.display[-500:])
            content, msgs = nb.run("%instances", timeout=60)
            table = "".join(m["content"].get("text", "") + m["content"].get("data", {}).get("text/plain", "")
                            for m in msgs if m["msg_type"] in ("stream", "display_data", "execute_result"))
            check(content["status"] == "ok" and "CAPACITY" in table and "/10" in table
                  and "g5.xlarge" in table,
                  "%instances lists the types with the cloud's placement scores", table[-800:])
            steps = set(s for a in mon.attempts() for s in a)
            missing = sorted(set(range(1, STEPS + 1)) - steps)
            check(not missing, "every step 1..%d was reported (%d missing)" % (STEPS, len(missing)))
            live = env.wait_instances_gone(90)
            check(not live, "every instance the stand-in ran is terminated%s"
                  % (": %s" % [(i["id"], i["state"]) for i in live] if live else ""))
            check_calls(env)
            check_store(env, job)
            check_secrets(env, watch)
            check_session_delete(env, mon, job)
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, (nb, mon), tail=8000, instance_logs=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
