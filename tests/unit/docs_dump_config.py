"""docs/admin.md's Reference shows every option of spotlab-gateway "exactly
as --dump-config prints the defaults with no file": this checks that it
does, so that a new option or a changed help line cannot leave the page
behind. The sections --dump-config shows only when a file has them
([user.NAME], [group.NAME], [webhook.NAME], [hub]) are in the block after
it: each key the gateway accepts there must be.

usage: docs_dump_config.py SPOTLAB-GATEWAY ADMIN-MD"""
import difflib
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402

MARK = "exactly as `spotlab-gateway --dump-config`"


def documented(path, which=0):
    """The fenced block which (0: the first) after the Reference's sentence, as lines."""
    lines = open(path).read().split("\n")
    at = next((i for i, line in enumerate(lines) if MARK in line), None)
    if at is None:
        return None
    start = lines.index("```", at)
    for _ in range(which):
        start = lines.index("```", lines.index("```", start + 1) + 1)
    return lines[start + 1:lines.index("```", start + 1)]


def accepted_keys(gateway, section, env, tmp):
    """The keys the gateway accepts in section, from its unknown-key error."""
    ini = os.path.join(tmp, "keys.ini")
    with open(ini, "w") as f:
        f.write("[%s]\nno_such_key = 1\n" % section)
    r = subprocess.run([gateway, "--config", ini, "--dump-config"], capture_output=True,
                       text=True, env=env, timeout=60)
    m = re.search(r"\(it accepts: ([^)]*)\)", r.stderr)
    check(r.returncode == 2 and m, "[%s] lists the keys it accepts" % section, r)
    return m.group(1).split(", ") if m else []


def entry_blocks(lines):
    """{"[user.NAME]": ["token_sha256", ...], ...} of the per-entry block."""
    blocks, current = {}, None
    for line in lines or []:
        head = re.match(r"(\[[^]]+\])", line)
        if head:
            current = blocks.setdefault(head.group(1), [])
        key = re.match(r"(\w+) = ", line)
        if key and current is not None:
            current.append(key.group(1))
            if "secret_file = " in line:
                current.append("secret_file")
    return blocks


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
    blocks = entry_blocks(documented(page, 1))
    with tempfile.TemporaryDirectory() as tmp:
        for section, shown in [("user.x", "[user.NAME]"), ("group.x", "[group.NAME]"),
                               ("webhook.x", "[webhook.NAME]"), ("hub", "[hub]")]:
            keys = accepted_keys(gateway, section, env, tmp)
            missing = [k for k in keys if k not in blocks.get(shown, [])]
            check(keys and not missing, "the Reference shows every key of %s" % shown,
                  "missing: %s" % ", ".join(missing))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
