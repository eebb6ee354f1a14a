#!/usr/bin/python3
"""spotlab-kernel against the Jupyter messaging protocol, beyond conformance.

Usage: test_kernel_protocol.py PATH-TO-spotlab-kernel [pytest options]

Covers what jupyter_kernel_test does not: signatures and replays, interrupts
(message and SIGINT), shutdown and restart on control and shell, stdin,
stop_on_error, the size limits on incoming messages, the refusal of a
signature scheme other than hmac-sha256, and busy/idle around every request.

Nothing here sleeps to wait: every wait is for an event with a deadline.
Where a test must show that something did NOT happen (a bad message got no
reply), it sends a good request on the same socket afterwards; a kernel
handles one connection's messages in order, so once the good reply is in,
anything the bad one caused would already have arrived.
"""

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from queue import Empty

import pytest
import zmq
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.session import Session
from jupyter_client.connect import write_connection_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kernelspec_env import KERNEL_NAME, KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

STARTUP_S = 30
REPLY_S = 10
# An interrupted statement must end this soon after the interrupt is sent.
INTERRUPT_S = 5

# The cell language used by the tests, in one place.
CODE = {
    "long": "sleep 60s",
    "print": 'print "{}"',
    "fail": "print no_such_variable",
    # fails after a moment, so requests sent right behind it are still queued
    "slow_fail": "sleep 1s\nprint no_such_variable",
    "input": 'name = input("Your name: ")',
    "print_input": "print name",
    "assign": "x = 1",
}


def kernel_exe():
    exe = os.environ.get("SPOTLAB_KERNEL_EXE")
    if not exe:
        pytest.fail("SPOTLAB_KERNEL_EXE is not set (run: test_kernel_protocol.py PATH-TO-KERNEL)")
    return exe


@pytest.fixture(scope="session")
def kspec():
    """The kernelspec under test, and a private SPOTLAB_HOME: the kernels keep
    their history there, and a gateway the user runs is not theirs."""
    env = KernelspecEnv(kernel_exe())
    with PrivateHome():
        yield env
    env.close()


