"""spotlab-train's JSON-lines metrics file (--metrics PATH), as the tests read it."""
import json
import os


def events(path):
    """Every complete line of the file as a dict, in order (a line still being written is left
    out); [] while the file does not exist.

    One read to the end, then split: iterating the open file instead would go on reading after
    a line cut at the end of the file, and hand out the rest of that line, appended meanwhile,
    as a line of its own."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read()
    out = []
    for n, line in enumerate(text.split("\n")[:-1], 1):
        try:
            out.append(json.loads(line))
        except ValueError as e:
            raise ValueError("%s line %d is not JSON (%s): %r" % (path, n, e, line)) from None
    return out


def steps(path):
    """step -> the last step line written for it (a resumed run writes some steps again)."""
    return {e["step"]: e for e in events(path) if "event" not in e}


def losses(path):
    """step -> the loss of the last step line written for it."""
    return {s: e["loss"] for s, e in steps(path).items() if "loss" in e}
