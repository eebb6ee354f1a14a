#!/usr/bin/python3
"""The gateway aborts the multipart uploads that workers could not finish, so
that S3 does not bill their parts for ever.

usage: test_aws_upload_abort.py GATEWAY WORKER TRAIN KERNEL

A train job runs on the aws provider (tests/pylib/aws_env.py) with a model
whose checkpoints (about 86 MB) go up as multipart uploads in parts of 32 MiB
([store] part_mib = 32, which the gateway gives its workers).
S3 is reached through the fault proxy of tests/s3/s3_fixture.py, which keeps
the books of the multipart uploads it sees and holds every part PUT (no
answer) until the test lets them through. While the first checkpoint's parts
are held, the test interrupts the job's instance without a notice (its
processes killed), and then lets the parts through. Then:
  - the gateway aborts that upload, which the dead worker could not (the
    proxy answers its AbortMultipartUpload), and says so in its log;
  - the job resumes on another instance and succeeds, each of its later
    checkpoints completed (in S3, spotlab-train --check accepts the last);
  - no multipart upload is left open, and each completed one went in parts
    of 32 MiB (the last one smaller).
Then the gateway stops, and the store is given the row of an upload begun
(through boto3, with a part sent) by an instance that no longer exists, as a
gateway stopped before its abort would leave it: the next start aborts it and
forgets its row.
"""
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading

import boto3
import botocore.config

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "s3"))
from aws_env import AwsEnv, ACCESS_KEY_ID, BUCKET, PREFIX, REGION, SECRET_ACCESS_KEY, end_test  # noqa: E402
from checks import check, require, exit_status, log  # noqa: E402
from notebook import FINAL, Monitor, wait_for, write_text  # noqa: E402

GATEWAY, WORKER, TRAIN, KERNEL = (os.path.realpath(p) for p in sys.argv[1:5])
TOKEN = "aws-upload-abort-token-0123456789"
# about 7 M parameters: a checkpoint of 86 MB, three parts of at most 32 MiB
PART = 32 << 20
MODEL = {"layers": 4, "heads": 4, "dim": 384, "ctx": 32}
STEPS, EVERY = 6, 2


class HoldParts:
    """A FaultProxy predicate: true for every part PUT of a checkpoint while held
    is set; the first one sets seen."""

    def __init__(self):
        self.held = threading.Event()
        self.held.set()
        self.seen = threading.Event()

    def __call__(self, method, target):
        if (method != "PUT" or "partNumber=" not in target or "/_spotlab/" in target
                or not self.held.is_set()):
            return False
        self.seen.set()
        return True



