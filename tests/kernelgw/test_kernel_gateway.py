"""spotlab-kernel and the spotlab CLI against a real spotlab-gateway.

usage: test_kernel_gateway.py KERNEL [GATEWAY CLI]

With only KERNEL: the kernel without any gateway (local cells work, a
gateway statement fails at once naming the address). With all three: the
embedded default end to end — the kernel starts the gateway, trains with a
live display, keeps variables and models across a restart, detaches,
interrupts (detach), %attach from a second kernel, and the CLI's listings,
logs and error exits. Then, against a gateway the test starts itself
(SPOTLAB_GATEWAY and SPOTLAB_TOKEN set): the gateway killed with SIGKILL
and started again under a cell that follows a job (the display carries on,
nothing shown twice), and idle notices reaching the notebook's output, then
the next cell bringing capacity back. Every wait has a deadline; nothing
sleeps.
"""

import contextlib
import hashlib
import json
import re
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import zmq
from jupyter_client import KernelManager
from kernelspec_env import KernelspecEnv
from checks import check, failures, summary
from spotlab_home import restore_env, stop_all, wait_exit





class Kernel:
    def __init__(self):
        self.km = KernelManager(kernel_name="spotlab")
        self.km.start_kernel()
        self.others = []  # iopub messages of other requests, read by Cell.pump
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
    # a notebook of plain cells starts no gateway; its names outlive a restart
    # of its kernel, and a kernel killed, all the same
    os.environ["JPY_SESSION_NAME"] = "plain/cells.ipynb"
    with KernelspecEnv(kernel_exe):
        k = Kernel()
        try:
            content, _ = k.run('lr = 3e-4\nmodel m = gpt(layers=1)\ngone = 1', timeout=30)
            content, _ = k.run('gone = 2', timeout=30)
            check(content["status"] == "ok", "plain cells without a gateway")
            k.restart()
            content, msgs = k.run("%who\nlr * 2", timeout=30)
            out = stdout_of(msgs) + str([m["content"].get("data", {}) for m in msgs])
            check(content["status"] == "ok" and "0.0006" in out and "gpt(layers=1)" in out and "gone" in out,
                  "a restart before any gateway ran keeps the names: %s %s" % (content.get("evalue"), out))
            k.run("x = 5", timeout=30)
            k.kc.stop_channels()
            k.km.restart_kernel(now=True)  # killed, not asked to stop
            k.connect()
            content, msgs = k.run("x + 1", timeout=30)
            check(content["status"] == "ok" and "6" in str([m["content"].get("data", {}) for m in msgs]),
                  "a killed kernel's successor has its names: %s" % content.get("evalue"))
            # the file is a journal of lines: it stays bounded over many cells,
            # and a last line cut short (a kernel killed in its write) is
            # passed over for the one before it
            pending = os.path.join(os.environ["SPOTLAB_HOME"], "pending",
                                   hashlib.sha256(b"plain/cells.ipynb").hexdigest() + ".json")
            big = "y" * 2000
            for i in range(200):
                k.run('pad = "%s%d"' % (big, i), timeout=30)
            with open(pending) as f:
                lines = f.read().splitlines()
            check(len(lines) > 1 and os.path.getsize(pending) <= 256 * 1024 + 4 * len(lines[-1]) and
                  '"%s199"' % big in lines[-1],
                  "the journal of 200 cells is rewritten as it grows: %d lines, %d bytes"
                  % (len(lines), os.path.getsize(pending)))
            k.run("x = 7", timeout=30)
            k.kc.stop_channels()
            k.km.restart_kernel(now=True)
            with open(pending, "a") as f:
                f.write('{"type":"session.set","vars":{"x":')  # cut short
            k.connect()
            content, msgs = k.run("print pad\nx + 1", timeout=30)
            out = str([m["content"].get("data", {}) for m in msgs])
            check(content["status"] == "ok" and "8" in out and "y199" in stdout_of(msgs),
                  "a line cut short is passed over for the last whole one: %s %s"
                  % (content.get("evalue"), out))
            k.run("x = 9", timeout=30)
            with open(pending) as f:
                lines = f.read().splitlines()
            def parses(line):
                try:
                    return json.loads(line)
                except ValueError:
                    return None
            check(1 <= len(lines) <= 2 and all(parses(x) for x in lines) and
                  "9" in json.dumps(parses(lines[-1])["vars"]["x"]),
                  "a new kernel wrote the journal anew, without the cut line, before appending: %s"
                  % [x[:60] for x in lines])
            check(not [p for p in os.listdir(os.environ["SPOTLAB_HOME"]) if p == "gateway.db"],
                  "none of it started a gateway")
        finally:
            k.close()
    del os.environ["JPY_SESSION_NAME"]


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

            # this kernel started the embedded gateway; a %gateway that
            # cannot be reached says why without claiming it started one
            content, _ = k.run("%gateway tcp://127.0.0.1:1", timeout=60)
            ev = content.get("evalue", "")
            check(content.get("ename") == "GatewayUnavailable" and "tcp://127.0.0.1:1" in ev and
                  "starting" not in ev, "%gateway to an address nobody answers: " + ev)
            # ... and leaves the kernel on the gateway it used before
            check("the kernel keeps using ipc://" in ev, "the failed %gateway names the address kept: " + ev)
            content, msgs = k.run("%gateway\n%jobs", timeout=60)
            out = stdout_of(msgs)
            check(content["status"] == "ok" and "gateway: ipc://" in out and "embedded" in out and
                  "127.0.0.1:1" not in out and str(job) in out,
                  "after a failed %%gateway, %%jobs still reaches the embedded gateway: %s %s" %
                  (content.get("evalue"), out))
            content, _ = k.run("%%gateway ipc://%s/gateway.sock" % os.environ["SPOTLAB_HOME"], timeout=60)
            check(content["status"] == "ok", "%%gateway back to the embedded one: %s" % content.get("evalue"))

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
            # option values are checked against their declared kinds; a choice word passes
            content, _ = k.run("train m on d steps=5 batch=4 checkpoint_every=auto spot=yes detach=yes", timeout=60)
            check(content["status"] == "ok", "checkpoint_every=auto and spot=yes are accepted: %s" % content.get("evalue"))
            for cell, want in (("train m on d steps=5 detach=1", "line 1: detach takes yes or no, not 1"),
                               ('train m on d steps="5"', 'line 1: steps takes a number, not "5"')):
                content, msgs = k.run(cell, timeout=30)
                check(content["status"] == "error" and content.get("ename") == "TypeError" and
                      content.get("evalue") == want and not displays(msgs),
                      "%s is refused in the kernel: %s" % (cell, content.get("evalue")))

            k2 = Kernel()
            content, msgs = k2.run("%attach " + str(det), timeout=300)
            ds = displays(msgs)
            check(content["status"] == "ok" and ds and "succeeded" in ds[-1]["content"]["data"]["text/plain"],
                  "%attach from a second kernel follows the job to its end")
            # Replayed and live events together: each checkpoint exactly once, in order.
            # (Which checkpoints there are is the gateway's record: a worker that
            # reads the trainer's events late skips one the trainer pruned already.)
            final = ds[-1]["content"]["data"]["text/plain"] if ds else ""
            marks = re.findall(r"checkpoint at step (\d+) \((\d+) so far\)", final)
            cks = [e["step"] for e in job_events(cli_exe, det) if e["event"] == "checkpoint"]
            want = [(str(st), str(i + 1)) for i, st in enumerate(cks[:3])]  # the timeline keeps three
            check(cks and cks[-1] == 400 and marks == want,
                  "%%attach shows the first checkpoints once, in order: %s (the gateway's: %s)" % (marks, cks))
            check("checkpoints: %d, the last at step 400" % len(cks) in final,
                  "%%attach counts every checkpoint event exactly once (%d): %s" % (len(cks), final))
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
            check(content["status"] == "ok" and "cancel requested for %s" % long_job in stdout_of(msgs),
                  "%%cancel names the job: %r" % stdout_of(msgs))
            check(wait_state(cli_exe, long_job, {"cancelled"}) == "cancelled", "the detached job was cancelled")

            rc, out, err = cli(cli_exe, "jobs", "--json")
            check(rc == 0 and {j["job"] for j in json.loads(out)} >= {job, det, long_job}, "spotlab jobs --json")
            rc, out, _ = cli(cli_exe, "jobs")
            check(rc == 0 and "JOB" in out and str(job) in out, "spotlab jobs")
            rc, out, _ = cli(cli_exe, "status")
            check(rc == 0 and re.search(r"^gateway +version ", out, re.M) is not None, "spotlab status")
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


