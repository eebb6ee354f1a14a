"""s3rver, a fault proxy in front of it, boto3 and s3-tool, for the s3 tests
and bench/s3.

s3rver knows one key id, S3RVER, and takes any SigV4 signature made with
it: test_s3.py's presign case checks signatures against botocore. Where s3rver
falls short of S3, the proxy makes up the difference: it implements neither
AbortMultipartUpload nor ListMultipartUploads (the proxy keeps the books of
the uploads it sees started, completed and aborted, and answers those two
calls itself), and it stores a body cut off mid-way and ignores Content-MD5
(the proxy forwards only whole bodies, and answers BadDigest as S3 does)."""
import base64
import collections
import hashlib
import os
import re
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

BUCKET = 'spotlab-test'
KEY_ID = SECRET = 'S3RVER'
REGION = 'us-east-1'


def source_root():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get('SPOTLAB_SOURCE_ROOT') or os.path.dirname(os.path.dirname(here))


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_port(port, proc, deadline_s=30):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError('s3rver exited with status %d' % proc.returncode)
        try:
            with socket.create_connection(('127.0.0.1', port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError('s3rver did not listen on port %d within %d s' % (port, deadline_s))


class S3rver:
    """s3rver on a free port with BUCKET, its data in a temporary folder."""

    def __init__(self, bucket=BUCKET):
        exe = os.path.join(source_root(), '.deps', 'node_modules', '.bin', 's3rver')
        if not os.access(exe, os.X_OK):
            raise RuntimeError('s3rver is not installed at %s (./spotlab installs it)' % exe)
        self.dir = tempfile.mkdtemp(prefix='spotlab-s3rver-')
        self.port = free_port()
        self.log = open(os.path.join(self.dir, 's3rver.log'), 'wb')
        # s3rver's continuation tokens are DES, which OpenSSL 3 keeps in its
        # legacy provider
        env = dict(os.environ, NODE_OPTIONS='--openssl-legacy-provider')
        self.proc = subprocess.Popen(
            [exe, '-d', os.path.join(self.dir, 'data'), '-a', '127.0.0.1', '-p', str(self.port),
             '-s', '--configure-bucket', bucket],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_port(self.port, self.proc)
        except Exception:
            self.stop()
            raise
        self.url = 'http://127.0.0.1:%d' % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def boto(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=KEY_ID,
                        aws_secret_access_key=SECRET, region_name=REGION,
                        config=Config(s3={'addressing_style': 'path'},
                                      retries={'max_attempts': 1}))


def tool_env(endpoint):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('AWS_') and k.lower() not in ('http_proxy', 'https_proxy', 'all_proxy')}
    env.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION,
               AWS_ENDPOINT_URL_S3=endpoint, AWS_EC2_METADATA_DISABLED='true')
    return env


def run_tool(tool, endpoint, *args, check=True, opts=(), env=None):
    """s3-tool OPTS ARGS against endpoint (env: more variables): (status,
    stdout, stderr)."""
    p = subprocess.run([tool, *opts, *args], env=dict(tool_env(endpoint), **(env or {})),
                       capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError('s3-tool %s failed (%d): %s' % (' '.join(args), p.returncode, p.stderr))
    return p.returncode, p.stdout, p.stderr


def kind_of(method, target):
    """The S3 call a request is: put-object, put-part, get-object, head, list,
    create, complete, abort, delete, list-uploads."""
    path, _, query = target.partition('?')
    q = urllib.parse.parse_qs(query, keep_blank_values=True)
    on_key = path.strip('/').count('/') >= 1
    if method == 'PUT':
        return 'put-part' if 'partNumber' in q else 'put-object'
    if method == 'GET':
        if 'uploads' in q:
            return 'list-uploads'
        return 'get-object' if on_key else 'list'
    if method == 'HEAD':
        return 'head'
    if method == 'POST':
        return 'create' if 'uploads' in q else 'complete'
    if method == 'DELETE':
        return 'abort' if 'uploadId' in q else 'delete'
    return 'other'


def error_xml(code, msg):
    return ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message>'
            '</Error>' % (code, msg)).encode()


class HoldParts:
    """A FaultProxy predicate (for its always list, with a stall): true for every
    part PUT whose path holds within while on is set (it is at first); the first
    one sets held."""

    def __init__(self, within):
        self.within = within
        self.on = threading.Event()
        self.on.set()
        self.held = threading.Event()

    def __call__(self, method, target):
        path, _, query = target.partition("?")
        if method != "PUT" or self.within not in path or "partNumber=" not in query or not self.on.is_set():
            return False
        self.held.set()
        return True


class FaultProxy:
    """An HTTP proxy in front of s3rver that fails chosen requests.

    first[kind] = [action, ...] applies to the next requests of that kind in
    turn; always is a list of (predicate(method, target), action). Actions:
    '503' (SlowDown), '500' (InternalError), 'drop' (the connection closes
    unanswered), 'stall' (no answer for 3 s, then a close), 'stall:S' (the
    same for S seconds)."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.first = {}
        self.always = []
        self.seen = collections.Counter()
        self.faults = collections.Counter()
        self.uploads = {}      # upload id -> key, open
        self.aborted = []
        self.completed = []
        self.part_bytes = collections.defaultdict(list)  # upload id -> each part PUT's size, as taken
        self.upload_keys = {}  # upload id -> key, every upload begun
        self.bad_digests = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                proxy.serve(self.request)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = 'http://127.0.0.1:%d' % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def action(self, method, target):
        kind = kind_of(method, target)
        with self.lock:
            self.seen[kind] += 1
            todo = self.first.get(kind)
            act = todo.pop(0) if todo else None
            if act is None:
                for pred, a in self.always:
                    if pred(method, target):
                        act = a
                        break
            if act:
                self.faults[kind] += 1
        return kind, act

    @staticmethod
    def read_request(sock):
        buf = b''
        while b'\r\n\r\n' not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, _, rest = buf.partition(b'\r\n\r\n')
        lines = head.decode('latin-1').split('\r\n')
        method, target, _ = lines[0].split(' ', 2)
        headers = [tuple(x.split(':', 1)) for x in lines[1:] if ':' in x]
        n = 0
        for k, v in headers:
            if k.strip().lower() == 'content-length':
                n = int(v)
        while len(rest) < n:
            chunk = sock.recv(min(1 << 20, n - len(rest)))
            if not chunk:
                return None
            rest += chunk
        return method, target, headers, rest

    @staticmethod
    def answer(sock, status, reason, body=b'', ctype='application/xml'):
        sock.sendall(('HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n'
                      'Connection: close\r\n\r\n' % (status, reason, ctype, len(body))).encode()
                     + body)

    def serve(self, sock):
        req = self.read_request(sock)
        if not req:
            return
        method, target, headers, body = req
        kind, act = self.action(method, target)
        if act == 'drop':
            return
        if act == 'stall' or (act or '').startswith('stall:'):
            time.sleep(float(act.partition(':')[2] or 3))
            return
        if act == '503':
            return self.answer(sock, 503, 'Slow Down', error_xml('SlowDown', 'Please reduce your request rate.'))
        if act == '500':
            return self.answer(sock, 500, 'Internal Server Error',
                               error_xml('InternalError', 'We encountered an internal error.'))
        q = urllib.parse.parse_qs(target.partition('?')[2], keep_blank_values=True)
        md5 = [v.strip() for k, v in headers if k.strip().lower() == 'content-md5']
        if md5 and md5[0] != base64.b64encode(hashlib.md5(body).digest()).decode():
            with self.lock:
                self.bad_digests += 1
            return self.answer(sock, 400, 'Bad Request', error_xml('BadDigest', 'The Content-MD5 you specified did not match what we received.'))
        if kind == 'abort':
            with self.lock:
                uid = q['uploadId'][0]
                if uid not in self.uploads:
                    return self.answer(sock, 404, 'Not Found', error_xml('NoSuchUpload', 'no such upload'))
                self.aborted.append(self.uploads.pop(uid))
            return self.answer(sock, 204, 'No Content')
        if kind == 'list-uploads':
            with self.lock:
                items = ''.join('<Upload><Key>%s</Key><UploadId>%s</UploadId></Upload>'
                                % (escape(k), escape(u)) for u, k in self.uploads.items())
            xml = ('<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult>'
                   '<Bucket>%s</Bucket><IsTruncated>false</IsTruncated>%s'
                   '</ListMultipartUploadsResult>' % (BUCKET, items))
            return self.answer(sock, 200, 'OK', xml.encode())
        status, resp = self.forward(method, target, headers, body)
        if kind == 'create' and status == 200:
            m = re.search(rb'<UploadId>([^<]+)</UploadId>', resp)
            key = urllib.parse.unquote(target.partition('?')[0].split('/', 2)[2])
            with self.lock:
                self.uploads[m.group(1).decode()] = key
                self.upload_keys[m.group(1).decode()] = key
        if kind == 'put-part' and status == 200:
            with self.lock:
                self.part_bytes[q['uploadId'][0]].append(len(body))
        if kind == 'complete' and status == 200:
            with self.lock:
                self.completed.append(self.uploads.pop(q['uploadId'][0], None))
        sock.sendall(resp)

    def forward(self, method, target, headers, body):
        with socket.create_connection(('127.0.0.1', self.upstream)) as up:
            head = '%s %s HTTP/1.1\r\n' % (method, target)
            for k, v in headers:
                if k.strip().lower() not in ('connection', 'keep-alive'):
                    head += '%s:%s\r\n' % (k, v)
            head += 'Connection: close\r\n\r\n'
            up.sendall(head.encode('latin-1') + body)
            chunks = []
            while True:
                c = up.recv(1 << 20)
                if not c:
                    break
                chunks.append(c)
        resp = b''.join(chunks)
        status = int(resp.split(b' ', 2)[1]) if resp.startswith(b'HTTP/') else 0
        return status, resp