def main():
    root = tempfile.mkdtemp(prefix="spotlab-aws-upload-abort-")
    text = os.path.join(root, "text.txt")
    write_text(text)
    env = mon = None
    hold = HoldParts()

    try:
        env = AwsEnv(root, GATEWAY, WORKER, TRAIN, {"alice": TOKEN}, time_scale=60,
                     boot_seconds=60, s3_faults=[(hold, "stall:120")], store_ini="part_mib = 32\n")
        proxy = env.proxy
        env.gw.start()
        mon = Monitor(env.gw.listen, TOKEN)
        r = mon.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": MODEL}},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [text], "options": {}}}])
        require(r["ok"], "the session's definitions are set", r)
        r = mon.submit(kind="train", model="m", data="d",
                       options={"steps": STEPS, "batch": 1, "seed": 1, "checkpoint_every": EVERY,
                                "spot": "yes"})
        require(r["ok"], "the train job is submitted", r)
        job = r["job"]
        mon.follow(job)
        require(hold.seen.wait(240), "a checkpoint's part PUT is held")
        with proxy.lock:
            open_before = dict(proxy.uploads)
        require(len(open_before) == 1, "one multipart upload is open: %s" % open_before)
        uid, key = next(iter(open_before.items()))
        wait_for(lambda: any(row[0] == uid for row in env.multipart_rows()),
                 "the gateway's row of the upload", 30)
        mon.until(lambda: mon.instance() is not None, "the job placed", 60)
        name = mon.instance()
        rec = env.ec2.by_spotlab(name)
        require(rec, "the job's instance is known to the stand-in (%s)" % name)
        log("interrupting %s (%s) without notice during the upload of %s" % (rec["id"], name, key))
        env.ec2.interrupt(rec["id"], False)
        hold.held.clear()  # the later checkpoints go up
        wait_for(lambda: key in proxy.aborted, "the abort of %s" % key, 120)
        log("aborted: %s" % proxy.aborted)
        check(uid not in proxy.uploads, "the gateway aborted the upload its worker left (%s)" % key)
        mon.until(lambda: mon.state() in FINAL, "the end of the job", 300, end_ok=True)
        log("job %s %s; events %s" % (job, mon.state(), mon.tail(12)))
        check(mon.state() == "succeeded", "the job succeeded (%s)" % mon.state())
        check(len(mon.mine("placed")) >= 2, "the job ran again on another instance: %s"
              % [p.get("instance") for p in mon.mine("placed")])
        cks = mon.mine("checkpoint")
        check(cks and cks[-1].get("step") == STEPS, "the job's checkpoints were stored: %s"
              % [(c.get("step"), c.get("bytes")) for c in cks])
        check(len(proxy.completed) >= len(cks),
              "its checkpoints went up as completed multipart uploads: %s" % proxy.completed)
        with proxy.lock:
            parts = {u: sorted(p, reverse=True) for u, p in proxy.part_bytes.items()
                     if u != uid and "/ckpt-" in proxy.upload_keys.get(u, "")}
        check(parts and all(len(p) == 3 and p[:2] == [PART, PART] and 0 < p[2] < PART for p in parts.values()),
              "each in three parts of 32 MiB, the last smaller ([store] part_mib): %s" % parts)
        stored = sorted(o["Key"] for o in env.s3.objects(env.store_prefix(job) + "ckpt-"))
        last = env.store_prefix(job) + "ckpt-%08d.tc" % STEPS
        check(stored and stored[-1] == last, "the last checkpoint is in S3: %s" % stored)
        if stored and stored[-1] == last:
            path = os.path.join(root, "last.tc")
            with open(path, "wb") as f:
                f.write(env.s3.get(last)[0])
            p = subprocess.run([TRAIN, "--check", path], capture_output=True, text=True, timeout=120)
            check(p.returncode == 0, "spotlab-train --check accepts it: %s" % p.stderr.strip())
        gwlog = env.gw.logtext()
        check("aborted the multipart upload left unfinished" in gwlog,
              "the gateway's log says it aborted the upload",
              [ln for ln in gwlog.splitlines() if "multipart" in ln][:5])
        wait_for(lambda: not env.multipart_rows(), "the gateway forgets the uploads", 30)
        with proxy.lock:
            left = dict(proxy.uploads)
        check(not left, "no multipart upload is left open: %s" % left)

        # a gateway stopped before its abort: the row of an instance that is gone
        env.gw.stop()
        left_key = "%s/%s/ckpt-99999999.tc" % (PREFIX, job)
        via = boto3.session.Session(aws_access_key_id=ACCESS_KEY_ID,
                                    aws_secret_access_key=SECRET_ACCESS_KEY,
                                    region_name=REGION).client(
            "s3", endpoint_url=proxy.url, config=botocore.config.Config(s3={"addressing_style": "path"}))
        up = via.create_multipart_upload(Bucket=BUCKET, Key=left_key)["UploadId"]
        via.upload_part(Bucket=BUCKET, Key=left_key, UploadId=up, PartNumber=1, Body=b"x" * 1024)
        db = sqlite3.connect(os.path.join(env.gw.state, "gateway.db"), timeout=10)
        db.execute("INSERT INTO multipart(upload_id, key, instance, seen_us) VALUES(?, ?, ?, 1)",
                   (up, left_key[len(PREFIX) + 1:], "i-gone0000000"))
        db.commit()
        db.close()
        env.gw.start()
        wait_for(lambda: left_key in proxy.aborted, "the abort at the start", 60)
        check(up not in proxy.uploads, "the next start aborted the upload of a gone instance")
        wait_for(lambda: not env.multipart_rows(), "the row forgotten after the abort", 30)
        check(not env.multipart_rows(), "and forgot its row")
    except Exception as e:  # a timeout or a broken expectation: a failure with context
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        end_test(root, env, (mon,))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
