#!/usr/bin/python3
"""Runs a notebook headless on the spotlab kernel and saves the executed copy.

usage: run_notebook.py IN.ipynb OUT.ipynb [--timeout SECONDS]
                       [--preempt-at-step N --cli PATH-TO-spotlab]

With --preempt-at-step, the first training job that reaches step N has its
instance preempted with a two-minute notice (`spotlab inject preempt`), as a
spot market would, and the run must survive it.

Prints each cell's text output as it would read in a terminal, so a run can be
followed without opening the notebook. Exits non-zero if a cell fails.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

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


class Preempter(threading.Thread):
    """Watches the gateway's job list and preempts one training instance."""

    def __init__(self, cli, at_step):
        super().__init__(daemon=True)
        self.cli, self.at_step = cli, at_step
        self.done = threading.Event()
        self.injected = None

    def jobs(self):
        r = subprocess.run([self.cli, "jobs", "--json"], capture_output=True, text=True)
        try:
            return json.loads(r.stdout) if r.returncode == 0 else []
        except ValueError:
            return []

    def run(self):
        while not self.done.is_set():
            for job in self.jobs():
                if (job.get("kind") == "train" and job.get("state") == "running"
                        and job.get("step", 0) >= self.at_step and job.get("instance")):
                    r = subprocess.run([self.cli, "inject", "preempt", job["instance"],
                                        "--notice", "120s"], capture_output=True, text=True)
                    if r.returncode == 0:
                        self.injected = (job["job"], job["instance"], job["step"])
                        print(f"[demo] preempted {job['instance']} under {job['job']} at step "
                              f"{job['step']} with a 120 s notice", file=sys.stderr)
                        return
            self.done.wait(0.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("notebook")
    ap.add_argument("out")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--preempt-at-step", type=int)
    ap.add_argument("--cli", default="spotlab")
    args = ap.parse_args()
    preempter = None
    if args.preempt_at_step is not None:
        preempter = Preempter(args.cli, args.preempt_at_step)
        preempter.start()
    nb = nbformat.read(args.notebook, as_version=4)
    # the kernel starts in the notebook's folder, as Jupyter starts it: relative data paths are its
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="spotlab",
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(args.notebook))}})
    failed = None
    try:
        client.execute()
    except CellExecutionError as e:
        failed = e
    if preempter:
        preempter.done.set()
    nbformat.write(nb, args.out)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        print("".join(f">>> {line}\n" for line in cell.source.splitlines()), end="")
        for out in cell.get("outputs", []):
            sys.stdout.write(text_of(out))
    if preempter and not preempter.injected:
        print("[demo] no training job reached the preemption step", file=sys.stderr)
    if failed:
        print(f"a cell failed: {str(failed).splitlines()[-1] if str(failed) else failed}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
