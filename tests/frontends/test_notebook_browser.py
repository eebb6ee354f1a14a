#!/usr/bin/python3
"""Classic Notebook in headless Chromium runs the quickstart.

Usage: test_notebook_browser.py PATH-TO-spotlab-kernel ARTIFACT_DIR

A real Notebook 6 server (Debian jupyter-notebook) serves a copy of
examples/notebooks/quickstart.ipynb with two cells added at the end: a
Markdown cell with math (the control that MathJax runs on this page) and
`probe = 42`. Headless Chromium (chromium, chromium-driver,
python3-selenium) opens it and runs every cell. The test checks:
  - mid-training (screenshot notebook-mid.png): the job display shows a
    <progress> bar and, once loss arrives, the loss curve as a loaded image;
  - at the end (notebook-end.png): the bar at 100, the curve, the money as
    written ("$0." in the display's text), and no MathJax element in any
    output while the Markdown control was typeset;
  - the kernel found its notebook without JPY_SESSION_NAME (Notebook 6 does
    not set it): after the session is deleted and the page reopened, a new
    kernel (a new id) shows `probe` and the model `m` in %who;
  - untrusted: a changed copy of the saved notebook opens untrusted and
    still shows the bar and the curve (notebook-untrusted.png).
Screenshots are kept in ARTIFACT_DIR. Every wait is on a condition.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures, summary  # noqa: E402
from kernelspec_env import KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
QUICKSTART = os.path.join(HERE, "..", "..", "examples", "notebooks", "quickstart.ipynb")
TOKEN = "spotlab-browser-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base, method, path):
    req = urllib.request.Request(base + path, method=method, headers={"Authorization": "token " + TOKEN})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body else None


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
            if last:
                return last
        except Exception as e:  # the page may be reloading
            last = e
        time.sleep(0.25)
    print("timed out waiting for %s (last: %r)" % (what, last), file=sys.stderr)
    return None


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,2400"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


# The train cell's output area, found by its code.
TRAIN_OUTPUT = """
var cells = Jupyter.notebook.get_cells();
for (var i = 0; i < cells.length; i++)
  if (cells[i].cell_type === 'code' && cells[i].get_text().indexOf('train m on book') === 0)
    return cells[i].output_area.element[0];