class Kernel:
    """A kernel started through its kernelspec, with one client whose iopub
    and shell messages are kept by parent msg_id."""

    def __init__(self, **manager_args):
        self.km = KernelManager(kernel_name=KERNEL_NAME, **manager_args)
        self.km.start_kernel()
        self.proc = self.km.provisioner.process
        self.connect_client()

    def connect_client(self):
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=STARTUP_S)
        self.iopub = defaultdict(list)
        self.shell = defaultdict(list)

    @property
    def pid(self):
        return self.proc.pid

    def close(self):
        self.kc.stop_channels()
        if self.km.has_kernel and self.km.is_alive():
            self.km.shutdown_kernel(now=True)
        self.km.cleanup_resources()

    # ---- waiting for events -------------------------------------------------

    def _pump_iopub(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            msg = self.kc.get_iopub_msg(timeout=min(remaining, 1.0))
        except Empty:
            return True
        self.iopub[msg["parent_header"].get("msg_id")].append(msg)
        return True

    def iopub_until(self, msg_id, pred, timeout=REPLY_S, what="message"):
        """iopub messages of msg_id, read until one satisfies pred."""
        deadline = time.monotonic() + timeout
        while not any(pred(m) for m in self.iopub[msg_id]):
            if not self._pump_iopub(deadline):
                got = [m["msg_type"] for m in self.iopub[msg_id]]
                raise AssertionError(f"no {what} on iopub for {msg_id} within {timeout}s; got {got}")
        return self.iopub[msg_id]

    def until_idle(self, msg_id, timeout=REPLY_S):
        return self.iopub_until(msg_id, is_status("idle"), timeout, "idle status")

    def shell_reply(self, msg_id, timeout=REPLY_S):
        deadline = time.monotonic() + timeout
        while not self.shell[msg_id]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no shell reply to {msg_id} within {timeout}s")
            try:
                msg = self.kc.get_shell_msg(timeout=min(remaining, 1.0))
            except Empty:
                continue
            self.shell[msg["parent_header"].get("msg_id")].append(msg)
        return self.shell[msg_id][0]

    def control_reply(self, msg_id, timeout=REPLY_S):
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no control reply to {msg_id} within {timeout}s")
            try:
                msg = self.kc.get_control_msg(timeout=min(remaining, 1.0))
            except Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def send_control(self, msg_type, content=None):
        msg = self.kc.session.msg(msg_type, content or {})
        self.kc.control_channel.send(msg)
        return msg["header"]["msg_id"]

    def send_shell(self, msg_type, content=None):
        msg = self.kc.session.msg(msg_type, content or {})
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def run(self, code, timeout=REPLY_S, **kw):
        """Executes code; returns (reply, iopub messages up to idle)."""
        msg_id = self.kc.execute(code, **kw)
        reply = self.shell_reply(msg_id, timeout)
        return reply, self.until_idle(msg_id, timeout)

    def wait_exit(self, timeout=REPLY_S):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kernel pid {self.pid} still running {timeout}s after shutdown")

    # ---- a raw shell connection, for messages jupyter_client will not send ---

    def raw_shell(self):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(f"{self.km.transport}://{self.km.ip}:{self.km.shell_port}")
        return RawShell(sock, self.km.session.key)


def is_status(state):
    return lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == state


def stdout_text(msgs):
    return "".join(
        m["content"]["text"]
        for m in msgs
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )


def all_stream_text(kernel):
    return "".join(
        m["content"].get("text", "")
        for msgs in kernel.iopub.values()
        for m in msgs
        if m["msg_type"] == "stream"
    )


class RawShell:
    """A DEALER on the shell port that builds and signs frames itself."""

    def __init__(self, sock, key):
        self.sock = sock
        self.key = key
        self.session = uuid.uuid4().hex
        self.replies = defaultdict(list)

    def close(self):
        self.sock.close()

    def header(self, msg_type):
        return {
            "msg_id": uuid.uuid4().hex,
            "username": "test",
            "session": self.session,
            "date": datetime.now(timezone.utc).isoformat(),
            "msg_type": msg_type,
            "version": "5.3",
        }

    def sign(self, parts, key=None):
        h = hmac.new(self.key if key is None else key, digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.hexdigest().encode()

    def frames(self, msg_type, content=None, raw_content=None, signature=None, extra=()):
        """(msg_id, frames): a signed message unless signature is given."""
        header = self.header(msg_type)
        body = raw_content if raw_content is not None else json.dumps(content or {}).encode()
        parts = [json.dumps(header).encode(), b"{}", b"{}", body]
        sig = self.sign(parts) if signature is None else signature
        return header["msg_id"], [b"<IDS|MSG>", sig] + parts + list(extra)

    def send(self, frames):
        self.sock.send_multipart(frames, copy=False)

    def execute_frames(self, code, allow_stdin=False, **kw):
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": allow_stdin,
            "stop_on_error": True,
        }
        return self.frames("execute_request", content, **kw)

    def _recv(self, deadline):
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return False
        if self.sock.poll(min(remaining_ms, 1000)):
            frames = self.sock.recv_multipart()
            i = frames.index(b"<IDS|MSG>")
            header, parent, _meta, content = (json.loads(f) for f in frames[i + 2 : i + 6])
            msg = {"header": header, "parent_header": parent, "content": content}
            self.replies[parent.get("msg_id")].append(msg)
        return True

    def reply(self, msg_id, timeout=REPLY_S):
        deadline = time.monotonic() + timeout
        while not self.replies[msg_id]:
            if not self._recv(deadline):
                raise AssertionError(f"no reply to raw request {msg_id} within {timeout}s")
        return self.replies[msg_id][0]

    def answering(self, attempts=3, timeout=REPLY_S):
        """msg_id of a kernel_info_request that got its reply. A fresh request
        per attempt: a kernel may drop the connection that sent an oversized
        message, and ZeroMQ reconnects for the next one."""
        for _ in range(attempts):
            msg_id, frames = self.frames("kernel_info_request")
            self.send(frames)
            try:
                self.reply(msg_id, timeout)
                return msg_id
            except AssertionError:
                continue
        raise AssertionError(f"kernel_info_request unanswered after {attempts} attempts")


@pytest.fixture
def kernel(kspec):
    k = Kernel()
    yield k
    k.close()


def test_ipc_transport(kspec, tmp_path):
    """All five channels over ipc:// sockets (paths ip-port)."""
    k = Kernel(transport="ipc", ip=str(tmp_path / "kernel"))
    try:
        assert k.km.transport == "ipc"
        reply, msgs = k.run(CODE["print"].format("over-ipc"))
        assert reply["content"]["status"] == "ok", reply["content"]
        assert "over-ipc" in stdout_text(msgs)
        assert any(p.name.startswith("kernel-") for p in tmp_path.iterdir())
    finally:
        k.close()


def test_heartbeat_answers_while_a_cell_runs(kernel):
    """The heartbeat thread echoes even while the shell is busy with a cell."""
    import zmq
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(kernel.kc._make_url("hb"))
    try:
        msg_id = kernel.kc.execute("sleep 3s")
        kernel.iopub_until(msg_id, is_status("busy"), what="busy status")
        for i in range(3):
            payload = f"ping-{i}".encode()
            sock.send(payload)
            assert sock.poll(2000), "no heartbeat echo while the kernel is busy"
            assert sock.recv() == payload
        kernel.km.interrupt_kernel()
        kernel.shell_reply(msg_id)
    finally:
        sock.close()


def assert_alive_and_answering(kernel, marker):
    assert kernel.proc.poll() is None, f"kernel exited with {kernel.proc.returncode}"
    reply, msgs = kernel.run(CODE["print"].format(marker))
    assert reply["content"]["status"] == "ok", reply["content"]
    assert marker in stdout_text(msgs)


# ---- (a) signatures and replays ---------------------------------------------


@pytest.mark.parametrize("how", ["zeros", "empty", "other-key", "uppercase"])
def test_bad_signature_is_ignored(kernel, how):
    raw = kernel.raw_shell()
    try:
        marker = f"bad-signature-ran-{how}"
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker))
        if how == "zeros":
            frames[1] = b"0" * 64
        elif how == "empty":
            frames[1] = b""
        elif how == "other-key":
            frames[1] = raw.sign(frames[2:6], key=b"not-the-key")
        else:  # the right digest in the wrong case: the protocol says lowercase hex
            frames[1] = frames[1].upper()
        raw.send(frames)
        good = raw.answering(attempts=1)
        kernel.until_idle(good)
        assert raw.replies[msg_id] == [], "a wrongly signed request got a reply"
        assert kernel.iopub[msg_id] == [], "a wrongly signed request caused iopub output"
        assert marker not in all_stream_text(kernel)
        assert_alive_and_answering(kernel, f"after-{how}")
    finally:
        raw.close()


