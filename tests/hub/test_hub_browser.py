#!/usr/bin/python3
"""Two JupyterHub users train from classic Notebook in headless Chromium.

usage: test_hub_browser.py GATEWAY KERNEL ARTIFACT_DIR

A real JupyterHub (Debian's jupyterhub and configurable-http-proxy) with the
DummyAuthenticator and the SimpleLocalProcessSpawner starts the team gateway
(spotlab-gateway with the local provider: real workers training on this
machine) as its managed service. Single-user servers are classic Notebook 6
(jupyterhub-singleuser, JUPYTERHUB_SINGLEUSER_APP); the kernelspec reaches
them through Spawner.environment's JUPYTER_PATH (`spotlab-kernel install
--prefix`), and SPOTLAB_GATEWAY names the team gateway. alice is in the hub
group research, bob in teaching; each has a spotlab notebook in the home the
spawner gives them.

In Chromium, each user logs in through the hub's login form, opens the
notebook, defines a small model and trains it. Then, in each notebook:
  - %jobs --all lists the user's own job and not the other's; %who shows
    only the user's own names; %instances and %status name no job of the
    other's;
  - %status shows the user's hub group's notebook timeout (2h, 45m in the file);
and after alice's server is stopped through the hub's API (DELETE
/users/alice/server) and started again, the reopened notebook (a new
kernel) shows the names in %who, and `sample m` writes text from the
trained model. Screenshots go to ARTIFACT_DIR. Every wait is on a condition.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "frontends"))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from checks import check, failures, summary  # noqa: E402
from kernelspec_env import KernelspecEnv  # noqa: E402
from test_hub import Hub  # noqa: E402
from test_notebook_browser import DISPLAY_STATE, browser, wait_for  # noqa: E402

GATEWAY, KERNEL = (os.path.abspath(a) for a in sys.argv[1:3])
ARTIFACTS = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else os.getcwd()
USERS = {"alice": ("research", "2 h 00 min"), "bob": ("teaching", "45 min")}
NOTEBOOK = "spotlab.ipynb"
TRAIN = "train m on book steps=40 batch=8 lr=3e-3 warmup=5 eval_every=20 checkpoint_every=20 spot=yes"


def cell(src):
    return {"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}


class BrowserHub(Hub):
    """The hub of test_hub.py with the real gateway, Notebook servers and homes."""

    def __init__(self, kspec):
        self.kspec = kspec
        super().__init__()

    def write_config(self):
        self.homes = os.path.join(self.dir, "home")
        os.mkdir(self.homes, 0o700)
        gwdir = os.path.join(self.dir, "gateway")
        with open(self.gw_ini, "w") as f:
            f.write("[gateway]\nlisten = %s\nworkers = ipc://%s/w.sock\nstate_dir = %s/state\n"
                    "[provider.local]\nslots = 2\n[hub]\ncache = 2s\n"
                    "[group.research]\nnotebook_timeout = 2h\n"
                    "[group.teaching]\nnotebook_timeout = 45m\nworker_timeout = 5m\n"
                    % (self.listen, gwdir, gwdir))
        make_homes(self)
        with open(self.config, "a") as f:
            f.write(f"""
