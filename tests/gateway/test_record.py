#!/usr/bin/env python3
"""Run records end to end: a real spotlab-gateway with the local provider
(real spotlab-worker instances running the real spotlab-train), the spotlab
CLI, the HTTP API and a real kernel through jupyter_client.

usage: test_record.py GATEWAY WORKER TRAIN CLI KERNEL

alice trains a small GPT on a data file of the test's and runs a %%run
cell. `spotlab show --json` holds the spec, the model and data definitions,
the data file's SHA-256 (hashlib's), the script's, the seed the gateway
chose, spotlab's version, the build ids readelf reads from the three
binaries, the instance type of each attempt and every checkpoint. A rerun
trains with the same seed to the same loss at every step; once the data
file changes a rerun is refused, and --force runs it and notes the change.
The API gives alice her record, bob a 404 as for a job that does not exist, and the
admin any. `spotlab logs
--json` prints one JSON event per line, the store's events. A kernel's
%rerun runs the same job again. Every wait has a deadline.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, require  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402

GATEWAY, WORKER, TRAIN, CLI, KERNEL = (os.path.abspath(a) for a in sys.argv[1:6])
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-2", "root": "root-token-3"}
MODEL = {"type": "gpt", "args": [], "options": {"layers": 1, "heads": 2, "dim": 32, "ctx": 32}}
SCRIPT = 'echo "record me $SPOTLAB_SEED"\n'


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else None


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cli(gw, *args, user="alice", timeout=240):
    env = dict(os.environ, SPOTLAB_GATEWAY=gw.listen, SPOTLAB_TOKEN=TOKENS[user],
               SPOTLAB_HOME=os.path.join(gw.dir, "cli-home"))
    env.pop("SPOTLAB_DEBUG", None)
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def api(base, path, user):
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + TOKENS[user]})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")


def wait_end(c, job, timeout=240):
    require(c.req("attach", job=job, after=0)["ok"], "attach %s" % job)
    return c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                        e["state"] in ("succeeded", "failed", "cancelled"), "the end of %s" % job,
                        timeout)


def show(gw, job):
    p = cli(gw, "show", job, "--json")
    require(p.returncode == 0, "spotlab show %s --json" % job, p)
    return json.loads(p.stdout)


def losses(gw, job):
    """{step: loss} of the job's step metrics, from `spotlab logs --json`."""
    p = cli(gw, "logs", job, "--json")
    require(p.returncode == 0, "spotlab logs %s --json" % job, p)
    return {e["step"]: e["loss"] for e in map(json.loads, p.stdout.splitlines())
            if e.get("event") == "metric" and "loss" in e}


def check_train_record(gw, job, data_file):
    r = show(gw, job)
    opts = r["spec"]["options"]
    check(r["job"] == job and r["kind"] == "train" and r["state"] == "succeeded" and r["user"] == "alice",
          "the record names the job: %s %s %s" % (r["job"], r["kind"], r["state"]))
    check(opts.get("steps") == 20 and opts.get("batch") == 4 and opts.get("checkpoint_every") == 10,
          "the spec's options as submitted: %s" % opts)
    check(isinstance(r["seed"], int) and r["seed"] > 0 and opts.get("seed") == r["seed"] and
          r.get("seed_from") == "gateway", "the gateway chose the seed and passed it on: %s" % r["seed"])
    check(r["model"] == {"name": "m", "definition": {"name": "m", "kind": "model", "spec": MODEL}},
          "the model's definition: %s" % r["model"])
    check(r["data"]["name"] == "d" and r["data"]["definition"]["spec"]["args"] == [data_file],
          "the data's definition: %s" % r["data"])
    want = sha256_file(data_file)
    check(r["data_sha256"] == want and r["data"]["sha256"] == want and r["data"]["path"] == data_file,
          "the data file's SHA-256 is hashlib's: %s" % r["data_sha256"])
    check(r["script_sha256"] is None, "a train job has no script hash")
    version = subprocess.run([CLI, "version"], capture_output=True, text=True, timeout=30).stdout.split()[-1]
    check(r["spotlab_version"] == version, "spotlab's version: %s" % r["spotlab_version"])
    ids = r["build_ids"]
    check(ids["gateway"] == build_id(GATEWAY) and ids["gateway"], "the gateway's build id: %s" % ids)
    check(ids["worker"] == [build_id(WORKER)], "the worker's build id: %s" % ids["worker"])
    check(ids["train"] == [build_id(TRAIN)], "spotlab-train's build id: %s" % ids["train"])
    atts = r["attempts"]
    check(len(atts) == 1 and atts[0]["instance_type"] and atts[0]["market"] in ("spot", "on-demand") and
          atts[0]["instance"] and atts[0].get("worker_build_id") == ids["worker"][0],
          "the attempt's instance type, market and worker: %s" % atts)
    cks = [c["step"] for c in r["checkpoints"]]
    check(cks == [10, 20] and all(c["key"] and c["bytes"] > 0 for c in r["checkpoints"]),
          "every checkpoint: %s" % r["checkpoints"])
    text = cli(gw, "show", job).stdout
    check(job in text and "seed" in text and want in text and "checkpoints" in text,
          "spotlab show prints a summary:\n%s" % text)
    return r