def test_replayed_request_is_ignored(kernel):
    raw = kernel.raw_shell()
    try:
        msg_id, frames = raw.execute_frames(CODE["print"].format("replayed-once"))
        raw.send(frames)
        assert raw.reply(msg_id)["content"]["status"] == "ok"
        kernel.until_idle(msg_id)
        raw.send(frames)  # byte for byte the same message again
        good = raw.answering(attempts=1)
        kernel.until_idle(good)
        assert len(raw.replies[msg_id]) == 1, "a replayed request was answered again"
        busy = [m for m in kernel.iopub[msg_id] if is_status("busy")(m)]
        assert len(busy) == 1, "a replayed request was run again"
        assert all_stream_text(kernel).count("replayed-once") == 1
        assert_alive_and_answering(kernel, "after-replay")
    finally:
        raw.close()


# ---- (b) interrupts ---------------------------------------------------------


def start_long(kernel):
    msg_id = kernel.kc.execute(CODE["long"])
    kernel.iopub_until(msg_id, lambda m: m["msg_type"] == "execute_input", what="execute_input")
    return msg_id


def assert_interrupted(kernel, msg_id, t0):
    reply = kernel.shell_reply(msg_id, timeout=INTERRUPT_S)
    elapsed = time.monotonic() - t0
    assert reply["content"]["status"] == "error", reply["content"]
    assert elapsed < INTERRUPT_S
    msgs = kernel.until_idle(msg_id)
    assert any(m["msg_type"] == "error" for m in msgs), "no error output for the interrupted cell"
    assert_alive_and_answering(kernel, "after-interrupt")


def test_interrupt_request_on_control(kernel):
    msg_id = start_long(kernel)
    t0 = time.monotonic()
    ctl = kernel.send_control("interrupt_request")
    reply = kernel.control_reply(ctl, timeout=INTERRUPT_S)
    assert reply["msg_type"] == "interrupt_reply"
    assert reply["content"]["status"] == "ok"
    assert_interrupted(kernel, msg_id, t0)


