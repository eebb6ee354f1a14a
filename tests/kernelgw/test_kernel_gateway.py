"""spotlab-kernel and the spotlab CLI against a real spotlab-gateway.

usage: test_kernel_gateway.py KERNEL [GATEWAY CLI]

With only KERNEL: the kernel without any gateway (local cells work, a
gateway statement fails at once naming the address). With all three: the
embedded default end to end — the kernel starts the gateway, trains with a
live display, keeps variables and models across a restart, detaches,
interrupts (detach), %attach from a second kernel, and the CLI's listings,
logs and error exits. Every wait has a deadline; nothing sleeps.
"""

import json
import re
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from jupyter_client import KernelManager
from kernelspec_env import KernelspecEnv

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


class Kernel:
    def __init__(self):
        self.km = KernelManager(kernel_name="spotlab")
        self.km.start_kernel()
        self.connect()

    def connect(self):
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code, timeout=180):
        msgs = []
        reply = self.kc.execute_interactive(code, output_hook=msgs.append, timeout=timeout)
        return reply["content"], msgs

    def restart(self):
        self.kc.stop_channels()
        self.km.restart_kernel(now=False)
        self.connect()

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def stdout_of(msgs):
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


def displays(msgs):
    return [m for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]


def no_gateway(kernel_exe):
    os.environ["SPOTLAB_GATEWAY"] = "ipc:///nonexistent-spotlab/gateway.sock"
    with KernelspecEnv(kernel_exe):
        k = Kernel()
        try:
            t0 = time.monotonic()
            content, msgs = k.run('lr = 3e-4\nmodel m = gpt(layers=1)\nprint lr * 2\n%who', timeout=30)
            check(content["status"] == "ok", "local cells work without a gateway")
            check("0.0006" in stdout_of(msgs) and "model" in stdout_of(msgs), "print and %who without a gateway")
            content, _ = k.run("data d = text(\"moby-dick\")\ntrain m on d steps=10", timeout=30)
            check(content["status"] == "error" and content["ename"] == "GatewayUnavailable",
                  "train without a gateway fails with GatewayUnavailable")
            check("ipc:///nonexistent-spotlab/gateway.sock" in content.get("evalue", ""),
                  "the error names the address tried: " + content.get("evalue", ""))
            check(time.monotonic() - t0 < 20, "no long wait for a missing gateway")
            content, msgs = k.run("%status", timeout=30)
            check(content["status"] == "ok" and "nonexistent" in stdout_of(msgs), "%status without a gateway")
        finally:
            k.close()
    del os.environ["SPOTLAB_GATEWAY"]


