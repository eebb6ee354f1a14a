#!/usr/bin/python3
"""Security: spotlab-train and odd or foreign files in its checkpoint folder,
replayed against the real binary on a real folder.

Cases (one per meson test):
  odd-folder   a folder named like a checkpoint: --resume warns with a message
               that names it ("not a checkpoint file (a folder)"), never with
               bytes nobody wrote, and every metrics line is valid JSON of
               printable text; --check says the same and exits 1.
  fifo         a FIFO named like a checkpoint (and one named like the writer's
               temporary): --resume, --check and a fresh run finish at once
               instead of blocking on it, and say what it is.
  other-run    run A's checkpoints in the folder; run B (another seed, or the
               same seed on other data of the same vocabulary) started without
               --resume is refused and A's files stay byte for byte; B with
               --resume is refused naming both seeds (or the data); a run id
               that is not the folder's is refused; --force-new moves A's
               aside and B's own checkpoints are kept; B resumed keeps its
               run id.
  prune-own    two runs' checkpoints in one folder: resuming one with
               --run-id continues it (not the other's newer step) and its
               pruning removes only its own.

usage: train_test.py CASE SPOTLAB_TRAIN"""
import glob
import json
import os
import random
import stat
import subprocess
import sys
import tempfile

from checks import check, exit_status, require

EXE = None
WAIT_S = float(os.environ.get("SEC_WAIT_S", "120"))  # a tiny run takes well under a second
TINY = ["--model", "gpt", "--layers", "1", "--heads", "2", "--dim", "16", "--ctx", "16",
        "--batch", "4", "--threads", "1", "--eval-batches", "2"]


def make_text(path, seed):
    """A text of words over a fixed alphabet: every seed gives the same vocabulary."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [letters + " ,.\n"]  # every byte at least once
    while sum(map(len, words)) < 6000:
        words.append("".join(rng.choice(letters) for _ in range(rng.randint(1, 8))) +
                     rng.choice(" ,.\n"))
    with open(path, "w") as f:
        f.write("".join(words))


def train(*args, timeout=WAIT_S):
    """spotlab-train with args; a run that outlives timeout counts as hung."""
    try:
        r = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(e.cmd, "hung", e.stdout or "", e.stderr or "")
    return r


def lines(path):
    """The metrics file's lines parsed; a line that is not JSON is kept as a string."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, "rb") as f:
        for raw in f:
            try:
                out.append(json.loads(raw))
            except ValueError:
                out.append(raw.decode("latin-1"))
    return out


def strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)


def printable(s):
    return all(32 <= ord(c) < 127 for c in s)


def files(d):
    """name -> bytes of every checkpoint-named file in d."""
    return {os.path.basename(p): open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(d, "ckpt-*.slck")))}


def run_id(blob):
    return blob[464:496].rstrip(b"\0").decode("ascii", "replace")


def seed_of(blob):
    return int.from_bytes(blob[80:88], "little")


def case_odd_folder(root):
    ck = os.path.join(root, "ck")
    odd = os.path.join(ck, "ckpt-0000000009.slck")
    os.makedirs(odd)
    m = os.path.join(root, "m.jsonl")
    r = train(*TINY, "--steps", "2", "--ckpt-dir", ck, "--resume", "--metrics", m)
    check(r.returncode == 0, "--resume past a folder named like a checkpoint trains fresh", r)
    got = lines(m)
    bad = [x for x in got if not isinstance(x, dict)]
    check(got and not bad, "every metrics line is valid JSON (%d lines)" % len(got), bad[:2])
    text = [s for x in got if isinstance(x, dict) for s in strings(x)]
    check(all(printable(s) for s in text), "every string in the metrics is printable text",
          [s for s in text if not printable(s)][:3])
    warn = [x for x in got if isinstance(x, dict) and x.get("event") == "warning"]
    want = odd + ": not a checkpoint file (a folder)"
    check(len(warn) == 1 and warn[0].get("path") == odd and warn[0].get("error") == want,
          "the warning names the folder and says what it is", warn)
    fresh = [x for x in got if isinstance(x, dict) and x.get("event") == "fresh"]
    check(len(fresh) == 1 and want in fresh[0].get("reason", ""),
          "the fresh event's reason says the same", fresh)
    check(all(printable(l) for l in r.stderr.splitlines()) and want in r.stderr,
          "stderr says the same in printable text", r.stderr[-400:])
    r = train("--check", odd)
    check(r.returncode == 1 and r.stdout.strip() == want,
          "--check on the folder: exit 1, one line naming it", r)