def test_interrupt_via_kernel_manager(kernel):
    assert kernel.km.kernel_spec.interrupt_mode == "message"
    msg_id = start_long(kernel)
    t0 = time.monotonic()
    kernel.km.interrupt_kernel()
    assert_interrupted(kernel, msg_id, t0)


def test_sigint(kernel):
    msg_id = start_long(kernel)
    t0 = time.monotonic()
    os.kill(kernel.pid, signal.SIGINT)
    assert_interrupted(kernel, msg_id, t0)


def test_interrupt_when_idle_is_harmless(kernel):
    ctl = kernel.send_control("interrupt_request")
    assert kernel.control_reply(ctl)["content"]["status"] == "ok"
    assert_alive_and_answering(kernel, "idle-interrupt")


# ---- (c) shutdown and restart -----------------------------------------------


def test_shutdown_restart_on_control(kernel):
    ctl = kernel.send_control("shutdown_request", {"restart": True})
    reply = kernel.control_reply(ctl)
    assert reply["msg_type"] == "shutdown_reply"
    assert reply["content"]["status"] == "ok"
    assert reply["content"]["restart"] is True
    assert kernel.wait_exit() == 0


def test_shutdown_on_shell(kernel):
    msg_id = kernel.send_shell("shutdown_request", {"restart": False})
    reply = kernel.shell_reply(msg_id)
    assert reply["msg_type"] == "shutdown_reply"
    assert reply["content"]["status"] == "ok"
    assert reply["content"]["restart"] is False
    assert kernel.wait_exit() == 0


def test_kernel_manager_restart(kernel):
    old = kernel.proc
    kernel.kc.stop_channels()
    kernel.km.restart_kernel(now=False)
    # restart_kernel asked the old process to stop and waited for it; 0 means
    # it exited on its own rather than being killed.
    assert old.returncode == 0, f"old kernel exit status {old.returncode}"
    kernel.proc = kernel.km.provisioner.process
    assert kernel.proc.pid != old.pid
    kernel.connect_client()
    assert_alive_and_answering(kernel, "after-restart")


# ---- (d) stdin --------------------------------------------------------------


def test_input_request(kernel):
    msg_id = kernel.kc.execute(CODE["input"], allow_stdin=True)
    req = kernel.kc.get_stdin_msg(timeout=REPLY_S)
    assert req["msg_type"] == "input_request"
    assert req["parent_header"]["msg_id"] == msg_id
    assert req["content"]["prompt"] == "Your name: "
    assert req["content"]["password"] is False
    kernel.kc.input("Ada Lovelace")
    assert kernel.shell_reply(msg_id)["content"]["status"] == "ok"
    kernel.until_idle(msg_id)
    reply, msgs = kernel.run(CODE["print_input"])
    assert reply["content"]["status"] == "ok"
    assert "Ada Lovelace" in stdout_text(msgs)


def test_two_clients_share_one_kernel(kernel):
    """A second front end on the same kernel (as `jupyter console --existing`
    next to a notebook): each gets its own replies and input requests, both
    see every iopub message."""
    # A client of its own, with its own session (and so its own routing
    # identity), as a second process reading the connection file has.
    other = BlockingKernelClient()
    other.load_connection_info(kernel.km.get_connection_info())
    other.session = Session(key=kernel.km.session.key)
    other.start_channels()
    try:
        other.wait_for_ready(timeout=STARTUP_S)
        mine = kernel.kc.execute(CODE["print"].format("from-first"))
        theirs = other.execute(CODE["print"].format("from-second"))
        assert kernel.shell_reply(mine)["content"]["status"] == "ok"
        reply = other.get_shell_msg(timeout=REPLY_S)
        while reply["parent_header"].get("msg_id") != theirs:
            reply = other.get_shell_msg(timeout=REPLY_S)
        assert reply["content"]["status"] == "ok"
        # The first client sees the second's cell on iopub, output included ...
        assert "from-second" in stdout_text(kernel.until_idle(theirs))
        # ... and never its reply on shell.
        kernel.until_idle(mine)
        with pytest.raises(Empty):
            kernel.kc.get_shell_msg(timeout=0.3)
        # An input request goes to the stdin of the client whose cell asked.
        asked = other.execute(CODE["input"], allow_stdin=True)
        req = other.get_stdin_msg(timeout=REPLY_S)
        assert req["parent_header"]["msg_id"] == asked
        with pytest.raises(Empty):
            kernel.kc.get_stdin_msg(timeout=0.3)
        other.input("Grace Hopper")
        reply = other.get_shell_msg(timeout=REPLY_S)
        while reply["parent_header"].get("msg_id") != asked:
            reply = other.get_shell_msg(timeout=REPLY_S)
        assert reply["content"]["status"] == "ok"
        kernel.until_idle(asked)
    finally:
        other.stop_channels()


