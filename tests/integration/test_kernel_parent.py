"""A kernel whose front end dies without shutting it down ends too.

jupyter_client starts a kernel it owns with JPY_PARENT_PID in its
environment; ipykernel then exits once its parent is gone, and so must
spotlab-kernel, or every front end killed (a console in a closed terminal,
a crashed notebook server) leaves a kernel running for ever.

Cases, each with a front end that is a separate Python process starting the
kernel through its kernelspec with jupyter_client's KernelManager:
  - the front end is killed (SIGKILL): the kernel exits within a few seconds;
  - the front end lives on: its kernel still answers after the same time;
  - a kernel started independent (no JPY_PARENT_PID) outlives its killed
    front end, as ipykernel does, and is then shut down by the test.

usage: test_kernel_parent.py PATH-TO-spotlab-kernel"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, exit_status  # noqa: E402
from kernelspec_env import KERNEL_NAME, KernelspecEnv  # noqa: E402

# The front end: starts the kernel, proves it answers, prints its pid, then
# waits for stdin to close (or to be killed).
FRONT_END = r"""
import sys
from jupyter_client import KernelManager
km = KernelManager(kernel_name=sys.argv[1])
km.start_kernel(independent=sys.argv[2] == "independent")
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=30)
print(km.provisioner.process.pid, flush=True)
sys.stdin.read()
kc.stop_channels()
km.shutdown_kernel(now=False)
"""

GONE_WITHIN_S = 10


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of ours would count as alive; the kernel is not our child
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)  # another process's exit has no event to wait on here
    return not alive(pid)


def front_end(mode):
    p = subprocess.Popen([sys.executable, "-c", FRONT_END, KERNEL_NAME, mode],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if not line.isdigit():
        p.kill()
        p.wait()
        raise RuntimeError("the front end did not start its kernel (%r)" % line)
    return p, int(line)


def main():
    env = KernelspecEnv(sys.argv[1])
    kernels = []
    try:
        # killed front end: its kernel follows
        p, pid = front_end("owned")
        kernels.append(pid)
        check(alive(pid), "the owned kernel runs (pid %d)" % pid)
        p.kill()
        p.wait()
        t0 = time.monotonic()
        check(wait_gone(pid, GONE_WITHIN_S), "the kernel of a killed front end exits within %d s "
              "(%.1f s)" % (GONE_WITHIN_S, time.monotonic() - t0))

        # a front end that lives on keeps its kernel
        p, pid = front_end("owned")
        kernels.append(pid)
        time.sleep(3)  # longer than the kernel's check period: it must not end by itself
        check(alive(pid), "the kernel of a live front end still runs after 3 s")
        p.stdin.close()  # the front end shuts it down as usual
        check(p.wait(timeout=60) == 0 and wait_gone(pid, GONE_WITHIN_S),
              "a live front end shuts its kernel down as usual")

        # an independent kernel is not watched
        p, pid = front_end("independent")
        kernels.append(pid)
        p.kill()
        p.wait()
        time.sleep(3)
        check(alive(pid), "an independent kernel outlives its killed front end")
    finally:
        for pid in kernels:
            if alive(pid):
                os.kill(pid, signal.SIGTERM)
                if not wait_gone(pid, GONE_WITHIN_S):
                    os.kill(pid, signal.SIGKILL)
        env.close()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
