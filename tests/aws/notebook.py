"""What the aws tests share: spotlab-kernel driven as a front end drives it
(jupyter_client, through a private kernelspec), a kernel-protocol monitor of
one job, the training text, and a wait for what has no event to wait on."""
import queue
import random
import re
import time

from jupyter_client import KernelManager

from gateway_client import GatewayClient

FINAL = ("succeeded", "failed", "cancelled")


def write_text(path):
    """A few KB of word salad: the training text (deterministic)."""
    rng = random.Random(0)
    words = ("call me ishmael some years ago never mind how long precisely having little or no "
             "money in my purse and nothing particular to interest me on shore I thought I would "
             "sail about a little and see the watery part of the world").split()
    lines = [" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(400)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def wait_for(pred, what, timeout):
    """Polls pred (the stand-in's state, S3 and the gateway's database have no
    event to wait on) until it returns a true value, which it returns; raises
    at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("%s: not within %ds" % (what, timeout))
        time.sleep(0.1)


def job_of(text):
    m = re.search(r"\bJ\d{6}\b", text or "")
    return m.group(0) if m else None


class Notebook:
    """spotlab-kernel started through the kernelspec (the caller holds a KernelspecEnv
    and has SPOTLAB_GATEWAY / SPOTLAB_TOKEN in the environment)."""

    def __init__(self):
        self.km = KernelManager(kernel_name="spotlab")
        self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.cell = None
        self.display = ""
        self.reply = None

    def run(self, code, timeout):
        """Runs a cell to its end: (reply content, iopub messages)."""
        msgs = []
        reply = self.kc.execute_interactive(code, output_hook=msgs.append, timeout=timeout)
        return reply["content"], msgs

    def start(self, code):
        """Starts a cell and returns at once; drain() follows it."""
        self.cell = self.kc.execute(code)
        self.display, self.reply = "", None

    def drain(self, timeout=0):
        """Takes what the kernel sent so far for the followed cell (waiting up to
        timeout for the first iopub message)."""
        first = True
        while True:
            try:
                m = self.kc.get_iopub_msg(timeout=timeout if first else 0)
            except queue.Empty:
                break
            first = False
            if m["parent_header"].get("msg_id") == self.cell and \
                    m["msg_type"] in ("display_data", "update_display_data"):
                self.display = m["content"]["data"].get("text/plain", "")
        while self.reply is None:
            try:
                m = self.kc.get_shell_msg(timeout=0)
            except queue.Empty:
                break
            if m["parent_header"].get("msg_id") == self.cell:
                self.reply = m["content"]

    def wait_job(self, timeout):
        """The job id the followed cell's display names."""
        deadline = time.monotonic() + timeout
        while not job_of(self.display):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the cell shows no job id: %r" % self.display)
            self.drain(min(left, 1.0))
        return job_of(self.display)

    def wait_reply(self, timeout):
        deadline = time.monotonic() + timeout
        while self.reply is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                m = self.kc.get_shell_msg(timeout=left)
            except queue.Empty:
                return None
            if m["parent_header"].get("msg_id") == self.cell:
                self.reply = m["content"]
        self.drain()
        return self.reply

    def close(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception as e:  # cleanup goes on
            print("kernel shutdown:", e)


class Monitor(GatewayClient):
    """A kernel-protocol client attached to one job: its events in order, the
    instance it runs on, the newest step. hook() runs after every message."""

    def __init__(self, address, token, session="aws-monitor"):
        super().__init__(address, token, session=session)
        self.job = None
        self.hook = None

    def follow(self, job):
        self.job = job
        r = self.req("attach", job=job, after=0)
        assert r["ok"], r

    def _keep(self, m):
        super()._keep(m)
        if self.hook:
            self.hook(m)

    def mine(self, kind=None):
        return [e for e in self.events if e.get("job") == self.job and
                (kind is None or e.get("event") == kind)]

    def state(self):
        st = [e["state"] for e in self.mine("state")]
        return st[-1] if st else None

    def step(self):
        return max((e["step"] for e in self.mine("metric") if isinstance(e.get("step"), int)),
                   default=0)

    def instance(self):
        """The spotlab instance the job is placed on now, or None."""
        cur = None
        for e in self.mine():
            if e["event"] == "placed":
                cur = e["instance"]
            elif e["event"] == "preempted" or (e["event"] == "state" and
                                               e["state"] in ("queued", "preempted") + FINAL):
                cur = None
        return cur

    def pump(self, timeout):
        m = self.recv(timeout)
        if m is not None:
            self._keep(m)
        return m

    def until(self, pred, what, timeout, end_ok=False):
        """Pumps until pred(); raises at the deadline or when the job ends first
        (unless end_ok)."""
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError("%s: not within %ds (state %s, step %d; last events %s)"
                                   % (what, timeout, self.state(), self.step(), self.tail()))
            if not end_ok and self.state() in FINAL:
                raise RuntimeError("%s: the job ended (%s) first; last events %s"
                                   % (what, self.state(), self.tail()))
            self.pump(0.2)

    def tail(self, n=12):
        return [(e.get("seq"), e.get("event"), e.get("state") or e.get("instance") or e.get("step"))
                for e in self.mine() if e.get("event") != "metric"][-n:]

    def attempts(self):
        """Steps reported by each placement, in order."""
        out = []
        for e in self.mine():
            if e["event"] == "placed":
                out.append([])
            elif e["event"] == "metric" and isinstance(e.get("step"), int) and "loss" in e and out:
                out[-1].append(e["step"])
        return out
