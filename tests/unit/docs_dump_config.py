"""docs/admin.md's Reference shows every option of spotlab-gateway "exactly
as --dump-config prints the defaults with no file": this checks that it
does, so that a new option or a changed help line cannot leave the page
behind.

usage: docs_dump_config.py SPOTLAB-GATEWAY ADMIN-MD"""
import difflib
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402

MARK = "exactly as `spotlab-gateway --dump-config`"


def documented(path):
    """The first fenced block after the Reference's sentence, as lines."""
    lines = open(path).read().split("\n")
    at = next((i for i, line in enumerate(lines) if MARK in line), None)
    if at is None:
        return None
    start = lines.index("```", at)
    return lines[start + 1:lines.index("```", start + 1)]


def main():
    gateway, page = sys.argv[1:3]
    env = {k: v for k, v in os.environ.items() if k not in ("SPOTLAB_CONFIG", "SPOTLAB_HOME")}
    r = subprocess.run([gateway, "--dump-config"], capture_output=True, text=True, env=env,
                       timeout=60)
    check(r.returncode == 0, "--dump-config exits 0", r)
    printed = r.stdout.rstrip("\n").split("\n")
    doc = documented(page)
    check(doc is not None, "the page has its Reference block")
    diff = list(difflib.unified_diff(doc or [], printed, "docs/admin.md", "--dump-config",
                                     lineterm=""))
    check(not diff and len(printed) > 50,
          "the Reference block is what --dump-config prints (%d lines)" % len(printed),
          "\n".join(diff))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
