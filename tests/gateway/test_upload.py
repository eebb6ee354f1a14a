#!/usr/bin/env python3
"""Data uploads end to end (protocols.md §1, data.have and data.put): a real
spotlab-gateway with [store] upload_data = yes and the local provider (real
spotlab-worker instances and spotlab-train), driven over its kernel socket.

usage: test_upload.py GATEWAY WORKER TRAIN

A train job on text("PATH") is answered with what to upload, not a job; the
upload goes on from where it stopped across a gateway restart; chunks at
another offset than the one wanted are not taken, oversized ones and
malformed hashes are refused, bytes that do not hash to the name are
refused and forgotten; the published object is the file, under
_data/USER/SHA256; another user does not see it, and has at most 4 uploads
under way; the job then trains on
the store's copy with the notebook's file gone, and its record names the
file's hash. spotlab data lists the stored file with its jobs; it is not
deleted while a job that has not ended uses it (GET /api/data shows a
user theirs, an admin everyone's), then is deleted from the
store and from the running workers, a rerun that needs it is refused, and it is
uploaded anew when asked for; 80 deletions a stopped gateway left marked are done at its next start. A fashion_mnist("FOLDER") job's files are asked for one by one
(all four for training, the test split's two for eval), and its jobs run
on the store's copies with the folder gone; one of its files deleted takes
the workers' folders of the sets made from it along. Every wait has a deadline.
"""
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status, require  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402
from image_set import SET_FILES, folder_id, make_image_set  # noqa: E402

GATEWAY, WORKER, TRAIN = (os.path.abspath(a) for a in sys.argv[1:4])
CLI = os.environ.get("SPOTLAB_TEST_CLI", "")
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-2", "carol": "carol-token-3"}
CHUNK = 16 * 1024


def put(c, sha, data, offset, n=CHUNK, size=None):
    return c.req("data.put", sha256=sha, size=len(data) if size is None else size, offset=offset,
                 frame=data[offset:offset + n])


def define(c, path):
    r = c.req("session.set", defs=[
        {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {
            "layers": 1, "heads": 2, "dim": 32, "ctx": 32}}},
        {"name": "d", "kind": "data", "spec": {"type": "text", "args": [path], "options": {}}}])
    require(r["ok"], "session.set", r)


TRAIN_OPTS = {"steps": 30, "batch": 4, "threads": 1, "seed": 3}
def wait_end(c, job):
    require(c.req("attach", job=job, after=0)["ok"], "attach " + job)
    return c.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                        e["state"] in ("succeeded", "failed", "cancelled"), "the end of " + job, 180)


def check_image_set(c, folder):
    """A fashion_mnist("FOLDER") job: its files uploaded one by one as the
    gateway asks, the train job given all four, an eval job the test
    split's two; both run with the folder gone, and their records name the
    set's id."""
    make_image_set(folder)
    r = c.req("session.set", defs=[
        {"name": "mm", "kind": "model", "spec": {"type": "mlp", "args": [], "options": {"hidden": 16}}},
        {"name": "f", "kind": "data", "spec": {"type": "fashion_mnist", "args": [folder + "/"], "options": {}}}])
    require(r["ok"], "session.set", r)
    opts = {"steps": 20, "batch": 8, "threads": 1, "seed": 5}
    asked, files = [], []
    while True:
        r = c.req("submit", kind="train", model="mm", data="f", options=opts,
                  **({"data_files": files} if files else {}))
        if not r.get("ok") or "upload" not in r or len(asked) > 4:
            break
        asked.append(r["upload"]["path"])
        files.append(c.upload(r["upload"]["path"], r["upload"]["chunk_bytes"]))
    check(asked == [os.path.join(folder, n) for n in SET_FILES],
          "a data set's files are asked for one by one: %s" % asked)
    require(r.get("ok") and "job" in r, "the train job is taken once its four files are uploaded", r)
    shutil.rmtree(folder)
    e = wait_end(c, r["job"])
    check(e["state"] == "succeeded", "%s trained on the uploaded data set, its folder gone: %s" % (r["job"], e))
    return r["job"], files


