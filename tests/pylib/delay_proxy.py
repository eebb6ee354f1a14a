#!/usr/bin/python3
"""A TCP proxy that delays what it forwards: a distant server on this machine.

usage: delay_proxy.py LISTEN_PORT TARGET_HOST:PORT ONE_WAY_MS

Each connection accepted on 127.0.0.1:LISTEN_PORT gets its own connection to
the target. The bytes read from either side are written to the other
ONE_WAY_MS milliseconds after they came, in order, so a round trip through
the proxy takes twice that longer; how many bytes may be under way is not
limited (a long fat network, as between a notebook and a gateway in another
region). Prints "ready" on stdout once it listens; runs until killed.
"""
import collections
import socket
import sys
import threading
import time

READ_BYTES = 1 << 18


def pump(src, dst, delay_s):
    """src's bytes to dst, each delay_s after it came; dst shut for writing at src's end."""
    queue = collections.deque()
    cond = threading.Condition()
    done = []

    def writer():
        while True:
            with cond:
                while not queue and not done:
                    cond.wait()
                if not queue:
                    break
                at, data = queue.popleft()
            wait = at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    while True:
        try:
            data = src.recv(READ_BYTES)
        except OSError:
            data = b""
        with cond:
            if data:
                queue.append((time.monotonic() + delay_s, data))
            else:
                done.append(True)
            cond.notify()
        if not data:
            break
    t.join()


def serve(conn, target, delay_s):
    try:
        up = socket.create_connection(target)
    except OSError:
        conn.close()
        return
    for s in (conn, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    a = threading.Thread(target=pump, args=(conn, up, delay_s), daemon=True)
    b = threading.Thread(target=pump, args=(up, conn, delay_s), daemon=True)
    a.start()
    b.start()
    a.join()
    b.join()
    conn.close()
    up.close()


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip())
    port = int(sys.argv[1])
    host, _, tport = sys.argv[2].rpartition(":")
    delay_s = float(sys.argv[3]) / 1000
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn, (host, int(tport)), delay_s), daemon=True).start()


if __name__ == "__main__":
    main()