def check_logs_json(gw, c, job):
    p = cli(gw, "logs", job, "--json")
    lines = p.stdout.splitlines()
    try:
        events = [json.loads(line) for line in lines]
    except ValueError:
        events = None
    check(p.returncode == 0 and events is not None and len(lines) > 3,
          "spotlab logs --json: one JSON event per line (%d lines)" % len(lines), p)
    r = c.req("logs", job=job, after=0, limit=1000)
    check(r["ok"] and events == r["events"], "the lines are the store's events, in order")
    check(all({"seq", "time_us", "event"} <= set(e) for e in events or []),
          "each line has seq, time and event")


def check_api(base, job):
    code, body = api(base, "/api/jobs/%s/record" % job, "alice")
    check(code == 200 and body.get("job") == job and body.get("data_sha256"),
          "alice reads her record: %s" % code)
    code, body = api(base, "/api/jobs/%s/record" % job, "bob")
    missing = api(base, "/api/jobs/J999999/record", "bob")
    check((code, body) == missing == (404, {"error": {"code": 404, "message": "no such job"}}),
          "bob reading alice's record: as one that does not exist: %s %s" % (code, body))
    code, body = api(base, "/api/jobs/%s/record" % job, "root")
    check(code == 200 and body.get("user") == "alice", "the admin reads alice's record: %s" % code)
    code, body = api(base, "/api/jobs/J999999/record", "alice")
    check(code == 404, "an unknown job's record: 404 %s" % code)


def check_rerun(gw, c, job, first, data_file):
    p = cli(gw, "rerun", job)
    again = re.match(r"(J\d{6}): a rerun of", p.stdout)
    require(p.returncode == 0 and again, "spotlab rerun %s starts it" % job, p)
    again = again.group(1)
    end = wait_end(c, again)
    check(end["state"] == "succeeded", "the rerun succeeded: %s" % end)
    r = show(gw, again)
    check(r.get("rerun_of") == job and r["seed"] == first["seed"] and
          r["spec"]["options"] == first["spec"]["options"] and r["model"] == first["model"] and
          r["data"]["definition"] == first["data"]["definition"] and
          r["data_sha256"] == first["data_sha256"],
          "the rerun's record: same spec, definitions, seed and data: %s" % r)
    a, b = losses(gw, job), losses(gw, again)
    check(a and a == b and 20 in a, "the rerun's loss at every step is the original's: %s vs %s"
          % (a.get(20), b.get(20)))

    with open(data_file, "a") as f:
        f.write("And a line the original run never read.\n")
    p = cli(gw, "rerun", job)
    check(p.returncode == 1 and "changed" in p.stderr and "force" in p.stderr,
          "a rerun on a changed data file is refused: %s" % p.stderr.strip(), p)
    p = cli(gw, "rerun", job, "--force")
    forced = re.match(r"(J\d{6}): a rerun of", p.stdout)
    require(p.returncode == 0 and forced, "spotlab rerun --force runs it anyway", p)
    forced = forced.group(1)
    check(wait_end(c, forced)["state"] == "succeeded", "the forced rerun succeeded")
    r = show(gw, forced)
    check(r.get("forced") and r.get("data_changed") ==
          {"was": first["data_sha256"], "now": sha256_file(data_file)},
          "the forced rerun's record notes the change: %s" % r.get("data_changed"))
    p = cli(gw, "rerun", job, user="bob")
    check(p.returncode == 1 and "no such job" in p.stderr, "bob cannot rerun alice's job", p)
    p = cli(gw, "rerun", job, user="root")
    check(p.returncode == 1 and "only their own" in p.stderr, "an admin reruns only their own jobs", p)


