"""A private SPOTLAB_HOME for a test, and stopping what ran under it.

The embedded gateway and its local workers are started by the kernel as
daemons, so a test cannot wait for them as children: it finds them by the
state folder on their command lines and waits on a pidfd for each to exit.
"""
import os
import select
import signal
import tempfile
import time

from procs import live


def processes_under(home):
    """Pids of live processes whose command line mentions home."""
    return [pid for pid, argv in live() if home.encode() in b"\0".join(argv)]


def wait_exit(pids, timeout_s):
    """Waits for each pid to exit (pidfd readable), until the deadline."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # already gone
        try:
            left = max(0.0, deadline - time.monotonic())
            select.select([fd], [], [], left)
        finally:
            os.close(fd)


def stop_all(home, timeout_s=10):
    """SIGTERM to the gateway and everything else under home, then SIGKILL
    whatever is still there after timeout_s. The gateway is waited for too
    (its command line does not name home): one that is still stopping may
    launch a worker after the first look."""
    gateway = []
    try:
        with open(os.path.join(home, "gateway.pid")) as f:
            pid = int(f.read().split()[0])
        os.kill(pid, signal.SIGTERM)
        gateway.append(pid)
    except (OSError, ValueError, IndexError):
        pass
    pids = [p for p in processes_under(home) if p not in gateway]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    wait_exit(gateway + pids, timeout_s)
    for pid in processes_under(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def restore_env(saved):
    """Puts back the variables of saved ({name: value or None if unset})."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class PrivateHome:
    """with PrivateHome() as home: SPOTLAB_HOME points at a fresh folder, and
    the gateway and workers started there are stopped on the way out."""

    def __enter__(self):
        self.home = tempfile.mkdtemp(prefix="spotlab-home-")
        self.saved = {k: os.environ.get(k) for k in ("SPOTLAB_HOME", "SPOTLAB_GATEWAY", "SPOTLAB_TOKEN")}
        os.environ["SPOTLAB_HOME"] = self.home
        os.environ.pop("SPOTLAB_GATEWAY", None)
        os.environ.pop("SPOTLAB_TOKEN", None)
        return self.home

    def __exit__(self, *exc):
        stop_all(self.home)
        restore_env(self.saved)
        return False
