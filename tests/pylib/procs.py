"""The live processes of this machine, read from /proc, for the tests that
look for what a run left behind (zombies, which hold nothing, are not
counted)."""
import os
import time


def cmdline(pid):
    """pid's argv as a list of bytes, or None when it is gone or a zombie."""
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            cmd = f.read()
        with open("/proc/%s/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return None
        return cmd.split(b"\0")
    except (OSError, IndexError):
        return None


def live():
    """(pid, argv) of every live process but this one."""
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            argv = cmdline(d)
            if argv:
                yield int(d), argv


def processes(program, *needles):
    """Pids of live `program` processes whose command line holds every needle."""
    return [pid for pid, argv in live()
            if os.path.basename(argv[0].decode(errors="replace")) == program and
            all(any(n.encode() in a for a in argv) for n in needles)]


def alive(pid):
    """Whether pid runs (a zombie does not)."""
    return cmdline(pid) is not None


def blocked_in(pid, syscall, timeout_s, hold_s=0.2):
    """Waits until pid's main thread has slept in system call number syscall
    (/proc/PID/syscall; x86-64: 1 write, 7 poll) for hold_s on end: whether
    it did before timeout_s."""
    end = time.monotonic() + timeout_s
    since = None
    while time.monotonic() < end:
        try:
            with open("/proc/%d/syscall" % pid) as f:
                inside = f.read().split()[0] == str(syscall)
        except (OSError, IndexError):
            inside = False
        now = time.monotonic()
        since = (since or now) if inside else None
        if since is not None and now - since >= hold_s:
            return True
        time.sleep(0.01)  # polling /proc: nothing to block on
    return False