# ---- against a gateway the test starts (and kills) itself ----------------

class OwnGateway:
    """spotlab-gateway --embedded --daemon in a fresh SPOTLAB_HOME with an
    INI file, the kernel pointed at it with SPOTLAB_GATEWAY and SPOTLAB_TOKEN
    (so it never starts one of its own)."""

    def __init__(self, gateway_exe, ini=""):
        self.exe = gateway_exe
        self.home = tempfile.mkdtemp(prefix="spotlab-kgw-own-")
        self.ini = os.path.join(self.home, "gateway.ini")
        with open(self.ini, "w") as f:
            # time_scale 1: the simulated market preempts nothing within a test
            f.write("[provider.local]\ntime_scale = 1\n" + ini)
        self.saved = {k: os.environ.get(k) for k in ("SPOTLAB_HOME", "SPOTLAB_GATEWAY", "SPOTLAB_TOKEN",
                                                     "SPOTLAB_CONFIG")}
        os.environ["SPOTLAB_HOME"] = self.home
        os.environ["SPOTLAB_CONFIG"] = self.ini
        self.start()
        with open(os.path.join(self.home, "token")) as f:
            os.environ["SPOTLAB_TOKEN"] = f.read().strip()
        os.environ["SPOTLAB_GATEWAY"] = "ipc://%s/gateway.sock" % self.home

    def start(self):
        p = subprocess.run([self.exe, "--embedded", "--daemon"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("spotlab-gateway did not start: " + p.stderr)
        with open(os.path.join(self.home, "gateway.pid")) as f:
            self.pid = int(f.read().split()[0])

    def kill9(self):
        os.kill(self.pid, signal.SIGKILL)
        wait_exit([self.pid], 20)

    def log(self):
        try:
            with open(os.path.join(self.home, "gateway.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def close(self, keep=False):
        stop_all(self.home)
        restore_env(self.saved)
        if not keep:
            shutil.rmtree(self.home, ignore_errors=True)


@contextlib.contextmanager
def own_gateway_kernel(kernel_exe, gateway_exe, ini="", address=None):
    """A gateway of the test's own (OwnGateway, with ini) and a kernel on it, as
    (gw, k); address: where the kernel reaches it, when not at its socket (a
    proxy before it). On leaving, the kernel is closed and the gateway stopped;
    unless the block ran to its end with no failed check so far, the gateway's
    log is printed and its folder kept."""
    gw = OwnGateway(gateway_exe, ini)
    if address:
        os.environ["SPOTLAB_GATEWAY"] = address
    ok = False
    try:
        with KernelspecEnv(kernel_exe):
            k = Kernel()
            try:
                yield gw, k
                ok = not failures
            finally:
                k.close()
    finally:
        if not ok:
            print("gateway log (%s):\n%s" % (gw.home, gw.log()[-6000:]))
        gw.close(keep=not ok)


class Cell:
    """One execute_request whose iopub messages are read as they come, while
    the test does other things; messages for other requests land in
    kernel.others."""

    def __init__(self, k, code):
        self.k = k
        self.msg_id = k.kc.execute(code)
        self.msgs = []
        self.reply = None
        self.idle = False

    def pump(self, until, timeout):
        """Reads messages until until(self) holds (True) or the deadline (False)."""
        end = time.monotonic() + timeout
        while not until(self):
            left = end - time.monotonic()
            if left <= 0:
                return False
            try:
                m = self.k.kc.get_iopub_msg(timeout=min(left, 0.5))
            except queue.Empty:
                m = None
            if m and m["parent_header"].get("msg_id") == self.msg_id:
                self.msgs.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    self.idle = True
            elif m:
                self.k.others.append(m)
            if self.reply is None:
                try:
                    r = self.k.kc.get_shell_msg(timeout=0.01)
                    if r["parent_header"].get("msg_id") == self.msg_id:
                        self.reply = r
                except queue.Empty:
                    pass
        return True

    def done(self):
        return self.reply is not None and self.idle

    def texts(self):
        return [m["content"]["data"].get("text/plain", "") for m in displays(self.msgs)]


def shown_step(text):
    m = re.search(r"step (\d+)/(\d+)", text)
    return int(m.group(1)) if m else -1


def job_events(cli_exe, job):
    """Every event of a job as the gateway keeps them (spotlab logs --json:
    one JSON object after another, read page by page)."""
    _, out, _ = cli(cli_exe, "logs", str(job), "--json")
    dec, i, evs = json.JSONDecoder(), 0, []
    while True:
        while i < len(out) and out[i].isspace():
            i += 1
        if i >= len(out):
            return evs
        ev, i = dec.raw_decode(out, i)
        evs.append(ev)


def steps_per_s(cli_exe, job):
    """The training rate of a finished job, from its metric events."""
    ms = [e for e in job_events(cli_exe, job) if e.get("event") == "metric" and "loss" in e]
    if len(ms) < 2 or ms[-1]["time_us"] <= ms[0]["time_us"]:
        return None
    return (ms[-1]["step"] - ms[0]["step"]) / ((ms[-1]["time_us"] - ms[0]["time_us"]) / 1e6)


def gateway_restart(kernel_exe, gateway_exe, cli_exe):
    """kill -9 of the gateway under a cell that follows a train job. Its
    workers send up to 100 step metrics a second, so a job of some 20 s
    leaves more events than one page of %attach, and fewer than the gateway
    keeps whole (GW_METRICS_WHOLE) even when a busy machine makes it last
    five times as long."""
    with own_gateway_kernel(kernel_exe, gateway_exe, "[worker]\nmetrics_per_s = 100\n") as (gw, k):
        content, _ = k.run('model m = gpt(layers=1, heads=2, dim=32, ctx=32)\ndata d = text("moby-dick")')
        check(content["status"] == "ok", "restart: definitions")
        # how fast this machine trains m, so the job below outlives the restart
        content, msgs = k.run("train m on d steps=300 batch=4 checkpoint_every=100", timeout=300)
        ds = displays(msgs)
        rate = steps_per_s(cli_exe, job_of(ds[-1]["content"]["data"]["text/plain"])) if ds else None
        check(content["status"] == "ok" and rate, "restart: a short job measures the step rate: %s" % rate)
        # about 20 s of training, at least 800 steps: well over a page of 500
        # events for %attach to read below
        steps = int(min(max((rate or 100) * 20, 800), 10 ** 7))
        every = max(steps // 8, 1)
        cell = Cell(k, "train m on d steps=%d batch=4 checkpoint_every=%d" % (steps, every))
        running = cell.pump(lambda c: any("(running)" in t and shown_step(t) >= 1 for t in c.texts()), 120)
        check(running, "restart: the job runs and its display shows progress")
        before = cell.texts()[-1] if cell.texts() else ""
        job = job_of(before)
        gw.kill9()
        n_before = len(displays(cell.msgs))
        gw.start()
        t_restart = time.monotonic()
        back = cell.pump(lambda c: any("gateway restarted" in t for t in c.texts()), 120)
        check(back, "restart: the kernel follows the job again %.1f s after the gateway restarted" %
              (time.monotonic() - t_restart))
        finished = cell.pump(Cell.done, 600)
        check(finished, "restart: the cell ends")
        reply = cell.reply["content"] if cell.reply else {}
        check(reply.get("status") == "ok", "restart: the cell ends normally: %s" % reply.get("evalue"))
        ds = displays(cell.msgs)
        texts = cell.texts()
        check(ds and ds[0]["msg_type"] == "display_data" and
              all(d["msg_type"] == "update_display_data" for d in ds[1:]),
              "restart: one display_data, then only updates")
        ids = {d["content"]["transient"].get("display_id") for d in ds}
        check(job is not None and ids == {"spotlab-" + job}, "restart: the same display id throughout: %s" % ids)
        after = texts[n_before:]
        marks = [i for i, t in enumerate(after) if "gateway restarted; following again from event" in t]
        check(marks, "restart: the display shows the gateway restart")
        later = after[marks[0]:] if marks else []
        check(len(later) >= 2 and shown_step(later[-1]) > shown_step(later[0]) and
              shown_step(later[0]) >= shown_step(before),
              "restart: the display keeps updating after the restart (steps %s)" %
              [shown_step(t) for t in later][:3])
        final = texts[-1] if texts else ""
        check("(succeeded)" in final and "step %d/%d" % (steps, steps) in final,
              "restart: the final display shows the job succeeded")
        evs = job_events(cli_exe, job)
        seqs = [e["seq"] for e in evs]
        gaps = [(a, b) for a, b in zip(seqs, seqs[1:]) if b != a + 1]
        check(seqs and seqs[0] == 1 and not gaps, "restart: the gateway kept every event (%d, gaps %s)"
              % (len(seqs), gaps[:5]))
        cks = [e for e in evs if e["event"] == "checkpoint"]
        restarts = [e for e in evs if e["event"] == "gateway"]
        check(len(restarts) == 1 and final.count("gateway restarted") == 1 and
              "gateway restarted; following again from event %d" % restarts[0]["seq"] in final,
              "restart: the restart shown once, at its event")
        check("checkpoints: %d, the last at step %d" % (len(cks), cks[-1]["step"] if cks else -1) in final,
              "restart: every checkpoint counted exactly once (%d): %s" % (len(cks), final))
        check(final.count("succeeded at step") == 1 and final.count("(1 so far)") == 1 and
              "preempted" not in final, "restart: no event shown twice, no preemption")
        # %attach of the finished job reads its history (in pages of 500
        # events) and shows the same; named by an alias of its id (J0000005
        # for J000005), whose events carry the id as the gateway writes it
        content, msgs = k.run("%attach J0" + str(job)[1:], timeout=120)
        again = displays(msgs)[-1]["content"]["data"]["text/plain"] if displays(msgs) else ""
        check(content["status"] == "ok" and len(evs) > 500 and
              again.split("timeline:")[-1] == final.split("timeline:")[-1] and
              "checkpoints: %d," % len(cks) in again,
              "restart: %%attach of the job (%d events) shows every event once: %s" % (len(evs), again))


def gateway_stopped(kernel_exe, cli_exe):
    """`spotlab gateway stop --force` under a cell that follows a job: the cell says the
    gateway is gone (once) instead of showing the job running; interrupted, the next cell
    that needs a gateway starts the embedded one again at once (it waited 30 s for an
    answer from the gone one), and that gateway has the job, still running on its worker."""
    with KernelspecEnv(kernel_exe):
        k = Kernel()
        try:
            content, _ = k.run('model m = gpt(layers=1, heads=2, dim=16, ctx=16)\ndata d = text("moby-dick")')
            check(content["status"] == "ok", "stopped: definitions")
            cell = Cell(k, "train m on d steps=10000000 batch=4")
            running = cell.pump(lambda c: any("(running)" in t and shown_step(t) >= 1 for t in c.texts()), 120)
            job = job_of(cell.texts()[-1]) if cell.texts() else None
            check(running and job, "stopped: the job runs")
            rc, out, err = cli(cli_exe, "gateway", "stop", "--force")
            check(rc == 0, "stopped: spotlab gateway stop --force: %r %r" % (out, err))

            def said(c):
                return [m["content"]["text"] for m in c.msgs if m["msg_type"] == "stream" and
                        "the gateway is not available" in m["content"]["text"]]
            check(cell.pump(lambda c: said(c), 30), "stopped: the following cell says the gateway is gone")
            cell.pump(lambda c: False, 12)  # more pings into the outage: it is said once
            lines = said(cell)
            check(len(lines) == 1 and str(job) in lines[0] and "goes on on its worker" in lines[0],
                  "stopped: once, naming the job: %r" % lines)
            k.km.interrupt_kernel()
            check(cell.pump(Cell.done, 30), "stopped: the interrupted cell ends")
            t0 = time.monotonic()
            content, msgs = k.run("%jobs", timeout=60)
            took = time.monotonic() - t0
            check(content["status"] == "ok" and took < 20 and str(job) in stdout_of(msgs) + str(displays(msgs)),
                  "stopped: %%jobs starts the gateway again and lists the job (%.1f s): %r" %
                  (took, content.get("evalue")))
            check(wait_state(cli_exe, job, {"running"}) == "running", "stopped: the job still runs")
            content, msgs = k.run("%cancel " + str(job), timeout=60)
            check(content["status"] == "ok", "stopped: %cancel")
            check(wait_state(cli_exe, job, {"cancelled"}) == "cancelled", "stopped: the job cancelled")
        finally:
            k.close()


def names_at_shutdown(kernel_exe):
    """A kernel asked to stop (a restart) right after a cell whose names its
    gateway has not confirmed keeps them in its journal for the next kernel:
    its set, unanswered or still queued on a socket that drops what is queued,
    used to leave with it (a restart under load lost a name this way). The
    gateway is stopped (SIGSTOP) over the cell, so that the set stays
    unanswered."""
    notebook = "kept/at-shutdown.ipynb"
    os.environ["JPY_SESSION_NAME"] = notebook
    home = os.environ["SPOTLAB_HOME"]
    pending = os.path.join(home, "pending", hashlib.sha256(notebook.encode()).hexdigest() + ".json")
    with KernelspecEnv(kernel_exe):
        k = Kernel()
        gw_pid = None
        try:
            content, _ = k.run("%jobs\nfirst = 1", timeout=60)  # the gateway runs and has first
            check(content["status"] == "ok", "shutdown: a first cell")
            with open(os.path.join(home, "gateway.pid")) as f:
                gw_pid = int(f.read())
            os.kill(gw_pid, signal.SIGSTOP)
            content, _ = k.run("kept = 41 + 1", timeout=30)
            check(content["status"] == "ok", "shutdown: a cell while the gateway does not answer")
            k.kc.stop_channels()
            k.km.shutdown_kernel(now=False)  # asked to stop, as a restart does
            lines = open(pending).read().splitlines() if os.path.exists(pending) else []
            check(lines and '"kept"' in lines[-1] and "42" in lines[-1],
                  "shutdown: the unconfirmed name is in the journal: %r" % [x[:80] for x in lines])
        finally:
            if gw_pid:
                os.kill(gw_pid, signal.SIGCONT)
        k = Kernel()
        try:
            content, msgs = k.run("kept + first", timeout=60)
            check(content["status"] == "ok" and "43" in str([m["content"].get("data", {}) for m in msgs]),
                  "shutdown: the next kernel has the name: %s" % content.get("evalue"))
        finally:
            k.close()
    del os.environ["JPY_SESSION_NAME"]


def gpu_requests(kernel_exe, gateway_exe, cli_exe):
    """gpus= and precision= through the whole stack on the local provider, whose
    instances play GPU types on this machine: a job asking for more GPUs than its
    instance has fails at once with the worker's sentence as the cell's error (never a
    silent CPU run); more GPUs than any instance type offers is refused at submit; bf16
    on the CPU fails clearly; a bad value never leaves the kernel; a CPU job's display
    says where it trains; %status shows what each worker found."""
    with own_gateway_kernel(kernel_exe, gateway_exe) as (gw, k):
        text = os.path.join(gw.home, "tiny.txt")
        with open(text, "w") as f:
            f.write("call me ishmael. some years ago, never mind how long precisely.\n" * 40)
        content, _ = k.run('model m = gpt(layers=1, heads=2, dim=16, ctx=16)\ndata d = text("%s")' % text)
        check(content["status"] == "ok", "gpus: definitions")
        for cell, kind in (('sample m "x" tokens=5', "sample"), ("eval m on d", "eval")):
            content, msgs = k.run(cell, timeout=60)
            ev = content.get("evalue", "")
            check(content["status"] == "error" and content.get("ename") == "SubmitError" and
                  ev.startswith("model m has no checkpoint yet: %s needs a trained model" % kind) and
                  not displays(msgs), "%s of an untrained model is refused at submit: %s" % (kind, ev))
        content, _ = k.run("train m on d steps=5 batch=4 gpus=2", timeout=120)
        ev = content.get("evalue", "")
        m = re.search(r"gpus=2 asked, but this instance \((g5\.12xlarge)\) has ([01]) GPUs?", ev)
        check(content["status"] == "error" and content.get("ename") == "JobFailed" and m,
              "gpus=2 on a local instance fails with the worker's sentence: %s" % ev)
        gpus_here = int(m.group(2)) if m else 0
        if gpus_here == 0:
            check("has 0 GPUs (" in ev, "the sentence says why there is no GPU: " + ev)
        content, _ = k.run("train m on d steps=5 batch=4 gpus=16", timeout=60)
        ev = content.get("evalue", "")
        check(content["status"] == "error" and content.get("ename") == "SubmitError" and
              "no instance type offers 16 GPUs (the most: 8, on " in ev,
              "gpus=16 is refused at submit: %s" % ev)
        content, msgs = k.run("train m on d steps=5 batch=4 precision=fp16", timeout=30)
        check(content["status"] == "error" and content.get("ename") == "ValueError" and
              'line 1: precision: "fp16" is not bf16 or fp32' in content.get("evalue", "") and not displays(msgs),
              "precision=fp16 is the cell's error: %s" % content.get("evalue"))
        content, _ = k.run("train m on d steps=5 batch=4 gpus=0 precision=bf16", timeout=120)
        check(content["status"] == "error" and
              "precision=bf16 needs a GPU, but this job runs on the CPU (gpus=0)" in content.get("evalue", ""),
              "bf16 on the CPU fails clearly: %s" % content.get("evalue"))
        content, msgs = k.run("train m on d steps=5 batch=4 gpus=0", timeout=120)
        ds = displays(msgs)
        last = ds[-1]["content"]["data"] if ds else {}
        check(content["status"] == "ok" and re.search(r"device: CPU, \d+ threads?, fp32",
                                                      last.get("text/plain", "")),
              "a CPU job's display says where it trains: %s" % last.get("text/plain", ""))
        check('class="spotlab-device"' in last.get("text/html", ""), "and so does its HTML")
        content, msgs = k.run("%status", timeout=30)
        out = stdout_of(msgs)
        check(content["status"] == "ok" and " gpus=%d" % gpus_here in out and "warning:" not in out,
              "%%status shows each worker's GPUs, and no warning for simulated types: %s" % out)


def long_failure(kernel_exe, gateway_exe, cli_exe):
    """A %%run script that fails with an error longer than a job's reason (255
    bytes), in an alphabet of two-byte characters: the cell ends in JobFailed with
    the script's words, the job's display shows it failed, and the CLI lists it so.
    (The gateway cut the reason inside a character, the failed state's event
    could not be made, and the cell waited for an end that never came.)"""
    with own_gateway_kernel(kernel_exe, gateway_exe) as (gw, k):
        # "exit status 3: " and one byte: an even count of bytes before the
        # characters, so that 255 bytes end inside one
        content, msgs = k.run("%%run\nprintf x >&2\nfor i in $(seq 400); do printf '\\303\\251'; done >&2\n"
                              "exit 3", timeout=120)
        ev = content.get("evalue", "")
        check(content["status"] == "error" and content.get("ename") == "JobFailed" and "\u00e9\u00e9" in ev,
              "a long failure in two-byte characters ends the cell: %s %s" % (content.get("ename"), ev[:80]))
        ds = displays(msgs)
        last = ds[-1]["content"]["data"].get("text/plain", "") if ds else ""
        check("failed" in last, "the job's display shows it failed: %s" % last[-200:])
        job = job_of(last)
        rc, out, _ = cli(cli_exe, "jobs", "--json")
        states = {j["job"]: j["state"] for j in json.loads(out)} if rc == 0 else {}
        check(job is not None and states.get(job) == "failed", "spotlab jobs says failed: %s" % states)


IDLE_INI = "[idle]\nnotebook_timeout = 8s\nwarn_before = 4s\nworker_timeout = 1h\n"


def idle_notices(kernel_exe, gateway_exe, cli_exe):
    """A notebook that runs a job and then no cell is warned and stopped; the
    notices show under the cell that ran last (a stderr stream and the job
    display's timeline); the next cell brings capacity back."""
    with own_gateway_kernel(kernel_exe, gateway_exe, IDLE_INI) as (gw, k):
        content, _ = k.run('model m = gpt(layers=1, heads=2, dim=16, ctx=16)\ndata d = text("moby-dick")')
        check(content["status"] == "ok", "idle: definitions")
        cell = Cell(k, "train m on d steps=60 batch=4 checkpoint_every=30")
        check(cell.pump(Cell.done, 300) and cell.reply["content"]["status"] == "ok", "idle: train succeeds")
        t_end = time.monotonic()
        texts = cell.texts()
        job = job_of(texts[-1]) if texts else None
        rc, out, _ = cli(cli_exe, "instances", "--json")
        insts = [i["instance"] for i in json.loads(out)] if rc == 0 else []
        check(len(insts) == 1, "idle: one worker after the job: %s" % insts)

        # no cell runs now: read what the kernel sends on its own
        def stderr_with(c, word):
            return [m for m in c.msgs if m["msg_type"] == "stream" and
                    m["content"]["name"] == "stderr" and word in m["content"]["text"]]

        warned = cell.pump(lambda c: stderr_with(c, "idle") and any("idle warning" in t for t in c.texts()), 60)
        t_warn = time.monotonic()
        check(warned, "idle: a warning under the cell that ran last, after %.1f s" % (t_warn - t_end))
        w = stderr_with(cell, "idle")[0]["content"]["text"] if warned else ""
        m = re.search(r"stop in (\d+) s", w)
        check(m and 0 < int(m.group(1)) <= 4, "idle: the warning says when the workers stop: %r" % w)
        stopped = cell.pump(lambda c: stderr_with(c, "stopped") and
                            any("idle shutdown" in t for t in c.texts()), 60)
        check(stopped and time.monotonic() - t_end >= 8 - 1,
              "idle: then the shutdown, after notebook_timeout (%.1f s)" % (time.monotonic() - t_end))
        s = stderr_with(cell, "stopped")[0]["content"]["text"] if stopped else ""
        check("workers were stopped" in s, "idle: the shutdown says what happened: %r" % s)
        ds = displays(cell.msgs)
        ups = [d for d in ds if "idle" in d["content"]["data"]["text/plain"]]
        check(ups and all(d["msg_type"] == "update_display_data" and
                          d["content"]["transient"]["display_id"] == "spotlab-%s" % job for d in ups),
              "idle: the job's display is updated in place")
        last = ups[-1]["content"]["data"]["text/plain"] if ups else ""
        check(re.search(r"idle warning: notebook stops in \d+ s unless a cell runs\n", last) and
              "idle shutdown: notebook stopped, its workers shut down" in last and
              last.index("idle warning") > last.index("succeeded at step 60"),
              "idle: the display's timeline ends with the warning and the shutdown: " + last)
        check(not [m for m in k.others if m["msg_type"] in ("stream", "display_data", "update_display_data")],
              "idle: nothing is sent to any other cell")
        rc, out, _ = cli(cli_exe, "instances", "--json")
        check(rc == 0 and not [i for i in json.loads(out) if i["instance"] in insts],
              "idle: the notebook's worker is gone: %s" % out)

        # the next cell brings capacity back and restores the model
        content, msgs = k.run('sample m "x" tokens=5', timeout=300)
        check(content["status"] == "ok", "idle: the next cell works: %s" % content.get("evalue"))
        errs = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream" and
                       m["content"]["name"] == "stderr")
        check("idle" not in errs, "idle: the next cell does not repeat the notices: %r" % errs)
        out = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream" and
                      m["content"]["name"] == "stdout")
        check(out.strip() != "", "idle: the sample prints text")
        sd = displays(msgs)
        final = sd[-1]["content"]["data"]["text/plain"] if sd else ""
        check(re.search(r"restored m from its checkpoint at step 60 on \S+ in \S+\n", final) and
              "(succeeded)" in final, "idle: the sample's display says the model was restored: " + final)
        placed = re.findall(r"\((i-[0-9a-f]+)\)", final)
        check(placed and placed[0] not in insts, "idle: on a new worker %s" % placed)

        # any cell is activity, even one that needs no gateway: warned
        # again, `print 1` puts the shutdown off by a whole timeout
        sample_cell = Cell(k, "%who")
        check(sample_cell.pump(Cell.done, 60), "idle: a cell after the sample")
        check(sample_cell.pump(lambda c: stderr_with(c, "idle"), 60), "idle: warned again")
        plain = Cell(k, "print 1")
        check(plain.pump(Cell.done, 60) and "1" in stdout_of(plain.msgs), "idle: print 1")
        nxt = plain.pump(lambda c: stderr_with(c, "idle") or stderr_with(c, "stopped"), 60)
        first = (stderr_with(plain, "idle") + stderr_with(plain, "stopped"))[:1]
        check(nxt and "stop in" in first[0]["content"]["text"],
              "idle: after a cell the next notice is a new warning, not the shutdown: %s" %
              [m["content"]["text"] for m in first])


class ScriptedGateway(threading.Thread):
    """A gateway that speaks protocols.md §1 from a script: it holds one job
    whose history is long (more events than one socket queue holds) and,
    once the kernel attached, sends live events with one missing, as a full
    queue would drop it. Every request is recorded."""

    def __init__(self, address, n_history=1200):
        super().__init__(daemon=True)
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind(address)
        self.requests = []
        self.events = []
        self.stop = False
        self.live_phase = 0
        self.t = 1_700_000_000_000_000
        self.add({"event": "state", "state": "queued", "reason": "submitted"})
        self.add({"event": "placed", "instance": "i-0123456789ab", "instance_type": "g5.xlarge",
                  "zone": "z-1a", "spot": True, "price_usd_per_hour": 0.4, "on_demand_usd_per_hour": 1.0,
                  "attempt": 1})
        self.add({"event": "state", "state": "starting", "reason": "assigned to a worker"})
        self.add({"event": "state", "state": "running", "reason": "first metric"})
        self.step = 0
        while len(self.events) < n_history:
            self.tick()

    def add(self, ev):
        self.t += 10_000
        ev = dict(ev, type="event", job="J000042", seq=len(self.events) + 1, time_us=self.t)
        self.events.append(ev)
        return ev

    def tick(self):
        """The next training event: a metric, every 100th event a checkpoint."""
        if (len(self.events) + 1) % 100 == 0:
            return self.add({"event": "checkpoint", "step": self.step, "path": "J000042/ckpt.tc",
                             "bytes": 10, "write_ms": 1, "durable": True})
        self.step += 1
        return self.add({"event": "metric", "step": self.step, "loss": 5.0 / self.step, "steps": 2000})

    def send(self, rid, msg):
        self.sock.send_multipart([rid, json.dumps(msg).encode()])

    def refuse(self, m):
        """The error a request gets instead of its answer, or None."""
        return None

    def summary(self):
        return {"job": "J000042", "user": "u", "session": "s", "kind": "train", "model": "m", "data": "d",
                "state": "running", "step": self.step, "steps": 2000, "attempt": 1,
                "last_seq": len(self.events)}

    def run(self):
        while not self.stop:
            if not self.sock.poll(100):
                continue
            rid, body = self.sock.recv_multipart()
            m = json.loads(body)
            self.requests.append(m)
            t, rep = m.get("type"), {"type": "reply", "re": m.get("id"), "ok": True}
            refused = self.refuse(m)
            if refused:
                rep.update(ok=False, error=refused)
            elif t == "hello":
                rep.update(user="u", session=m.get("session", ""), gateway="0.1.0")
            elif t == "session.get":
                rep.update(vars={}, defs=[], models={})
            elif t == "submit":
                rep.update(job="J000042")
            elif t == "logs":
                after, limit = m["after"], m.get("limit", 1000)
                page = [e for e in self.events if e["seq"] > after][:limit]
                rep.update(events=page, more=bool(page) and page[-1]["seq"] < len(self.events),
                           kind=self.summary()["kind"])
            elif t == "attach":
                rep.update(job=self.summary())
                self.send(rid, rep)
                for e in self.events[m["after"]:]:
                    self.send(rid, e)
                self.live(rid)
                continue
            self.send(rid, rep)

    def live(self, rid):
        self.live_phase += 1
        if self.live_phase == 1:  # three live events; the middle one is lost on the way
            for k in range(3):
                e = self.tick() if k != 1 else self.add({"event": "checkpoint", "step": self.step,
                                                          "path": "J000042/ckpt.tc", "bytes": 10,
                                                          "write_ms": 1, "durable": True})
                if k != 1:
                    self.send(rid, e)
        elif self.live_phase == 2:  # attached again: the job ends
            self.send(rid, self.tick())
            self.steps = self.step
            self.send(rid, self.add({"event": "state", "state": "succeeded", "reason": "done"}))


@contextlib.contextmanager
def scripted_env(d, gateway_class):
    """A scripted gateway, gateway_class(address) (a thread), serving
    ipc://d/gw.sock, which SPOTLAB_GATEWAY and SPOTLAB_TOKEN name to the
    kernels started inside; after, the gateway stopped, the variables as
    they were and d removed."""
    saved = {k: os.environ.get(k) for k in ("SPOTLAB_GATEWAY", "SPOTLAB_TOKEN")}
    os.environ["SPOTLAB_GATEWAY"] = "ipc://%s/gw.sock" % d
    os.environ["SPOTLAB_TOKEN"] = "scripted-token"
    gw = gateway_class(os.environ["SPOTLAB_GATEWAY"])
    gw.start()
    try:
        yield gw
    finally:
        gw.stop = True
        gw.join(5)
        restore_env(saved)
        shutil.rmtree(d, ignore_errors=True)


def scripted_gateway(kernel_exe):
    """Against a scripted gateway: a long history read in pages, a lost live
    event read back, each event shown once."""
    d = tempfile.mkdtemp(prefix="spotlab-kgw-scripted-")
    with scripted_env(d, ScriptedGateway) as gw:
        with KernelspecEnv(kernel_exe):
            k = Kernel()
            try:
                content, msgs = k.run('model m = gpt(layers=1)\ndata d = text("moby-dick")\n'
                                      'train m on d steps=100', timeout=60)
                check(content["status"] == "ok", "scripted: the cell follows the job to its end: %s" %
                      content.get("evalue"))
                submits = sum(r["type"] == "submit" for r in gw.requests)
                content, _ = k.run("train m on d steps=100 deadline=1000d", timeout=60)
                check(content.get("ename") == "ValueError" and
                      content.get("evalue") == "line 1: deadline: 1000d is out of range [1s, 30d]" and
                      sum(r["type"] == "submit" for r in gw.requests) == submits,
                      "scripted: a deadline past its bounds is refused at its line, before any submit: %s"
                      % content.get("evalue"))
                logs = [(r["after"], r.get("limit")) for r in gw.requests if r["type"] == "logs"]
                attaches = [r["after"] for r in gw.requests if r["type"] == "attach"]
                check(logs[:3] == [(0, 500), (500, 500), (1000, 500)] and attaches[:1] == [1200],
                      "scripted: the history is read in pages before attaching: %s %s" % (logs, attaches))
                check(logs[3:] == [(1201, 500)] and attaches[1:] == [1203],
                      "scripted: after a lost event it reads back from the last one shown: %s %s" %
                      (logs[3:], attaches[1:]))
                ds = displays(msgs)
                final = ds[-1]["content"]["data"]["text/plain"] if ds else ""
                cks = [e for e in gw.events if e["event"] == "checkpoint"]
                check("checkpoints: %d, the last at step %d" % (len(cks), cks[-1]["step"]) in final and
                      "step %d/2000" % gw.steps in final and final.count("succeeded at step %d" % gw.steps) == 1,
                      "scripted: every event shown once: " + final)
            finally:
                k.close()


class TrimmedOutputGateway(ScriptedGateway):
    """A %%run job that has ended, its output as the gateway keeps a chatty one: the first
    lines, one stderr line among them, the gateway's line in place of those it left out
    (an output event with elided_lines), the newest lines; then failed without a reason."""

    def __init__(self, address):
        super().__init__(address, n_history=4)
        for i in range(1, 4):
            self.add({"event": "output", "stream": "stdout", "text": "line %d" % i})
        self.add({"event": "output", "stream": "stderr", "text": "warning: the script's own"})
        self.add({"event": "output", "stream": "stderr", "elided_lines": 52000, "elided_bytes": 4300000,
                  "text": "[spotlab: 52000 lines of output (4.1 MiB) left out here; the gateway keeps "
                          "a job's first 1000 lines and its last 10000 (8.0 MiB at most)]"})
        for i in range(52005, 52008):
            self.add({"event": "output", "stream": "stdout", "text": "line %d" % i})
        self.add({"event": "state", "state": "failed", "reason": ""})

    def summary(self):
        return dict(super().summary(), kind="run", model="", data="", state="failed",
                    last_seq=len(self.events))

    def live(self, rid):
        pass


class PreemptedGateway(ScriptedGateway):
    """A train job another kernel submitted, preempted with notice at step 12
    (its checkpoint of step 12 durable), resumed, and ended."""

    def __init__(self, address):
        super().__init__(address, n_history=4)
        while self.step < 12:
            self.tick()
        self.add({"event": "checkpoint", "step": 12, "path": "J000042/ckpt.tc", "bytes": 10,
                  "write_ms": 1, "durable": True})
        self.add({"event": "notice", "action": "terminate", "deadline_us": self.t + 2_000_000,
                  "instance": "i-0123456789ab", "leaving": True})
        self.add({"event": "preempted", "step": 12, "notice": True, "instance": "i-0123456789ab",
                  "steps_lost": 0})
        self.add({"event": "resumed", "from_step": 12, "instance_type": "g5.xlarge", "zone": "z-1b",
                  "after_s": 3})
        self.add({"event": "state", "state": "succeeded", "reason": "done"})

    def summary(self):
        return dict(super().summary(), state="succeeded", last_seq=len(self.events))

    def live(self, rid):
        pass

    def refuse(self, m):
        """A session.set naming "big" is refused as too large, as the gateway refuses one."""
        if m.get("type") == "session.set" and "big" in (m.get("vars") or {}):
            return {"code": "SL_ELIMIT", "message": "the session's variables and definitions would "
                    "hold more than 512 KiB (a notebook reads its session whole); nothing was saved"}
        return None


def attach_preempted(kernel_exe):
    """%attach to a job this kernel did not submit tells its preemption as a train job's
    (the step and its checkpoint), not as a job that starts again."""
    d = tempfile.mkdtemp(prefix="spotlab-kgw-attach-")
    with scripted_env(d, PreemptedGateway) as gw:
        with KernelspecEnv(kernel_exe):
            k = Kernel()
            try:
                content, msgs = k.run("%attach J000042", timeout=60)
                ds = displays(msgs)
                final = ds[-1]["content"]["data"]["text/plain"] if ds else ""
                check(content["status"] == "ok" and
                      "preempted at step 12 (notice 2 s) → checkpoint durable at step 12" in final and
                      "starts again" not in final,
                      "attach: the preemption told with its step and checkpoint: %s" % final)
                k.run("model m = gpt(layers=1)\nsample m tokens=10", timeout=60)
                subs = [r for r in gw.requests if r["type"] == "submit"]
                check(subs and subs[-1]["kind"] == "sample" and
                      subs[-1]["options"].get("prompt") == "",
                      "sample without a prompt asks for the text from its start: %s %s"
                      % (content.get("evalue"), subs[-1:]))
                # variables the gateway refuses to keep: the user hears it, under the cell
                cell = Cell(k, "big = 1")
                told = cell.pump(lambda c: any("not saved" in m["content"].get("text", "")
                                               for m in c.msgs if m["msg_type"] == "stream"), 30)
                text = "".join(m["content"].get("text", "") for m in cell.msgs if m["msg_type"] == "stream")
                check(told and "variables were not saved in the gateway" in text and "512 KiB" in text,
                      "a refused session.set is told to the user: %r" % text)
            finally:
                k.close()


def trimmed_output(kernel_exe):
    """A %%run job's trimmed output replayed into its cell: the gateway's line shows where
    the gap is, in order, and is not taken for the script's last stderr line."""
    d = tempfile.mkdtemp(prefix="spotlab-kgw-trimmed-")
    with scripted_env(d, TrimmedOutputGateway):
        with KernelspecEnv(kernel_exe):
            k = Kernel()
            try:
                content, msgs = k.run("%%run\necho hi", timeout=60)
                streams = [(m["content"]["name"], m["content"]["text"]) for m in msgs
                           if m["msg_type"] == "stream"]
                text = "".join(t for _, t in streams)
                order = [text.find(x) for x in ("line 3\n", "warning: the script's own",
                                                "[spotlab: 52000 lines of output", "line 52005\n")]
                check(all(o >= 0 for o in order) and order == sorted(order),
                      "trimmed: the first lines, the gateway's line, the newest lines, in order: %r" % text)
                check(any(n == "stderr" and "52000 lines" in t for n, t in streams),
                      "trimmed: the gateway's line is on stderr")
                check(content.get("ename") == "JobFailed" and
                      "warning: the script's own" in content.get("evalue", ""),
                      "trimmed: the failure names the script's last stderr line, not the gateway's: %s"
                      % content.get("evalue"))
            finally:
                k.close()


def stop_gateway(home):
    """Stops the embedded gateway this test started, then kills its workers
    and their jobs (a worker whose gateway is gone would wait for it)."""
    try:
        with open(os.path.join(home, "gateway.pid")) as f:
            pid = int(f.read().split()[0])
        os.kill(pid, signal.SIGTERM)
        wait_exit([pid], 10)
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

    left = ours()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    wait_exit(left, 10)


# a budget a few seconds of one local instance spend (time_scale 1)
BUDGET_INI = "[budget]\nmonthly_usd = 0.0004\nalert_at = 50,400\nhard_cap = no\n"


def budget_notices(kernel_exe, gateway_exe, cli_exe):
    """Budget alerts in a notebook: the one that fires while a job runs shows
    under the running cell and in its display; one that fires while no cell
    runs shows at the start of the next cell; neither is shown twice."""
    with own_gateway_kernel(kernel_exe, gateway_exe, BUDGET_INI) as (gw, k):
        content, _ = k.run('model m = gpt(layers=1, heads=2, dim=16, ctx=16)\ndata d = text("moby-dick")')
        check(content["status"] == "ok", "budget: definitions")
        cell = Cell(k, "train m on d steps=100000 batch=4 checkpoint_every=1000000")

        def alert(c, pct):
            return [m for m in c.msgs if m["msg_type"] == "stream" and
                    "Budget alert" in m["content"]["text"] and "(%d%%)" % pct in m["content"]["text"]]

        shown = cell.pump(lambda c: alert(c, 50), 120)
        check(shown, "budget: the 50% alert under the running cell")
        text = alert(cell, 50)[0]["content"]["text"] if shown else ""
        check(re.search(r"Budget alert: .* has spent \$[0-9.]+ of its \$[0-9.]+ monthly "
                        r"budget \(50%\)", text), "budget: the alert's sentence: %r" % text)
        check(cell.pump(lambda c: any("Budget alert" in t for t in c.texts()), 30),
              "budget: the job's display shows the alert")
        texts = cell.texts()
        job = job_of(texts[-1]) if texts else None
        rc, out, err = cli(cli_exe, "cancel", job or "J000000")
        check(rc == 0, "budget: the job cancelled: %s %s" % (out, err))
        check(cell.pump(Cell.done, 120), "budget: the cell ends")
        # the budget lowered under the spend while no cell runs: the
        # 400% alert fires between cells
        rc, out, err = cli(cli_exe, "budget", "set", "gateway", "0.0000001")
        check(rc == 0, "budget: set live from the CLI: %s %s" % (out, err))
        deadline = time.monotonic() + 30
        while "400" not in gw.log() and time.monotonic() < deadline:
            time.sleep(0.2)  # the alert is logged when it fires; nothing else to wait on
        check("(400%)" in gw.log(), "budget: the 400% alert fired")
        content, msgs = k.run("%budget")
        err_text = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
        check(content["status"] == "ok" and "(400%)" in err_text,
              "budget: the next cell starts with the alert: %r" % err_text[:300])
        check("(50%)" not in err_text, "budget: the 50% alert is not shown again")
        content, msgs = k.run("%budget")
        again = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
        check("Budget alert" not in again, "budget: a cell after that shows no alert: %r" % again[:300])
        everything = again + "".join(str(m["content"].get("data", {})) for m in msgs)
        check("gateway" in everything and "$" in everything,
              "budget: %%budget lists the gateway's budget: %r" % everything[:400])
        # a group's and a user's budget, set from the shell
        # (neither applies to anyone here: the reply says so, and keeps them)
        for scope, name, usd, note in (("group", "ml", "25", "Note: no [group.ml] section"),
                                       ("user", "carol", "7.5", "Note: no job or session of user carol")):
            rc, out, err = cli(cli_exe, "budget", "set", scope, name, usd)
            check(rc == 0 and "the monthly budget of %s %s to $%.2f" % (scope, name, float(usd))
                  in gw.log() and note in out, "budget: set %s %s from the CLI: %s %s" % (scope, name, out, err))
        rc, out, err = cli(cli_exe, "budget", "set", "group", "ml", "25", "more")
        check(rc == 2 and "too many arguments" in err, "budget: a fifth argument: %s" % err)
        # a negative amount is judged as an amount, not taken for an option
        rc, out, err = cli(cli_exe, "budget", "set", "group", "ml", "-5")
        check(rc != 0 and "'-5'" in err and "option" not in err, "budget: a negative amount: %s" % err)
        rc, out, err = cli(cli_exe, "inject", "preempt", "i-0", "--notice")
        check(rc == 2 and "--notice needs a value" in err, "inject: --notice without its value: %s" % err)
        rc, out, err = cli(cli_exe, "gateway", "stop", "--json")
        check(rc == 2 and "usage" in err, "gateway stop takes no --json: %s" % err)
        # a token the gateway does not know: it answered, so it is there
        saved = os.environ.get("SPOTLAB_TOKEN")
        os.environ["SPOTLAB_TOKEN"] = "not-a-token-it-knows-0123456789"
        try:
            rc, out, err = cli(cli_exe, "status")
        finally:
            if saved is None:
                os.environ.pop("SPOTLAB_TOKEN", None)
            else:
                os.environ["SPOTLAB_TOKEN"] = saved
        check(rc != 0 and "the spotlab gateway at " in err and "refused hello" in err and
              "no spotlab gateway" not in err, "status with an unknown token: %s" % err)


def main():
    kernel_exe = sys.argv[1]
    home = tempfile.mkdtemp(prefix="spotlab-kgw-")
    os.environ["SPOTLAB_HOME"] = home
    os.environ.pop("SPOTLAB_GATEWAY", None)
    os.environ.pop("SPOTLAB_TOKEN", None)
    try:
        no_gateway(kernel_exe)
        scripted_gateway(kernel_exe)
        trimmed_output(kernel_exe)
        attach_preempted(kernel_exe)
        if len(sys.argv) > 3:
            os.environ["SPOTLAB_GATEWAY_BIN"] = os.path.realpath(sys.argv[2])
            with_gateway(kernel_exe, os.path.realpath(sys.argv[3]))
            gateway_stopped(kernel_exe, os.path.realpath(sys.argv[3]))
            names_at_shutdown(kernel_exe)
            stop_gateway(home)
            gateway_restart(kernel_exe, os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3]))
            idle_notices(kernel_exe, os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3]))
            gpu_requests(kernel_exe, os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3]))
            long_failure(kernel_exe, os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3]))
            budget_notices(kernel_exe, os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3]))
    finally:
        stop_gateway(home)
        shutil.rmtree(home, ignore_errors=True)
    print(summary())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
