#!/usr/bin/python3
"""tests/gpu/standalone.py packs a folder that runs the gpu suite without the
build folder.

usage: standalone_test.py BUILD

Packs BUILD into a temporary folder, then checks:
  - every program and script the packed suite names is in the folder;
  - with the folder's lib/ first on the loader's path, each packed program
    and the CUDA backend find every library in lib/, except the machine's
    own (glibc, the C++ runtime) and CUDA's, which suite.json lists;
  - the packed spotlab-train loads its CUDA backend from beside it:
    --check-cuda gives a GPU count or a reason that is not the backend's;
  - the runner runs a kernel test and the CLI test from the folder: each
    passes (a GPU here) or skips (none), never fails, and summary.txt has
    one line each.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from checks import check, exit_status  # noqa: E402

sys.path.insert(0, HERE)
import standalone  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])


def main():
    with tempfile.TemporaryDirectory(prefix="spotlab-gpu-pack-") as tmp:
        d = os.path.join(tmp, "pack")
        r = subprocess.run([sys.executable, os.path.join(HERE, "standalone.py"), "pack", BUILD, d],
                           capture_output=True, text=True, timeout=120)
        print(r.stdout + r.stderr)
        if not check(r.returncode == 0, "pack exits 0"):
            return exit_status()
        info = json.load(open(os.path.join(d, "suite.json")))
        meson = standalone.gpu_tests(BUILD)
        check(sorted(t["name"] for t in info["suite"]) == sorted(t["name"] for t in meson),
              "suite.json holds the gpu suite's %d tests" % len(meson))
        for t in info["suite"]:
            for a in t["argv"]:
                if a.startswith("{dir}/"):
                    check(os.path.isfile(os.path.join(d, a[len("{dir}/"):])),
                          "%s: %s is packed" % (t["name"], a))
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(d, "lib"))
        lib = os.path.join(d, "lib") + os.sep
        elves = [os.path.join(d, "bin", n) for n in sorted(os.listdir(os.path.join(d, "bin")))]
        check(len(elves) >= 5, "bin/ holds the suite's programs, spotlab-train and its backend: %s"
              % [os.path.basename(e) for e in elves])
        for e in elves + [os.path.join(d, "lib", n) for n in os.listdir(os.path.join(d, "lib"))]:
            for name, where in standalone.ldd(e, env):
                if standalone.is_base(name):
                    continue
                if standalone.is_cuda(name):
                    check(name in info["cuda_libraries"], "%s: %s is listed as CUDA's"
                          % (os.path.basename(e), name))
                    continue
                check(where is not None and where.startswith(lib),
                      "%s: %s comes from the folder (%s)" % (os.path.basename(e), name, where))
        r = subprocess.run([os.path.join(d, "bin", "spotlab-train"), "--check-cuda"],
                           capture_output=True, text=True, timeout=120, env=env)
        text = (r.stdout + r.stderr).strip()
        check((r.returncode == 0 and text.startswith("CUDA: ")) or
              (r.returncode == 1 and "backend" not in text),
              "the packed spotlab-train loads its backend: rc %d, %r" % (r.returncode, text))
        out = os.path.join(tmp, "out")
        r = subprocess.run([sys.executable, os.path.join(d, "standalone.py"), "run", "--out", out,
                            "--only", "check,suite", "--tests", "gpu-sumsq,gpu-train-cli"],
                           capture_output=True, text=True, timeout=900)
        print(r.stdout[-4000:] + r.stderr[-2000:])
        check(r.returncode in (0, 77), "run exits 0 (a GPU) or 77 (none): %d" % r.returncode)
        lines = open(os.path.join(out, "summary.txt")).read().splitlines()
        for name in ("gpu-sumsq", "gpu-train-cli"):
            row = [x for x in lines if x.split()[0] == name]
            check(len(row) == 1 and row[0].split()[1] in ("OK", "SKIP"),
                  "summary.txt: %s passed or skipped: %s" % (name, row))
        check(os.path.getsize(os.path.join(out, "standalone.log")) > 0, "standalone.log is kept")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
