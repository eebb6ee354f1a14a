#!/usr/bin/python3
"""The gpu suite away from its build folder: one folder with the suite's
programs, spotlab-train and its CUDA backend, the libraries they need that a
GPU machine may lack, bench/train_gpu and its text, to run on a machine that
has the NVIDIA driver and CUDA 13 but neither meson nor the build's
dependencies (a cloud GPU instance, say).

usage: tests/gpu/standalone.py pack BUILD DIR
       python3 DIR/standalone.py run [--out DIR] [--only PHASE,...] [--tests NAME,...]
                                     [--budget SECONDS] [--bench-args "ARGS" ...]

pack reads the gpu suite from BUILD's meson introspection (the tests and
their arguments as `meson test --suite gpu` runs them) and writes DIR:
bin/ (the programs, the backend beside spotlab-train), lib/ (every library
they load that is neither glibc's, the C++ runtime's nor CUDA's), tests/
and bench/ (the scripts), data/moby-dick.txt, suite.json and this script.
It refuses a build without the CUDA path.

run, on the GPU machine, takes its phases in order, each only while the
budget (default 540 s) leaves it time:
  check      nvidia-smi -L and `spotlab-train --check-cuda`
  suite      every test of the gpu suite (--tests: those named), with meson's
             timeouts
  sanitizer  compute-sanitizer: memcheck over the bf16 kernels and a bf16
             step, racecheck over the fused attention
  bench      bench/train_gpu, once for each --bench-args (its options;
             default "--batch 8 --rounds 3")
The CUDA libraries come from the machine: /usr/local/cuda*/lib64 and lib,
then the wheels of Python's nvidia packages. Everything is printed and kept in
OUT/standalone.log, with one line a test in OUT/summary.txt. Exit status: 0
when everything run passed, 1 when something failed, 77 when no GPU is usable
(the suite's tests skip).
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

# What every Linux machine has: never packed.
BASE = ("linux-vdso.so", "ld-linux", "libc.so", "libm.so", "libdl.so", "libpthread.so",
        "librt.so", "libgcc_s.so", "libstdc++.so", "libresolv.so", "libutil.so")
# What the GPU machine's CUDA gives: never packed, found there.
CUDA_PREFIXES = ("libcudart", "libcublas", "libcublasLt", "libnccl", "libcuda.so",
                 "libnvidia-ml")
PHASES = ("check", "suite", "sanitizer", "bench")
BENCH_ARGS = "--batch 8 --rounds 3"
SANITIZER = [("memcheck", "test-gpu-ops", "mlp-bf16"), ("memcheck", "test-gpu-ops", "linear-bf16"),
             ("memcheck", "test-gpu-ops", "attention-bf16"),
             ("memcheck", "test-gpu-model", "gpt-bf16"),
             ("racecheck", "test-gpu-ops", "attention-bf16")]


def fail(msg):
    sys.exit("standalone.py: " + msg)


def is_base(soname):
    return soname.startswith(BASE)


def is_cuda(soname):
    return soname.startswith(CUDA_PREFIXES)


def ldd(path, env=None):
    """[(soname, resolved path or None)] for an ELF file."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True, env=env)
    out = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, rest = line.partition("=>")
            rest = rest.strip()
            out.append((name.strip(), None if rest.startswith("not found") else rest.split()[0]))
        elif line:  # the loader itself, or the vdso: by path
            out.append((os.path.basename(line.split()[0]), line.split()[0]))
    return out


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


# ---- pack ----

def gpu_tests(build):
    try:
        with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
            tests = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s is not a configured meson build folder (%s)" % (build, e))
    return [t for t in tests if any(s.split(":")[-1] == "gpu" for s in t.get("suite", []))]


