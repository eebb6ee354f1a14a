#!/usr/bin/python3
"""jupyter console in tmux: a terminal front end sees a job's progress and end.

Usage: test_console.py PATH-TO-spotlab-kernel ARTIFACT_DIR

A real `jupyter console --kernel spotlab` runs in a tmux pane (Debian's
tmux and jupyter-console) with a private SPOTLAB_HOME, so training goes
through an embedded gateway of its own. What a person sees is read back with
`tmux capture-pane`:
  - a short train shows "following J…", progress lines with a percentage
    while it runs, and its final state (succeeded, loss) when it ends;
  - no kernel log line ever appears among the outputs;
  - %attach on the finished job shows its final state, not "submitted";
  - Ctrl-C while a long train runs gives the prompt back at once; the next
    cell runs at once (not behind the job), says the cell detached from the
    job, and lists the job still running; a cell after that needs one Enter
    (the kernel answered is_complete while the train cell was running, so the
    console kept using it). jupyter console 6.4.4 on Python 3.11 never sends
    interrupt_request here (its SIGINT handler is gone after the first
    prompt): the kernel detaches the train cell when the console, back at its
    prompt, asks is_complete. interrupt_request itself is tested in kernelgw.
The screen at each step is written to ARTIFACT_DIR/console-*.txt.
Every wait is on a condition with a generous deadline, never a fixed sleep.
"""

import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures, summary  # noqa: E402
from kernelspec_env import KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

CONSOLE = "/usr/bin/jupyter-console"


class Pane:
    def __init__(self, artifacts):
        self.sock = "spotlab-console-%d" % os.getpid()
        self.artifacts = artifacts
        self.seen = ""

    def tmux(self, *args, check_rc=True):
        return subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null"] + list(args),
                              capture_output=True, text=True, timeout=30, check=check_rc)

    def start(self, command):
        self.tmux("new-session", "-d", "-x", "160", "-y", "50", command)
        self.tmux("set-option", "-g", "history-limit", "20000")

    def screen(self):
        r = self.tmux("capture-pane", "-p", "-J", "-S", "-20000", check_rc=False)
        return r.stdout if r.returncode == 0 else self.seen

    def send(self, text):
        self.tmux("send-keys", "-l", text)
        self.tmux("send-keys", "Enter")

    def key(self, name):
        self.tmux("send-keys", name)

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.seen = self.screen()
            if pred(self.seen):
                return True
            time.sleep(0.2)
        self.seen = self.screen()
        print("screen while waiting for %s:\n%s" % (what, self.seen[-4000:]), file=sys.stderr)
        return False

    def save(self, name):
        with open(os.path.join(self.artifacts, "console-%s.txt" % name), "w") as f:
            f.write(self.screen())

    def stop(self):
        self.tmux("kill-server", check_rc=False)


def prompts(screen):
    return len(re.findall(r"^In \[\d+\]:", screen, re.M))