def test_input_without_stdin_is_an_error(kernel):
    reply, msgs = kernel.run(CODE["input"], allow_stdin=False)
    assert reply["content"]["status"] == "error"
    assert any(m["msg_type"] == "error" for m in msgs)
    assert_alive_and_answering(kernel, "after-no-stdin")


# ---- (e) stop_on_error ------------------------------------------------------


def test_stop_on_error_aborts_queued(kernel):
    first = kernel.kc.execute(CODE["slow_fail"])
    second = kernel.kc.execute(CODE["print"].format("second-ran"))
    third = kernel.kc.execute(CODE["print"].format("third-ran"))
    assert kernel.shell_reply(first)["content"]["status"] == "error"
    assert kernel.shell_reply(second)["content"]["status"] == "aborted"
    assert kernel.shell_reply(third)["content"]["status"] == "aborted"
    kernel.until_idle(third)
    text = all_stream_text(kernel)
    assert "second-ran" not in text and "third-ran" not in text
    assert_alive_and_answering(kernel, "after-abort")


def test_no_stop_on_error_runs_queued(kernel):
    first = kernel.kc.execute(CODE["slow_fail"], stop_on_error=False)
    second = kernel.kc.execute(CODE["print"].format("second-ran"))
    assert kernel.shell_reply(first)["content"]["status"] == "error"
    assert kernel.shell_reply(second)["content"]["status"] == "ok"
    assert "second-ran" in stdout_text(kernel.until_idle(second))


# ---- (f) limits -------------------------------------------------------------

# The kernel's limits on one incoming message (docs/kernel.md), and the frame
# size past which libzmq closes the connection without reading the frame.
LIMIT_FRAMES = 1024
LIMIT_FRAME_BYTES = 16 << 20
LIMIT_TOTAL_BYTES = 32 << 20
WIRE_MAX_FRAME_BYTES = 256 << 20


def refused(kernel, raw, msg_id, frames, marker, answered=True):
    """Sends frames; the kernel must not run them, must answer them with an
    error reply (when answered: an authentic request over a limit is never
    met with silence), and must keep answering."""
    raw.send(frames)
    if answered:
        reply = raw.reply(msg_id)
        assert reply["header"]["msg_type"] == "execute_reply", reply
        assert reply["content"]["status"] == "error", reply
        assert reply["content"]["ename"] == "BadMessage", reply
    good = raw.answering()
    kernel.until_idle(good)
    for reply in raw.replies[msg_id]:
        assert reply["content"]["status"] != "ok", f"an over-limit request was run: {reply}"
    assert marker not in all_stream_text(kernel)
    assert_alive_and_answering(kernel, "after-" + marker)


@pytest.mark.parametrize("msg_type", ["execute_request", "kernel_info_request"])
@pytest.mark.parametrize("buffers", [65, 200, 250])
def test_signed_request_with_buffers_is_answered(kernel, msg_type, buffers):
    """Binary buffers (as widgets send) within the frame limit are no reason
    to refuse a request, let alone to drop it."""
    raw = kernel.raw_shell()
    try:
        marker = f"buffers-ran-{buffers}"
        extra = [b"buffer-%d" % i for i in range(buffers)]
        if msg_type == "execute_request":
            msg_id, frames = raw.execute_frames(CODE["print"].format(marker), extra=extra)
        else:
            msg_id, frames = raw.frames(msg_type, extra=extra)
        raw.send(frames)
        reply = raw.reply(msg_id)
        assert reply["header"]["msg_type"] == msg_type.replace("_request", "_reply")
        assert reply["content"]["status"] == "ok", reply["content"]
        msgs = kernel.until_idle(msg_id)
        if msg_type == "execute_request":
            assert marker in stdout_text(msgs)
    finally:
        raw.close()


