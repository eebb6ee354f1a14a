"""The S3 client (through s3-tool) and the worker's S3 store against s3rver,
checked with boto3: what spotlab writes boto3 reads, bytes and sha256
metadata; what boto3 writes spotlab reads; lists of several pages; a wrong
x-amz-meta-sha256; 503s, dropped and stalled connections; a multipart
upload whose part keeps failing.

usage: test_s3.py CASE S3_TOOL TEST_S3_STORE"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

from s3_fixture import BUCKET, FaultProxy, S3rver, boto, run_tool, tool_env

MIB = 1 << 20
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print('FAIL: %s' % what, file=sys.stderr)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def write(path, data):
    with open(path, 'wb') as f:
        f.write(data)


def read(path):
    with open(path, 'rb') as f:
        return f.read()


def no_secrets(text, what):
    """Error sentences name keys, never a signed URL's query."""
    check('X-Amz-' not in text and 'Signature' not in text and 'http://' not in text,
          '%s: the error shows a URL or a signature: %s' % (what, text))


def case_roundtrip(tool, tmp, s3, **_):
    b = boto(s3.url)
    url = 's3://%s/pfx/deep' % BUCKET
    # a small object: one PUT
    small = os.urandom(1000)
    write(os.path.join(tmp, 'small'), small)
    run_tool(tool, s3.url, 'put', url, 'small.bin', os.path.join(tmp, 'small'))
    o = b.get_object(Bucket=BUCKET, Key='pfx/deep/small.bin')
    check(o['Body'].read() == small, 'boto3 reads the small object spotlab wrote')
    check(o['Metadata'].get('sha256') == sha(small), 'the small object carries its sha256')
    # several parts: 17 MiB in 5 MiB parts is 4
    big = os.urandom(17 * MIB + 12345)
    write(os.path.join(tmp, 'big'), big)
    with FaultProxy(s3.port) as proxy:  # no faults: it counts
        run_tool(tool, proxy.url, 'put', url, 'ckpt/big.tc', os.path.join(tmp, 'big'),
                 opts=['--part-mib', '5', '--threads', '3'])
        check(proxy.seen['create'] == 1 and proxy.seen['put-part'] == 4 and proxy.seen['complete'] == 1,
              'one upload of 4 parts: %r' % proxy.seen)
    o = b.get_object(Bucket=BUCKET, Key='pfx/deep/ckpt/big.tc')
    check(o['Body'].read() == big, 'boto3 reads the multipart object spotlab wrote')
    check(o['Metadata'].get('sha256') == sha(big), 'the multipart object carries its sha256')
    # and spotlab reads both back, the large one in ranges
    run_tool(tool, s3.url, 'get', url, 'ckpt/big.tc', os.path.join(tmp, 'big.out'),
             opts=['--part-mib', '5'])
    check(read(os.path.join(tmp, 'big.out')) == big, 'spotlab reads its multipart object in ranges')
    run_tool(tool, s3.url, 'get', url, 'small.bin', os.path.join(tmp, 'out', 'small.out'))
    check(read(os.path.join(tmp, 'out', 'small.out')) == small, 'spotlab reads its small object')
    # keys with odd characters
    odd = ['odd/sp ace.bin', 'odd/plus+eq=amp&semi;.bin', 'odd/\u00fcml\u00e4ut-\u00df-\u65e5\u672c.bin',
           'odd/q?h#p%25t~.bin', "odd/(p)[b]{c},:@$!'*.bin"]
    for i, k in enumerate(odd):
        data = ('object %d %s' % (i, k)).encode() * 7
        write(os.path.join(tmp, 'odd'), data)
        run_tool(tool, s3.url, 'put', url, k, os.path.join(tmp, 'odd'))
        o = b.get_object(Bucket=BUCKET, Key='pfx/deep/' + k)
        check(o['Body'].read() == data, 'boto3 reads odd key %r' % k)
        check(o['Metadata'].get('sha256') == sha(data), 'odd key %r carries its sha256' % k)
        run_tool(tool, s3.url, 'get', url, k, os.path.join(tmp, 'odd.out'))
        check(read(os.path.join(tmp, 'odd.out')) == data, 'spotlab reads odd key %r' % k)
    _, out, _ = run_tool(tool, s3.url, 'list', url, 'odd/')
    check(out.splitlines() == sorted(odd), 'list of the odd keys: %r' % out.splitlines())
    # s3rver knows one key id: another is refused (403)
    st, _, err = run_tool(tool, s3.url, 'get', url, 'small.bin', os.path.join(tmp, 'wrong'), check=False,
                          env={'AWS_ACCESS_KEY_ID': 'AKIDNOTKNOWN'})
    check(st == 1 and 'SL_EAUTH' in err and 'small.bin' in err, 'an unknown key id is SL_EAUTH: %s' % err)
    no_secrets(err, 'unknown key id')
    check(not os.path.exists(os.path.join(tmp, 'wrong')), 'a refused get leaves no file')
    # a missing key: ENOENT, no file
    st, _, err = run_tool(tool, s3.url, 'get', url, 'nope.bin', os.path.join(tmp, 'nope'), check=False)
    check(st == 1 and 'ENOENT' in err and 'nope.bin' in err, 'a missing key is ENOENT: %s' % err)
    check(not os.path.exists(os.path.join(tmp, 'nope')), 'a missing key leaves no file')
    # rm
    run_tool(tool, s3.url, 'rm', url, 'small.bin')
    _, out, _ = run_tool(tool, s3.url, 'list', url)
    check('small.bin' not in out.splitlines() and 'ckpt/big.tc' in out.splitlines(),
          'rm removes one key: %r' % out.splitlines())