return null;
"""

DISPLAY_STATE = TRAIN_OUTPUT.replace("return cells[i].output_area.element[0];", """{
    var el = cells[i].output_area.element[0];
    var bar = el.querySelector('progress.spotlab-bar');
    var img = el.querySelector('img.spotlab-curve');
    return {bar: bar ? parseFloat(bar.getAttribute('value')) : null,
            img: img ? img.naturalWidth : null,
            text: el.innerText,
            mathjax: el.querySelectorAll('.MathJax, .MathJax_Preview, .MathJax_Display, mjx-container, script[type^="math/"]').length};
  }""")


def shoot(drv, path):
    """A screenshot with the job display in view."""
    drv.execute_script("var f = function () {" + TRAIN_OUTPUT + "}; var el = f(); if (el) el.scrollIntoView();")
    drv.save_screenshot(path)


def open_notebook(drv, base, path):
    drv.get("%snotebooks/%s?token=%s" % (base, path, TOKEN))
    return wait_for(lambda: drv.execute_script(
        "return window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && "
        "Jupyter.notebook.kernel.is_connected() && Jupyter.notebook.kernel.info_reply && "
        "Jupyter.notebook.kernel.info_reply.implementation === 'spotlab-kernel'"), 120, "the kernel of " + path)


def run_new_cell(drv, code, want, timeout):
    drv.execute_script("var c = Jupyter.notebook.insert_cell_at_bottom('code'); c.set_text(arguments[0]); "
                       "c.execute();", code)
    return wait_for(lambda: (lambda t: t if want in t else None)(drv.execute_script(
        "var cs = Jupyter.notebook.get_cells(); return cs[cs.length - 1].output_area.element[0].innerText;")),
        timeout, "%r to show %r" % (code, want))


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    artifacts = os.path.abspath(argv[2])
    os.makedirs(artifacts, exist_ok=True)
    for tool in ("/usr/bin/jupyter-notebook", "/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not os.access(tool, os.X_OK):
            print("missing %s: install jupyter-notebook chromium chromium-driver python3-selenium "
                  "(./spotlab setup)" % tool, file=sys.stderr)
            return 1
    root = tempfile.mkdtemp(prefix="spotlab-nb-")
    nb = json.load(open(QUICKSTART))
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "control: $x^2 + 1$"})
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "probe = 42", "outputs": [],
                        "execution_count": None})
    with open(os.path.join(root, "quickstart.ipynb"), "w") as f:
        json.dump(nb, f)
    port = free_port()
    base = "http://127.0.0.1:%d/" % port
    with KernelspecEnv(argv[1]), PrivateHome():
        env = dict(os.environ)
        env.pop("JPY_SESSION_NAME", None)
        log = open(os.path.join(artifacts, "notebook-server.log"), "w")
        server = subprocess.Popen(
            ["/usr/bin/jupyter-notebook", "--no-browser", "--port=%d" % port, "--ip=127.0.0.1",
             "--NotebookApp.token=" + TOKEN, "--notebook-dir=" + root, "--NotebookApp.port_retries=0"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            stdout=log, stderr=subprocess.STDOUT, env=env)
        drv = None
        try:
            check(wait_for(lambda: api(base, "GET", "api/status") is not None, 120, "the server"),
                  "the Notebook server answers")
            drv = browser()
            check(open_notebook(drv, base, "quickstart.ipynb"), "the quickstart opens on spotlab-kernel")
            first_kernel = drv.execute_script("return Jupyter.notebook.kernel.id")
            drv.execute_script("Jupyter.notebook.execute_all_cells()")
            mid = wait_for(lambda: (lambda s: s if s and s["bar"] is not None and 5 <= s["bar"] < 95
                                    and s["img"] else None)(drv.execute_script(DISPLAY_STATE)),
                           900, "the display mid-training")
            shoot(drv, os.path.join(artifacts, "notebook-mid.png"))
            check(mid is not None, "mid-training: a progress bar and a loaded loss curve")
            end = wait_for(lambda: (lambda s: s if s and s["bar"] == 100 and "succeeded" in s["text"] else None)(
                drv.execute_script(DISPLAY_STATE)), 900, "the display at the end")
            done = wait_for(lambda: drv.execute_script(
                "return !Jupyter.notebook.kernel_busy && Jupyter.notebook.get_cells().every(function (c) {"
                " return c.cell_type !== 'code' || c.input_prompt_number > 0; })"), 900, "every cell to run")
            shoot(drv, os.path.join(artifacts, "notebook-end.png"))
            check(end is not None and done, "the quickstart runs to the end")
            if end:
                check(end["img"] and end["img"] > 0, "the end: the loss curve image is loaded")
                check("$0." in end["text"] and "/h" in end["text"], "money shown as written ($0.…/h)")
                check(end["mathjax"] == 0, "no MathJax element in the job display")
            outputs_math = drv.execute_script(
                "return document.querySelectorAll('.output_area .MathJax, .output_area mjx-container, "
                ".output_area .MathJax_Preview').length")
            control = wait_for(lambda: drv.execute_script(
                "return document.querySelectorAll('.text_cell_render .MathJax, .text_cell_render mjx-container, "
                ".text_cell_render .MathJax_SVG').length"), 60, "MathJax on the control cell")
            check(control, "MathJax runs on this page (the Markdown control is typeset)")
            check(outputs_math == 0, "no output of any cell is typeset as math")
            drv.execute_script("Jupyter.notebook.save_notebook()")
            wait_for(lambda: drv.execute_script("return !Jupyter.notebook.dirty"), 60, "the save")

            # A new kernel for the same notebook (what reopening it after a
            # culled server brings): the session is found through the server.
            sessions = api(base, "GET", "api/sessions")
            for s in sessions:
                api(base, "DELETE", "api/sessions/" + s["id"])
            check(open_notebook(drv, base, "quickstart.ipynb"), "the notebook reopens with a new kernel")
            second_kernel = drv.execute_script("return Jupyter.notebook.kernel.id")
            check(second_kernel != first_kernel, "the reopened notebook has a new kernel id")
            who = run_new_cell(drv, "%who", "probe", 120)
            check(who is not None and "42" in who and "model" in who,
                  "%who in the new kernel shows the notebook's names (probe, m)")
            status = run_new_cell(drv, "%status", "session", 120)
            check(status is not None and "quickstart.ipynb" in status, "%status names the notebook's session")

            # Untrusted: a changed copy has no signature.
            saved = json.load(open(os.path.join(root, "quickstart.ipynb")))
            saved["metadata"]["copied"] = True
            with open(os.path.join(root, "copy.ipynb"), "w") as f:
                json.dump(saved, f)
            check(open_notebook(drv, base, "copy.ipynb"), "the copy opens")
            check(drv.execute_script("return Jupyter.notebook.trusted") is False, "the copy is untrusted")
            st = wait_for(lambda: drv.execute_script(DISPLAY_STATE), 30, "the saved display")
            shoot(drv, os.path.join(artifacts, "notebook-untrusted.png"))
            check(st is not None and st["bar"] == 100, "untrusted: the progress bar is kept")
            check(st is not None and st["img"] and st["img"] > 0, "untrusted: the loss curve is an image")
            check(st is not None and "train loss" not in st["text"], "untrusted: the curve is not a line of text")
            check(st is not None and "$0." in st["text"], "untrusted: money shown as written")
        finally:
            if drv:
                drv.quit()
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()
            shutil.rmtree(root, ignore_errors=True)
    print(summary())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