def pack(build, dest, src):
    build, src = os.path.abspath(build), os.path.abspath(src)
    tests = gpu_tests(build)
    if not tests:
        fail("%s has no gpu suite: it was built without the CUDA path (nvcc on PATH, "
             "-Dcuda=enabled)" % build)
    if os.path.exists(dest):
        fail("%s exists already" % dest)
    for d in ("bin", "lib", "data"):
        os.makedirs(os.path.join(dest, d))
    copied = {}  # source path -> path in dest

    def put(path):
        """Copies a program or script of the suite; returns its path in dest."""
        path = os.path.realpath(path)
        if path in copied:
            return copied[path]
        if path.startswith(src + os.sep) and not path.startswith(build + os.sep):
            rel = os.path.relpath(path, src)  # a script: keep its place in the tree
        else:
            rel = os.path.join("bin", os.path.basename(path))
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(path, os.path.join(dest, rel))
        copied[path] = rel
        return rel

    suite = []
    for t in tests:
        argv = []
        cwd = t.get("workdir") or build  # where meson runs it: relative paths start there
        for i, a in enumerate(t["cmd"]):
            f = os.path.join(cwd, a)
            if i == 0 and os.path.basename(a).startswith("python"):
                argv.append("{python}")
            elif os.path.isfile(f):
                argv.append("{dir}/" + put(f))
            else:
                argv.append(a)
        suite.append({"name": t["name"], "argv": argv, "timeout": t.get("timeout") or 300,
                      "env": {k: v for k, v in (t.get("env") or {}).items()
                              if not os.path.isabs(v)}})
    train = os.path.join(build, "kernels", "spotlab-train")
    backend = os.path.join(build, "kernels", "libspotlab-train-cuda.so")
    if not os.path.isfile(backend):
        fail("%s is missing: build the CUDA path first (ninja -C %s)" % (backend, build))
    put(train)
    put(backend)  # beside spotlab-train, where it looks first
    for py in ("checks.py", "train_metrics.py"):
        put(os.path.join(src, "tests", "pylib", py))
    put(os.path.join(src, "bench", "train_gpu"))
    text = os.path.join(src, ".deps", "node_modules", "@stdlib", "datasets-moby-dick", "data",
                        "data.txt")
    if os.path.isfile(text):
        shutil.copy2(text, os.path.join(dest, "data", "moby-dick.txt"))
    else:
        print("standalone.py: note: no Moby Dick text under .deps (./spotlab installs it): the "
              "bench phase will need --bench-args \"--data FILE\"")

    # the libraries the programs load, but for the machine's own and CUDA's
    cuda = set()
    for rel in sorted(set(copied.values())):
        path = os.path.join(dest, rel)
        if not is_elf(path):
            continue
        for name, where in ldd(path):
            if is_base(name):
                continue
            if is_cuda(name):
                cuda.add(name)
                continue
            if where is None:
                fail("%s needs %s, which this machine does not have either" % (rel, name))
            target = os.path.join(dest, "lib", name)
            if not os.path.exists(target):
                shutil.copy2(os.path.realpath(where), target)
    shutil.copy2(os.path.abspath(__file__), os.path.join(dest, "standalone.py"))
    info = {"suite": suite, "cuda_libraries": sorted(cuda), "build": build,
            "buildtype": buildoption(build, "buildtype"), "gpu_arch": buildoption(build, "gpu_arch")}
    with open(os.path.join(dest, "suite.json"), "w") as f:
        json.dump(info, f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(dest) for n in ns)
    print("packed %d tests of the gpu suite, spotlab-train and bench/train_gpu into %s "
          "(%.1f MiB; %s build for sm %s; CUDA's libraries left to the machine: %s)"
          % (len(suite), dest, size / 2**20, info["buildtype"], info["gpu_arch"],
             ", ".join(sorted(cuda))))
    if info["buildtype"] == "debug":
        print("standalone.py: note: a buildtype=debug build carries nvcc's -G: its benchmark "
              "figures are not the project's (-Dbuildtype=release)")


def buildoption(build, name):
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            return next(o["value"] for o in json.load(f) if o["name"] == name)
    except (OSError, ValueError, StopIteration):
        return "?"


# ---- run ----

class Log:
    def __init__(self, out):
        self.f = open(os.path.join(out, "standalone.log"), "w")
        self.summary = open(os.path.join(out, "summary.txt"), "w")

    def say(self, text):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        self.f.write(text + "\n")
        self.f.flush()

    def result(self, text):
        self.say("== " + text)
        self.summary.write(text + "\n")
        self.summary.flush()


def cuda_dirs(names):
    """Folders that hold the CUDA libraries names, best first."""
    cands = []
    for root in ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True):
        cands += [os.path.join(root, "lib64"), os.path.join(root, "lib"),
                  os.path.join(root, "targets", "x86_64-linux", "lib")]
    cands.append("/usr/lib/x86_64-linux-gnu")
    try:
        r = subprocess.run([sys.executable, "-c", "import nvidia, os; print('\\n'.join("
                            "os.path.abspath(p) for p in nvidia.__path__))"],
                           capture_output=True, text=True, timeout=60)
        for p in r.stdout.split():  # nvidia/cublas/lib, nvidia/cu13/lib, ...
            for d, subs, _ in os.walk(p):
                if os.path.basename(d) == "lib":
                    cands.append(d)
                if d.count(os.sep) - p.count(os.sep) >= 3:
                    subs.clear()
    except (OSError, subprocess.TimeoutExpired):
        pass
    dirs, missing = [], []
    for n in names:
        for c in cands:
            if os.path.exists(os.path.join(c, n)):
                if c not in dirs:
                    dirs.append(c)
                break
        else:
            missing.append(n)
    return dirs, missing