c.JupyterHub.services[0]["command"] = [{GATEWAY!r}, "--config", {self.gw_ini!r}]
c.JupyterHub.services[0]["environment"] = {{}}
c.JupyterHub.load_roles[0]["scopes"].append("admin:servers")
c.Spawner.cmd = ["/usr/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/tree"
c.Spawner.args = {["--allow-root"] if os.geteuid() == 0 else []!r}
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = {{
    "SPOTLAB_GATEWAY": {self.listen!r},
    "JUPYTER_PATH": {self.kspec.jupyter_path!r},
    "JUPYTERHUB_SINGLEUSER_APP": "notebook.notebookapp.NotebookApp",
}}
c.SimpleLocalProcessSpawner.home_dir_template = {os.path.join(self.homes, "{username}")!r}
""")


def make_homes(hub):
    for user in USERS:
        home = os.path.join(hub.homes, user)
        os.mkdir(home, 0o700)
        nb = {"cells": [cell('data book = text("moby-dick")\n'
                             'model m = gpt(layers=1, heads=2, dim=32, ctx=32)\nmine = "%s"' % user),
                        cell(TRAIN)],
              "metadata": {"kernelspec": {"name": "spotlab", "display_name": "Spot GPU (spotlab)",
                                          "language": "spotlab"}},
              "nbformat": 4, "nbformat_minor": 5}
        with open(os.path.join(home, NOTEBOOK), "w") as f:
            json.dump(nb, f)


def make_users(hub):
    for user, (group, _) in USERS.items():
        st, _ = hub.request("POST", "/users/%s" % user)
        check(st == 201, "user %s made through the hub API (%s)" % (user, st))
        st, _ = hub.request("POST", "/groups/%s" % group)
        check(st == 201, "group %s made (%s)" % (group, st))
        st, _ = hub.request("POST", "/groups/%s/users" % group, {"users": [user]})
        check(st == 200, "%s in group %s (%s)" % (user, group, st))


def server_ready(hub, user):
    st, r = hub.request("GET", "/users/%s" % user)
    return st == 200 and r and r.get("servers", {}).get("", {}).get("ready")


def server_gone(hub, user):
    st, r = hub.request("GET", "/users/%s" % user)
    return st == 200 and r is not None and "" not in r.get("servers", {})


def login(drv, hub, user):
    """The DummyAuthenticator's form; the hub then spawns the server."""
    from selenium.webdriver.common.by import By
    drv.get("http://127.0.0.1:%d/hub/login" % hub.port)
    if not wait_for(lambda: drv.find_element(By.ID, "username_input"), 60, "the login form"):
        return False
    drv.find_element(By.ID, "username_input").send_keys(user)
    drv.find_element(By.ID, "password_input").send_keys("any password")
    drv.find_element(By.ID, "login_submit").click()
    return wait_for(lambda: server_ready(hub, user) and "/user/%s/" % user in drv.current_url,
                    180, "%s's server" % user)


def open_notebook(drv, hub, user):
    drv.get("http://127.0.0.1:%d/user/%s/notebooks/%s" % (hub.port, user, NOTEBOOK))
    return wait_for(lambda: drv.execute_script(
        "return window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && "
        "Jupyter.notebook.kernel.is_connected() && Jupyter.notebook.kernel.info_reply && "
        "Jupyter.notebook.kernel.info_reply.implementation === 'spotlab-kernel' && "
        "Jupyter.notebook.kernel.id"), 120, "%s's notebook's kernel" % user)


def run_cell(drv, code, timeout):
    """The text of a new cell's output once it has run (None on timeout)."""
    drv.execute_script("var c = Jupyter.notebook.insert_cell_at_bottom('code'); c.set_text(arguments[0]); "
                       "c.execute();", code)
    return wait_for(lambda: drv.execute_script(
        "var cs = Jupyter.notebook.get_cells(), c = cs[cs.length - 1];"
        "return !Jupyter.notebook.kernel_busy && c.input_prompt_number > 0 ? "
        "c.output_area.element[0].innerText : null;"), timeout, "%r to run" % code)


def train(drv, user):
    drv.execute_script("Jupyter.notebook.execute_all_cells()")
    end = wait_for(lambda: (lambda s: s if s and s["bar"] == 100 and "succeeded" in s["text"] else None)(
        drv.execute_script(DISPLAY_STATE)), 900, "%s's training" % user)
    drv.save_screenshot(os.path.join(ARTIFACTS, "hub-%s-trained.png" % user))
    check(end is not None, "%s trains to the end (the display's bar at 100, succeeded)" % user)
    job = run_cell(drv, "%jobs", 60) or ""
    ids = [w for w in job.split() if w.startswith("J") and w[1:].isdigit()]
    check(len(ids) == 1, "%s's %%jobs lists one job: %r" % (user, job))
    return ids[0] if ids else None


def isolation(drvs, jobs):
    for user, drv in drvs.items():
        other = next(u for u in USERS if u != user)
        text = run_cell(drv, "%jobs --all", 60)
        check(text is not None and jobs[user] and jobs[user] in text and
              (not jobs[other] or jobs[other] not in text),
              "%s's %%jobs --all: their own job, not %s's: %r" % (user, other, text))
        text = run_cell(drv, "%who", 60)
        check(text is not None and user in text and other not in text and "model" in text,
              "%s's %%who: their own names only: %r" % (user, text))
        text = run_cell(drv, "%instances", 60)
        check(text is not None and text.strip() and (not jobs[other] or jobs[other] not in text),
              "%s's %%instances names no job of %s's: %r" % (user, other, text))
        text = run_cell(drv, "%status", 60)
        group, timeout = USERS[user]
        check(text is not None and "as user %s" % user in text and
              "a notebook idle for %s stops" % timeout in text and
              (not jobs[other] or jobs[other] not in text),
              "%s's %%status: their user, %s's notebook timeout %s, no job of %s's: %r"
              % (user, group, timeout, other, text))
        shoot_last(drv, os.path.join(ARTIFACTS, "hub-%s-isolation.png" % user))


def shoot_last(drv, path):
    """A screenshot with the last cell's output in view."""
    drv.execute_script("var cs = Jupyter.notebook.get_cells(); cs[cs.length - 1].element[0].scrollIntoView();")
    drv.save_screenshot(path)


def restart(hub, drv, user):
    old = drv.execute_script("return Jupyter.notebook.kernel.id")
    drv.execute_script("Jupyter.notebook.save_notebook()")
    wait_for(lambda: drv.execute_script("return !Jupyter.notebook.dirty"), 60, "the save")
    st, _ = hub.request("DELETE", "/users/%s/server" % user)
    check(st in (202, 204), "%s's server stopped through the hub API (%s)" % (user, st))
    check(wait_for(lambda: server_gone(hub, user), 120, "the server to stop"), "%s's server is gone" % user)
    st, _ = hub.request("POST", "/users/%s/server" % user)
    check(st in (201, 202), "%s's server started again (%s)" % (user, st))
    check(wait_for(lambda: server_ready(hub, user), 180, "the server again"), "%s's server is back" % user)
    new = open_notebook(drv, hub, user)
    check(new and new != old, "the reopened notebook has a new kernel (%s, was %s)" % (new, old))
    text = run_cell(drv, "%who", 120)
    check(text is not None and user in text and "model" in text,
          "after the restart, %s's %%who shows the names: %r" % (user, text))
    text = run_cell(drv, 'sample m "Call me" tokens=20', 300)
    shoot_last(drv, os.path.join(ARTIFACTS, "hub-%s-restarted.png" % user))
    check(text is not None and "Call me" in text and "Error" not in text,
          "after the restart, sample m writes from the trained model: %r" % text)


def main():
    os.makedirs(ARTIFACTS, exist_ok=True)
    for tool in ("/usr/bin/jupyterhub-singleuser", "/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not os.access(tool, os.X_OK):
            print("missing %s: install jupyterhub jupyter-notebook chromium chromium-driver "
                  "python3-selenium (./spotlab setup)" % tool, file=sys.stderr)
            return 1
    kspec = KernelspecEnv(KERNEL)
    hub = BrowserHub(kspec)
    drvs = {}
    try:
        if not check(hub.wait_ready(), "JupyterHub answers on %s" % hub.api):
            print(hub.logtext()[-6000:])
            return 1
        check(hub.wait_log("hello takes JupyterHub tokens, checked at %s" % hub.api, 30),
              "the team gateway, a hub-managed service, found the hub")
        make_users(hub)
        jobs = {}
        for user in USERS:
            drvs[user] = drv = browser()
            if not (check(login(drv, hub, user), "%s logs in and the server starts" % user) and
                    check(open_notebook(drv, hub, user), "%s's notebook opens on spotlab-kernel" % user)):
                drv.save_screenshot(os.path.join(ARTIFACTS, "hub-%s-failed.png" % user))
                return 1
            jobs[user] = train(drv, user)
        isolation(drvs, jobs)
        restart(hub, drvs["alice"], "alice")
    finally:
        for drv in drvs.values():
            drv.quit()
        for user in USERS:
            hub.request("DELETE", "/users/%s/server" % user)
        if failures:
            print(hub.logtext()[-8000:])
        hub.close()
        kspec.close()
    print(summary())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
