#!/usr/bin/python3
"""Runs a notebook headless on the spotlab kernel and saves the executed copy.

usage: run_notebook.py IN.ipynb OUT.ipynb [--timeout SECONDS]

Prints each cell's text output as it would read in a terminal, so a run can be
followed without opening the notebook. Exits non-zero if a cell fails.
"""
import argparse
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def text_of(output):
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data", {})
    text = data.get("text/plain", "")
    return text if text.endswith("\n") else text + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("notebook")
    ap.add_argument("out")
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="spotlab",
                            resources={"metadata": {"path": "."}})
    failed = None
    try:
        client.execute()
    except CellExecutionError as e:
        failed = e
    nbformat.write(nb, args.out)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        print("".join(f">>> {line}\n" for line in cell.source.splitlines()), end="")
        for out in cell.get("outputs", []):
            sys.stdout.write(text_of(out))
    if failed:
        print(f"a cell failed: {str(failed).splitlines()[-1] if str(failed) else failed}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