def test_too_many_frames(kernel):
    raw = kernel.raw_shell()
    try:
        marker = "frames-ran"
        msg_id, frames = raw.execute_frames(
            CODE["print"].format(marker), extra=[b"x"] * 100000
        )
        refused(kernel, raw, msg_id, frames, marker)
    finally:
        raw.close()


def test_one_frame_past_the_frame_limit(kernel):
    """The routing id, delimiter, signature and four parts leave
    LIMIT_FRAMES - 7 buffers; one more is refused with an error reply."""
    raw = kernel.raw_shell()
    try:
        fits, frames = raw.frames("kernel_info_request", extra=[b"b"] * (LIMIT_FRAMES - 7))
        raw.send(frames)
        assert raw.reply(fits)["content"]["status"] == "ok"
        marker = "frame-limit-ran"
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker),
                                            extra=[b"b"] * (LIMIT_FRAMES - 6))
        refused(kernel, raw, msg_id, frames, marker)
    finally:
        raw.close()


def test_large_buffer(kernel):
    """A buffer over the frame limit: the request is refused with an error."""
    raw = kernel.raw_shell()
    try:
        marker = "large-buffer-ran"
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker),
                                            extra=[b"x" * (LIMIT_FRAME_BYTES + 1)])
        refused(kernel, raw, msg_id, frames, marker)
    finally:
        raw.close()


def test_large_content(kernel):
    """A signed part over the frame limit: refused with an error, unparsed."""
    raw = kernel.raw_shell()
    try:
        marker = "large-content-ran"
        code = json.dumps(CODE["print"].format(marker)).encode()
        body = b"".join([b'{"code": ', code, b', "silent": false, "store_history": true, '
                         b'"user_expressions": {}, "allow_stdin": false, '
                         b'"stop_on_error": true, "padding": "', b"x" * LIMIT_FRAME_BYTES, b'"}'])
        msg_id, frames = raw.frames("execute_request", raw_content=body)
        refused(kernel, raw, msg_id, frames, marker)
    finally:
        raw.close()


def test_message_over_the_total_limit(kernel):
    """Buffers each within the frame limit, over the message limit together."""
    raw = kernel.raw_shell()
    try:
        marker = "total-ran"
        n = LIMIT_TOTAL_BYTES // LIMIT_FRAME_BYTES + 1
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker),
                                            extra=[b"x" * LIMIT_FRAME_BYTES] * n)
        refused(kernel, raw, msg_id, frames, marker)
    finally:
        raw.close()


def test_giant_frame(kernel):
    """A frame past what libzmq reads at all closes that connection unread;
    the kernel goes on answering (a new connection)."""
    raw = kernel.raw_shell()
    try:
        marker = "giant-ran"
        code = json.dumps(CODE["print"].format(marker)).encode()
        body = b"".join([b'{"code": ', code, b', "silent": false, "store_history": true, '
                         b'"user_expressions": {}, "allow_stdin": false, '
                         b'"stop_on_error": true, "padding": "', b"x" * WIRE_MAX_FRAME_BYTES, b'"}'])
        msg_id, frames = raw.frames("execute_request", raw_content=body)
        del body
        refused(kernel, raw, msg_id, frames, marker, answered=False)
    finally:
        raw.close()


def test_deeply_nested_json(kernel):
    raw = kernel.raw_shell()
    try:
        marker = "deep-ran"
        code = json.dumps(CODE["print"].format(marker))
        body = ('{"code": %s, "silent": false, "store_history": true, "user_expressions": {},'
                ' "allow_stdin": false, "stop_on_error": true, "deep": %s%s}'
                % (code, "[" * 10000, "]" * 10000)).encode()
        msg_id, frames = raw.frames("execute_request", raw_content=body)
        refused(kernel, raw, msg_id, frames, marker)
    finally:
        raw.close()


