"""Signs random requests with spotlab (sigv4-tool) and with botocore's own
signers (SigV4Auth, S3SigV4Auth, SigV4QueryAuth, S3SigV4QueryAuth), at the
same fixed time, and compares the Authorization headers and the presigned
URLs' signatures.

The requests are drawn from a seeded generator (SIGV4_SEED overrides the
seed; it is printed): methods, paths with odd characters and dot segments,
query parameters with repeats, empty values and unicode, headers with
spaces, tabs, mixed case and repeats, bodies, with and without a session
token, services ec2 and s3, header and presigned forms.

Where botocore itself departs from the general rules, the generator stays
inside what both implement alike: the presigned form gets no repeated query
names (botocore keeps only the first), header values stay clear of
non-ASCII white space (Python's str.split folds it), and no header is one
that botocore drops or rewrites (User-Agent, Expect, Date, ...)."""
import binascii
import datetime
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import types
from urllib.parse import parse_qsl, quote, urlsplit

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

N_CASES = 400

tool = sys.argv[1]
seed = int(os.environ.get("SIGV4_SEED", "20150830"))
print(f"seed {seed} (set SIGV4_SEED to replay another)")
rng = random.Random(seed)

REGIONS = ["us-east-1", "us-west-2", "eu-central-1", "ap-southeast-2", "cn-north-1"]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
QCHARS = list("abcXYZ019-_.~ +=&/%:!*'();,$@?#") + ["é", "ሴ", "😀", "\u00a0"]
PATH_SEGMENTS = ["a", "b c", "$x", "%20", "%2F", "100%", "..", ".", "", "é", "ሴ", "+", "=",
                 "!", "~", "*", "a:b", "(x)", "'", "@", ",", ";", "Key-_.~"]
KEY_CHARS = list("abcXYZ019-_.~ +=&!*'():;,$@") + ["é", "ሴ", "/", "//", "./", "../"]
HEADER_NAMES = ["X-Amz-Meta-Foo", "x-amz-meta-foo", "Content-Type", "X-Custom-Thing", "My-Header1",
                "my-header1", "Range", "Cache-Control", "X-Amz-Storage-Class", "x-amz-acl",
                "If-None-Match", "Content-MD5"]
VALUE_CHARS = list("abcXYZ019 -_.,;:=/\"'()*&^%$#@!~`") + ["  ", "\t", " \t ", "é", "ሴ"]


def rand_str(chars, lo, hi):
    return "".join(rng.choice(chars) for _ in range(rng.randint(lo, hi)))


def aws_encode(s, safe="-_.~"):
    return quote(s.encode("utf-8"), safe=safe)


