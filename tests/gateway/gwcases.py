"""What the gateway's integration tests share (test_gateway.py with the fake
provider, test_gateway_local.py with the local one): the test users' tokens,
the gateway a case runs against, a signed-in client, and the few requests
every case makes.

Nothing here reads sys.argv: a script calls configure() with the programs
it was given before it starts a Gateway.
"""
import glob
import json
import os
import shutil
import signal
import sys
import tempfile

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from gateway_proc import GatewayProcess, kill_instances  # noqa: E402
from gateway_client import GatewayClient  # noqa: E402

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-9876543210",
          "carol": "carol-token-5555555555"}
CTX = zmq.Context()
# set by configure(): spotlab-gateway, the one with the provider "fake", its worker script
GATEWAY = FAKE_GATEWAY = FAKE_WORKER = None


def configure(gateway, fake_gateway=None, fake_worker=None):
    """The programs a Gateway runs: gateway (spotlab-gateway) and, for the
    cases with the fake provider, fake_gateway and the fake_worker it runs
    per instance."""
    global GATEWAY, FAKE_GATEWAY, FAKE_WORKER
    GATEWAY, FAKE_GATEWAY, FAKE_WORKER = gateway, fake_gateway, fake_worker


class Gateway(GatewayProcess):
    def __init__(self, exe=None, extra_ini="", slots=2, user_options=None):
        exe = exe or FAKE_GATEWAY
        super().__init__(tempfile.mkdtemp(prefix="gw-test-"), exe, TOKENS,
                         provider="fake" if exe == FAKE_GATEWAY else "local", slots=slots,
                         extra_ini=extra_ini, user_options=user_options,
                         env={"SPOTLAB_FAKE_WORKER": FAKE_WORKER, "SPOTLAB_DEBUG": "gateway"})
        self.start()

    def cleanup(self, keep=False):
        self.stop(15)
        # the fake workers by pid, a real local instance with its whole session
        for pidfile in glob.glob(os.path.join(self.state, "instances", "*", "fake.pid")):
            try:
                os.kill(int(open(pidfile).read()), signal.SIGKILL)
            except (ValueError, ProcessLookupError, PermissionError):
                pass
        kill_instances(self.state)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def gateway_cleanup(gw, failed):
    """A case's end: gw stopped and its instances killed; on a failure its
    folder is kept and its log's tail printed."""
    gw.cleanup(keep=failed)
    if failed:
        print("gateway log (%s):\n%s" % (gw.logpath, gw.logtext()[-6000:]), file=sys.stderr)


class Client(GatewayClient):
    def __init__(self, address, user=None, session="nb", token=None, small=False):
        super().__init__(address, token=token or (TOKENS[user] if user else None),
                         session=session, context=CTX, small=small)


def define(c):
    """alice's usual session: model m (a one-layer gpt) and data d."""
    r = c.req("session.set", vars={"lr": {"t": "num", "v": 0.001}}, defs=[
        {"name": "m", "kind": "model", "spec": {"type": "gpt", "args": [], "options": {"layers": 1}}},
        {"name": "d", "kind": "data", "spec": {"type": "text", "args": ["moby-dick"], "options": {}}}])
    assert r["ok"], r


def worker_socket(cfg_path):
    """A DEALER speaking as the fake worker whose config is cfg_path (its
    CURVE keys, the gateway's address), and that config."""
    cfg = json.load(open(cfg_path))
    s = CTX.socket(zmq.DEALER)
    s.linger = 0
    s.curve_serverkey = cfg["gateway_public"].encode()
    s.curve_publickey = cfg["public"].encode()
    s.curve_secretkey = cfg["secret"].encode()
    s.connect(cfg["gateway"])
    return s, cfg


def state_is(job, state):
    return lambda e: e["job"] == job and e["event"] == "state" and e["state"] == state


def submit(c, **opts):
    r = c.req("submit", kind="train", model="m", data="d", options=opts)
    assert r["ok"], r
    return r["job"]


def attach(c, job, after=0):
    r = c.req("attach", job=job, after=after)
    assert r["ok"], r
    return r["job"]
