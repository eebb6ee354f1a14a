#!/usr/bin/python3
"""A worker cut off from its gateway saves its checkpoint to the URLs it
was given beforehand, and the job resumes from it.

usage: test_aws_orphan.py GATEWAY WORKER TRAIN KERNEL

A train job runs on the aws provider (tests/pylib/aws_env.py) with
orphan_timeout = 10s (the least the provider takes). Once its first
periodic checkpoint is in S3, the test SIGSTOPs the gateway, so no
presigned URL can be had. Then:
  - the worker stops as orphaned and its instance powers itself off (the
    stand-in's shutdown shim: Client.InstanceInitiatedShutdown, terminated),
    the gateway having terminated nothing, as soon as its job has stopped
    (not at the notice's deadline, 30 s later);
  - JOB/orphan/step holds a step past the periodic checkpoint as decimal
    text, and JOB/orphan/ckpt.tc is a checkpoint of that step
    (spotlab-train --check);
after SIGCONT the gateway resumes the job from its periodic checkpoint, and:
  - the new attempt's first step follows the orphan step: the steps between
    the two checkpoints are not run again;
  - the job succeeds, and the orphan objects are gone (deleted after its
    next checkpoint).
"""
import os
import re
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from aws_env import AwsEnv, end_test  # noqa: E402
from checks import check, require, exit_status, log  # noqa: E402
from notebook import FINAL, Monitor, wait_for, write_text  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-orphan-token-0123456789abcdef"
# wide enough that the steps take a while (20 to 45 steps/s here), and
# long enough after the checkpoint of step EVERY that the orphan timeout
# (10 s after the gateway stops) passes well before the next checkpoint,
# the last (step 2 EVERY, 22 s or more later): a checkpoint's upload waits
# for the stopped gateway's presigned URL until it times out, and a run that
# reached its end in that wait would never be orphaned
MODEL = {"layers": 2, "heads": 4, "dim": 128, "ctx": 128}
STEPS, EVERY = 2000, 1000



def orphan_keys(env, job):
    return sorted(o["Key"] for o in env.s3.objects(env.store_prefix(job) + "orphan/"))


def worker_log(rec):
    try:
        with open(os.path.join(rec["dir"], "worker.log"), errors="replace") as f:
            return f.read()
    except (OSError, KeyError, TypeError):
        return ""


def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-orphan-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    env = mon = None
    stopped = False
    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN}, time_scale=60,
                     boot_seconds=60, orphan_timeout="10s", heartbeat_timeout_s=4)
        env.gw.start()
        mon = Monitor(env.gw.listen, TOKEN)
        r = mon.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "the session's definitions are set", r)
        r = mon.submit(kind="train", model="m", data="d",
                    options={"steps": STEPS, "batch": 8, "seed": 1, "checkpoint_every": EVERY,
                             "spot": "yes"})
        require(r["ok"], "the train job is submitted", r)
        job = r["job"]
        mon.follow(job)
        mon.until(lambda: any(e.get("step") == EVERY for e in mon.mine("checkpoint")),
                  "the checkpoint of step %d" % EVERY, 180)
        name = mon.instance()
        rec = env.ec2.by_spotlab(name) if name else None
        require(rec is not None, "the job runs on a stand-in instance (%s)" % name)
        since = env.ec2.calls()[-1]["seq"]
        os.kill(env.gw.p.pid, signal.SIGSTOP)
        stopped = True
        log("gateway stopped at step %d; the job ran on %s (%s)" % (mon.step(), rec["id"], name))

        # the worker is orphaned after 10 s, saves its checkpoint and exits; the
        # instance's user data powers it off
        gone = wait_for(lambda: next((i for i in env.ec2.instances() if i["id"] == rec["id"]
                                      and i["state"] == "terminated"), None),
                        "the orphaned instance terminated", 90)
        log("instance %s %s (%s)" % (gone["id"], gone["state"], gone.get("state_reason")))
        check((gone.get("state_reason") or [None])[0] == "Client.InstanceInitiatedShutdown",
              "the orphaned instance powered itself off (%s)" % gone.get("state_reason"))
        terms = [c for c in env.ec2.calls() if c["seq"] > since and
                 c.get("action") == "TerminateInstances"]
        check(not terms, "nobody else terminated it (%d TerminateInstances)" % len(terms))
        wlog = worker_log(gone)
        check("checkpointing and exiting" in wlog and "orphan/ckpt.tc" in wlog,
              "its worker log tells of the orphan timeout and the saved checkpoint",
              wlog[-1500:])
        check("notice deadline reached" not in wlog,
              "the worker exited once its job had stopped, not at the notice's deadline", wlog[-1500:])

        keys = orphan_keys(env, job)
        want = [env.store_prefix(job) + "orphan/ckpt.tc", env.store_prefix(job) + "orphan/step"]
        require(keys == want, "the orphan objects are in S3: %s" % keys)
        step_text = env.s3.get(want[1])[0].decode(errors="replace")
        orphan = int(step_text) if re.fullmatch(r"[0-9]+", step_text) else -1
        check(EVERY < orphan < STEPS,
              "JOB/orphan/step names a step past the checkpoint of step %d: %r" % (EVERY, step_text))
        ck = os.path.join(root, "orphan.slck")
        with open(ck, "wb") as f:
            f.write(env.s3.get(want[0])[0])
        p = subprocess.run([TRAIN, "--check", ck], capture_output=True, text=True, timeout=120)
        check(p.returncode == 0 and p.stdout.strip().endswith("ok step %d" % orphan),
              "JOB/orphan/ckpt.tc is a valid checkpoint of step %d" % orphan, p)
        stored = sorted(o["Key"] for o in env.s3.objects(env.store_prefix(job) + "ckpt-"))
        check(stored == [env.store_prefix(job) + "ckpt-%08d.tc" % EVERY],
              "the regular checkpoints are as the gateway knows them: %s" % stored)

        n_res = len(mon.mine("resumed"))
        os.kill(env.gw.p.pid, signal.SIGCONT)
        stopped = False
        log("gateway continued")
        mon.until(lambda: mon.state() in FINAL, "the end of the job", 180, end_ok=True)
        check(mon.state() == "succeeded", "the job succeeded (%s)" % mon.state())
        res = mon.mine("resumed")[n_res:]
        check(res and res[0].get("from_step") == EVERY,
              "the gateway resumed it from its checkpoint of step %d (%s)"
              % (EVERY, res[0].get("from_step") if res else None))
        att = [a for a in mon.attempts() if a]
        first = min(att[-1]) if len(att) >= 2 else None
        log("steps per attempt: %s" % [(min(a), max(a)) for a in att])
        check(first == orphan + 1, "the new attempt went on from the orphan step %d: its first "
              "step is %s, not %d" % (orphan, first, EVERY + 1))
        check(len(att) >= 2 and max(att[-1]) == STEPS, "it ran to step %d" % STEPS)
        keys = orphan_keys(env, job)
        check(not keys, "the orphan objects are deleted once a newer checkpoint is stored: %s"
              % keys)
        second = env.ec2.by_spotlab(mon.mine("placed")[-1]["instance"]) \
            if mon.mine("placed") else None
        wlog = worker_log(second) if second else ""
        check("restored the orphan checkpoint of step %d" % orphan in wlog
              and "deleted the orphan checkpoint" in wlog,
              "the new attempt's worker restored the orphan checkpoint and deleted it", wlog[-1500:])
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if env and env.gw and stopped and env.gw.alive():
            os.kill(env.gw.p.pid, signal.SIGCONT)
        end_test(root, env, (mon,))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