def case_fifo(root):
    ck = os.path.join(root, "ck")
    os.makedirs(ck)
    fifo = os.path.join(ck, "ckpt-0000000009.slck")
    os.mkfifo(fifo)
    want = fifo + ": not a checkpoint file (a FIFO)"
    r = train("--check", fifo)
    check(r.returncode == 1 and r.stdout.strip() == want,
          "--check on a FIFO returns at once: exit 1, naming it", r)
    m = os.path.join(root, "m.jsonl")
    r = train(*TINY, "--steps", "2", "--ckpt-dir", ck, "--resume", "--metrics", m)
    check(r.returncode == 0, "--resume past a FIFO named like a checkpoint returns and trains", r)
    warn = [x for x in lines(m) if isinstance(x, dict) and x.get("event") == "warning"]
    check(len(warn) == 1 and warn[0].get("error") == want, "the warning says it is a FIFO", warn)
    check(stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO is left where it was")
    # a FIFO under the name of the writer's temporary for step 2
    ck2 = os.path.join(root, "ck2")
    os.makedirs(ck2)
    os.mkfifo(os.path.join(ck2, ".ckpt-0000000002.slck.tmp"))
    r = train(*TINY, "--steps", "2", "--ckpt-dir", ck2, "--metrics", os.path.join(root, "m2.jsonl"))
    check(r.returncode == 0 and list(files(ck2)) == ["ckpt-0000000002.slck"],
          "a FIFO named like the temporary does not block the checkpoint write", r)


def case_other_run(root):
    text_a, text_b = os.path.join(root, "a.txt"), os.path.join(root, "b.txt")
    make_text(text_a, 1)
    make_text(text_b, 2)
    ck = os.path.join(root, "ck")
    m = os.path.join(root, "m.jsonl")
    base = [*TINY, "--ckpt-dir", ck, "--metrics", m, "--keep", "3"]
    r = train(*base, "--data", text_a, "--seed", "1", "--steps", "20", "--checkpoint-every", "5")
    require(r.returncode == 0, "run A (seed 1) writes its checkpoints", r)
    a_files = files(ck)
    require(sorted(a_files) == ["ckpt-%010d.slck" % s for s in (10, 15, 20)],
            "run A keeps steps 10, 15, 20 (%s)" % sorted(a_files))
    a_id = run_id(a_files["ckpt-0000000020.slck"])
    check(len(a_id) == 32 and len({run_id(b) for b in a_files.values()}) == 1,
          "A's checkpoints carry one random run id (%s)" % a_id)

    # B started without --resume: refused, A's files untouched
    for what, data, seed in (("another seed", text_a, "2"), ("other data", text_b, "1")):
        r = train(*base, "--data", data, "--seed", seed, "--steps", "6", "--checkpoint-every", "2")
        check(r.returncode == 1 and "holds another run's checkpoints" in r.stderr and a_id in r.stderr
              and "--force-new" in r.stderr,
              "a fresh run with %s in A's folder is refused, naming A and --force-new" % what, r)
        check(files(ck) == a_files, "... and A's checkpoints are all still there, byte for byte")
    # B with --resume: refused, naming what differs
    r = train(*base, "--data", text_a, "--seed", "2", "--steps", "30", "--resume")
    check(r.returncode == 1 and "seed 1" in r.stderr and "seed 2" in r.stderr
          and "--resume-other" in r.stderr,
          "--resume with another seed is refused, naming both seeds", r)
    r = train(*base, "--data", text_b, "--seed", "1", "--steps", "30", "--resume")
    check(r.returncode == 1 and "data" in r.stderr and "--resume-other" in r.stderr,
          "--resume with the same seed on other data (same vocabulary) is refused", r)
    r = train(*base, "--data", text_a, "--seed", "1", "--steps", "30", "--resume", "--run-id", "J000002")
    check(r.returncode == 1 and "none of run J000002" in r.stderr,
          "--resume as another run id (another job's folder) is refused", r)
    check(files(ck) == a_files, "after the refusals A's checkpoints are unchanged")
    errs = [x for x in lines(m) if isinstance(x, dict) and x.get("event") == "error"]
    check(len(errs) == 5 and all(e.get("code") in ("EEXIST", "SL_EMISMATCH") for e in errs),
          "each refusal is an error event in the metrics", errs)

    # asked for explicitly: B starts over, A's checkpoints set aside, not deleted
    r = train(*base, "--data", text_a, "--seed", "2", "--steps", "6", "--checkpoint-every", "2",
              "--force-new")
    check(r.returncode == 0, "--force-new starts run B", r)
    aside = glob.glob(os.path.join(ck, "set-aside-*"))
    check(len(aside) == 1 and files(aside[0]) == a_files,
          "A's checkpoints are in one set-aside folder, byte for byte", aside)
    b_files = files(ck)
    check(sorted(b_files) == ["ckpt-%010d.slck" % s for s in (2, 4, 6)],
          "B's own checkpoints are kept, none pruned for another run's (%s)" % sorted(b_files))
    b_ids = {run_id(b) for b in b_files.values()}
    b_id = b_ids.pop() if len(b_ids) == 1 else None
    check(b_id and b_id != a_id and all(seed_of(b) == 2 for b in b_files.values()),
          "B's checkpoints are B's: one new run id, seed 2")

    # B resumed continues B, under B's identity
    before = len(lines(m))
    r = train(*base, "--data", text_a, "--seed", "2", "--steps", "8", "--checkpoint-every", "2",
              "--resume")
    res = [x for x in lines(m)[before:] if isinstance(x, dict) and x.get("event") == "resume"]
    check(r.returncode == 0 and len(res) == 1 and res[0]["step"] == 6 and res[0]["run_id"] == b_id,
          "--resume continues B from its step 6 under its run id", res)
    check(run_id(files(ck).get("ckpt-0000000008.slck", b"")) == b_id,
          "B's step-8 checkpoint carries B's run id")
    # and A is not continued by mistake from here
    r = train(*base, "--data", text_a, "--seed", "1", "--steps", "30", "--resume")
    check(r.returncode == 1 and b_id in r.stderr, "A's options on B's folder: refused", r)
    # unless asked for
    before = len(lines(m))
    r = train(*base, "--data", text_a, "--seed", "1", "--steps", "10", "--resume", "--resume-other")
    new = lines(m)[before:]
    res = [x for x in new if isinstance(x, dict) and x.get("event") == "resume"]
    warn = [x for x in new if isinstance(x, dict) and x.get("event") == "warning"
            and "another run" in x.get("error", "")]
    check(r.returncode == 0 and len(res) == 1 and res[0]["step"] == 8 and len(warn) == 1,
          "--resume-other continues B's checkpoint with a warning", new[:3])


def case_prune_own(root):
    text = os.path.join(root, "t.txt")
    make_text(text, 3)
    d1, d2 = os.path.join(root, "a"), os.path.join(root, "b")
    common = [*TINY, "--data", text, "--keep", "2"]
    r = train(*common, "--ckpt-dir", d1, "--run-id", "run-a", "--seed", "1", "--steps", "6",
              "--checkpoint-every", "2", "--metrics", os.path.join(root, "a.jsonl"))
    require(r.returncode == 0, "run-a writes steps 4 and 6", r)
    r = train(*common, "--ckpt-dir", d2, "--run-id", "run-b", "--seed", "2", "--steps", "15",
              "--checkpoint-every", "5", "--metrics", os.path.join(root, "b.jsonl"))
    require(r.returncode == 0, "run-b writes steps 10 and 15", r)
    b_files = files(d2)
    for name, blob in b_files.items():
        with open(os.path.join(d1, name), "wb") as f:
            f.write(blob)
    m = os.path.join(root, "m.jsonl")
    r = train(*common, "--ckpt-dir", d1, "--seed", "1", "--steps", "12", "--resume",
              "--metrics", m)
    check(r.returncode == 1 and "2 runs" in r.stderr and "--run-id" in r.stderr,
          "--resume in a folder of two runs asks which (--run-id)", r)
    r = train(*common, "--ckpt-dir", d1, "--run-id", "run-a", "--seed", "1", "--steps", "12",
              "--checkpoint-every", "3", "--resume", "--metrics", m)
    res = [x for x in lines(m) if isinstance(x, dict) and x.get("event") == "resume"]
    check(r.returncode == 0 and len(res) == 1 and res[0]["step"] == 6,
          "--resume --run-id run-a continues run-a at step 6, not run-b's newer step 15", res)
    now = files(d1)
    mine = sorted(n for n, b in now.items() if run_id(b) == "run-a")
    check(mine == ["ckpt-0000000009.slck", "ckpt-0000000012.slck"],
          "run-a's pruning kept its newest two (%s)" % mine)
    check(all(now.get(n) == b for n, b in b_files.items()),
          "run-b's checkpoints (steps 10 and 15) are untouched", sorted(now))


CASES = {"odd-folder": case_odd_folder, "fifo": case_fifo, "other-run": case_other_run,
         "prune-own": case_prune_own}


def main():
    global EXE
    case, EXE = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as root:
        CASES[case](root)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
