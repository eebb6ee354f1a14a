#!/usr/bin/python3
"""Security: forged and replayed Jupyter messages to spotlab-kernel, end to end
over the kernel's real ZeroMQ sockets (started through its kernelspec).

An attacker who can reach the kernel's ports but lacks the connection file's
key sends requests with wrong signatures, tampers with a signed request, or
sends a captured signed request again. None may run code, stop or interrupt
the kernel. Each test then sends the rightly signed message and sees it take
effect, so a refusal is a refusal and not a kernel that does nothing.

The kernel remembers the signatures of the last 4096 messages it accepted
(kernel/wire.c); the replays here fall inside that window.

usage: kernel_test.py PATH-TO-spotlab-kernel [pytest options]"""
import json
import os
import sys

import pytest
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
# the kernel under test and its raw sockets, as the protocol tests drive them
from test_kernel_protocol import (CODE, RawShell, all_stream_text,  # noqa: E402,F401
                                  assert_alive_and_answering, kernel, kspec)


def raw_control(kernel):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(f"{kernel.km.transport}://{kernel.km.ip}:{kernel.km.control_port}")
    return RawShell(sock, kernel.km.session.key)


def tamper(raw, frames, how):
    """frames (a signed execute_request) made into what an attacker could send."""
    if how == "other-key":
        frames[1] = raw.sign(frames[2:6], key=b"a-key-the-attacker-made-up")
    elif how == "content-changed":  # signed, then its code replaced
        content = json.loads(frames[5])
        content["code"] = CODE["print"].format("tampered-ran")
        frames[5] = json.dumps(content).encode()
    elif how == "header-changed":  # signed, then its msg_id changed
        header = json.loads(frames[2])
        header["msg_id"] = header["msg_id"][:-1] + ("0" if header["msg_id"][-1] != "0" else "1")
        frames[2] = json.dumps(header).encode()
    elif how == "signature-truncated":
        frames[1] = frames[1][:32]
    elif how == "no-signature":
        frames[1] = b""
    return frames


@pytest.mark.parametrize("how", ["other-key", "content-changed", "header-changed",
                                 "signature-truncated", "no-signature"])
def test_forged_execute_never_runs(kernel, how):
    raw = kernel.raw_shell()
    try:
        marker = f"forged-ran-{how}"
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker))
        raw.send(tamper(raw, frames, how))
        good = raw.answering(attempts=1)
        kernel.until_idle(good)
        text = all_stream_text(kernel)
        assert marker not in text and "tampered-ran" not in text, "a forged request ran"
        assert raw.replies[msg_id] == [] and kernel.iopub[msg_id] == [], \
            "a forged request was answered"
        # control: the same request, rightly signed, runs
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker))
        raw.send(frames)
        assert raw.reply(msg_id)["content"]["status"] == "ok"
        kernel.until_idle(msg_id)
        assert all_stream_text(kernel).count(marker) == 1
    finally:
        raw.close()


def test_forged_shutdown_and_interrupt_refused(kernel):
    ctl = raw_control(kernel)
    try:
        for msg_type, content in (("shutdown_request", {"restart": False}),
                                  ("interrupt_request", {})):
            msg_id, frames = ctl.frames(msg_type, content,
                                        signature=b"0" * 64)
            ctl.send(frames)
            good = ctl.answering(attempts=1)
            assert ctl.replies[msg_id] == [], f"a forged {msg_type} was answered"
            kernel.until_idle(good)
        # a forged interrupt during a running cell leaves the cell running
        msg_id = kernel.kc.execute("sleep 2s\nprint \"slept-through\"")
        kernel.iopub_until(msg_id, lambda m: m["msg_type"] == "execute_input", what="execute_input")
        _, frames = ctl.frames("interrupt_request", {}, signature=ctl.sign([b"{}"] * 4))
        ctl.send(frames)
        ctl.answering(attempts=1)
        reply = kernel.shell_reply(msg_id, timeout=30)
        assert reply["content"]["status"] == "ok", "a forged interrupt stopped the cell"
        kernel.until_idle(msg_id, timeout=30)
        assert_alive_and_answering(kernel, "after-forged-control")
        # control: the rightly signed interrupt stops a running cell
        msg_id = kernel.kc.execute(CODE["long"])
        kernel.iopub_until(msg_id, lambda m: m["msg_type"] == "execute_input", what="execute_input")
        _, frames = ctl.frames("interrupt_request", {})
        ctl.send(frames)
        assert kernel.shell_reply(msg_id, timeout=30)["content"]["status"] == "error"
        kernel.until_idle(msg_id)
        # control: the rightly signed shutdown stops the kernel
        msg_id, frames = ctl.frames("shutdown_request", {"restart": False})
        ctl.send(frames)
        assert ctl.reply(msg_id)["content"]["status"] == "ok"
        assert kernel.wait_exit() == 0
    finally:
        ctl.close()


@pytest.mark.parametrize("where", ["same-socket", "another-socket", "control-channel"])
def test_replayed_execute_never_runs_again(kernel, where):
    raw = kernel.raw_shell()
    other = kernel.raw_shell() if where == "another-socket" else \
        raw_control(kernel) if where == "control-channel" else raw
    try:
        marker = f"replayed-{where}"
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker))
        raw.send(frames)
        assert raw.reply(msg_id)["content"]["status"] == "ok"
        kernel.until_idle(msg_id)
        for _ in range(3):
            other.send(list(frames))  # byte for byte what was captured
        good = other.answering(attempts=1)
        kernel.until_idle(good)
        shell_good = raw.answering(attempts=1)
        kernel.until_idle(shell_good)
        assert len(raw.replies[msg_id]) == 1, "a replayed request was answered"
        assert other is raw or other.replies[msg_id] == [], "a replayed request was answered"
        assert all_stream_text(kernel).count(marker) == 1, "a replayed request ran again"
        # control: a new request with the same code (a new signature) runs again
        msg_id, frames = raw.execute_frames(CODE["print"].format(marker))
        raw.send(frames)
        raw.reply(msg_id)
        kernel.until_idle(msg_id)
        assert all_stream_text(kernel).count(marker) == 2
    finally:
        if other is not raw:
            other.close()
        raw.close()


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: kernel_test.py PATH-TO-spotlab-kernel [pytest options]")
    os.environ["SPOTLAB_KERNEL_EXE"] = sys.argv[1]
    sys.exit(pytest.main([os.path.abspath(__file__), "-p", "no:cacheprovider", "-q",
                          "-rfE", *sys.argv[2:]]))
