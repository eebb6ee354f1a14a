"""A test client of spotlab-gateway's kernel protocol (docs/internals/protocols.md
§1): one DEALER socket, JSON requests numbered by id, each after hello
carrying the secret ("auth") hello's reply gave, and the events and notices
that arrive meanwhile kept in order. Every wait has a deadline."""
import hashlib
import json
import time

import zmq


class GatewayClient:
    def __init__(self, address, token=None, session="nb", context=None, small=False,
                 hello_timeout=20, routing_id=None):
        """Connects to address and, when a token is given, says hello with it.
        small: a short receive queue, so what the client does not read waits
        at the gateway. routing_id: bytes the socket names itself with (else
        the gateway's ROUTER picks one)."""
        self._own_ctx = context is None
        self.ctx = zmq.Context() if context is None else context
        self.s = self.ctx.socket(zmq.DEALER)
        self.s.linger = 0
        if small:
            self.s.rcvhwm = 20
            self.s.rcvbuf = 4096
        if routing_id is not None:
            self.s.setsockopt(zmq.ROUTING_ID, routing_id)
        self.s.connect(address)
        self.auth = None
        self.events = []
        self.notices = []
        self.nid = 0
        if token:
            r = self.req("hello", token=token, client="cli", session=session, version="0.1.0",
                         timeout=hello_timeout)
            assert r["ok"], r

    def recv(self, timeout):
        """The next message, or None after timeout seconds."""
        if not self.s.poll(int(max(0.0, timeout) * 1000)):
            return None
        return json.loads(self.s.recv())

    def _keep(self, m):
        if m.get("type") == "event":
            self.events.append(m)
        elif m.get("type") == "notice":
            self.notices.append(m)

    def req(self, type_, timeout=10, frame=None, **kw):
        """Sends a request (with the secret of the last hello, unless kw names
        an auth, None for none) and returns its reply. frame: bytes sent as the
        message's second frame (data.put's chunk)."""
        self.nid += 1
        kw.update(type=type_, id=self.nid)
        if type_ != "hello" and "auth" not in kw and self.auth:
            kw["auth"] = self.auth
        if kw.get("auth", "") is None:
            del kw["auth"]
        self.s.send_multipart([json.dumps(kw).encode()] + ([frame] if frame is not None else []))
        r = self.reply(self.nid, timeout)
        if type_ == "hello" and r.get("ok"):
            self.auth = r.get("auth")
        return r

    def have(self, sha, size, until=("ready", "receiving"), timeout=30):
        """data.have until the upload's state is one of until (checking and
        publishing pass), or timeout seconds: the last reply."""
        end = time.monotonic() + timeout
        while True:
            r = self.req("data.have", sha256=sha, size=size)
            if not r.get("ok") or r["state"] in until or time.monotonic() > end:
                return r
            time.sleep(0.1)

    def upload(self, path, chunk_bytes, timeout=120):
        """Uploads the file at path as the kernel does (protocols.md §1,
        uploads): its data_files entry, or the reply that failed."""
        with open(path, "rb") as f:
            data = f.read()
        sha = hashlib.sha256(data).hexdigest()
        end = time.monotonic() + timeout
        s = self.req("data.have", sha256=sha, size=len(data))
        while s.get("ok") and s["state"] != "ready" and time.monotonic() < end:
            if s["state"] == "receiving":
                off = s["offset"]
                chunk = data[off:off + chunk_bytes]
                s = self.req("data.put", sha256=sha, size=len(data), offset=off, frame=chunk)
            else:
                time.sleep(0.1)
                s = self.req("data.have", sha256=sha, size=len(data))
        if not s.get("ok") or s["state"] != "ready":
            return s
        return {"path": path, "sha256": sha, "size": len(data)}

    def submit(self, timeout=10, **kw):
        """A submit, the data files uploaded first while the gateway asks for
        them, as the kernel does. The last reply: the job's, or the upload's
        that failed."""
        files = []
        while True:
            r = self.req("submit", timeout=timeout, **(dict(kw, data_files=files) if files else kw))
            up = r.get("upload") if r.get("ok") else None
            if not up or len(files) > 4:
                return r
            f = self.upload(up["path"], up["chunk_bytes"])
            if "sha256" not in f:
                return f
            files.append(f)

    def reply(self, rid, timeout=10):
        end = time.monotonic() + timeout
        while True:
            m = self.recv(end - time.monotonic())
            if m is None:
                raise TimeoutError("no reply to request %s" % rid)
            if m.get("type") == "reply" and m.get("re") == rid:
                return m
            self._keep(m)

    def signed(self, frame):
        """frame (bytes, a JSON object's text) with the secret of the last
        hello as its first member, for raw()."""
        assert frame.startswith(b"{") and self.auth
        return b'{"auth":%s,' % json.dumps(self.auth).encode() + frame[1:]

    def raw(self, frames, timeout=10):
        """Sends frames as they are and returns the first reply."""
        self.s.send_multipart(frames)
        end = time.monotonic() + timeout
        while True:
            m = self.recv(end - time.monotonic())
            if m is None:
                raise TimeoutError("no reply to raw frames")
            if m.get("type") == "reply":
                return m

    def _wait(self, kept, pred, what, timeout):
        end = time.monotonic() + timeout
        seen = 0
        while True:
            while seen < len(kept):
                if pred(kept[seen]):
                    return kept[seen]
                seen += 1
            m = self.recv(end - time.monotonic())
            if m is None:
                raise TimeoutError("%s not seen; last events: %s; notices: %s" % (what, [
                    (e.get("event"), e.get("state") or e.get("step") or e.get("text"))
                    for e in self.events[-15:]], self.notices[-5:]))
            self._keep(m)

    def wait_event(self, pred, what="event", timeout=30):
        """The first event, kept or new, for which pred is true."""
        return self._wait(self.events, pred, what, timeout)

    def wait_notice(self, pred, what="notice", timeout=30):
        """The first session notice for which pred is true, waiting without
        sending anything (a request would count as activity)."""
        return self._wait(self.notices, pred, what, timeout)

    def close(self):
        self.s.close(0)
        if self._own_ctx:
            self.ctx.term()