def check_run_record(gw, c):
    r = c.req("submit", kind="run", script=SCRIPT, options={})
    require(r["ok"], "submit a %%run job", r)
    job = r["job"]
    check(wait_end(c, job)["state"] == "succeeded", "the %%run job succeeded")
    rec = show(gw, job)
    check(rec["script_sha256"] == hashlib.sha256(SCRIPT.encode()).hexdigest() and
          rec["spec"]["script"] == SCRIPT and rec["model"] is None,
          "the %%%%run record has the script and its SHA-256: %s" % rec["script_sha256"])
    out = "".join(e.get("text", "") for e in c.events if e["job"] == job and e["event"] == "output")
    check(isinstance(rec["seed"], int) and rec["seed_from"] == "gateway" and
          re.search(r"record me %d\b" % rec["seed"], out),
          "the %%%%run script read its recorded seed from SPOTLAB_SEED: %s in %r" % (rec["seed"], out))
    check(rec["build_ids"]["worker"] == [build_id(WORKER)] and rec["attempts"],
          "the %%run job's worker and attempt")


def check_kernel(gw, job):
    from jupyter_client import KernelManager
    from kernelspec_env import KernelspecEnv
    saved = {k: os.environ.get(k) for k in ("SPOTLAB_GATEWAY", "SPOTLAB_TOKEN")}
    os.environ["SPOTLAB_GATEWAY"] = gw.listen
    os.environ["SPOTLAB_TOKEN"] = TOKENS["alice"]
    try:
        with KernelspecEnv(KERNEL):
            km = KernelManager(kernel_name="spotlab")
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=60)
                msgs = []
                reply = kc.execute_interactive("%%show %s" % job, output_hook=msgs.append, timeout=60)
                out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
                check(reply["content"]["status"] == "ok" and job in out and "seed" in out,
                      "%%show prints the record:\n%s" % out)
                msgs = []
                reply = kc.execute_interactive("%%rerun %s force" % job, output_hook=msgs.append,
                                               timeout=300)
                shown = json.dumps([m["content"] for m in msgs])
                again = [j for j in re.findall(r"J\d{6}", shown) if j != job]
                check(reply["content"]["status"] == "ok" and again,
                      "%%rerun runs the job again and follows it: %s" %
                      reply["content"].get("evalue", again))
                if again:
                    r = show(gw, again[0])
                    check(r.get("rerun_of") == job, "the kernel's rerun names %s" % job)
                    check(losses(gw, again[0]).get(20) is not None, "the kernel's rerun trained")
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main():
    require(shutil.which("readelf"), "readelf is installed (binutils)")
    folder = tempfile.mkdtemp(prefix="gw-record-")
    data_file = os.path.join(folder, "book.txt")
    with open(data_file, "w") as f:
        f.write("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2, user_options={"root": "admin = yes\n"},
                        extra_ini="[idle]\nworker_timeout = 10m\n",
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN,
                             "SPOTLAB_DEBUG": None})
    with open(gw.ini) as f:  # [gateway] comes first in the file GatewayProcess writes
        ini = f.read().replace("[gateway]\n", "[gateway]\nhttp = 127.0.0.1:0\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini)
    gw.start()
    try:
        require(gw.wait_log("HTTP API and /metrics on http://127.0.0.1:", 20), "the HTTP server listens",
                gw.logtail())
        with open(os.path.join(gw.state, "http.address")) as f:
            base = "http://" + f.read().strip()
        c = GatewayClient(gw.listen, TOKENS["alice"])
        r = c.req("session.set", defs=[
            {"name": "m", "kind": "model", "spec": MODEL},
            {"name": "d", "kind": "data", "spec": {"type": "text", "args": [data_file], "options": {}}}])
        require(r["ok"], "session.set", r)
        r = c.req("submit", kind="train", model="m", data="d",
                  options={"steps": 20, "batch": 4, "threads": 1, "checkpoint_every": 10})
        require(r["ok"], "submit a train job", r)
        job = r["job"]
        end = wait_end(c, job)
        require(end["state"] == "succeeded", "the train job succeeded: %s" % end)
        first = check_train_record(gw, job, data_file)
        check_logs_json(gw, c, job)
        check_api(base, job)
        check_run_record(gw, c)
        check_rerun(gw, c, job, first, data_file)
        check_kernel(gw, job)
        c.close()
    finally:
        from checks import failures
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)  # workers outlive a stopped gateway by design
        shutil.rmtree(folder, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