def case_boto_written(tool, tmp, s3, **_):
    from boto3.s3.transfer import TransferConfig
    b = boto(s3.url)
    url = 's3://%s' % BUCKET
    small = os.urandom(3000)
    b.put_object(Bucket=BUCKET, Key='b/small', Body=small, Metadata={'sha256': sha(small)})
    run_tool(tool, s3.url, 'get', url, 'b/small', os.path.join(tmp, 'small'))
    check(read(os.path.join(tmp, 'small')) == small, 'spotlab reads what boto3 put')
    _, out, _ = run_tool(tool, s3.url, 'head', url, 'b/small')
    check(out.split()[0] == '3000' and out.split()[2] == sha(small), 'head: %s' % out)
    plain = b'no metadata here\n' * 100
    b.put_object(Bucket=BUCKET, Key='b/plain', Body=plain)
    run_tool(tool, s3.url, 'get', url, 'b/plain', os.path.join(tmp, 'plain'))
    check(read(os.path.join(tmp, 'plain')) == plain, 'an object without sha256 metadata reads')
    big = os.urandom(12 * MIB + 7)
    write(os.path.join(tmp, 'big.src'), big)
    b.upload_file(os.path.join(tmp, 'big.src'), BUCKET, 'b/big',
                  ExtraArgs={'Metadata': {'sha256': sha(big)}},
                  Config=TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB))
    for part in ('5', '64'):
        run_tool(tool, s3.url, 'get', url, 'b/big', os.path.join(tmp, 'big'), opts=['--part-mib', part])
        check(read(os.path.join(tmp, 'big')) == big, 'spotlab reads boto3 multipart (%s MiB ranges)' % part)


def case_list_pages(tool, tmp, s3, **_):
    b = boto(s3.url)
    many = ['many/k%03d' % i for i in range(23)]
    for k in many + ['other/a', 'other/b', 'manyx']:
        b.put_object(Bucket=BUCKET, Key='lp/' + k, Body=k.encode())
    with FaultProxy(s3.port) as proxy:
        _, out, _ = run_tool(tool, proxy.url, 'list', 's3://%s/lp' % BUCKET, 'many/',
                             opts=['--page-keys', '5'])
        check(out.splitlines() == many, 'list of 23 keys in pages of 5: %r' % out.splitlines())
        check(proxy.seen['list'] == 5, 'five pages were asked for: %d' % proxy.seen['list'])
        _, out, _ = run_tool(tool, proxy.url, 'list', 's3://%s/lp' % BUCKET, opts=['--page-keys', '4'])
        check(out.splitlines() == sorted(many + ['other/a', 'other/b', 'manyx']),
              'list of everything under the store prefix: %r' % out.splitlines())
    _, out, _ = run_tool(tool, s3.url, 'list', 's3://%s/lp' % BUCKET, 'none/')
    check(out == '', 'an empty list: %r' % out)