class Runner:
    def __init__(self, here, out, budget, log):
        self.here, self.out, self.log = here, out, log
        self.deadline = time.monotonic() + budget
        self.failed = self.passed = self.skipped = 0

    def left(self):
        return self.deadline - time.monotonic()

    def run(self, name, argv, timeout, env=None, skip_codes=()):
        """Runs argv within timeout (and the budget); logs its output; returns its code."""
        limit = min(timeout, self.left())
        if limit < 5:
            self.log.result("%-40s NOT RUN (the budget is spent)" % name)
            return None
        self.log.say("-- %s: %s" % (name, " ".join(argv)))
        t0 = time.monotonic()
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, timeout=limit, cwd=self.here)
            rc, text = r.returncode, r.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, text = "timeout", (e.stdout or b"").decode("utf-8", "replace")
        except OSError as e:
            rc, text = "cannot start", str(e)
        self.log.say(text.rstrip())
        took = time.monotonic() - t0
        if rc == 77 or (rc in skip_codes):
            self.skipped += 1
            verdict = "SKIP"
        elif rc == 0:
            self.passed += 1
            verdict = "OK"
        else:
            self.failed += 1
            verdict = "FAIL (%s)" % rc
        self.log.result("%-40s %-14s %7.1f s" % (name, verdict, took))
        return rc


def run(args):
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "suite.json")) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        fail("no suite.json beside this script (%s): run it from a folder that pack wrote" % e)
    only = args.only.split(",") if args.only else list(PHASES)
    for p in only:
        if p not in PHASES:
            fail("unknown phase %r (phases: %s)" % (p, ", ".join(PHASES)))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    log = Log(out)
    dirs, missing = cuda_dirs(info["cuda_libraries"])
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([os.path.join(here, "lib")] + dirs +
                                      [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    log.say("packed from %s (%s, sm %s); CUDA libraries from %s%s" % (
        info.get("build"), info.get("buildtype"), info.get("gpu_arch"),
        ", ".join(dirs) or "nowhere",
        "; not found: " + ", ".join(missing) if missing else ""))
    r = Runner(here, out, args.budget, log)
    exe = os.path.join(here, "bin", "spotlab-train")
    gpu = True
    if "check" in only:
        if shutil.which("nvidia-smi"):
            r.run("nvidia-smi", ["nvidia-smi", "-L"], 60, env)
        # exit 1: no usable GPU, and the reason (a skip, as the suite's tests)
        rc = r.run("spotlab-train --check-cuda", [exe, "--check-cuda"], 120, env, skip_codes=(1,))
        gpu = rc == 0
    if "suite" in only:
        names = args.tests.split(",") if args.tests else [t["name"] for t in info["suite"]]
        unknown = set(names) - {t["name"] for t in info["suite"]}
        if unknown:
            fail("no test %s in the gpu suite" % ", ".join(sorted(unknown)))
        for t in info["suite"]:
            if t["name"] not in names:
                continue
            argv = [a.replace("{python}", sys.executable).replace("{dir}", here) for a in t["argv"]]
            r.run(t["name"], argv, t["timeout"], dict(env, **t["env"]))
    if "sanitizer" in only:
        cs = shutil.which("compute-sanitizer") or next(
            iter(sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer"), reverse=True)), None)
        if not gpu:
            log.result("%-40s NOT RUN (no usable GPU)" % "compute-sanitizer")
        elif not cs:
            log.result("%-40s NOT RUN (compute-sanitizer not found)" % "compute-sanitizer")
        else:
            for tool, prog, arg in SANITIZER:
                r.run("%s %s %s" % (tool, prog, arg),
                      [cs, "--tool", tool, "--error-exitcode", "3",
                       os.path.join(here, "bin", prog), arg], 300, env)
    if "bench" in only:
        for extra in [a.split() for a in args.bench_args or [BENCH_ARGS]]:
            bench = [sys.executable, os.path.join(here, "bench", "train_gpu"), "--exe", exe]
            if "--data" not in extra:
                bench += ["--data", os.path.join(here, "data", "moby-dick.txt")]
            r.run("bench/train_gpu " + " ".join(extra), bench + extra, 600, env)
    log.say("%d passed, %d failed, %d skipped" % (r.passed, r.failed, r.skipped))
    if r.failed:
        return 1
    return 0 if r.passed and gpu else 77


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("build")
    p.add_argument("dir")
    q = sub.add_parser("run")
    q.add_argument("--out", default="standalone-out")
    q.add_argument("--only", default="")
    q.add_argument("--tests", default="")
    q.add_argument("--budget", type=float, default=540)
    q.add_argument("--bench-args", action="append")
    a = ap.parse_args()
    if a.cmd == "pack":
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        pack(a.build, a.dir, src)
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
