"""The live processes of this machine, read from /proc, for the tests that
look for what a run left behind (zombies, which hold nothing, are not
counted)."""
import os


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