def case_checksum(tool, tmp, s3, **_):
    b = boto(s3.url)
    url = 's3://%s' % BUCKET
    good, bad = os.urandom(5000), os.urandom(6 * MIB)
    b.put_object(Bucket=BUCKET, Key='c/small', Body=good, Metadata={'sha256': sha(b'other bytes')})
    b.put_object(Bucket=BUCKET, Key='c/large', Body=bad, Metadata={'sha256': sha(good)})
    dst = os.path.join(tmp, 'dl')
    os.makedirs(dst)
    st, _, err = run_tool(tool, s3.url, 'get', url, 'c/small', os.path.join(dst, 'small'), check=False)
    check(st == 1 and 'SL_ECHECKSUM' in err and 'c/small' in err, 'a wrong sha256 fails: %s' % err)
    no_secrets(err, 'checksum')
    check(os.listdir(dst) == [], 'no file and no temporary left: %r' % os.listdir(dst))
    # an existing destination stays as it was, on the ranged path too
    write(os.path.join(dst, 'large'), b'previous')
    st, _, err = run_tool(tool, s3.url, 'get', url, 'c/large', os.path.join(dst, 'large'), check=False,
                          opts=['--part-mib', '5'])
    check(st == 1 and 'SL_ECHECKSUM' in err, 'a wrong sha256 on a ranged download fails: %s' % err)
    check(os.listdir(dst) == ['large'] and read(os.path.join(dst, 'large')) == b'previous',
          'the destination is untouched: %r' % os.listdir(dst))


def case_faults(tool, tmp, s3, **_):
    b = boto(s3.url)
    url = 's3://%s/f' % BUCKET
    fast = ['--tries', '5', '--backoff-ms', '20']
    small = os.urandom(20000)
    write(os.path.join(tmp, 'small'), small)
    big = os.urandom(11 * MIB)
    write(os.path.join(tmp, 'big'), big)
    with FaultProxy(s3.port) as proxy:
        proxy.first = {'put-object': ['503', 'drop'], 'head': ['503'], 'get-object': ['drop', '503'],
                       'create': ['503'], 'put-part': ['drop', '503', '500'], 'complete': ['503'],
                       'list': ['drop']}
        run_tool(tool, proxy.url, 'put', url, 'small', os.path.join(tmp, 'small'), opts=fast)
        run_tool(tool, proxy.url, 'get', url, 'small', os.path.join(tmp, 'small.out'), opts=fast)
        check(read(os.path.join(tmp, 'small.out')) == small, 'get through faults')
        run_tool(tool, proxy.url, 'put', url, 'big', os.path.join(tmp, 'big'), opts=fast + ['--part-mib', '5'])
        _, out, _ = run_tool(tool, proxy.url, 'list', url, opts=fast)
        check(out.splitlines() == ['big', 'small'], 'list through a dropped connection: %r' % out)
        for kind, n in (('put-object', 2), ('head', 1), ('get-object', 2), ('create', 1),
                        ('put-part', 3), ('complete', 1), ('list', 1)):
            check(proxy.faults[kind] == n, '%d faults on %s, wanted %d' % (proxy.faults[kind], kind, n))
        # a stalled answer: the try times out and the next one succeeds
        proxy.first = {'get-object': ['stall']}
        _, _, _ = run_tool(tool, proxy.url, 'get', url, 'small', os.path.join(tmp, 'small2'),
                           opts=fast + ['--timeout-ms', '1000'])
        check(proxy.faults['get-object'] == 3, 'the stall was met')
        check(read(os.path.join(tmp, 'small2')) == small, 'get after a stalled try')
    o = b.get_object(Bucket=BUCKET, Key='f/small')
    check(o['Body'].read() == small and o['Metadata'].get('sha256') == sha(small), 'small object whole')
    o = b.get_object(Bucket=BUCKET, Key='f/big')
    check(o['Body'].read() == big and o['Metadata'].get('sha256') == sha(big), 'multipart object whole')


