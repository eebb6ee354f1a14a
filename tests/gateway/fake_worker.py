#!/usr/bin/python3
"""A scripted worker for gateway tests: speaks protocols.md §2 over CURVE.

Run by the test provider as `fake_worker.py WORKER_CONFIG`. On assign it
reports one metric per tick (options.per_tick: that many) up to
options.steps (default 5), a checkpoint every checkpoint_every steps, then
spotlab-train's closing `done` event and done. With options.hold it stops after
the first checkpoint and waits (for cancel, SIGTERM or shutdown) unless the
assign carried a restore key, in which case it finishes. With options.die_at
its "process" dies by SIGKILL at that step (done failed, exit_code 137) in
attempts up to options.die_attempts. SIGTERM: report a
checkpoint and done "preempted", then exit (a preemption with notice).
Like spotlab-worker it sends `started` once a job's process would run. A
run job behaves like spotlab-worker's %%run: output lines only, no metrics
or checkpoints (its folder is restored without a key), and done with
step null; with options.hold its first attempt waits after one line.
"""
import json
import os
import re
import signal
import sys
import time

import zmq


def main():
    cfg = json.load(open(sys.argv[1]))
    # the test cleans up the workers a stopped gateway leaves behind by this pid
    with open(os.path.join(os.path.dirname(sys.argv[1]), "fake.pid"), "w") as f:
        f.write(str(os.getpid()))
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.curve_serverkey = cfg["gateway_public"].encode()
    s.curve_publickey = cfg["public"].encode()
    s.curve_secretkey = cfg["secret"].encode()
    s.linger = 1000
    s.connect(cfg["gateway"])
    inst = cfg["instance"]
    job = None
    term = []
    signal.signal(signal.SIGTERM, lambda *a: term.append(1))

    def send(**m):
        s.send(json.dumps(m).encode())

    def jobs():
        return [{"job": job["job"], "attempt": job["attempt"],
                 "step": 0 if job["run"] else job["step"]}] if job else []

    send(type="register", instance=inst, jobs=jobs())
    hb_s, next_hb = 1.0, time.monotonic() + 1.0
    while True:
        if term:
            if job and job["run"]:
                send(type="done", job=job["job"], attempt=job["attempt"], status="preempted",
                     exit_code=0, message="preempted with notice", step=None)
            elif job:
                send(type="checkpoint", job=job["job"], attempt=job["attempt"], step=job["step"],
                     key="%s/ckpt-%08d.tc" % (job["job"], job["step"]), bytes=10, write_ms=1,
                     upload_ms=1)
                send(type="done", job=job["job"], attempt=job["attempt"], status="preempted",
                     exit_code=0, message="preempted with notice", step=job["step"])
            s.close(1000)
            return 0
        if s.poll(20):
            m = json.loads(s.recv())
            t = m.get("type")
            if t == "registered":
                hb_s = m["heartbeat_ms"] / 1000.0
            elif t == "reregister":
                send(type="register", instance=inst, jobs=jobs())
            elif t == "assign":
                opts = m["spec"].get("options", {})
                step = 0
                if m.get("restore"):
                    step = int(re.search(r"ckpt-(\d+)", m["restore"]).group(1))
                run = m["kind"] == "run"
                job = {"job": m["job"], "attempt": m["attempt"], "step": step,
                       "steps": int(opts.get("steps", 5)), "every": int(m["checkpoint_every"]),
                       "per_tick": max(1, int(opts.get("per_tick", 1))),
                       "hold": bool(opts.get("hold")) and not m.get("restore") and
                       not (run and m["attempt"] > 1), "run": run,
                       "die_at": int(opts.get("die_at", 0)) if m["attempt"] <=
                       int(opts.get("die_attempts", 1000)) else 0}
                send(type="started", job=job["job"], attempt=job["attempt"])
                if m["kind"] == "run":
                    send(type="output", job=job["job"], attempt=job["attempt"], stream="stdout",
                         text="script: " + m["spec"]["script"])
            elif t == "cancel" and job and m.get("job") == job["job"] \
                    and m.get("attempt", job["attempt"]) == job["attempt"]:
                send(type="done", job=job["job"], attempt=job["attempt"], status="cancelled",
                     exit_code=0, message="", step=job["step"])
                job = None
            elif t == "checkpoint_every" and job and m.get("job") == job["job"]:
                job["every"] = max(1, int(m["steps"]))
            elif t == "shutdown":
                s.close(1000)
                return 0
        if job and job["run"] and not (job["hold"] and job["step"] >= 1):
            job["step"] += 1
            send(type="output", job=job["job"], attempt=job["attempt"], stream="stdout",
                 text="line %d of attempt %d" % (job["step"], job["attempt"]))
            if job["step"] >= job["steps"]:
                send(type="done", job=job["job"], attempt=job["attempt"], status="succeeded",
                     exit_code=0, message="", step=0)
                job = None
        elif job and not (job["hold"] and job["step"] >= 1):
            for _ in range(job["per_tick"]):
                job["step"] += 1
                send(type="metric", job=job["job"], attempt=job["attempt"],
                     data={"step": job["step"], "loss": 3.0 / job["step"], "lr": 0.001})
                if job["step"] % job["every"] == 0 or job["hold"]:
                    send(type="checkpoint", job=job["job"], attempt=job["attempt"],
                         step=job["step"], key="%s/ckpt-%08d.tc" % (job["job"], job["step"]),
                         bytes=10, write_ms=1, upload_ms=1)
                if job["step"] == job["die_at"]:
                    send(type="done", job=job["job"], attempt=job["attempt"], status="failed",
                         exit_code=137, message="killed by signal 9", step=job["step"])
                    job = None
                    break
                if job["step"] >= job["steps"]:
                    # spotlab-train's closing event repeats the last step's loss
                    send(type="metric", job=job["job"], attempt=job["attempt"],
                         data={"event": "done", "step": job["step"], "loss": 3.0 / job["step"],
                               "eval_loss": 3.5 / job["step"]})
                    send(type="done", job=job["job"], attempt=job["attempt"], status="succeeded",
                         exit_code=0, message="", step=job["step"])
                    job = None
                    break
                if job["hold"]:
                    break
        if time.monotonic() >= next_hb:
            send(type="heartbeat", instance=inst, jobs=jobs())
            next_hb = time.monotonic() + hb_s


if __name__ == "__main__":
    sys.exit(main())
