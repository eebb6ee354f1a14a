#!/usr/bin/python3
"""spotlab-kernel with many front ends connected at once.

Usage: test_kernel_frontends.py PATH-TO-spotlab-kernel [pytest options]

FRONT_ENDS clients, each a real ZeroMQ client (a DEALER on shell and a SUB on
iopub, signing with jupyter_client's Session), stay connected together and
each does a kernel_info round trip; then a new front end (a whole
BlockingKernelClient) still gets its kernel_info_reply, and the first one is
still served. The kernel is started with a soft descriptor limit below what
those connections need, so it passes only if the kernel raises its own limit
and serves any number of connections per channel.
"""

import os
import resource
import sys
import time

import pytest
import zmq
from jupyter_client import KernelManager
from jupyter_client.session import Session

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kernelspec_env import KERNEL_NAME, KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

FRONT_ENDS = 600
STARTUP_S = 30
REPLY_S = 30
# The soft limit the kernel starts with: fewer descriptors than the
# FRONT_ENDS * 2 connections it must hold.
KERNEL_SOFT_NOFILE = 1024
# This process holds two sockets per front end, each a connection and a
# mailbox descriptor, plus what Python and the new front end use.
OWN_NOFILE = FRONT_ENDS * 2 * 2 + 512


def kernel_exe():
    exe = os.environ.get("SPOTLAB_KERNEL_EXE")
    if not exe:
        pytest.fail("SPOTLAB_KERNEL_EXE is not set (run: test_kernel_frontends.py PATH-TO-KERNEL)")
    return exe


def soft_nofile(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return line.split()[3]
    raise AssertionError(f"no 'Max open files' in /proc/{pid}/limits")


@pytest.fixture
def kernel():
    """A kernel started with KERNEL_SOFT_NOFILE as its soft limit; this
    process's own soft limit raised to the hard one afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < OWN_NOFILE:
        pytest.fail(f"the hard descriptor limit ({hard}) is below the {OWN_NOFILE} "
                    f"this test needs for {FRONT_ENDS} front ends")
    env = KernelspecEnv(kernel_exe())
    try:
        with PrivateHome():
            km = KernelManager(kernel_name=KERNEL_NAME)
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(KERNEL_SOFT_NOFILE, soft), hard))
            try:
                km.start_kernel()
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            try:
                yield km
            finally:
                if km.has_kernel:
                    km.shutdown_kernel(now=True)
                km.cleanup_resources()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        env.close()


class FrontEnd:
    """A DEALER on shell and a SUB on iopub, with its own session."""

    def __init__(self, ctx, km):
        self.session = Session(key=km.session.key)
        self.shell = ctx.socket(zmq.DEALER)
        self.iopub = ctx.socket(zmq.SUB)
        for s in (self.shell, self.iopub):
            s.linger = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.shell.connect(f"{km.transport}://{km.ip}:{km.shell_port}")
        self.iopub.connect(f"{km.transport}://{km.ip}:{km.iopub_port}")

    def send_kernel_info(self):
        return self.session.send(self.shell, "kernel_info_request", {})["header"]["msg_id"]

    def reply(self, msg_id, deadline):
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not self.shell.poll(left_ms):
                raise AssertionError(f"no reply to {msg_id} within {REPLY_S}s")
            _, msg = self.session.recv(self.shell, mode=0)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def round_trip(self):
        msg_id = self.send_kernel_info()
        reply = self.reply(msg_id, time.monotonic() + REPLY_S)
        assert reply["msg_type"] == "kernel_info_reply", reply
        assert reply["content"]["status"] == "ok", reply["content"]

    def close(self):
        self.shell.close()
        self.iopub.close()


def test_many_front_ends_then_one_more(kernel):
    ctx = zmq.Context()
    ctx.max_sockets = FRONT_ENDS * 2 + 64
    fronts = []
    newcomer = None
    try:
        for _ in range(FRONT_ENDS):
            fronts.append(FrontEnd(ctx, kernel))
        # Every front end asks at once (a request waits in its socket until
        # the connection is made), and every one is answered while all the
        # others stay connected.
        asked = [f.send_kernel_info() for f in fronts]
        deadline = time.monotonic() + REPLY_S
        for i, (f, msg_id) in enumerate(zip(fronts, asked)):
            try:
                reply = f.reply(msg_id, deadline)
            except AssertionError as e:
                raise AssertionError(f"front end {i + 1} of {FRONT_ENDS}: {e}") from None
            assert reply["msg_type"] == "kernel_info_reply", reply
            assert reply["content"]["status"] == "ok", reply["content"]
        # Every iopub connection is live: each sees the status messages of a
        # request made once it is subscribed.
        deadline = time.monotonic() + REPLY_S
        silent = set(range(FRONT_ENDS))
        while silent:
            assert time.monotonic() < deadline, \
                f"{len(silent)} front ends' iopub received nothing, e.g. number {min(silent) + 1}"
            fronts[0].round_trip()
            silent = {i for i in silent if not fronts[i].iopub.poll(0)}

        newcomer = kernel.client()
        newcomer.start_channels()
        newcomer.wait_for_ready(timeout=STARTUP_S)
        msg_id = newcomer.kernel_info()
        reply = newcomer.get_shell_msg(timeout=REPLY_S)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = newcomer.get_shell_msg(timeout=REPLY_S)
        assert reply["msg_type"] == "kernel_info_reply"
        assert reply["content"]["status"] == "ok", reply["content"]

        fronts[-1].round_trip()
        assert kernel.provisioner.process.poll() is None, "the kernel exited"
    finally:
        if newcomer is not None:
            newcomer.stop_channels()
        for f in fronts:
            f.close()
        ctx.term()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    expected = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    assert soft_nofile(kernel.provisioner.process.pid) == expected, \
        "the kernel did not raise its soft descriptor limit to the hard one"


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: test_kernel_frontends.py PATH-TO-spotlab-kernel [pytest options]")
    os.environ["SPOTLAB_KERNEL_EXE"] = sys.argv[1]
    sys.exit(pytest.main([os.path.abspath(__file__), "-p", "no:cacheprovider", "-q",
                          "-rfE", *sys.argv[2:]]))