def run_cell(pane, code, timeout, what):
    before = prompts(pane.screen())
    pane.send(code)
    return pane.wait(lambda s: prompts(s) > before, timeout, what)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    artifacts = os.path.abspath(argv[2])
    os.makedirs(artifacts, exist_ok=True)
    for tool in ("tmux", CONSOLE):
        if not shutil.which(tool):
            print("missing %s: install tmux and jupyter-console (./spotlab setup)" % tool, file=sys.stderr)
            return 1
    with KernelspecEnv(argv[1]), PrivateHome():
        pane = Pane(artifacts)
        try:
            pane.start("%s --kernel spotlab" % CONSOLE)
            check(pane.wait(lambda s: prompts(s) >= 1, 120, "the first prompt"), "jupyter console starts the kernel")
            check(run_cell(pane, 'data book = text("moby-dick")', 60, "data"), "data cell runs")
            check(run_cell(pane, "model m = gpt(layers=1, heads=2, dim=32, ctx=32)", 60, "model"), "model cell runs")
            before = prompts(pane.screen())
            pane.send("train m on book steps=6000 batch=8 lr=3e-3 eval_every=1000 checkpoint_every=1000")
            ok = pane.wait(lambda s: re.search(r"following J\d+", s), 120, "following")
            check(ok, "the train cell says which job it follows and how to detach")
            ok = pane.wait(lambda s: prompts(s) > before, 600, "the end of the train cell")
            check(ok, "the train cell ends")
            pane.save("train")
            out = pane.seen.split("train m on book", 1)[-1]
            job = (re.search(r"following (J\d+)", out) or re.search(r"(J\d+)", out) or [None, "?"])[1]
            lines = re.findall(r"^%s running .*?(\d+)%%" % job, out, re.M)
            check(len(lines) >= 2, "progress lines while the job runs (%d seen)" % len(lines))
            check(len(set(lines)) == len(lines), "each progress line says something new")
            check(re.search(r"succeeded", out) is not None, "the final state (succeeded) is on screen")
            check(re.search(r"^loss \d+\.\d+", out, re.M) is not None, "the final loss is on screen")
            check(re.search(r"step 6000/6000", out) is not None, "the last step is on screen")
            check("(submitted)" not in out.split("following", 1)[-1], "no stale 'submitted' state after the start")
            check(not re.search(r"spotlab-(kernel|gateway)\[", pane.seen), "no kernel or gateway log line on screen")

            before = prompts(pane.screen())
            pane.send("%%attach %s" % job)
            ok = pane.wait(lambda s: prompts(s) > before, 120, "%attach of a finished job")
            pane.save("attach")
            out = pane.seen.split("%%attach %s" % job, 1)[-1]
            check(ok and "succeeded" in out and "step 6000/6000" in out,
                  "%attach on the finished job shows its final state")

            # Ctrl-C while a long train runs
            before = prompts(pane.screen())
            pane.send("train m on book steps=200000 batch=8 lr=3e-3 checkpoint_every=100000")
            ok = pane.wait(lambda s: re.search(r"^(J\d+) running .*\d+/200000", s.split("steps=200000", 1)[-1], re.M), 120,
                           "the long train running")
            check(ok, "the long train runs")
            out = pane.seen.split("steps=200000", 1)[-1]
            long_job = (re.search(r"following (J\d+)", out) or [None, "?"])[1]
            pane.key("C-c")
            ok = pane.wait(lambda s: prompts(s) > before, 30, "the prompt after Ctrl-C")
            check(ok, "Ctrl-C gives the prompt back")
            before = prompts(pane.screen())
            t0 = time.monotonic()
            pane.send("%jobs")
            ok = pane.wait(lambda s: prompts(s) > before, 60, "%jobs after Ctrl-C")
            took = time.monotonic() - t0
            pane.save("ctrl-c")
            out = pane.seen.split("%jobs", 1)[-1] if ok else ""
            check(ok and took < 30, "the next cell runs at once, not behind the job (%.1f s)" % took)
            check(("detached from %s" % long_job) in out, "the train cell detached from %s" % long_job)
            check(re.search(r"^%s\s+running" % long_job, out, re.M) is not None,
                  "the job keeps running after Ctrl-C")
            before = prompts(pane.screen())
            pane.send("%status")
            ok = pane.wait(lambda s: prompts(s) > before, 30, "%status after Ctrl-C")
            check(ok and "...:" not in pane.seen.split("%status", 1)[-1],
                  "a cell after Ctrl-C needs one Enter (the console still asks the kernel is_complete)")
            check("did not respond to an is_complete_request" not in pane.seen,
                  "the console never gave up on the kernel's is_complete")
            before = prompts(pane.screen())
            pane.send("%%cancel %s" % long_job)
            check(pane.wait(lambda s: prompts(s) > before, 60, "%cancel"), "%cancel stops the long job")

            pane.save("end")
        finally:
            pane.stop()
    print(summary())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
