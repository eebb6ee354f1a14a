"""spotlab-worker integration tests: python3 test_worker.py CASE WORKER TRAIN.

Each case starts its own fake gateway, metadata service and worker, and
waits for messages with deadlines; it never sleeps to wait for an event."""
import os
import re
import shutil
import signal
import sys
import tempfile
import time

import zmq

from image_set import SET_FILES, image_set_files, set_id as image_set_id
from procs import alive, processes
from without_cuda import UNSHARE, backend_of, hiding_command
from worker_harness import (Bucket, Gateway, Metadata, Worker, is_orphan_presign, of, text_file,
                            train_assign)


def start(tmp, worker_exe, train_exe, meta=None, registered_by_hand=False, **kw):
    gw = Gateway("ipc://%s/workers.sock" % tmp)
    w = Worker(worker_exe, train_exe, gw, tmp, meta.url if meta else "", **kw)
    reg = gw.recv(lambda m: m["type"] == "register", what="register")
    assert reg["instance"] == "i-0123456789ab" and reg["jobs"] == [], reg
    gw.gpus = reg["gpus"]
    gw.send({"type": "registered", "heartbeat_ms": 100})
    gw.answer_register = not registered_by_hand
    return gw, w


def run_until_done(gw, job, timeout=30):
    msgs = []
    while True:
        m = gw.recv(of(job, "metric", "checkpoint", "done", "output", "result"), timeout, "done of " + job)
        msgs.append(m)
        if m["type"] == "done":
            return msgs


def steps_of(msgs):
    return [m["data"]["step"] for m in msgs if m["type"] == "metric" and "event" not in m["data"]]


def case_register(tmp, worker_exe, train_exe):
    gw, w = start(tmp, worker_exe, train_exe, registered_by_hand=True)
    try:
        hb = gw.recv(lambda m: m["type"] == "heartbeat", 5, "heartbeat")
        assert hb["instance"] == "i-0123456789ab" and hb["jobs"] == []
        t0 = time.monotonic()
        gw.recv(lambda m: m["type"] == "heartbeat", 5, "second heartbeat")
        assert time.monotonic() - t0 < 1.0, "heartbeat_ms from registered not applied"
        # A restarted gateway: the worker saw its connection drop and registers by itself.
        gw.restart()
        gw.recv(lambda m: m["type"] == "register", 10, "register after restart")
        gw.send({"type": "registered", "heartbeat_ms": 100})
        gw.recv(lambda m: m["type"] == "heartbeat", 5, "heartbeat after registered")
        # A gateway that does not know it answers with reregister.
        gw.send({"type": "reregister"})
        gw.recv(lambda m: m["type"] == "register", 5, "register after reregister")
        gw.send({"type": "registered", "heartbeat_ms": 100})
        # Malformed input gets a clear refusal and the worker keeps serving.
        gw.sock.send_multipart([gw.ident, b"{not json"])
        gw.send({"type": "assign", "job": "J000009", "attempt": 1, "kind": "dance", "spec": {}})
        d = gw.recv(of("J000009", "done"), 5, "refusal")
        assert d["status"] == "failed" and "kind" in d["message"], d
        gw.send({"type": "assign", "job": "J000010", "attempt": 1, "kind": "train",
                 "spec": {"model": {"type": "gpt"}, "data": {"type": "text", "args": ["x"]},
                          "options": {"steps": "many"}}})
        d = gw.recv(of("J000010", "done"), 5, "refusal")
        assert d["status"] == "failed" and "steps" in d["message"], d
        # The GPU inventory comes with every register: what NVML says, or none and why.
        gpus = gw.gpus
        assert sorted(set(gpus) - {"reason", "unusable"}) == ["count", "driver", "memory_mib", "model"], gpus
        assert gpus["count"] > 0 or (gpus["reason"] and gpus["model"] == "" and gpus["memory_mib"] == 0), gpus
        # More GPUs than the instance has: refused at once with a sentence for the notebook,
        # never trained on the CPU; so is bf16 on the CPU.
        n = gpus["count"] + 1
        gw.send(train_assign("J000011", "x.txt", 5, options={"gpus": n}))
        d = gw.recv(of("J000011", "done", "started"), 5, "refusal")
        want = r"gpus=%d asked, but this instance \(local\.cpu\) has %d GPUs?" % (n, gpus["count"])
        assert d["type"] == "done" and d["status"] == "failed" and re.match(want, d["message"]), d
        if gpus["count"] == 0:
            assert gpus["reason"] in d["message"], d
            gw.send(train_assign("J000012", "x.txt", 5, options={"precision": "bf16"}))
            d = gw.recv(of("J000012", "done", "started"), 5, "refusal")
            assert d["type"] == "done" and "precision=bf16 needs a GPU" in d["message"], d
        gw.recv(lambda m: m["type"] == "heartbeat", 5, "heartbeat after bad input")
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def worker_without_cuda(tmp, train_exe, worker_exe):
    """A program that runs the worker where the CUDA libraries of train_exe's
    backend are hidden (without_cuda.py); None where they cannot be."""
    hide, _ = hiding_command(train_exe)
    if hide is None:
        return None
    path = os.path.join(tmp, "worker-without-cuda")
    with open(path, "w") as f:  # the worker is $0 of the inner shell, its arguments follow
        f.write("#!/bin/sh\nexec %s sh -c '%s && exec \"$0\" \"$@\"' '%s' \"$@\"\n"
                % (" ".join(UNSHARE), hide, worker_exe))
    os.chmod(path, 0o755)
    return path


