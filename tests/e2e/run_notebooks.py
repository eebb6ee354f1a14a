#!/usr/bin/python3
"""Runs every notebook in examples/notebooks/ on spotlab-kernel and checks its outputs.

Usage: run_notebooks.py PATH-TO-spotlab-kernel [OUTPUT_DIR]

Each notebook is executed through nbclient with the kernel found by a
kernelspec that the binary under test installs into a temporary prefix. A
cell that raises fails the run. Beyond that, code cells state what they must
print in their metadata under "spotlab_expect":

    "result": "0.0006"           the execute_result's text/plain, exactly
    "stdout": ["line", ...]      each line appears in the cell's stdout
    "output": ["text", ...]      each text appears in the cell's output
                                 (streams and text/plain of results/displays)
    "display": {                 the cell shows exactly one job display whose
      "mime": [...],             final bundle has each of these mime types,
      "output": ["text", ...],   whose text/plain has each text,
      "eval_loss_below": 2.5     and whose last "eval loss X" is below the bound
    }

The notebooks run with a private SPOTLAB_HOME, so training goes through an
embedded gateway of their own, which is stopped at the end.

A notebook without a single expectation fails, so a notebook can never pass
by printing nothing. The executed notebooks are written to OUTPUT_DIR
(default: the current folder) as NAME.executed.ipynb.
"""

import os
import re
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kernelspec_env import DISPLAY_NAME, KERNEL_NAME, KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

NOTEBOOK_DIR = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "notebooks")
)
CELL_TIMEOUT_S = 300


def cell_texts(cell):
    """(stdout text, all text) of a cell's outputs."""
    stdout, everything = [], []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            everything.append(out.text)
            if out.name == "stdout":
                stdout.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            everything.append(out.data.get("text/plain", ""))
    return "".join(stdout), "".join(everything)


def execute_result_text(cell):
    results = [o for o in cell.get("outputs", []) if o.output_type == "execute_result"]
    if len(results) != 1:
        return None
    return results[0].data.get("text/plain")


def check_display(cell, want, where):
    """(expectations checked, problems) for a job display in the cell."""
    problems = []
    displays = [o for o in cell.get("outputs", []) if o.output_type == "display_data"
                and "spotlab job" in o.data.get("text/plain", "")]
    if len(displays) != 1:
        return 1, [f"{where}: expected one job display, found {len(displays)}"]
    data = displays[0].data
    checked = 1
    for mime in want.get("mime", []):
        checked += 1
        if mime not in data:
            problems.append(f"{where}: the display has no {mime} (has {sorted(data)})")
    text = data.get("text/plain", "")
    for part in want.get("output", []):
        checked += 1
        if part not in text:
            problems.append(f"{where}: the display lacks {part!r}; it reads {text!r}")
    if "eval_loss_below" in want:
        checked += 1
        losses = re.findall(r"eval loss ([0-9.]+)", text)
        if not losses:
            problems.append(f"{where}: the display shows no eval loss: {text!r}")
        elif float(losses[-1]) >= want["eval_loss_below"]:
            problems.append(f"{where}: eval loss {losses[-1]} is not below {want['eval_loss_below']}")
    if "image/svg+xml" in data and "<polyline" not in data["image/svg+xml"] and "<path" not in data["image/svg+xml"]:
        problems.append(f"{where}: the loss curve SVG draws no line")
    return checked, problems


def check_notebook(nb, name):
    """Problems found in an executed notebook, and how many expectations held."""
    problems = []
    checked = 0
    spec = nb.metadata.get("kernelspec", {})
    if spec.get("name") != KERNEL_NAME or spec.get("display_name") != DISPLAY_NAME:
        problems.append(f"{name}: kernelspec metadata is {dict(spec)}")
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"{name} cell {index} ({cell.source.splitlines()[0] if cell.source else ''!r})"
        if cell.source.strip() and cell.get("execution_count") is None:
            problems.append(f"{where}: not executed")
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                problems.append(f"{where}: {out.ename}: {out.evalue}")
        expect = cell.metadata.get("spotlab_expect", {})
        stdout, everything = cell_texts(cell)
        if "result" in expect:
            checked += 1
            got = execute_result_text(cell)
            if got != expect["result"]:
                problems.append(f"{where}: result {got!r}, expected {expect['result']!r}")
        for text in expect.get("stdout", []):
            checked += 1
            if text not in stdout:
                problems.append(f"{where}: stdout lacks {text!r}; stdout was {stdout!r}")
        for text in expect.get("output", []):
            checked += 1
            if text not in everything:
                problems.append(f"{where}: output lacks {text!r}; output was {everything!r}")
        if "display" in expect:
            n, more = check_display(cell, expect["display"], where)
            checked += n
            problems += more
        unknown = set(expect) - {"result", "stdout", "output", "display"}
        if unknown:
            problems.append(f"{where}: unknown expectation keys {sorted(unknown)}")
    if checked == 0:
        problems.append(f"{name}: no cell states an expectation (spotlab_expect)")
    return problems, checked


def run_one(path, output_dir):
    name = os.path.basename(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": os.path.dirname(path)}},
    )
    t0 = time.monotonic()
    problems = []
    try:
        client.execute()
    except CellExecutionError as e:
        problems.append(f"{name}: a cell failed:\n{e}")
    elapsed = time.monotonic() - t0
    out_path = os.path.join(output_dir, name.replace(".ipynb", ".executed.ipynb"))
    nbformat.write(nb, out_path)
    more, checked = check_notebook(nb, name)
    problems += more
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        problems.append(f"{name}: executed notebook is not valid nbformat: {e.message}")
    status = "FAIL" if problems else "ok"
    print(f"{status} {name}: {checked} expectations, {elapsed:.1f}s, written to {out_path}")
    return problems


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print("usage: run_notebooks.py PATH-TO-spotlab-kernel [OUTPUT_DIR]", file=sys.stderr)
        return 2
    output_dir = os.path.abspath(argv[2] if len(argv) > 2 else ".")
    os.makedirs(output_dir, exist_ok=True)
    notebooks = sorted(
        os.path.join(NOTEBOOK_DIR, f) for f in os.listdir(NOTEBOOK_DIR) if f.endswith(".ipynb")
    )
    if not notebooks:
        print(f"no notebooks in {NOTEBOOK_DIR}", file=sys.stderr)
        return 1
    problems = []
    with KernelspecEnv(argv[1]), PrivateHome():
        for path in notebooks:
            problems += run_one(path, output_dir)
    for p in problems:
        print("  " + p, file=sys.stderr)
    print(f"{len(notebooks)} notebooks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