def case_abort(tool, tmp, s3, **_):
    url = 's3://%s' % BUCKET
    v1 = os.urandom(4000)
    write(os.path.join(tmp, 'v1'), v1)
    run_tool(tool, s3.url, 'put', url, 'victim.tc', os.path.join(tmp, 'v1'))
    write(os.path.join(tmp, 'v2'), os.urandom(12 * MIB))
    with FaultProxy(s3.port) as proxy:
        proxy.always = [(lambda m, t: m == 'PUT' and 'partNumber=2&' in t + '&', '500')]
        st, _, err = run_tool(tool, proxy.url, 'put', url, 'victim.tc', os.path.join(tmp, 'v2'),
                              check=False, opts=['--part-mib', '5', '--tries', '3', '--backoff-ms', '10',
                                                 '--uploads', '1'])
        check(st == 1 and 'victim.tc' in err and 'part 2 of 3' in err and 'InternalError' in err,
              'the failing part is named: %s' % err)
        no_secrets(err, 'abort')
        check(proxy.faults['put-part'] == 3, 'part 2 was tried 3 times: %d' % proxy.faults['put-part'])
        check(proxy.seen['complete'] == 0, 'no completion was asked for')
        check(proxy.aborted == ['victim.tc'], 'the upload was aborted: %r' % proxy.aborted)
        said = [ln.split() for ln in err.splitlines() if ln.startswith('upload ')]
        check(len(said) == 2 and [w[1] for w in said] == ['open', 'ended']
              and said[0][2:] == said[1][2:] == ['victim.tc', said[0][3]],
              'the caller is told of the upload as it opens and once it is aborted: %r' % said)
        ups = boto(proxy.url).list_multipart_uploads(Bucket=BUCKET)
        check(not ups.get('Uploads'), 'no upload is left open: %r' % ups.get('Uploads'))
        # its abort failing too: the caller is told it opened, never that it ended
        # (its record stays, for someone to abort it later)
        proxy.always = [(lambda m, t: m == 'PUT' and 'partNumber=2&' in t + '&', '500'),
                        (lambda m, t: m == 'DELETE' and 'uploadId=' in t, '500')]
        st, _, err = run_tool(tool, proxy.url, 'put', url, 'victim.tc', os.path.join(tmp, 'v2'),
                              check=False, opts=['--part-mib', '5', '--tries', '2', '--backoff-ms', '10',
                                                 '--uploads', '1'])
        said = [ln.split()[1] for ln in err.splitlines() if ln.startswith('upload ')]
        check(st == 1 and 'its abort failed too' in err and said == ['open'],
              'an upload whose abort fails is not said to have ended: %r, %s' % (said, err.strip()[-300:]))
        left = list(proxy.uploads)
        check(len(left) == 1, 'it is left open: %r' % left)
        proxy.always = []
        for uid in left:
            boto(proxy.url).abort_multipart_upload(Bucket=BUCKET, Key='victim.tc', UploadId=uid)
        # the caller refuses the upload as it opens (it cannot record it): no part is sent,
        # and the upload is aborted
        parts = proxy.seen['put-part']
        st, _, err = run_tool(tool, proxy.url, 'put', url, 'victim.tc', os.path.join(tmp, 'v2'),
                              check=False, opts=['--part-mib', '5', '--uploads', '2'])
        said = [ln.split()[1] for ln in err.splitlines() if ln.startswith('upload ')]
        check(st == 1 and 'cannot be recorded' in err and said == ['open', 'ended'],
              'a start the caller refuses fails the put: %r, %s' % (said, err.strip()[-300:]))
        check(proxy.seen['put-part'] == parts, 'no part was sent')
        check(not boto(proxy.url).list_multipart_uploads(Bucket=BUCKET).get('Uploads'), 'none open')
        aborted = len(proxy.aborted)
        # a body cut off mid-way (the test hook): aborted too
        st, _, err = run_tool(tool, proxy.url, 'put', url, 'victim.tc', os.path.join(tmp, 'v2'),
                              check=False, opts=['--part-mib', '5', '--fail-after', str(7 * (1 << 20))])
        check(st == 1 and 'victim.tc' in err, 'a cut-off body fails: %s' % err)
        check(proxy.aborted == ['victim.tc'] * (aborted + 1), 'aborted again: %r' % proxy.aborted)
        check(not boto(proxy.url).list_multipart_uploads(Bucket=BUCKET).get('Uploads'), 'none open')
        # cancelled while a part hangs (a stopping gateway; after 3 s, when the part's PUT
        # is held): it ends within seconds, and the upload is still aborted
        proxy.always = [(lambda m, t: m == 'PUT' and 'partNumber=2&' in t + '&', 'stall:60')]
        t0 = time.monotonic()
        st, _, err = run_tool(tool, proxy.url, 'put', url, 'victim.tc', os.path.join(tmp, 'v2'),
                              check=False, opts=['--part-mib', '5', '--cancel-after-ms', '3000'])
        took = time.monotonic() - t0
        check(st == 1 and 'ECANCELED' in err and took < 10,
              'a cancel stops the upload in %.1f s: %s' % (took, err.strip()))
        check(proxy.aborted == ['victim.tc'] * (aborted + 2), 'and aborts it: %r' % proxy.aborted)
        check(not boto(proxy.url).list_multipart_uploads(Bucket=BUCKET).get('Uploads'), 'none open')
    o = boto(s3.url).get_object(Bucket=BUCKET, Key='victim.tc')
    check(o['Body'].read() == v1 and o['Metadata'].get('sha256') == sha(v1),
          'the previous object is intact')