def test_unsupported_signature_scheme_refused(kspec):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel-md5.json")
        write_connection_file(path, key=uuid.uuid4().hex.encode(),
                              signature_scheme="hmac-md5")
        try:
            proc = subprocess.run([kernel_exe(), "-f", path], capture_output=True, text=True,
                                  timeout=REPLY_S)
        except subprocess.TimeoutExpired:
            raise AssertionError("kernel kept running with signature_scheme hmac-md5")
    assert proc.returncode != 0
    assert "signature_scheme" in proc.stderr, proc.stderr


# ---- (g) busy / idle --------------------------------------------------------


SHELL_REQUESTS = [
    ("kernel_info_request", {}),
    ("execute_request", {"code": CODE["assign"], "silent": False, "store_history": True,
                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}),
    ("execute_request", {"code": CODE["fail"], "silent": False, "store_history": True,
                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}),
    ("execute_request", {"code": CODE["assign"], "silent": True, "store_history": False,
                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}),
    ("complete_request", {"code": "pri", "cursor_pos": 3}),
    ("inspect_request", {"code": "print", "cursor_pos": 5, "detail_level": 0}),
    ("is_complete_request", {"code": CODE["assign"]}),
    ("history_request", {"output": False, "raw": True, "hist_access_type": "tail", "n": 5}),
    ("comm_info_request", {}),
]


def assert_bracketed(msgs, what):
    states = [m["content"]["execution_state"] for m in msgs if m["msg_type"] == "status"]
    assert states == ["busy", "idle"], f"{what}: status sequence {states}"
    assert is_status("busy")(msgs[0]), f"{what}: first iopub message is {msgs[0]['msg_type']}"
    assert is_status("idle")(msgs[-1]), f"{what}: last iopub message is {msgs[-1]['msg_type']}"


@pytest.mark.parametrize("msg_type,content", SHELL_REQUESTS,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(SHELL_REQUESTS)])
def test_busy_idle_brackets_shell_request(kernel, msg_type, content):
    msg_id = kernel.send_shell(msg_type, content)
    reply = kernel.shell_reply(msg_id)
    assert reply["msg_type"] == msg_type.replace("_request", "_reply")
    assert_bracketed(kernel.until_idle(msg_id), msg_type)


@pytest.mark.parametrize("msg_type", ["kernel_info_request", "interrupt_request"])
def test_busy_idle_brackets_control_request(kernel, msg_type):
    msg_id = kernel.send_control(msg_type)
    reply = kernel.control_reply(msg_id)
    assert reply["msg_type"] == msg_type.replace("_request", "_reply")
    assert_bracketed(kernel.until_idle(msg_id), msg_type)


class LateFrontEnd:
    """A front end on a kernel of its own whose iopub SUB connects after its
    first request was sent, as happens when libzmq's reconnection timers
    bring a client's shell connection up before its iopub one."""

    def __init__(self):
        self.km = KernelManager(kernel_name=KERNEL_NAME)
        self.km.start_kernel()
        self.shell = RawShell(zmq.Context.instance().socket(zmq.DEALER), self.km.session.key)
        self.shell.sock.linger = 0
        self.shell.sock.connect(self.endpoint(self.km.shell_port))
        self.sub = None

    def endpoint(self, port):
        return f"{self.km.transport}://{self.km.ip}:{port}"

    def subscribe(self):
        self.sub = zmq.Context.instance().socket(zmq.SUB)
        self.sub.linger = 0
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(self.endpoint(self.km.iopub_port))

    def iopub_until_idle(self, msg_id, timeout=REPLY_S):
        deadline, got = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            if not self.sub.poll(200):
                continue
            frames = self.sub.recv_multipart()
            i = frames.index(b"<IDS|MSG>")
            header, parent, _meta, content = (json.loads(f) for f in frames[i + 2: i + 6])
            if parent.get("msg_id") == msg_id:
                got.append({"msg_type": header["msg_type"], "content": content})
                if is_status("idle")(got[-1]):
                    return got
        raise AssertionError(f"no idle status on iopub for {msg_id} within {timeout}s; got {got}")

    def close(self):
        self.shell.close()
        if self.sub is not None:
            self.sub.close()
        self.km.shutdown_kernel(now=True)
        self.km.cleanup_resources()