def check_image_set_eval(c, job, files, want_train, want_eval):
    rec = c.req("record", job=job).get("record", {})
    check((rec.get("attempts") or [{}])[0].get("data_sha256") == want_train,
          "the train record names the data set's id: %s" % rec.get("attempts"))
    r = c.req("submit", kind="eval", model="mm", data="f", options={"threads": 1}, data_files=files[:1])
    check(r.get("ok") and r.get("upload", {}).get("path") == files[1]["path"],
          "an eval job asks for the test split's files only: %s" % r)
    r = c.req("submit", kind="eval", model="mm", data="f", options={"threads": 1}, data_files=files[:2])
    require(r.get("ok") and "job" in r, "the eval job is taken with the test split's two files", r)
    e = wait_end(c, r["job"])
    check(e["state"] == "succeeded", "%s evaluated on the uploaded test split: %s" % (r["job"], e))
    rec = c.req("record", job=r["job"]).get("record", {})
    check((rec.get("attempts") or [{}])[0].get("data_sha256") == want_eval,
          "the eval record names the test split's id: %s" % rec.get("attempts"))
    r = c.req("submit", kind="eval", model="mm", data="f", options={"threads": 1}, data_files={"a": 1})
    check(not r["ok"] and r["error"]["code"] == "SL_ETYPE", "data_files that is not an array is refused: %s" % r)


def check_set_file_deleted(gw, c, files, want_train, want_eval):
    """A train split's file deleted: the workers' copies of it go, and with them the train
    set's folder linking it; the test split's folder, which does not, stays."""
    train, evalset = "set-" + want_train, "set-" + want_eval
    require(worker_copies(gw, c, train) and worker_copies(gw, c, evalset),
            "the workers hold both sets' folders")
    gone = files[2]["sha256"]
    r = c.req("data.delete", sha256=gone)
    check(r.get("ok"), "a train split's file is deleted: %s" % r)
    left = wait_no_copies(gw, c, train) + wait_no_copies(gw, c, gone)
    check(not left and worker_copies(gw, c, evalset) and worker_copies(gw, c, files[0]["sha256"]),
          "its copies and the train set's folder go (%s left), the test split's stay" % left)


def check_refusals(c, sha, data):
    r = c.req("data.have", sha256="ABC", size=3)
    check(not r["ok"] and r["error"]["code"] == "SL_ETYPE", "a malformed hash is refused: %s" % r)
    r = c.req("data.have", sha256=sha, size=-1)
    check(not r["ok"] and r["error"]["code"] == "SL_ETYPE", "a negative size is refused: %s" % r)
    r = c.have(sha, len(data))
    check(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0, "a new upload starts at 0: %s" % r)
    r = put(c, sha, data, 5)
    check(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0,
          "a chunk at another offset is not taken; the reply says which is wanted: %s" % r)
    r = c.req("data.put", sha256=sha, size=len(data), offset=0, frame=data + b"x")
    check(not r["ok"] and r["error"]["code"] == "SL_ELIMIT", "a chunk past the file's size is refused: %s" % r)
    r = c.req("data.put", sha256=sha, size=len(data), offset=0)
    check(not r["ok"] and r["error"]["code"] == "SL_EWIRE", "a data.put without its bytes is refused: %s" % r)
    r = c.req("jobs", frame=b"bytes")
    check(not r["ok"] and r["error"]["code"] == "SL_EWIRE",
          "a second frame on another request is refused: %s" % r)
    r = c.req("data.have", sha256=sha, size=len(data) + 1)
    check(not r["ok"] and r["error"]["code"] == "SL_EMISMATCH",
          "another size for an upload under way is refused: %s" % r)