def case_store(tool, tmp, s3, store_test):
    with FaultProxy(s3.port) as proxy:  # S3's refusal of cut-off bodies
        p = subprocess.run([store_test, 's3://%s/store/root' % BUCKET, tmp], env=tool_env(proxy.url),
                           capture_output=True, text=True, timeout=600)
        check(len(proxy.aborted) == 1 and not proxy.uploads, 'the cut-off multipart put was aborted')
    sys.stderr.write(p.stderr)
    check(p.returncode == 0, 'test-s3-store passed')
    keys = [o['Key'] for o in boto(s3.url).list_objects_v2(Bucket=BUCKET).get('Contents', [])]
    check('store/root/J000001/ckpt-00000010.tc' in keys, 'the store writes under its prefix: %r' % keys)


def case_presign(tool, tmp, s3, **_):
    """Each op's method and query, and its signature as botocore computes it
    for the same URL at the same time (s3rver takes any SigV4 signature, so
    this is where signing is checked)."""
    import datetime
    import urllib.parse
    from unittest import mock
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    at = 1700000000
    creds = Credentials('AKIDEXAMPLE', 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', 'session/token+=')
    env = {'AWS_ACCESS_KEY_ID': creds.access_key, 'AWS_SECRET_ACCESS_KEY': creds.secret_key,
           'AWS_SESSION_TOKEN': creds.token, 'S3_TOOL_TIME': str(at)}
    digest = sha(b'x')
    cases = [  # op, key, upload id, part, sha256, token; method; query without auth
        ('get', 'ckpt/a b+c.tc', None, None, None, None, 'GET', ''),
        ('head', 'k', None, None, None, None, 'HEAD', ''),
        ('put', 'J1/\u00fc?#%.tc', None, None, digest, None, 'PUT', ''),
        ('delete', 'k', None, None, None, None, 'DELETE', ''),
        ('list', 'J1/', None, None, None, None, 'GET', 'list-type=2&prefix=pfx%2FJ1%2F'),
        ('list', '', None, None, None, 'tok/+=', 'GET',
         'list-type=2&prefix=pfx%2F&continuation-token=tok%2F%2B%3D'),
        ('mpu_create', 'big', None, None, digest, None, 'POST', 'uploads='),
        ('mpu_part', 'big', 'up/id+1', '7', None, None, 'PUT', 'partNumber=7&uploadId=up%2Fid%2B1'),
        ('mpu_complete', 'big', 'up', None, None, None, 'POST', 'uploadId=up'),
        ('mpu_abort', 'big', 'up', None, None, None, 'DELETE', 'uploadId=up'),
    ]

    class Frozen(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return datetime.datetime.utcfromtimestamp(at)

    for op, key, uid, part, digest_, token, method, query in cases:
        args = [op, key] + [x or '-' for x in (uid, part, digest_, token)]
        _, out, _ = run_tool(tool, s3.url, 'presign', 's3://%s/pfx' % BUCKET, *args, env=env)
        url = out.strip()
        base, _, q = url.partition('?')
        plain = '&'.join(x for x in q.split('&') if not x.startswith('X-Amz-'))
        check(plain == query, '%s: query %r, wanted %r' % (op, plain, query))
        want_path = '/%s/pfx/%s' % (BUCKET, urllib.parse.quote(key, safe='/~')) if op != 'list' else '/' + BUCKET
        check(urllib.parse.urlsplit(base).path == want_path, '%s: path %s' % (op, base))
        headers = {'x-amz-meta-sha256': digest_} if digest_ else {}
        req = AWSRequest(method=method, url=base + ('?' + plain if plain else ''), headers=headers)
        with mock.patch.object(botocore.auth.datetime, 'datetime', Frozen):
            botocore.auth.S3SigV4QueryAuth(creds, 's3', 'us-east-1', expires=3600).add_auth(req)
        theirs = urllib.parse.parse_qs(urllib.parse.urlsplit(req.url).query)
        ours = urllib.parse.parse_qs(q)
        for p in ('X-Amz-SignedHeaders', 'X-Amz-Credential', 'X-Amz-Date', 'X-Amz-Security-Token',
                  'X-Amz-Signature'):
            check(ours.get(p) == theirs.get(p), '%s %r: %s %r, botocore %r' % (op, key, p, ours.get(p),
                                                                              theirs.get(p)))


CASES = {'presign': case_presign, 'roundtrip': case_roundtrip, 'boto-written': case_boto_written,
         'list-pages': case_list_pages, 'checksum': case_checksum, 'faults': case_faults,
         'abort': case_abort, 'store': case_store}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix='spotlab-s3-test-')
    try:
        with S3rver() as s3:
            CASES[sys.argv[1]](sys.argv[2], tmp, s3, store_test=sys.argv[3])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%s: %s' % (sys.argv[1], 'FAILED: %d' % len(FAILURES) if FAILURES else 'ok'))
    return 1 if FAILURES else 0


if __name__ == '__main__':
    sys.exit(main())