def make_case():
    service = rng.choice(["ec2", "s3"])
    s3 = service == "s3"
    presign = rng.random() < 0.4
    region = rng.choice(REGIONS)
    scheme = rng.choice(["https", "https", "http"])
    bucket = "bkt-" + rand_str("abc019", 3, 8)
    if s3:
        host, path_prefix = rng.choice([
            (f"{bucket}.s3.{region}.amazonaws.com", ""),
            (f"s3.{region}.amazonaws.com", "/" + bucket),
            ("127.0.0.1:9000", "/" + bucket),
            ("LocalHost:4566", "/" + bucket),
        ])
        key = rand_str(KEY_CHARS, 0, 12)
        path = path_prefix + "/" + aws_encode(key, safe="/~")
    else:
        host = rng.choice([f"ec2.{region}.amazonaws.com", "EC2.Example.COM:8443",
                           f"ec2.{region}.amazonaws.com:443", "10.0.0.1"])
        segs = [rng.choice(PATH_SEGMENTS) for _ in range(rng.randint(0, 6))]
        path = "/" + "/".join(segs)
        if rng.random() < 0.2:
            path += "/"
    # Query: encoded AWS-style, as a client sends it.
    pairs = []
    names = []
    for _ in range(rng.choice([0, 0, 1, 2, 3, 6])):
        if names and not presign and rng.random() < 0.3:
            name = rng.choice(names)              # repeated name
        else:
            name = rand_str(QCHARS, 1 if presign else 0, 8)
            if presign and (name in names or name.lower().startswith("x-amz-")):
                continue
        names.append(name)
        kind = rng.random()
        if kind < 0.15:
            pairs.append(aws_encode(name))         # bare name
        elif kind < 0.3:
            pairs.append(aws_encode(name) + "=")   # empty value
        else:
            pairs.append(aws_encode(name) + "=" + aws_encode(rand_str(QCHARS, 0, 10)))
    url = f"{scheme}://{host}{path}" + ("?" + "&".join(pairs) if pairs else "")

    headers = []
    for _ in range(rng.randint(0, 5)):
        name = rng.choice(HEADER_NAMES)
        value = rand_str(VALUE_CHARS, 0, 12)
        headers.append([name, value])
    if rng.random() < 0.2:
        headers.append([rng.choice(["Host", "host"]), host.lower()])

    body = b""
    if not presign and rng.random() < 0.5:
        body = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    token = None
    if rng.random() < 0.5:
        token = rand_str(B64, 100, 400) + "=="
    case = {
        "method": rng.choice(["GET", "PUT", "POST", "DELETE", "HEAD"]),
        "url": url,
        "headers": headers,
        "body_hex": binascii.hexlify(body).decode(),
        "region": region,
        "service": service,
        "time": rng.randint(1420070400, 2082758399),   # 2015 to 2035
        "s3": s3,
        "presign_expires": rng.randint(1, 604800) if presign else 0,
        "creds": {
            "access_key_id": "AKIA" + rand_str("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 16),
            "secret_access_key": rand_str(B64, 40, 40),
            "session_token": token or "",
        },
    }
    if presign and not s3:
        # botocore's SigV4QueryAuth hashes the (empty) body; S3 presigns unsigned.
        case["payload_sha256"] = hashlib.sha256(b"").hexdigest()
    if not presign and s3 and rng.random() < 0.3:
        case["payload_sha256"] = "UNSIGNED-PAYLOAD"
    return case


class FixedClock:
    """Stands in for botocore.auth's datetime module at one instant."""

    def __init__(self):
        self.now = None
        fixed = self

        class DT(datetime.datetime):
            @classmethod
            def utcnow(cls):
                return fixed.now

            @classmethod
            def now(cls, tz=None):
                return fixed.now.replace(tzinfo=tz) if tz else fixed.now

        self.module = types.SimpleNamespace(datetime=DT, timezone=datetime.timezone)


class CanonicalCapture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.last = None

    def emit(self, record):
        if record.msg.startswith("CanonicalRequest"):
            self.last = record.args[0] if isinstance(record.args, tuple) else record.args


clock = FixedClock()
botocore.auth.datetime = clock.module
capture = CanonicalCapture()
auth_log = logging.getLogger("botocore.auth")
auth_log.setLevel(logging.DEBUG)
auth_log.addHandler(capture)
auth_log.propagate = False


def botocore_sign(case):
    clock.now = datetime.datetime.utcfromtimestamp(case["time"])
    body = binascii.unhexlify(case["body_hex"])
    req = AWSRequest(method=case["method"], url=case["url"], data=body or None)
    for name, value in case["headers"]:
        req.headers[name] = value                # appends: repeats stay repeats
    c = case["creds"]
    creds = Credentials(c["access_key_id"], c["secret_access_key"], c["session_token"] or None)
    if case["presign_expires"]:
        cls = botocore.auth.S3SigV4QueryAuth if case["s3"] else botocore.auth.SigV4QueryAuth
        signer = cls(creds, case["service"], case["region"], expires=case["presign_expires"])
    else:
        cls = botocore.auth.S3SigV4Auth if case["s3"] else botocore.auth.SigV4Auth
        signer = cls(creds, case["service"], case["region"])
        if case.get("payload_sha256") == "UNSIGNED-PAYLOAD":
            req.context["client_config"] = types.SimpleNamespace(
                s3={"payload_signing_enabled": False})
    capture.last = None
    signer.add_auth(req)
    return req, capture.last


def query_of(url):
    return sorted(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def compare(case, ours):
    """None when both agree, else a description of the difference."""
    theirs, creq = botocore_sign(case)
    if "error" in ours:
        return f"spotlab refused the request: {ours['error']}", creq
    if case["presign_expires"]:
        a, b = urlsplit(ours["url"]), urlsplit(theirs.url)
        if (a.scheme, a.netloc, a.path) != (b.scheme, b.netloc, b.path):
            return f"URL differs:\n  spotlab  {ours['url']}\n  botocore {theirs.url}", creq
        if query_of(ours["url"]) != query_of(theirs.url):
            return (f"presigned query differs:\n  spotlab  {ours['url']}\n"
                    f"  botocore {theirs.url}"), creq
        return None, creq
    want = {"authorization": theirs.headers["Authorization"],
            "x-amz-date": theirs.headers["X-Amz-Date"]}
    if case["s3"]:
        want["x-amz-content-sha256"] = theirs.headers["X-Amz-Content-SHA256"]
    for k, v in want.items():
        if ours.get(k) != v:
            return (f"{k} differs:\n  spotlab  {ours.get(k)}\n  botocore {v}\n"
                    f"spotlab's canonical request:\n{ours.get('canonical_request')}"), creq
    return None, creq


cases = [make_case() for _ in range(N_CASES)]
text = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
proc = subprocess.run([tool], input=text.encode("utf-8"), capture_output=True)
if proc.returncode != 0:
    print(f"sigv4-tool exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    sys.exit(1)
answers = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
if len(answers) != len(cases):
    print(f"sigv4-tool answered {len(answers)} lines for {len(cases)} requests")
    sys.exit(1)

mismatches = 0
forms = {}
for i, (case, ours) in enumerate(zip(cases, answers)):
    kind = ("s3" if case["s3"] else "ec2") + ("-presign" if case["presign_expires"] else "-header")
    forms[kind] = forms.get(kind, 0) + 1
    diff, creq = compare(case, ours)
    if diff:
        mismatches += 1
        if mismatches == 1:
            print(f"first mismatch: case {i} of seed {seed}")
            print(json.dumps(case, ensure_ascii=False, indent=1))
            print(diff)
            print(f"botocore's canonical request:\n{creq}")
print(f"{len(cases)} requests compared with botocore ({', '.join(f'{k} {v}' for k, v in sorted(forms.items()))}), "
      f"{mismatches} mismatches")
# Every form must have been exercised, or the comparison proves little.
sys.exit(1 if mismatches or len(forms) < 4 or min(forms.values()) < 40 else 0)