def check_bad_bytes(c, state):
    """Bytes that do not hash to the name given: refused with the last chunk,
    nothing published, and the upload starts over."""
    data = b"these bytes are not the ones named\n" * 100
    sha = hashlib.sha256(b"something else").hexdigest()
    r = c.have(sha, len(data))
    off = 0
    while r.get("ok") and r["state"] == "receiving" and off < len(data):
        r = put(c, sha, data, off, 1000)
        off = r.get("offset", off)
    check(not r["ok"] and r["error"]["code"] == "SL_ECHECKSUM" and "changed" in r["error"]["message"],
          "bytes that hash to another name are refused: %s" % r)
    check(not os.path.exists(os.path.join(state, "store", "_data", "alice", sha)), "nothing is published")
    r = c.have(sha, len(data))
    check(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0, "the upload starts over: %s" % r)


def data_cli(gw, user, *args):
    env = dict(os.environ, SPOTLAB_GATEWAY=gw.listen, SPOTLAB_TOKEN=TOKENS[user],
               SPOTLAB_HOME=os.path.join(gw.dir, "cli-home"))
    env.pop("SPOTLAB_DEBUG", None)
    return subprocess.run([CLI, "data", *args], env=env, capture_output=True, text=True, timeout=60)


def api(gw, path, user):
    with open(os.path.join(gw.state, "http.address")) as f:
        base = "http://" + f.read().strip()
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + TOKENS[user]})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def check_http_data(gw, sha, size):
    """GET /api/data: a user's own stored files; an admin's view of everyone's, by user."""
    code, o = api(gw, "/api/data", "alice")
    check(code == 200 and [u["sha256"] for u in o["uploads"]] == [sha] and o["files"] == 1 and
          o["bytes"] == size and o["by_user"] == [{"user": "alice", "files": 1, "bytes": size}],
          "GET /api/data: alice's stored file: %s %s" % (code, o))
    code, o = api(gw, "/api/data?user=alice", "bob")
    check(code == 403, "bob may not see alice's: %s %s" % (code, o))
    code, o = api(gw, "/api/data", "carol")
    check(code == 200 and any(u["sha256"] == sha and u["user"] == "alice" for u in o["uploads"]) and
          o["by_user"][0]["user"] == "alice",
          "an admin sees everyone's, by user: %s %s" % (code, o))
    code, o = api(gw, "/api/data?user=bob", "carol")
    check(code == 200 and o["files"] == 0 and o["uploads"] == [], "and one user's: %s %s" % (code, o))
    with open(os.path.join(gw.state, "http.address")) as f:
        with urllib.request.urlopen("http://%s/metrics" % f.read().strip(), timeout=20) as r:
            text = r.read().decode()
    check('spotlab_stored_data_bytes{user="alice"} %d\n' % size in text and
          'spotlab_stored_data_files{user="alice"} 1\n' in text,
          "/metrics has alice's stored data: %s" % [ln for ln in text.splitlines() if "stored_data" in ln])


def worker_copies(gw, c, name):
    """The entries named name in the data folders of c's user's instances that run now."""
    ids = [i["instance"] for i in c.req("instances")["instances"]]
    return [p for p in (os.path.join(gw.state, "instances", i, "work", "data", name) for i in ids)
            if os.path.lexists(p)]


def wait_no_copies(gw, c, name, timeout=30):
    end = time.monotonic() + timeout
    while worker_copies(gw, c, name) and time.monotonic() < end:
        time.sleep(0.05)
    return worker_copies(gw, c, name)