def cli(cli_exe, *args, timeout=120):
    p = subprocess.run([cli_exe, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def job_of(text):
    for word in text.split():
        word = word.strip(".,:;()")
        if len(word) == 7 and word[0] == "J" and word[1:].isdigit():
            return word
    return None


def wait_state(cli_exe, job, states, deadline_s=120):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        rc, out, _ = cli(cli_exe, "jobs", "--json")
        if rc == 0:
            for j in json.loads(out):
                if j.get("job") == job and j.get("state") in states:
                    return j["state"]
        # Follow the job's events instead of polling blindly: logs -f ends
        # when the job does (or at its own deadline).
        try:
            subprocess.run([cli_exe, "logs", job, "-f"], capture_output=True, timeout=max(1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    return None


def with_gateway(kernel_exe, cli_exe):
    with KernelspecEnv(kernel_exe):
        k = Kernel()
        k2 = None
        try:
            content, _ = k.run('lr = 3e-4\nmodel m = gpt(layers=1, heads=2, dim=16, ctx=16)\ndata d = text("moby-dick")')
            check(content["status"] == "ok", "definitions")
            content, msgs = k.run("train m on d steps=40 batch=4 checkpoint_every=20", timeout=300)
            check(content["status"] == "ok", "train succeeds: %s" % content.get("evalue"))
            ds = displays(msgs)
            check(len(ds) >= 2 and ds[0]["msg_type"] == "display_data", "one display_data, then updates")
            ids = {d["content"]["transient"].get("display_id") for d in ds}
            job = job_of(ds[-1]["content"]["data"]["text/plain"]) if ds else None
            check(job is not None and ids == {"spotlab-" + job}, "one display id per job: %s" % ids)
            last = ds[-1]["content"]["data"] if ds else {}
            check("succeeded" in last.get("text/plain", ""), "final display shows succeeded")
            check("<svg" in last.get("image/svg+xml", "") and "application/vnd.vegalite.v5+json" in last,
                  "final display has the loss curve as SVG and Vega-Lite")
            check("step 40/40" in last.get("text/plain", ""), "final display at the last step")

            k.restart()
            content, msgs = k.run("%who\nshow m\n%jobs", timeout=60)
            out = stdout_of(msgs)
            check(content["status"] == "ok" and "lr" in out and "gpt(" in out, "restart keeps variables and models")
            shows = [d["content"]["data"]["text/plain"] for d in displays(msgs)]
            check(any("trained: job " + str(job) in s for s in shows), "show m after restart names the job: %s" % shows)
            check(str(job) in out, "%jobs after restart lists the job")

            content, msgs = k.run("train m on d steps=400 batch=4 checkpoint_every=50 detach=yes", timeout=60)
            det = job_of(stdout_of(msgs))
            check(content["status"] == "ok" and det is not None and not displays(msgs), "detach=yes returns at once")

            k2 = Kernel()
            content, msgs = k2.run("%attach " + str(det), timeout=300)
            ds = displays(msgs)
            check(content["status"] == "ok" and ds and "succeeded" in ds[-1]["content"]["data"]["text/plain"],
                  "%attach from a second kernel follows the job to its end")
            # Replayed and live events together: each checkpoint exactly once, in order.
            final = ds[-1]["content"]["data"]["text/plain"] if ds else ""
            marks = re.findall(r"checkpoint at step (\d+) \((\d+) so far\)", final)
            want = [(str(50 * i), str(i)) for i in range(1, 4)]  # the timeline keeps the first three
            check(marks == want, "%%attach shows the first checkpoints once, in order: %s" % marks)
            check("checkpoints: 8, the last at step 400" in final,
                  "%attach counts every checkpoint event exactly once: " + final)
            check(final.count("succeeded at step") == 1 and final.count("queued: submitted") == 1,
                  "%attach shows the first and last events once")
            rc, out, _ = cli(cli_exe, "logs", str(det), "-f", "--json")
            seqs = [json.loads(line)["seq"] for line in out.splitlines() if line.strip()]
            check(rc == 0 and seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 3,
                  "logs -f replays every event once, in order (%d events)" % len(seqs))

            msg_id = k.kc.execute("train m on d steps=100000 batch=4")
            end = time.monotonic() + 120
            shown = False
            while time.monotonic() < end and not shown:
                try:
                    m = k.kc.get_iopub_msg(timeout=max(0.1, end - time.monotonic()))
                except queue.Empty:
                    break
                shown = m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "display_data"
            check(shown, "a long train shows its display")
            k.km.interrupt_kernel()
            reply = k.kc.get_shell_msg(timeout=60)
            ev = reply["content"].get("evalue", "")
            check(reply["content"]["status"] == "error" and reply["content"].get("ename") == "Interrupted"
                  and "detached from J" in ev and "%attach" in ev, "interrupt detaches: " + ev)
            long_job = job_of(ev)
            content, msgs = k.run("%cancel " + str(long_job), timeout=60)
            check(content["status"] == "ok", "%cancel")
            check(wait_state(cli_exe, long_job, {"cancelled"}) == "cancelled", "the detached job was cancelled")

            rc, out, err = cli(cli_exe, "jobs", "--json")
            check(rc == 0 and {j["job"] for j in json.loads(out)} >= {job, det, long_job}, "spotlab jobs --json")
            rc, out, _ = cli(cli_exe, "jobs")
            check(rc == 0 and "JOB" in out and str(job) in out, "spotlab jobs")
            rc, out, _ = cli(cli_exe, "status")
            check(rc == 0 and "gateway:" in out, "spotlab status")
            rc, out, _ = cli(cli_exe, "cost", "--json")
            check(rc == 0 and "spent_usd" in json.loads(out), "spotlab cost --json")
            rc, out, _ = cli(cli_exe, "instances", "--json")
            check(rc == 0 and isinstance(json.loads(out), list), "spotlab instances --json")
            rc, out, _ = cli(cli_exe, "logs", str(job))
            check(rc == 0 and "metric" in out and "succeeded" in out, "spotlab logs JOB")
            rc, _, err = cli(cli_exe, "logs", "J999999")
            check(rc == 1 and err.strip(), "spotlab logs of an unknown job: exit 1 with a message")
            rc, _, _ = cli(cli_exe, "inject", "explode", "i-0")
            check(rc == 2, "spotlab inject with a bad action: usage")
        finally:
            k.close()
            if k2:
                k2.close()


def stop_gateway(home):
    """Stops the embedded gateway this test started (and its workers)."""
    try:
        with open(os.path.join(home, "gateway.pid")) as f:
            pid = int(f.read().split()[0])
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        pass
    def ours():
        pids = []
        for d in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    cmd = f.read()
                with open("/proc/%s/stat" % d) as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
                if home.encode() in cmd and not zombie:
                    pids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
        return pids

    for pid in ours():
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + 10
    while ours() and time.monotonic() < end:
        time.sleep(0.1)  # waiting for processes to exit has no event to block on
    for pid in ours():
        os.kill(pid, signal.SIGKILL)


def main():
    kernel_exe = sys.argv[1]
    home = tempfile.mkdtemp(prefix="spotlab-kgw-")
    os.environ["SPOTLAB_HOME"] = home
    os.environ.pop("SPOTLAB_GATEWAY", None)
    os.environ.pop("SPOTLAB_TOKEN", None)
    try:
        no_gateway(kernel_exe)
        if len(sys.argv) > 3:
            os.environ["SPOTLAB_GATEWAY_BIN"] = os.path.realpath(sys.argv[2])
            with_gateway(kernel_exe, os.path.realpath(sys.argv[3]))
    finally:
        stop_gateway(home)
        shutil.rmtree(home, ignore_errors=True)
    print("%d failures" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
