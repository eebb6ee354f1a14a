"""How the Python test scripts report: every check prints one line, a failed one is
remembered, and the script's exit status comes from what failed."""
import json
import sys
import time

failures = []
_T0 = time.monotonic()


def log(*a):
    """A line of progress, after the seconds since the script began."""
    print("[%6.1f]" % (time.monotonic() - _T0), *a, flush=True)


def _detail(detail):
    if hasattr(detail, "stdout") and hasattr(detail, "stderr"):  # a finished process
        return "stdout: %s\n     stderr: %s" % (str(detail.stdout)[-500:], str(detail.stderr)[-500:])
    if isinstance(detail, (dict, list)):
        return json.dumps(detail, indent=2)[-4000:]
    return str(detail)[-2000:]


def check(cond, what, detail=None):
    """Prints "ok" or "FAIL" before what; a failure is recorded, with detail (a
    finished process's output, or any value) printed under it. Returns cond."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
        if detail is not None:
            print("     " + _detail(detail), flush=True)
    return cond


def require(cond, what, detail=None):
    """As check(), but ends the script at once (exit 1): for a step the rest depends on."""
    if not check(cond, what, detail):
        sys.exit(1)
    return cond


def summary():
    """How many checks failed, then each failed one's line, for the end of a
    script's output (which a long log's tail still shows)."""
    return "%d failures" % len(failures) + "".join("\nFAILED " + f[:300] for f in failures)


def exit_status():
    """1 if any check failed, after saying how many, else 0."""
    if failures:
        print(summary(), flush=True)
        return 1
    return 0


def run_case(case, *args, cleanup=None):
    """A test script's case: runs case(*args); an exception it raises (a timeout,
    a failed assertion) is a failure with its context. cleanup(failed), when
    given, runs afterwards whatever happened (an early exit by require()
    included). Returns the script's exit status: 1 if any check failed, else 0
    after printing "ok"."""
    try:
        case(*args)
    except Exception as e:
        failures.append("%s: %s" % (type(e).__name__, e))
        print("FAIL:", type(e).__name__, e, file=sys.stderr)
    finally:
        if cleanup:
            cleanup(bool(failures))
    if failures:
        return 1
    print("ok")
    return 0