def check_data_files(gw, alice, bob, sha, data, text, first_job):
    """spotlab data: the stored file listed with its jobs; not bob's to see or delete; not
    deleted while a job that has not ended uses it; then deleted from the store, no longer
    listed, a rerun of a job that trained on it refused, and uploaded anew when asked for."""
    r = alice.req("data.list")
    mine = [u for u in r.get("uploads", []) if u["sha256"] == sha]
    check(r.get("ok") and r.get("uploads_on") and len(mine) == 1 and mine[0]["bytes"] == len(data) and
          mine[0]["path"] == text and mine[0]["jobs"] >= 1 and mine[0]["live_jobs"] == 0 and
          mine[0]["last_job"] == first_job,
          "data.list shows the stored file, its path and the jobs that used it: %s" % mine)
    cli = data_cli(gw, "alice")
    check(cli.returncode == 0 and sha[:12] in cli.stdout and text in cli.stdout and "SHA256" in cli.stdout,
          "spotlab data prints it: %r %r" % (cli.stdout, cli.stderr))
    r = bob.req("data.list")
    check(r.get("ok") and not r["uploads"], "bob lists none of alice's files: %s" % r)
    check_http_data(gw, sha, len(data))
    r = bob.req("data.delete", sha256=sha)
    check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "bob cannot delete alice's file: %s" % r)
    r = bob.req("data.list", user="alice")
    check(not r["ok"] and r["error"]["code"] == "EPERM", "nor list it, being no admin: %s" % r)
    r = alice.req("data.delete", sha256="zz")
    check(not r["ok"] and r["error"]["code"] == "SL_ETYPE", "a hash that is not one is refused: %s" % r)

    # a job that has not ended holds it
    r = alice.req("submit", kind="train", model="m", data="d", options=dict(TRAIN_OPTS, steps=100000),
                  data_files=[{"path": text, "sha256": sha, "size": len(data)}])
    require(r.get("ok") and "job" in r, "a long job on the file", r)
    live = r["job"]
    r = alice.req("data.delete", sha256=sha[:10])
    check(not r["ok"] and r["error"]["code"] == "SL_ESTATE" and live in r["error"]["message"],
          "not deleted while %s uses it: %s" % (live, r))
    require(alice.req("cancel", job=live)["ok"], "cancel " + live)
    e = wait_end(alice, live)
    check(e["state"] == "cancelled", "%s cancelled: %s" % (live, e))

    copies = worker_copies(gw, alice, sha)
    require(copies, "the workers that ran its jobs hold a copy of %s" % sha)
    cli = data_cli(gw, "alice", "rm", sha[:10])
    check(cli.returncode == 0 and "deleting " + text in cli.stdout,
          "spotlab data rm deletes it: %r %r" % (cli.stdout, cli.stderr))
    left = wait_no_copies(gw, alice, sha)
    check(not left, "the running workers' copies go too: %s of %s left" % (left, copies))
    obj = os.path.join(gw.state, "store", "_data", "alice", sha)
    end = time.monotonic() + 30
    while time.monotonic() < end and (os.path.exists(obj) or
                                      any(u["sha256"] == sha for u in alice.req("data.list")["uploads"])):
        time.sleep(0.05)
    check(not os.path.exists(obj), "the object is gone from the store")
    check(not [u for u in alice.req("data.list")["uploads"] if u["sha256"] == sha], "and no longer listed")
    r = alice.req("data.delete", sha256=sha)
    check(not r["ok"] and r["error"]["code"] == "SL_ENAME", "deleting it again: no such file: %s" % r)
    r = alice.req("rerun", job=first_job)
    check(not r["ok"] and r["error"]["code"] == "SL_ESTATE" and "was deleted" in r["error"]["message"],
          "a rerun of %s, which trained on it, is refused: %s" % (first_job, r))
    r = alice.req("submit", kind="train", model="m", data="d", options=TRAIN_OPTS,
                  data_files=[{"path": text, "sha256": sha, "size": len(data)}])
    check(not r["ok"] and r["error"]["code"] == "SL_ESTATE", "a submit naming it is refused: %s" % r)
    r = alice.have(sha, len(data))
    check(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0, "asked for again, it is uploaded "
          "anew: %s" % r)
    off = 0
    while r.get("ok") and r["state"] == "receiving":
        r = put(alice, sha, data, off, n=1 << 20)
        off = r.get("offset", off)
    r = alice.have(sha, len(data), until=("ready",))
    check(r.get("ok") and r["state"] == "ready" and os.path.exists(obj), "and stored again: %s" % r)
    r = alice.req("submit", kind="train", model="m", data="d", options=TRAIN_OPTS,
                  data_files=[{"path": text, "sha256": sha, "size": len(data)}])
    check(r.get("ok") and "job" in r, "a job takes it again: %s" % r)
    if r.get("ok"):
        check(wait_end(alice, r["job"])["state"] == "succeeded", "and trains on it")
    r = alice.req("data.list")
    check([u["sha256"] for u in r["uploads"]].count(sha) == 1, "listed once again: %s" % r)