def case_gpus_unusable(tmp, worker_exe, train_exe):
    """An instance with a GPU (a stand-in NVML) where spotlab-train cannot
    train on it: the register says why, a job that names no GPU trains on the
    CPU, one that asks for a GPU is refused with the reason."""
    data = text_file(tmp)
    nvml = {"LD_LIBRARY_PATH": os.environ["SPOTLAB_TEST_FAKE_NVML_DIR"] +
            (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")}
    # spotlab-train alone, as a build without nvcc, or an install that lost its backend, has it
    alone = os.path.join(tmp, "alone")
    os.mkdir(alone)
    shutil.copy(train_exe, alone)
    cases = [(os.path.join(alone, "spotlab-train"), "this spotlab-train has no CUDA backend")]
    if os.path.exists(backend_of(train_exe)):
        # this build's: it loads, and CUDA finds no GPU here (on a machine with one it can train)
        cases.append((train_exe, None))
        # ... on an image without CUDA's libraries: hidden in a mount namespace where one can be
        # made (as root), the worker started inside it
        hidden = worker_without_cuda(tmp, train_exe, worker_exe)
        if hidden:
            cases.append((train_exe, "cannot load the CUDA backend (lib", hidden))
        else:
            print("note: not checked on a machine without CUDA's libraries (no mount namespace here)")
    for n, case in enumerate(cases):
        train, why = case[:2]
        gw, w = start(tmp, case[2] if len(case) > 2 else worker_exe, train, env=nvml)
        try:
            gpus = gw.gpus
            assert gpus["count"] == 1 and gpus["model"] == "NVIDIA A10G", gpus
            if why is None and "unusable" not in gpus:
                print("spotlab-train can use the GPU here: nothing to check with", train)
                gw.send({"type": "shutdown"})
                assert w.wait(10) == 0
                continue
            if why is None:  # the backend loaded: what is missing is the GPU or its driver
                assert "no CUDA backend" not in gpus["unusable"] and (
                    "CUDA sees no GPU" in gpus["unusable"] or "driver" in gpus["unusable"]), gpus
            else:
                assert gpus["unusable"].startswith(why), gpus
            job = "J00002%d" % n
            gw.send(train_assign(job, data, 3))
            msgs = run_until_done(gw, job)
            dev = [m["data"] for m in msgs if m["type"] == "metric" and m["data"].get("event") == "device"]
            assert msgs[-1]["status"] == "succeeded" and dev and dev[0]["device"] == "cpu", (msgs[-1], dev)
            # ... and its device event says the instance's GPU went unused, and why
            assert dev[0].get("gpus_unused") == 1 and dev[0].get("gpu_model") == "NVIDIA A10G" and \
                dev[0].get("gpus_unusable") == gpus["unusable"], dev
            job = "J00003%d" % n
            gw.send(train_assign(job, data, 3, options={"gpus": 1}))
            d = gw.recv(of(job, "done", "started"), 5, "refusal")
            assert d["type"] == "done" and d["status"] == "failed", d
            assert d["message"] == ("gpus=1 asked, but spotlab-train cannot use this instance's GPUs: " +
                                    gpus["unusable"]), d
            gw.send({"type": "shutdown"})
            assert w.wait(10) == 0
        finally:
            w.kill()
            gw.close()


def case_train(tmp, worker_exe, train_exe):
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        gw.send(train_assign("J000001", data, 40, options={"gpus": 0}))
        msgs = run_until_done(gw, "J000001")
        steps = steps_of(msgs)
        assert steps == list(range(1, 41)), steps
        # gpus=0: the CPU, and one device event that says so, with its threads
        dev = [m["data"] for m in msgs if m["type"] == "metric" and m["data"].get("event") == "device"]
        assert dev == [{"event": "device", "device": "cpu", "threads": 1, "world_size": 1,
                        "precision": "fp32"}], dev
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        assert cks and cks[-1]["step"] == 40, cks
        for c in cks:
            assert c["key"] == "J000001/ckpt-%08d.tc" % c["step"], c
            assert c["step"] % 10 == 0 and c["attempt"] == 1
            path = os.path.join(w.store, c["key"])
            assert os.path.getsize(path) == c["bytes"] > 0, (c, os.path.getsize(path))
            assert c["write_ms"] >= 0 and c["upload_ms"] >= 0
        done = msgs[-1]
        assert done["status"] == "succeeded" and done["exit_code"] == 0 and done["step"] == 40, done
        # eval and sample from the stored checkpoint
        gw.send({"type": "assign", "job": "J000002", "attempt": 1, "kind": "eval",
                 "spec": {"data": {"type": "text", "args": [data]}}, "restore": cks[-1]["key"]})
        msgs = run_until_done(gw, "J000002")
        res = [m for m in msgs if m["type"] == "result"]
        assert msgs[-1]["status"] == "succeeded" and res and res[0]["eval_loss"] > 0, msgs[-3:]
        gw.send({"type": "assign", "job": "J000003", "attempt": 1, "kind": "sample",
                 "spec": {"options": {"prompt": "Call me", "tokens": 20, "temperature": 0.5, "top_k": 5}},
                 "restore": cks[-1]["key"]})
        msgs = run_until_done(gw, "J000003")
        res = [m for m in msgs if m["type"] == "result"]
        assert msgs[-1]["status"] == "succeeded" and res and res[0]["text"].startswith("Call me"), msgs
        assert any(m["type"] == "output" and m["stream"] == "stdout" for m in msgs)
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_corrupt_restore(tmp, worker_exe, train_exe):
    """A checkpoint to restore that is corrupt or gone: the worker restores
    the newest valid one of the same run before it, and says so on the job's
    stderr; with none valid, the start is refused naming each one."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        gw.send(train_assign("J000041", data, 40, options={"gpus": 0}))
        msgs = run_until_done(gw, "J000041")
        assert msgs[-1]["status"] == "succeeded", msgs[-1]
        keys = ["J000041/ckpt-%08d.tc" % s for s in (20, 30, 40)]
        for k in keys:
            assert os.path.exists(os.path.join(w.store, k)), k
        with open(os.path.join(w.store, keys[2]), "r+b") as f:  # the newest: bytes changed
            f.seek(100)
            f.write(b"garbage")
        gw.send({"type": "assign", "job": "J000042", "attempt": 1, "kind": "eval",
                 "spec": {"data": {"type": "text", "args": [data]}}, "restore": keys[2]})
        started = gw.recv(of("J000042", "started", "done"), 30, "started of J000042")
        assert started["type"] == "started" and started.get("restored_key") == keys[1] and \
            started.get("restored_step") == 30 and started["passed_over"].startswith(keys[2]), started
        msgs = run_until_done(gw, "J000042")
        err = [m["text"] for m in gw.received if m.get("job") == "J000042" and m["type"] == "output" and
               m["stream"] == "stderr"]
        assert msgs[-1]["status"] == "succeeded", msgs[-3:]
        assert any(("checkpoint %s is not usable" % keys[2]) in t and
                   ("restored %s, of step 30, instead" % keys[1]) in t for t in err), err
        # a training run resumes from there: its steps go on from 31
        os.remove(os.path.join(w.store, keys[2]))  # gone
        gw.send(train_assign("J000041", data, 40, attempt=2, restore=keys[2], options={"gpus": 0}))
        msgs = run_until_done(gw, "J000041")
        assert msgs[-1]["status"] == "succeeded" and steps_of(msgs) == list(range(31, 41)), \
            (msgs[-1], steps_of(msgs))
        # every one of them corrupt: refused, naming each
        stored = sorted(k for k in os.listdir(os.path.join(w.store, "J000041")) if k.startswith("ckpt-"))
        assert "ckpt-00000040.tc" in stored and len(stored) >= 3, stored
        for k in stored:
            with open(os.path.join(w.store, "J000041", k), "wb") as f:
                f.write(b"not a checkpoint")
        keys = ["J000041/" + k for k in stored]
        gw.send({"type": "assign", "job": "J000043", "attempt": 1, "kind": "eval",
                 "spec": {"data": {"type": "text", "args": [data]}}, "restore": "J000041/ckpt-00000040.tc"})
        d = gw.recv(of("J000043", "done"), 60, "refusal")
        assert d["status"] == "failed" and "retry" not in d, d
        assert d["message"].startswith("restore J000041/ckpt-00000040.tc: ") and \
            all(k in d["message"] for k in keys) and "truncated header" in d["message"], d
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def set_assign(job, files, set_id):
    """A train job on a data set the notebook uploaded: files [(name, key, sha256, bytes)]."""
    a = train_assign(job, "/nowhere/images", 10, options={"gpus": 0, "batch": 8})
    a["spec"]["model"] = {"name": "c", "kind": "model", "spec": {"type": "mlp", "args": [],
                                                                  "options": {"hidden": 8}}}
    a["spec"]["data"] = {"type": "fashion_mnist", "args": ["/nowhere/images"]}
    a["spec"]["data_upload"] = {"sha256": set_id, "bytes": sum(f[3] for f in files), "files": [
        {"name": n, "key": k, "sha256": h, "bytes": b} for n, k, h, b in files]}
    return a


def case_data_set(tmp, worker_exe, train_exe):
    """A data set folder the notebook uploaded ("data_upload" with files):
    each file fetched and checked, linked under its name into
    work_dir/data/set-ID, trained on there, the set's id in the started
    message; a file whose bytes changed in the store, a set id its files do
    not make, or files in another order: the start refused, saying which."""
    import hashlib
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        files = []
        for name, blob in image_set_files(n_train=32, n_test=16).items():
            sha = hashlib.sha256(blob).hexdigest()
            os.makedirs(os.path.join(w.store, "_data", "alice"), exist_ok=True)
            with open(os.path.join(w.store, "_data", "alice", sha), "wb") as f:
                f.write(blob)
            files.append((name, "_data/alice/" + sha, sha, len(blob)))
        files.sort(key=lambda f: SET_FILES.index(f[0]))
        set_id = image_set_id([h for _, _, h, _ in files])
        gw.send(set_assign("J000061", files, set_id))
        started = gw.recv(of("J000061", "started", "done"), 30, "started of J000061")
        folder = os.path.join(w.work, "data", "set-" + set_id)
        assert started["type"] == "started" and started.get("data_sha256") == set_id and \
            started.get("data_path") == folder, started
        msgs = run_until_done(gw, "J000061")
        assert msgs[-1]["status"] == "succeeded" and steps_of(msgs) == list(range(1, 11)), msgs[-1]
        assert sorted(os.listdir(folder)) == sorted(SET_FILES), os.listdir(folder)
        for n, _, h, _ in files:
            assert os.path.samefile(os.path.join(folder, n), os.path.join(w.work, "data", h)), n
        # the same folder read in place (no upload): the same id; a rerun expecting another is refused
        local = set_assign("J000065", files, set_id)
        del local["spec"]["data_upload"]
        local["spec"]["data"]["args"] = [folder]
        gw.send(local)
        started = gw.recv(of("J000065", "started", "done"), 30, "started of J000065")
        assert started["type"] == "started" and started.get("data_sha256") == set_id, started
        assert run_until_done(gw, "J000065")[-1]["status"] == "succeeded"
        local["job"] = "J000066"
        local["spec"]["expect_data_sha256"] = "1" * 64
        gw.send(local)
        d = gw.recv(of("J000066", "done"), 30, "refusal of J000066")
        assert d["status"] == "failed" and "changed since the original run" in d["message"], d

        # a file changed in the store, not yet fetched by this worker
        shutil.rmtree(os.path.join(w.work, "data"))
        key = os.path.join(w.store, files[3][1])
        with open(key, "r+b") as f:
            f.seek(20)
            f.write(b"changed")
        gw.send(set_assign("J000062", files, set_id))
        d = gw.recv(of("J000062", "done"), 30, "refusal of J000062")
        assert d["status"] == "failed" and files[3][1] in d["message"] and "hashes to" in d["message"], d
        assert not os.path.exists(folder), os.listdir(os.path.join(w.work, "data"))
        # an id its files do not make; files in another order
        gw.send(set_assign("J000063", files, "0" * 64))
        d = gw.recv(of("J000063", "done"), 30, "refusal of J000063")
        assert d["status"] == "failed" and "files' hashes make" in d["message"], d
        gw.send(set_assign("J000064", [files[1], files[0]] + files[2:], set_id))
        d = gw.recv(of("J000064", "done"), 30, "refusal of J000064")
        assert d["status"] == "failed" and "needs the name t10k-images-idx3-ubyte.gz" in d["message"], d
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_data_forget(tmp, worker_exe, train_exe):
    """data_forget (the gateway deleted uploaded data files from the store): a
    file a running job reads stays; malformed ones are ignored; once the job
    has ended, a set file's copy goes with the set folder that links it, and
    the other files' copies stay until they are named too."""
    import hashlib
    gw, w = start(tmp, worker_exe, train_exe)

    def synced():  # the worker has handled what was sent before; its register
        gw.send({"type": "reregister"})
        return gw.recv(lambda m: m["type"] == "register", 5, "register after reregister")

    try:
        files = []
        os.makedirs(os.path.join(w.store, "_data", "alice"), exist_ok=True)
        for name, blob in image_set_files(n_train=32, n_test=16).items():
            sha = hashlib.sha256(blob).hexdigest()
            with open(os.path.join(w.store, "_data", "alice", sha), "wb") as f:
                f.write(blob)
            files.append((name, "_data/alice/" + sha, sha, len(blob)))
        files.sort(key=lambda f: SET_FILES.index(f[0]))
        set_id = image_set_id([h for _, _, h, _ in files])
        data = os.path.join(w.work, "data")
        folder = os.path.join(data, "set-" + set_id)
        gw.send(set_assign("J000071", files, set_id))
        assert run_until_done(gw, "J000071")[-1]["status"] == "succeeded"
        a = set_assign("J000072", files, set_id)
        a["spec"]["options"]["steps"] = 10_000_000
        a["checkpoint_every"] = 0
        gw.send(a)
        gw.recv(lambda m: of("J000072", "metric")(m) and m["data"].get("step", 0) >= 2, 20, "J000072 trains")
        gw.send({"type": "data_forget", "sha256": [files[2][2], set_id]})
        gw.send({"type": "data_forget", "sha256": "not a list"})
        gw.send({"type": "data_forget", "sha256": [7, "../../x", "A" * 64]})
        synced()
        assert sorted(os.listdir(folder)) == sorted(SET_FILES), "a running job's set stays"
        assert os.path.exists(os.path.join(data, files[2][2])), "and its files"
        gw.send({"type": "cancel", "job": "J000072", "attempt": 1})
        assert run_until_done(gw, "J000072")[-1]["status"] == "cancelled"
        gw.send({"type": "data_forget", "sha256": [files[2][2]]})
        reg = synced()
        left = sorted(os.listdir(data))
        assert left == sorted(h for _, _, h, _ in files if h != files[2][2]), left
        # a register names the copies kept (for the gateway to tell which were deleted meanwhile)
        assert sorted(reg.get("data", [])) == left, reg
        gw.send({"type": "data_forget", "sha256": [h for _, _, h, _ in files]})
        reg = synced()
        assert os.listdir(data) == [], os.listdir(data)
        assert "data" not in reg, reg
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_data_cache(tmp, worker_exe, train_exe):
    """data_cache_bytes bounds the copies of uploaded data files kept between
    jobs: a fetch that would pass it removes the least recently used copy
    that no running job reads (a copy used again counts as new), never one
    a running job reads."""
    import hashlib
    size = 20000
    gw = Gateway("ipc://%s/workers.sock" % tmp)
    w = Worker(worker_exe, train_exe, gw, tmp, extra={"data_cache_bytes": 2 * size + size // 2})
    reg = gw.recv(lambda m: m["type"] == "register", what="register")
    gw.gpus = reg["gpus"]
    gw.send({"type": "registered", "heartbeat_ms": 100})
    gw.answer_register = True
    data = os.path.join(w.work, "data")
    os.makedirs(os.path.join(w.store, "_data", "alice"), exist_ok=True)
    shas = {}
    for name in "ABCD":
        blob = ("%s: Call me Ishmael. Some years ago, never mind how long precisely.\n" % name * 400)[:size].encode()
        shas[name] = hashlib.sha256(blob).hexdigest()
        with open(os.path.join(w.store, "_data", "alice", shas[name]), "wb") as f:
            f.write(blob)

    def assign(job, name, steps=5):
        a = train_assign(job, "/nowhere/%s.txt" % name, steps, checkpoint_every=0)
        a["spec"]["data_upload"] = {"key": "_data/alice/" + shas[name], "sha256": shas[name], "bytes": size}
        return a

    def run(job, name):
        gw.send(assign(job, name))
        assert run_until_done(gw, job)[-1]["status"] == "succeeded", job

    def held():
        return sorted(n for n, h in shas.items() if os.path.exists(os.path.join(data, h)))

    try:
        run("J000081", "A")
        run("J000082", "B")
        assert held() == ["A", "B"], held()
        run("J000083", "A")  # A used again: B is now the least recently used
        run("J000084", "C")
        assert held() == ["A", "C"], held()
        # a running job's copy stays, even once it is the least recently used
        gw.send(assign("J000085", "A", steps=10_000_000))
        gw.recv(lambda m: of("J000085", "metric")(m) and m["data"].get("step", 0) >= 2, 20, "J000085 trains")
        run("J000086", "B")
        assert held() == ["A", "B"], held()
        run("J000087", "D")  # A is the oldest now, and J000085 reads it
        assert held() == ["A", "D"], held()
        gw.send({"type": "cancel", "job": "J000085", "attempt": 1})
        assert run_until_done(gw, "J000085")[-1]["status"] == "cancelled"
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_cancel(tmp, worker_exe, train_exe):
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        gw.send(train_assign("J000004", data, 10_000_000, checkpoint_every=0))
        gw.recv(lambda m: of("J000004", "metric")(m) and m["data"].get("step", 0) >= 5, 20, "step 5")
        hb = gw.recv(lambda m: m["type"] == "heartbeat" and m["jobs"], 5, "heartbeat with the job")
        assert hb["jobs"][0]["job"] == "J000004" and hb["jobs"][0]["step"] >= 5, hb
        gw.send({"type": "checkpoint_now", "job": "J000004"})
        ck = gw.recv(of("J000004", "checkpoint"), 10, "checkpoint on request")
        assert ck["step"] >= 5 and os.path.getsize(os.path.join(w.store, ck["key"])) == ck["bytes"], ck
        gw.send({"type": "cancel", "job": "J000099"})  # not here: ignored
        # another attempt of the job (one that is over): ignored, the job goes on
        gw.send({"type": "cancel", "job": "J000004", "attempt": 2})
        gw.recv(lambda m: of("J000004", "metric")(m) and m["data"].get("step", 0) > ck["step"] + 20,
                20, "steps after a cancel of another attempt")
        gw.send({"type": "cancel", "job": "J000004", "attempt": 1})
        msgs = run_until_done(gw, "J000004", 20)
        done = msgs[-1]
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        assert done["status"] == "cancelled", done
        assert cks and done["step"] == cks[-1]["step"], (done, cks)
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def notice_flow(gw, timeout):
    """The notices, metrics and checkpoints up to a job's done (each within timeout):
    (messages, the last notice or None)."""
    msgs, notice = [], None
    while not msgs or msgs[-1]["type"] != "done":
        m = gw.recv(lambda m: m["type"] in ("notice", "metric", "checkpoint", "done"), timeout, "notice flow")
        msgs.append(m)
        if m["type"] == "notice":
            notice = m
    return msgs, notice


def case_notice(tmp, worker_exe, train_exe):
    data = text_file(tmp)
    meta = Metadata()
    gw, w = start(tmp, worker_exe, train_exe, meta)
    try:
        gw.send(train_assign("J000005", data, 10_000_000, checkpoint_every=1000))
        gw.recv(lambda m: of("J000005", "metric")(m) and m["data"].get("step", 0) >= 20, 20, "step 20")
        # An expired token (401) makes the worker fetch a new one.
        meta.wait_tokens(1, 5)
        meta.expire_token()
        meta.wait_tokens(2, 5)
        lead = 20.0
        deadline = meta.post_notice(lead)
        t0 = time.monotonic()
        msgs, notice = notice_flow(gw, lead)
        assert notice and notice["action"] == "terminate", notice
        assert abs(notice["deadline_us"] / 1e6 - int(deadline)) < 1.5, notice
        done = msgs[-1]
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        steps = steps_of(msgs)
        assert done["status"] == "preempted", done
        assert cks and done["step"] == cks[-1]["step"] == steps[-1], (done, cks[-1:], steps[-3:])
        # a gateway restarted since, which may not have heard the notice, hears it in the register
        gw.send({"type": "reregister"})
        reg = gw.recv(lambda m: m["type"] == "register", 5, "register after reregister")
        assert reg.get("notice") == {"action": "terminate", "deadline_us": notice["deadline_us"]}, reg
        key = cks[-1]["key"]
        assert os.path.getsize(os.path.join(w.store, key)) == cks[-1]["bytes"]
        assert w.wait(max(0.1, deadline - time.time())) == 0
        assert time.time() < deadline, "worker exited after the deadline"
        assert meta.tokens_issued >= 1 and not meta.bad_requests, meta.bad_requests
        print("notice handled in %.2f s; durable step %d" % (time.monotonic() - t0, done["step"]))
        gw.close()
        # A new worker resumes the job from the uploaded checkpoint.
        durable = done["step"]
        store = w.store
        gw, w = start(tmp, worker_exe, train_exe, store=store)
        gw.send(train_assign("J000005", data, durable + 10, attempt=2, restore=key))
        msgs = run_until_done(gw, "J000005")
        steps = steps_of(msgs)
        assert steps == list(range(durable + 1, durable + 11)), (durable, steps)
        assert msgs[-1]["status"] == "succeeded" and msgs[-1]["attempt"] == 2, msgs[-1]
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()
        meta.close()


def case_sigterm(tmp, worker_exe, train_exe):
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        gw.send(train_assign("J000006", data, 10_000_000, checkpoint_every=0))
        gw.recv(lambda m: of("J000006", "metric")(m) and m["data"].get("step", 0) >= 3, 20, "step 3")
        # a %%run job beside it: its folder must reach the store before the worker leaves
        # written the preemption-safe way: a complete file under a temporary name, then renamed
        script = ('i=0\ncd "$SPOTLAB_CHECKPOINT_DIR"\n'
                  'while true; do i=$((i+1)); echo $i > n.tmp; mv n.tmp n; echo tick $i; sleep 0.01; done')
        gw.send({"type": "assign", "job": "J000013", "attempt": 1, "kind": "run", "spec": {"script": script}})
        gw.recv(lambda m: of("J000013", "output")(m) and m["text"] == "tick 3", 20, "tick 3")
        w.proc.send_signal(signal.SIGTERM)
        n = gw.recv(lambda m: m["type"] == "notice", 10, "notice")
        assert n["action"] == "sigterm", n
        done = {}
        msgs = []
        while len(done) < 2:
            m = gw.recv(lambda m: m.get("job") in ("J000006", "J000013"), 20, "both done")
            msgs.append(m)
            if m["type"] == "done":
                done[m["job"]] = m
        cks = [m for m in msgs if m["type"] == "checkpoint" and m["job"] == "J000006"]
        d = done["J000006"]
        assert d["status"] == "preempted" and cks and d["step"] == cks[-1]["step"], (d, cks[-1:])
        assert done["J000013"]["status"] == "preempted", done["J000013"]
        ticks = [int(m["text"].split()[1]) for m in msgs if m["type"] == "output" and m["job"] == "J000013"]
        with open(os.path.join(w.store, "J000013", "files", "n")) as f:
            # the file is written before each tick is printed, and uploaded after the script stopped
            assert int(f.read()) >= max(ticks + [3])
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_rebalance(tmp, worker_exe, train_exe):
    """A rebalance recommendation: the job checkpoints at once and goes on (the
    instance may well not be reclaimed); the interruption notice after it stops
    the job as any notice does, and is reported too."""
    data = text_file(tmp)
    meta = Metadata()
    gw, w = start(tmp, worker_exe, train_exe, meta)
    try:
        gw.send(train_assign("J000012", data, 10_000_000, checkpoint_every=0))
        gw.recv(lambda m: of("J000012", "metric")(m) and m["data"].get("step", 0) >= 3, 20, "step 3")
        meta.rebalance = {"noticeTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        n = gw.recv(lambda m: m["type"] == "notice", 10, "notice")
        assert n["action"] == "rebalance" and n["leaving"] is False, n
        ck = gw.recv(of("J000012", "checkpoint", "done"), 20, "the checkpoint it asks for")
        assert ck["type"] == "checkpoint", ck
        # training goes on past it
        gw.recv(lambda m: of("J000012", "metric", "done")(m) and (
            m["type"] == "done" or m["data"].get("step", 0) >= ck["step"] + 5), 20,
            "steps after the checkpoint")
        assert w.proc.poll() is None, "the worker went on"
        # a restarted gateway hears of it in the register
        gw.send({"type": "reregister"})
        reg = gw.recv(lambda m: m["type"] == "register", 5, "register after reregister")
        assert reg.get("at_risk") is True, reg
        gw.send({"type": "registered", "heartbeat_ms": 100})
        deadline = meta.post_notice(20.0)
        msgs, notice = notice_flow(gw, 20)
        assert notice and notice["action"] == "terminate" and notice["leaving"] is True, notice
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        assert msgs[-1]["status"] == "preempted" and cks and msgs[-1]["step"] == cks[-1]["step"] > ck["step"], \
            (msgs[-1], cks[-1:], ck)
        assert w.wait(max(0.1, deadline - time.time())) == 0
    finally:
        w.kill()
        gw.close()
        meta.close()


def case_rebalance_move(tmp, worker_exe, train_exe):
    """With move_on_rebalance, a recommendation is a notice: checkpoint, stop, exit."""
    data = text_file(tmp)
    meta = Metadata()
    gw, w = start(tmp, worker_exe, train_exe, meta, extra={"move_on_rebalance": True})
    try:
        gw.send(train_assign("J000012", data, 10_000_000, checkpoint_every=0))
        gw.recv(lambda m: of("J000012", "metric")(m) and m["data"].get("step", 0) >= 3, 20, "step 3")
        meta.rebalance = {"noticeTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        n = gw.recv(lambda m: m["type"] == "notice", 10, "notice")
        assert n["action"] == "rebalance" and n["leaving"] is True and n["deadline_us"] > time.time() * 1e6, n
        msgs = run_until_done(gw, "J000012", 20)
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        assert msgs[-1]["status"] == "preempted" and cks and msgs[-1]["step"] == cks[-1]["step"], msgs[-2:]
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()
        meta.close()


def case_kill(tmp, worker_exe, train_exe):
    gw, w = start(tmp, worker_exe, train_exe, extra={"kill_grace_ms": 300})
    try:
        script = "trap '' TERM\necho ready\nwhile true; do sleep 0.01 || true; done"
        gw.send({"type": "assign", "job": "J000014", "attempt": 1, "kind": "run", "spec": {"script": script}})
        gw.recv(lambda m: of("J000014", "output")(m) and m["text"] == "ready", 10, "ready")
        t0 = time.monotonic()
        gw.send({"type": "cancel", "job": "J000014"})
        d = gw.recv(of("J000014", "done"), 10, "done after SIGKILL")
        assert d["status"] == "cancelled" and d["exit_code"] == 128 + 9, d
        assert 0.25 < time.monotonic() - t0 < 5, time.monotonic() - t0
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_run(tmp, worker_exe, train_exe):
    store = os.path.join(tmp, "store")
    os.makedirs(os.path.join(store, "J000007", "files", "sub"))
    with open(os.path.join(store, "J000007", "files", "sub", "before.txt"), "w") as f:
        f.write("restored-content\n")
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        script = ('cat "$SPOTLAB_CHECKPOINT_DIR/sub/before.txt"\n'
                  'echo "step 7" > "$SPOTLAB_CHECKPOINT_DIR/state"\n'
                  'echo "to stderr" >&2\n'
                  'echo "$GREETING"\n')
        gw.send({"type": "assign", "job": "J000007", "attempt": 1, "kind": "run",
                 "spec": {"script": script}, "restore": None, "env": {"GREETING": "hello-env"}})
        msgs = run_until_done(gw, "J000007")
        out = [m["text"] for m in msgs if m["type"] == "output" and m["stream"] == "stdout"]
        err = [m["text"] for m in msgs if m["type"] == "output" and m["stream"] == "stderr"]
        assert out == ["restored-content", "hello-env"] and err == ["to stderr"], (out, err)
        assert msgs[-1]["status"] == "succeeded", msgs[-1]
        # numbered, and carried again by the done (for a gateway that died with some in flight)
        outs = [m for m in msgs if m["type"] == "output"]
        assert [m["oseq"] for m in outs] == [1, 2, 3], outs
        tail = msgs[-1].get("output_tail")
        assert tail == [{k: m[k] for k in ("oseq", "stream", "text")} for m in outs], tail
        # started (the gateway's cue for running) comes once, before the script says anything
        mine = [m["type"] for m in gw.received if m.get("job") == "J000007"]
        assert mine.count("started") == 1 and mine.index("started") < mine.index("output"), mine
        with open(os.path.join(store, "J000007", "files", "state")) as f:
            assert f.read() == "step 7\n"
        gw.send({"type": "assign", "job": "J000008", "attempt": 1, "kind": "run",
                 "spec": {"script": "echo boom >&2\nfalse\necho never"}})
        msgs = run_until_done(gw, "J000008")
        d = msgs[-1]
        assert d["status"] == "failed" and d["exit_code"] == 1 and "boom" in d["message"], d
        assert not any(m["type"] == "output" and m["text"] == "never" for m in msgs)
        # what a job starts in the background ends with the job: the next job on this
        # worker (the same user's, maybe not the same notebook's) must not meet it
        gw.send({"type": "assign", "job": "J000009", "attempt": 1, "kind": "run",
                 "spec": {"script": 'sleep 300 >/dev/null 2>&1 &\necho $! > "$SPOTLAB_CHECKPOINT_DIR/bg.pid"'}})
        msgs = run_until_done(gw, "J000009")
        assert msgs[-1]["status"] == "succeeded", msgs[-1]
        with open(os.path.join(store, "J000009", "files", "bg.pid")) as f:
            bg = int(f.read())
        end = time.monotonic() + 5
        while alive(bg) and time.monotonic() < end:
            time.sleep(0.02)  # polling /proc: nothing to block on
        assert not alive(bg), "the job's background process outlived it"
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()



def case_output_limits(tmp, worker_exe, train_exe):
    """A line longer than an output message takes (4096 bytes) arrives cut, saying so
    and how long it was; one longer than the worker reads as one line (64 KiB) says it was
    longer than that. Lines past output_lines_per_s are counted as dropped, and at the end
    the newest of them follow the count, so a script's last lines are seen."""
    gw, w = start(tmp, worker_exe, train_exe, extra={"output_lines_per_s": 2})
    try:
        script = ("head -c 5000 /dev/zero | tr '\\0' b; echo\n"
                  "head -c 70000 /dev/zero | tr '\\0' c; echo\n"
                  "i=0; while [ $i -lt 300 ]; do echo flood $i; i=$((i+1)); done\n"
                  "echo last-1; echo last-2 >&2; echo last-3\n")
        gw.send({"type": "assign", "job": "J000091", "attempt": 1, "kind": "run",
                 "spec": {"script": script}, "restore": None})
        msgs = run_until_done(gw, "J000091")
        assert msgs[-1]["status"] == "succeeded", msgs[-1]
        out = [(m["stream"], m["text"]) for m in msgs if m["type"] == "output"]
        texts = [t for _, t in out]
        assert texts[0] == "b" * 4096 + " [spotlab-worker: a line of 5000 bytes, cut after its first 4096]", \
            texts[0][4090:]
        assert texts[1] == "c" * 4096 + (" [spotlab-worker: a line of more than 65536 bytes, cut after its"
                                         " first 4096]"), texts[1][4090:]
        marks = [i for i, t in enumerate(texts) if "output lines dropped; the last of them follow" in t]
        assert len(marks) == 1, texts[-8:]
        held = out[marks[0] + 1:]  # stdout and stderr are two pipes: their lines' order is each's own
        assert [t for st, t in held if st == "stdout"][-2:] == ["last-1", "last-3"] and \
            ("stderr", "last-2") in held, out[marks[0]:]
        # the done carries the newest lines again, within its bounds (16 lines, 16 KiB of text)
        tail = msgs[-1]["output_tail"]
        sent = [m for m in msgs if m["type"] == "output"]
        assert 1 <= len(tail) <= 16 and sum(len(t["text"]) for t in tail) <= 16384, tail
        assert [t["oseq"] for t in tail] == [m["oseq"] for m in sent][-len(tail):], (tail, sent[-3:])
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_coalesce(tmp, worker_exe, train_exe):
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, extra={"metrics_per_s": 2})
    try:
        gw.send(train_assign("J000011", data, 300, checkpoint_every=100))
        msgs = run_until_done(gw, "J000011", 60)
        steps = steps_of(msgs)
        cks = [m["step"] for m in msgs if m["type"] == "checkpoint"]
        assert len(steps) < 100 and steps[-1] == 300, steps
        assert steps == sorted(steps) and 300 in cks, (steps, cks)
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_resend(tmp, worker_exe, train_exe):
    """A registered reply naming the newest step the gateway recorded (a
    restarted gateway lost the ones in flight) brings the later ones again."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, registered_by_hand=True)
    try:
        gw.send(train_assign("J000012", data, 1000000, checkpoint_every=100000))
        first = gw.recv(lambda m: of("J000012", "metric")(m) and "event" not in m["data"] and
                        m["data"]["step"] >= 30, 30, "step 30")["data"]["step"]
        gw.send({"type": "registered", "heartbeat_ms": 100,
                 "jobs": [{"job": "J000012", "attempt": 2, "metric_step": 0},
                          {"job": "J000012", "attempt": 1, "metric_step": first - 10}]})
        steps = []
        while first - 9 not in steps or len(steps) < steps.index(first - 9) + 10:
            m = gw.recv(of("J000012", "metric"), 10, "the steps sent again")
            if "event" not in m["data"]:
                steps.append(m["data"]["step"])
        i = steps.index(first - 9)
        assert steps[i:i + 10] == list(range(first - 9, first + 1)), (first, steps)
        assert all(s > first for s in steps[:i]), (first, steps)  # only live steps before
        gw.send({"type": "cancel", "job": "J000012"})
        d = gw.recv(of("J000012", "done"), 30, "done after cancel")
        assert d["status"] == "cancelled", d
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_resend_checkpoint(tmp, worker_exe, train_exe):
    """A registered reply whose checkpoint_step is older than the newest checkpoint the
    worker reported (its report was in flight when a gateway died) brings that report
    again, after the steps it covers; one naming that checkpoint brings nothing."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, registered_by_hand=True)
    try:
        gw.send(train_assign("J000014", data, 1000000, checkpoint_every=20))
        ck = gw.recv(lambda m: of("J000014", "checkpoint")(m) and m["step"] >= 40, 60, "a checkpoint")
        gw.send({"type": "registered", "heartbeat_ms": 100,
                 "jobs": [{"job": "J000014", "attempt": 1, "metric_step": ck["step"], "checkpoint_step": 0}]})
        # the newest reported by then (the one seen, or one reported while the reply was on its
        # way) comes again: a step reported twice
        reported = [m["step"] for m in gw.received if of("J000014", "checkpoint")(m)]
        again = gw.recv(lambda m: of("J000014", "checkpoint")(m) and
                        (m["step"] in reported or reported.append(m["step"])), 10,
                        "the newest checkpoint reported again")
        assert again["step"] >= ck["step"] and again["key"].endswith("ckpt-%08d.tc" % again["step"]), (ck, again)
        assert again["bytes"] > 0 and "write_ms" in again and "upload_ms" in again, again
        newest = again["step"]
        mark = len(gw.received)
        gw.send({"type": "registered", "heartbeat_ms": 100,
                 "jobs": [{"job": "J000014", "attempt": 1, "metric_step": newest, "checkpoint_step": 10 ** 9}]})
        gw.send({"type": "cancel", "job": "J000014"})
        d = gw.recv(of("J000014", "done"), 30, "done after cancel")
        assert d["status"] == "cancelled", d
        late = [m for m in gw.received[mark:] if of("J000014", "checkpoint")(m) and m["step"] <= newest]
        assert not late, late  # nothing older than what the gateway has comes again
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_link(tmp, worker_exe, train_exe):
    """The job ends while no gateway is there: once one is back the worker
    registers by itself, sends again the steps the gateway says it lacks, and
    only then the checkpoints it held back (none may come before the steps it
    covers) and its done."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, registered_by_hand=True)
    try:
        gw.send(train_assign("J000013", data, 200, checkpoint_every=100))
        seen = gw.recv(lambda m: of("J000013", "metric")(m) and "event" not in m["data"] and
                       m["data"]["step"] >= 20, 30, "step 20")["data"]["step"]
        gw.close()
        before = len(gw.received)
        final = os.path.join(w.store, "J000013", "ckpt-00000200.tc")
        deadline = time.monotonic() + 60
        while not os.path.exists(final) and time.monotonic() < deadline:
            time.sleep(0.02)  # the worker reports to nobody now: its store is all there is to see
        assert os.path.exists(final), "the job did not end while the gateway was away"
        gw.open()
        reg = gw.recv(lambda m: m["type"] == "register", 20, "register once the gateway is back")
        assert [j["job"] for j in reg["jobs"]] == ["J000013"], reg
        # What the worker sent before it noticed the gateway go arrives first, in
        # order, but not all of it: what was already written to the closed
        # connection is lost, so a checkpoint that was queued after it can
        # arrive ahead of step metrics that never came (the gateway does not
        # use such a checkpoint from a worker that has not registered again:
        # wproto.c, on_checkpoint). Nothing the worker held back may come
        # before the register: no done, and no step past one it had sent.
        early = gw.received[before:]
        early = early[:next(i for i, m in enumerate(early) if m["type"] == "register")]
        assert all(m["type"] != "done" for m in early), "done before register"
        early_steps, last = steps_of(early), max(steps_of(gw.received[:before]))
        assert early_steps == sorted(set(early_steps)) and all(s > last for s in early_steps), \
            "steps before register out of order or repeated: %s" % early_steps
        gw.send({"type": "registered", "heartbeat_ms": 100,
                 "jobs": [{"job": "J000013", "attempt": 1, "metric_step": seen}]})
        msgs = run_until_done(gw, "J000013")
        steps = [s for s in steps_of(msgs) if s > seen]
        assert steps == list(range(seen + 1, 201)), (seen, steps)
        for i, m in enumerate(msgs):
            if m["type"] == "checkpoint":
                assert m["step"] in steps_of(msgs[:i]), "checkpoint %d before its step" % m["step"]
        assert msgs[-1]["status"] == "succeeded" and msgs[-1]["step"] == 200, msgs[-1]
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_ended(tmp, worker_exe, train_exe):
    """A job that ended stays until the gateway answers done_recorded: its
    done names its newest step metric and checkpoint; it is listed in the
    next register, and after registered its step metrics the gateway lacks
    go again, then its done; the done goes again every two seconds until
    done_recorded (of its attempt), after which the job is gone, and its
    folder with its checkpoint copies."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, registered_by_hand=True)
    try:
        gw.send(train_assign("J000014", data, 20))
        done = run_until_done(gw, "J000014")[-1]
        assert done["status"] == "succeeded" and done["metric_step"] == 20 and \
            done["checkpoint"]["step"] == 20 and done["checkpoint"]["key"] == "J000014/ckpt-00000020.tc", done
        gw.restart()
        reg = gw.recv(lambda m: m["type"] == "register", 10, "register after restart")
        assert [(j["job"], j["attempt"]) for j in reg["jobs"]] == [("J000014", 1)], reg
        # (heartbeats unanswered for ten intervals would start registering over)
        gw.send({"type": "registered", "heartbeat_ms": 1000,
                 "jobs": [{"job": "J000014", "attempt": 1, "metric_step": 10}]})
        msgs = run_until_done(gw, "J000014")
        assert steps_of(msgs) == list(range(11, 21)), steps_of(msgs)
        again = gw.recv(of("J000014", "done"), 10, "the done again, unanswered")
        assert again["status"] == "succeeded", again
        gw.send({"type": "resend", "job": "J000014", "attempt": 1, "metric_step": 18})
        msgs = run_until_done(gw, "J000014")
        assert steps_of(msgs) == [19, 20], steps_of(msgs)
        folder = os.path.join(w.work, "jobs", "J000014")
        assert os.listdir(os.path.join(folder, "ckpt")), "the job's folder stays until done_recorded"
        gw.send({"type": "done_recorded", "job": "J000014", "attempt": 2})  # not its attempt
        gw.send({"type": "reregister"})
        reg = gw.recv(lambda m: m["type"] == "register", 5, "register after reregister")
        assert [j["job"] for j in reg["jobs"]] == ["J000014"] and os.path.isdir(folder), reg
        gw.send({"type": "done_recorded", "job": "J000014", "attempt": 1})
        gw.send({"type": "reregister"})
        reg = gw.recv(lambda m: m["type"] == "register", 5, "register after reregister")
        assert reg.get("jobs") == [], reg
        assert not os.path.exists(folder), os.listdir(folder)
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_refuse_retry(tmp, worker_exe, train_exe):
    """A start that cannot restore its checkpoint is refused with done
    "failed"; "retry" marks a cause that may pass (the store throttling, HTTP
    503 SlowDown on every try) and is absent for one that will not (no such
    checkpoint, 404). The worker's store is S3 with URLs its gateway (this
    fake) presigns."""
    import http.server
    import threading

    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def answer(self):
            hits.append(self.path)
            if "/throttled/" in self.path:
                code, body = 503, (b"<Error><Code>SlowDown</Code>"
                                   b"<Message>Please reduce your request rate.</Message></Error>")
            else:
                code, body = 404, b"<Error><Code>NoSuchKey</Code><Message>none</Message></Error>"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Retry-After", "0")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = answer

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d/bkt" % server.server_address[1]
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, extra={"store": "s3://bkt/throttled"})
    try:
        for job in ("J000021", "J000022"):
            gw.recv(lambda m: m["type"] == "heartbeat", 5, "heartbeat")  # the agent's connection
            gw.send(train_assign(job, data, 20, restore=job + "/ckpt-00000010.tc"))
            while True:
                m = gw.recv(lambda m: m["type"] == "presign" or (m.get("job") == job and
                                                                  m["type"] == "done"),
                            60, "presign or done of " + job)
                if m["type"] == "done":
                    break
                # the first job's URLs are throttled, the second's name nothing
                where = "throttled" if job == "J000021" else "missing"
                gw.send({"type": "presigned", "id": m["id"],
                         "urls": ["%s/%s/%s" % (base, where, r["key"]) for r in m["requests"]]})
            assert m["status"] == "failed" and m["exit_code"] == -1, m
            if job == "J000021":
                assert m.get("retry") is True and "503" in m["message"], m
            else:
                assert "retry" not in m and "no object" in m["message"], m
        assert any("/throttled/J000021/" in h for h in hits) and \
            any("/missing/J000022/" in h for h in hits), hits
    finally:
        w.kill()
        gw.close()
        server.shutdown()


def case_refused(tmp, worker_exe, train_exe):
    """A gateway that refuses the worker's key twice (its ZAP handler did not
    know the instance yet), then admits it. libzmq gives up on a refused
    connection, so the worker opens a new one by itself, after a backoff of
    1 s then 2 s, registers there and trains; its log says it was refused."""
    gw = Gateway("ipc://%s/workers.sock" % tmp, refuse=2)
    log = os.path.join(tmp, "worker.log")
    w = Worker(worker_exe, train_exe, gw, tmp, log=log)
    try:
        t0 = time.monotonic()
        reg = gw.recv(lambda m: m["type"] == "register", 20, "register once admitted")
        took = time.monotonic() - t0
        assert gw.zap_refused == 2 and gw.zap_admitted >= 1, (gw.zap_refused, gw.zap_admitted)
        assert reg["jobs"] == [], reg
        assert took < 10, "registered %.1f s after start: the backoff is 1 s, then 2 s" % took
        gw.send({"type": "registered", "heartbeat_ms": 100})
        gw.answer_register = True
        gw.send(train_assign("J000014", text_file(tmp), 20))
        msgs = run_until_done(gw, "J000014")
        assert msgs[-1]["status"] == "succeeded" and steps_of(msgs)[-1] == 20, msgs[-1]
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
        with open(log) as f:
            text = f.read()
        refused = [l for l in text.splitlines() if "the gateway refused the agent connection" in l]
        assert len(refused) == 2 and "connecting again in 1 s" in refused[0] and \
            "connecting again in 2 s" in refused[1], text
    finally:
        w.kill()
        gw.close()


def case_wrong_key(tmp, worker_exe, train_exe):
    """A gateway with another key than the one the worker was given (one
    started on another state folder): every handshake fails, which libzmq
    retries ten times a second for ever. The worker says so after ten, then
    tries once after 1 s, 2, 4 ...; once the gateway with its key is back it
    registers there. Its store is S3, so its presigner's connection, idle
    meanwhile, does the same."""
    gw = Gateway("ipc://%s/workers.sock" % tmp)
    right_public, right_secret = zmq.curve_keypair()
    mon = gw.sock.get_monitor_socket(zmq.EVENT_ACCEPTED)
    log = os.path.join(tmp, "worker.log")
    w = Worker(worker_exe, train_exe, gw, tmp, log=log,
               extra={"gateway_public": right_public.decode(), "store": "s3://spotlab-test/wk"})
    try:
        accepted, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 8:
            if mon.poll(100):
                mon.recv_multipart()
                accepted += 1
        with open(log) as f:
            text = f.read()
        said = [l for l in text.splitlines() if "handshakes in a row with the gateway failed" in l]
        assert len(said) == 2 and any("on the agent connection" in l for l in said) and \
            any("on the presign connection" in l for l in said), text
        # each connection: 10, then one after 1 s, 2 s and 4 s; libzmq alone
        # retries every 100-150 ms, about 70 in 8 s
        assert 20 <= accepted <= 40, "%d connections in 8 s" % accepted
        mon.close()
        gw.public, gw.secret = right_public, right_secret
        gw.restart()
        t1 = time.monotonic()
        gw.recv(lambda m: m["type"] == "register", 20, "register with the gateway of its key")
        print("%d connections (agent and presigner) in 8 s; registered %.1f s after the right gateway came"
              % (accepted, time.monotonic() - t1))
        gw.send({"type": "registered", "heartbeat_ms": 100})
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_restart_upload(tmp, worker_exe, train_exe):
    """The gateway restarts while a checkpoint upload holds the worker's loop
    (an S3 PUT the store leaves unanswered): the worker registers with the new
    gateway within seconds, while the upload still waits, and its heartbeats
    follow. A restarted gateway takes an instance that has not registered
    within its register_timeout for lost and runs its job again; an upload may
    take longer than that. Then the upload ends and the job trains on."""
    bucket = Bucket(hold="ckpt-00000010")
    puts = bucket.puts
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, registered_by_hand=True, extra={"store": "s3://bkt/up"})
    try:
        gw.send(train_assign("J000023", data, 20, checkpoint_every=10))
        bucket.serve_until_held(gw, "J000023")
        gw.restart()
        t0 = time.monotonic()
        gw.recv(lambda m: m["type"] == "register", 10, "register with the restarted gateway")
        took = time.monotonic() - t0
        gw.recv(lambda m: m["type"] == "heartbeat", 3, "a heartbeat after the register")
        assert not bucket.release.is_set() and len(puts) == 1, puts
        print("registered %.2f s after the restart, with the upload still held" % took)
        assert took < 3, "registered %.1f s after the gateway's restart" % took
        bucket.release.set()
        gw.send({"type": "registered", "heartbeat_ms": 100})
        gw.answer_register = True
        m = bucket.serve_job(gw, "J000023", ("done",), 30, "the end of the job")
        assert m["status"] == "succeeded" and m["step"] == 20, m
        assert any("ckpt-00000020" in p for p in puts), puts
        gw.recv(lambda m: m["type"] == "heartbeat", 3, "a heartbeat")  # the agent's connection
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        bucket.close()
        w.kill()
        gw.close()


def case_last_ack(tmp, worker_exe, train_exe):
    """A train job with [store] keep that ends by itself holds its done until
    the gateway's checkpoint_recorded of its last checkpoint has come and the
    checkpoints keep no longer wants are deleted: the gateway signs the URLs
    for that only while the job runs. Without that word, the done goes after
    3 s at most."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        assign = train_assign("J000024", data, 30, checkpoint_every=10)
        assign["keep"] = 2
        gw.send(assign)
        while True:
            m = gw.recv(of("J000024", "checkpoint", "done"), 30, "a checkpoint of J000024")
            assert m["type"] == "checkpoint", "done before the last checkpoint's word: %s" % m
            if m["step"] == 30:
                break
            gw.send({"type": "checkpoint_recorded", "job": "J000024", "attempt": 1, "step": m["step"]})
        held = time.monotonic()
        try:
            early = gw.recv(of("J000024", "done"), 1.0, "done")
        except AssertionError:
            early = None
        assert early is None, "done %.2f s after the last checkpoint, before its word" % (
            time.monotonic() - held)
        gw.send({"type": "checkpoint_recorded", "job": "J000024", "attempt": 1, "step": 30})
        done = gw.recv(of("J000024", "done"), 5, "done after the last checkpoint's word")
        assert done["status"] == "succeeded" and done["step"] == 30, done
        left = sorted(os.listdir(os.path.join(w.store, "J000024")))
        assert left == ["ckpt-00000020.tc", "ckpt-00000030.tc"], left
        gw.send({"type": "done_recorded", "job": "J000024", "attempt": 1})

        assign = train_assign("J000025", data, 10, checkpoint_every=10)
        assign["keep"] = 2
        gw.send(assign)
        gw.recv(of("J000025", "checkpoint"), 30, "the checkpoint of J000025")
        t0 = time.monotonic()
        done = gw.recv(of("J000025", "done"), 10, "done with no word from the gateway")
        took = time.monotonic() - t0
        assert done["status"] == "succeeded" and 2.5 < took < 5, "done %.2f s after the checkpoint" % took
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
    finally:
        w.kill()
        gw.close()


def case_idle(tmp, worker_exe, train_exe):
    """An idle worker stays registered, and in touch. The gateway answers only
    heartbeats that name its jobs, so an idle worker hears nothing; after ten
    silent heartbeats (1 s here) it sends a register to hear from the gateway,
    and stays registered meanwhile (it once dropped its registration each time
    and logged it again). The answers keep it from taking itself for orphaned:
    here orphan_timeout_ms is 1.5 s and it idles for 4 s."""
    log = os.path.join(tmp, "worker.log")
    gw, w = start(tmp, worker_exe, train_exe, log=log, extra={"orphan_timeout_ms": 1500})
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4:
            gw.recv(lambda m: m["type"] == "heartbeat", 2, "heartbeats while idle")
        regs = [m for m in gw.received if m["type"] == "register"]
        assert 3 <= len(regs) <= 8, "%d registers in 4 s of idling" % len(regs)
        assert w.proc.poll() is None, "the idle worker exited"
        gw.send({"type": "shutdown"})
        assert w.wait(10) == 0
        with open(log) as f:
            text = f.read()
        assert "no word from the gateway" not in text, text
        assert text.count("registered with the gateway") == 1, text
    finally:
        w.kill()
        gw.close()

def until_done(bucket, gw, job, timeout):
    """job's checkpoints and done, up to the done, its presigns answered but
    for the orphan URLs'."""
    msgs = []
    while not msgs or msgs[-1]["type"] != "done":
        msgs.append(bucket.serve_job(gw, job, ("checkpoint", "done"), timeout, "the notice's checkpoint",
                                     sign_orphan=False))
    return msgs


def case_reserve_wait(tmp, worker_exe, train_exe):
    """A train job on an S3 store has its orphan checkpoint URLs signed by the
    gateway ahead of need; the agent's loop asks for them without waiting. A
    gateway that leaves that presign unanswered (busy, or restarting) once
    held the loop for up to 20 s: no heartbeats (the gateway took the
    instance for lost and ran the job elsewhere) and no notice handled (on
    EC2 the two minutes of a spot notice run meanwhile). Here that presign
    is never answered: heartbeats go on, and a notice is reported and ends
    in a checkpoint uploaded before its deadline."""
    bucket = Bucket()
    data = text_file(tmp)
    meta = Metadata()
    gw, w = start(tmp, worker_exe, train_exe, meta, extra={"store": "s3://bkt/rw"})
    try:
        gw.send(train_assign("J000026", data, 10_000_000, checkpoint_every=1_000_000))
        while True:
            m = gw.recv(lambda m: m["type"] == "presign", 30, "the presign of the orphan URLs")
            if is_orphan_presign(m):
                break
            bucket.presigned(gw, m)
        t0 = time.monotonic()
        beats = 0
        while time.monotonic() - t0 < 2:
            gw.recv(lambda m: m["type"] == "heartbeat", 1, "a heartbeat while the orphan URLs are unanswered")
            beats += 1
        assert beats >= 10, "%d heartbeats in 2 s at 100 ms" % beats
        lead = 10.0
        deadline = meta.post_notice(lead)
        t1 = time.monotonic()
        notice = gw.recv(lambda m: m["type"] == "notice", 2, "the notice, with the orphan URLs unanswered")
        took = time.monotonic() - t1
        assert notice["action"] == "terminate", notice
        msgs = until_done(bucket, gw, "J000026", lead)
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        assert cks and msgs[-1]["status"] == "preempted" and msgs[-1]["step"] == cks[-1]["step"], msgs
        assert any(cks[-1]["key"] in p for p in bucket.puts), (cks[-1], bucket.puts)
        assert not any("/orphan/" in p for p in bucket.puts), bucket.puts
        assert w.wait(max(0.1, deadline - time.time())) == 0
        print("%d heartbeats in 2 s, notice reported %.2f s after it was posted, "
              "checkpoint of step %d uploaded" % (beats, took, cks[-1]["step"]))
    finally:
        w.kill()
        gw.close()
        meta.close()
        bucket.close()


def case_notice_upload(tmp, worker_exe, train_exe):
    """A spot notice that comes while a checkpoint upload holds the loop is
    reported to the gateway at once, not when the upload ends (an upload may
    take much of the notice's two minutes, and the gateway may start the
    job's next instance meanwhile); the jobs' part follows the upload: the
    notice's checkpoint is uploaded and the job ends preempted in time. The
    held upload is the job's first checkpoint PUT, whichever its step: a
    worker that falls behind skips the checkpoints spotlab-train has already
    pruned for newer ones."""
    bucket = Bucket(hold="/ckpt-")
    data = text_file(tmp)
    meta = Metadata()
    gw, w = start(tmp, worker_exe, train_exe, meta, extra={"store": "s3://bkt/nu"})
    try:
        gw.send(train_assign("J000027", data, 10_000_000, checkpoint_every=10))
        bucket.serve_until_held(gw, "J000027", sign_orphan=False)
        lead = 15.0
        deadline = meta.post_notice(lead)
        t0 = time.monotonic()
        notice = gw.recv(lambda m: m["type"] == "notice", 3, "the notice, during the upload")
        took = time.monotonic() - t0
        assert notice["action"] == "terminate" and not bucket.release.is_set(), notice
        bucket.release.set()
        msgs = until_done(bucket, gw, "J000027", lead)
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        held = int(re.search(r"ckpt-(\d+)\.tc$", bucket.held_path).group(1))
        assert cks and cks[0]["step"] == held, (bucket.held_path, cks)
        assert msgs[-1]["status"] == "preempted" and msgs[-1]["step"] == cks[-1]["step"] > held, msgs
        assert w.wait(max(0.1, deadline - time.time())) == 0
        print("notice reported %.2f s after it was posted, with the upload held; "
              "then checkpoints of steps %s" % (took, [c["step"] for c in cks]))
    finally:
        bucket.close()
        w.kill()
        gw.close()
        meta.close()


def case_notice_busy(tmp, worker_exe, train_exe):
    """A spot notice while spotlab-train writes checkpoints faster than the
    store takes them. The worker used to go on reading the metrics pipe, up
    to 64 reads, each with its checkpoint's upload, before the notice's part
    ran: with slow uploads the instance's deadline came first, and the job
    lost the steps after its last recorded checkpoint (seen on a busy
    machine). Reading now returns to the loop as soon as a notice is taken:
    the notice's checkpoint follows within a few uploads, and the job ends
    preempted at it."""
    upload_s = 0.25
    bucket = Bucket(slow=("/ckpt-", upload_s))
    data = text_file(tmp)
    meta = Metadata()
    gw, w = start(tmp, worker_exe, train_exe, meta, extra={"store": "s3://bkt/nb"})
    try:
        gw.send(train_assign("J000031", data, 10_000_000, checkpoint_every=2))
        for _ in range(3):  # uploads back to back, spotlab-train ahead of them
            m = bucket.serve_job(gw, "J000031", ("checkpoint", "done"), 30, "a checkpoint", sign_orphan=False)
            assert m["type"] == "checkpoint", m
        lead = 20.0
        deadline = meta.post_notice(lead)
        t0 = time.monotonic()
        msgs = until_done(bucket, gw, "J000031", lead)
        took = time.monotonic() - t0
        cks = [m["step"] for m in msgs if m["type"] == "checkpoint"]
        print("the job ended %.2f s after the notice was posted, %d checkpoints later (steps %s)"
              % (took, len(cks), cks))
        assert msgs[-1]["status"] == "preempted" and cks and msgs[-1]["step"] == cks[-1], msgs[-3:]
        # the notice is seen within about a second (the watcher's poll), then
        # the upload under way, the notice's checkpoint and the one spotlab-train
        # writes at its SIGTERM; 64 reads of uploads would take 16 s
        assert len(cks) <= 8 and took < 6, (took, cks)
        assert w.wait(max(0.1, deadline - time.time())) == 0
    finally:
        bucket.close()
        w.kill()
        gw.close()
        meta.close()


def case_sigterm_upload(tmp, worker_exe, train_exe):
    """A SIGTERM (the instance shutting down) that comes while a checkpoint
    upload holds the loop is a notice as at any other time: reported at once,
    with its deadline counted from the signal, and the jobs' part after the
    upload. It used to wait unread until the upload ended, its deadline
    counted from then, past the kill it stood for."""
    bucket = Bucket(hold="/ckpt-")
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe, None, extra={"store": "s3://bkt/su"})
    try:
        gw.send(train_assign("J000029", data, 10_000_000, checkpoint_every=10))
        bucket.serve_until_held(gw, "J000029", sign_orphan=False)
        sent = time.time()
        w.proc.send_signal(signal.SIGTERM)
        notice = gw.recv(lambda m: m["type"] == "notice", 3, "the SIGTERM's notice, during the upload")
        assert notice["action"] == "sigterm" and not bucket.release.is_set(), notice
        # sigterm_notice_ms (30 s) from the signal
        assert abs(notice["deadline_us"] / 1e6 - (sent + 30)) < 2, (notice, sent)
        time.sleep(1)  # the upload stays held a while: the deadline must not move with it
        bucket.release.set()
        msgs = until_done(bucket, gw, "J000029", 30)
        cks = [m for m in msgs if m["type"] == "checkpoint"]
        assert msgs[-1]["status"] == "preempted" and cks and msgs[-1]["step"] == cks[-1]["step"], msgs[-3:]
        assert w.wait(30) == 0
        print("SIGTERM reported during a held upload, deadline %.1f s after the signal; then checkpoints %s"
              % (notice["deadline_us"] / 1e6 - sent, [c["step"] for c in cks]))
    finally:
        bucket.close()
        w.kill()
        gw.close()


def case_worker_killed(tmp, worker_exe, train_exe):
    """A worker killed (SIGKILL, a crash, the kernel's OOM killer) takes its
    job's process with it: a trainer left behind would hold the instance's
    CPUs and GPUs, unseen, while the gateway runs its job again elsewhere."""
    data = text_file(tmp)
    gw, w = start(tmp, worker_exe, train_exe)
    try:
        gw.send(train_assign("J000028", data, 10_000_000, checkpoint_every=1_000_000))
        gw.recv(lambda m: of("J000028", "metric")(m) and m["data"].get("step", 0) >= 5, 20, "step 5")
        trains = processes("spotlab-train", w.work)
        assert len(trains) == 1, trains
        w.proc.kill()
        w.proc.wait()
        t0 = time.monotonic()
        while processes("spotlab-train", w.work) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        left = processes("spotlab-train", w.work)
        assert not left, "spotlab-train %s still runs %.1f s after its worker was killed" % (
            left, time.monotonic() - t0)
        print("the trainer ended %.2f s after its worker was killed" % (time.monotonic() - t0))
    finally:
        for pid in processes("spotlab-train", w.work):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended since the scan
        w.kill()
        gw.close()


def main():
    case = sys.argv[1]
    worker_exe, train_exe = (os.path.abspath(p) for p in sys.argv[2:4])
    tmp = tempfile.mkdtemp(prefix="wk-test-")
    try:
        globals()["case_" + case](tmp, worker_exe, train_exe)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok", case)


if __name__ == "__main__":
    main()
