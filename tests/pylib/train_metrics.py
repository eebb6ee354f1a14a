"""spotlab-train's JSON-lines metrics file (--metrics PATH), as the tests read it."""
import json
import os


def events(path):
    """Every complete line of the file as a dict, in order (a line still being written is left
    out); [] while the file does not exist."""
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
    return out


def steps(path):
    """step -> the last step line written for it (a resumed run writes some steps again)."""
    return {e["step"]: e for e in events(path) if "event" not in e}


def losses(path):
    """step -> the loss of the last step line written for it."""
    return {s: e["loss"] for s, e in steps(path).items() if "loss" in e}