def check_deletions_resumed(gw):
    """Deletions a stopped gateway left marked (80 of them) are done at its next start."""
    gw.stop()
    shas = [hashlib.sha256(b"left %d" % i).hexdigest() for i in range(80)]
    folder = os.path.join(gw.state, "store", "_data", "alice")
    db = sqlite3.connect(os.path.join(gw.state, "gateway.db"))
    with db:
        for h in shas:
            with open(os.path.join(folder, h), "wb") as f:
                f.write(b"x")
            db.execute("INSERT INTO uploads(user, sha256, bytes, path, first_us, last_us, deleting)"
                       " VALUES('alice', ?, 1, '/old/file', 1, 1, 1)", (h,))
    db.close()
    gw.start()
    alice = GatewayClient(gw.listen, TOKENS["alice"])
    try:
        end = time.monotonic() + 60
        left = shas
        while time.monotonic() < end:
            listed = {u["sha256"] for u in alice.req("data.list")["uploads"]}
            left = [h for h in shas if os.path.exists(os.path.join(folder, h)) or h in listed]
            if not left:
                break
            time.sleep(0.1)
        check(not left, "a restarted gateway deletes the 80 files an earlier run left marked (%d left)"
              % len(left))
    finally:
        alice.close()


def main():
    folder = tempfile.mkdtemp(prefix="gw-upload-")
    gw = GatewayProcess(folder, GATEWAY, TOKENS, slots=2, extra_ini="[store]\nupload_data = yes\n",
                        user_options={"carol": "admin = yes\n"},
                        env={"SPOTLAB_WORKER_BIN": WORKER, "SPOTLAB_TRAIN_BIN": TRAIN, "SPOTLAB_DEBUG": None})
    with open(gw.ini) as f:  # [gateway] comes first in the file GatewayProcess writes
        ini = f.read().replace("[gateway]\n", "[gateway]\nhttp = 127.0.0.1:0\n", 1)
    with open(gw.ini, "w") as f:
        f.write(ini)
    text = os.path.join(folder, "notes.txt")
    data = ("Call me Ishmael. Some years ago, never mind how long precisely, having little money. "
            * 600).encode()
    with open(text, "wb") as f:
        f.write(data)
    sha = hashlib.sha256(data).hexdigest()
    gw.start()
    try:
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        define(alice, text)
        r = alice.req("submit", kind="train", model="m", data="d", options=TRAIN_OPTS)
        check(r.get("ok") and "job" not in r and r.get("upload") == {"path": text, "chunk_bytes": 1 << 20},
              "a train job on the notebook's file is answered with what to upload: %s" % r)
        r = alice.req("submit", kind="train", model="m", data="d", options=TRAIN_OPTS,
                      data_files=[{"path": text, "sha256": sha, "size": len(data)}])
        check(not r["ok"] and r["error"]["code"] == "SL_ESTATE", "naming an upload not made is refused: %s" % r)
        check_refusals(alice, sha, data)

        half = len(data) // 2 // CHUNK * CHUNK
        off = 0
        while off < half:
            r = put(alice, sha, data, off)
            require(r.get("ok"), "data.put at %d" % off, r)
            off = r["offset"]
        alice.close()
        gw.stop()
        gw.start()
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        r = alice.have(sha, len(data))
        check(r.get("ok") and r["state"] == "receiving" and r["offset"] == half,
              "after a gateway restart the upload goes on from byte %d: %s" % (half, r))
        off = r.get("offset", 0)
        while r.get("ok") and r["state"] == "receiving":
            r = put(alice, sha, data, off)
            off = r.get("offset", off)
        check(r.get("ok") and r["state"] in ("publishing", "ready"), "the last chunk publishes: %s" % r)
        r = alice.have(sha, len(data), until=("ready",))
        check(r.get("ok") and r["state"] == "ready", "the upload is ready: %s" % r)
        r = alice.req("data.list")
        check(r.get("ok") and [(u["sha256"], u["path"], u["jobs"]) for u in r["uploads"]] == [(sha, "", 0)],
              "data.list shows the stored file before any job names it: %s" % r)
        obj = os.path.join(gw.state, "store", "_data", "alice", sha)
        check(os.path.exists(obj) and open(obj, "rb").read() == data, "the store holds the file as %s" % obj)
        check(not [n for n in os.listdir(os.path.join(gw.state, "uploads")) if n.endswith(".part")],
              "no part is left once published")

        bob = GatewayClient(gw.listen, TOKENS["bob"])
        r = bob.have(sha, len(data))
        check(r.get("ok") and r["state"] == "receiving" and r["offset"] == 0,
              "bob does not see alice's upload: %s" % r)
        others = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(3)]
        started = [bob.have(o, 10).get("state") for o in others]
        r = bob.req("data.have", sha256=hashlib.sha256(b"one more").hexdigest(), size=10)
        check(started == ["receiving"] * 3 and not r["ok"] and r["error"]["code"] == "SL_ELIMIT" and
              "4 uploads under way" in r["error"]["message"],
              "a user has at most 4 uploads under way: %s %s" % (started, r))
        bob.close()
        check_bad_bytes(alice, gw.state)

        os.unlink(text)  # the job reads the store's copy, not the notebook's file
        r = alice.req("submit", kind="train", model="m", data="d", options=TRAIN_OPTS,
                      data_files=[{"path": text, "sha256": sha, "size": len(data)}])
        require(r.get("ok") and "job" in r, "the job is taken once the upload is ready", r)
        job = r["job"]
        require(alice.req("attach", job=job, after=0)["ok"], "attach " + job)
        e = alice.wait_event(lambda e: e["job"] == job and e["event"] == "state" and
                             e["state"] in ("succeeded", "failed", "cancelled"), "the end of " + job, 180)
        check(e["state"] == "succeeded", "%s trained on the uploaded copy, its file gone: %s" % (job, e))
        r = alice.req("record", job=job)
        attempts = r.get("record", {}).get("attempts") or [{}]
        check(r.get("ok") and attempts[0].get("data_sha256") == sha,
              "the run record names the data's hash: %s" % attempts[0])
        bob = GatewayClient(gw.listen, TOKENS["bob"])
        check_data_files(gw, alice, bob, sha, data, text, job)
        bob.close()
        images = os.path.join(folder, "images")
        make_image_set(images + "-copy")
        want_train, want_eval = folder_id(images + "-copy", 4), folder_id(images + "-copy", 2)
        job, files = check_image_set(alice, images)
        check_image_set_eval(alice, job, files, want_train, want_eval)
        check_set_file_deleted(gw, alice, files, want_train, want_eval)

        # a new gateway finds the upload in the store at once, and the workers it finds
        # running forget their copies of files deleted while they were out of touch
        datas = [os.path.dirname(p) for p in worker_copies(gw, alice, sha)]
        require(datas, "a worker holds a copy of %s" % sha)
        alice.close()
        gw.stop()
        gone = hashlib.sha256(b"deleted while out of touch").hexdigest()
        for d in datas:
            with open(os.path.join(d, gone), "wb") as f:
                f.write(b"deleted while out of touch")
        gw.start()
        alice = GatewayClient(gw.listen, TOKENS["alice"])
        r = alice.have(sha, len(data))
        check(r.get("ok") and r["state"] == "ready", "a restarted gateway finds the upload stored: %s" % r)
        left = wait_no_copies(gw, alice, gone)
        check(not left and all(os.path.exists(os.path.join(d, sha)) for d in datas),
              "re-registered workers forget a copy no stored file has (%s left) and keep %s's" % (left, sha[:12]))
        alice.close()
        check_deletions_resumed(gw)
    finally:
        from checks import failures
        if failures:
            print("gateway log:\n" + gw.logtail(), file=sys.stderr)
        gw.stop()
        kill_instances(gw.state)  # workers outlive a stopped gateway by design
        if not failures:
            shutil.rmtree(folder, ignore_errors=True)  # kept to look at when a check failed
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