def test_first_request_waits_for_its_iopub_subscription(kspec):
    """Shell requests wait (up to 2 s) while iopub has no subscriber: the
    request sent before the front end's SUB connected still has its busy
    status, output and idle status published to it. Without the wait they
    go out to nobody, and a front end that waits for the idle status (jupyter
    console) hangs. The half-second pause is the scenario (a SUB that
    connects late), not a wait for the kernel."""
    fe = LateFrontEnd()
    try:
        msg_id, frames = fe.shell.execute_frames(CODE["print"].format("late-sub"))
        fe.shell.send(frames)
        time.sleep(0.5)
        fe.subscribe()
        msgs = fe.iopub_until_idle(msg_id)
        assert_bracketed(msgs, "the first execute_request")
        assert stdout_text(msgs) == "late-sub\n", f"output: {msgs}"
        assert fe.shell.reply(msg_id)["content"]["status"] == "ok"
    finally:
        fe.close()


def test_client_without_iopub_waits_once(kspec):
    """A client that never subscribes to iopub is answered after the wait
    (at most 2 s), and its next requests at once."""
    fe = LateFrontEnd()
    try:
        fe.shell.answering()  # the kernel is up (its first answer may come after the wait)
        t0 = time.monotonic()
        for _ in range(3):
            fe.shell.answering()
        took = time.monotonic() - t0
        assert took < 1.5, f"three kernel_info requests after the first took {took:.2f}s"
    finally:
        fe.close()



def test_input_request_reaches_a_stdin_that_connects_late(kernel):
    """An input_request sent while the front end's stdin connection is not
    up yet is held and sent once it connects (the kernel's stdin ROUTER
    refuses a message for an unknown peer and tries again); before, it went
    to nobody and the cell waited until it was interrupted. The half-second
    pause is the scenario (a stdin DEALER that connects late)."""
    identity = uuid.uuid4().hex.encode()
    ctx = zmq.Context.instance()
    shell = ctx.socket(zmq.DEALER)
    shell.linger = 0
    shell.identity = identity
    shell.connect(f"{kernel.km.transport}://{kernel.km.ip}:{kernel.km.shell_port}")
    raw = RawShell(shell, kernel.km.session.key)
    stdin = None
    try:
        raw.answering()  # shell is connected and answered
        msg_id, frames = raw.execute_frames(CODE["input"], allow_stdin=True)
        raw.send(frames)
        time.sleep(0.5)
        stdin = ctx.socket(zmq.DEALER)
        stdin.linger = 0
        stdin.identity = identity
        stdin.connect(f"{kernel.km.transport}://{kernel.km.ip}:{kernel.km.stdin_port}")
        assert stdin.poll(REPLY_S * 1000), "no input_request on the stdin that connected late"
        got = stdin.recv_multipart()
        i = got.index(b"<IDS|MSG>")
        req_header, req_parent = json.loads(got[i + 2]), json.loads(got[i + 3])
        assert req_header["msg_type"] == "input_request"
        assert req_parent["msg_id"] == msg_id
        answer = RawShell(stdin, kernel.km.session.key)
        answer.session = raw.session
        _, reply_frames = answer.frames("input_reply", {"value": "late stdin"})
        answer.send(reply_frames)
        assert raw.reply(msg_id)["content"]["status"] == "ok"
        check = kernel.kc.execute(CODE["print_input"])
        assert kernel.shell_reply(check)["content"]["status"] == "ok"
        assert "late stdin" in stdout_text(kernel.until_idle(check))
    finally:
        raw.close()
        if stdin is not None:
            stdin.close()


def test_held_input_request_is_dropped_when_the_cell_is_interrupted(kernel):
    """A held input_request whose front end never connects stdin waits no
    longer than its cell: an interrupt ends the cell, and the kernel goes on
    answering."""
    raw = kernel.raw_shell()
    try:
        msg_id, frames = raw.execute_frames(CODE["input"], allow_stdin=True)
        raw.send(frames)
        time.sleep(0.3)
        kernel.km.interrupt_kernel()
        reply = raw.reply(msg_id, INTERRUPT_S)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "Interrupted"
        assert_alive_and_answering(kernel, "after-held-input")
    finally:
        raw.close()

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: test_kernel_protocol.py PATH-TO-spotlab-kernel [pytest options]")
    os.environ["SPOTLAB_KERNEL_EXE"] = sys.argv[1]
    sys.exit(pytest.main([os.path.abspath(__file__), "-p", "no:cacheprovider", "-q",
                          "-rfE", *sys.argv[2:]]))
