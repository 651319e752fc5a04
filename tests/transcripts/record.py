#!/usr/bin/env python3
"""Records what memcached answers to each transcript's requests.

A transcript (`*.t`) is a list of cases; each case is one connection:

    # a comment
    send: set a 0 0 3\\r\\nabc\\r\\n
    recv: STORED\\r\\n
    closed: yes            (optional: the server closes the connection)

`send`/`recv` use Python's bytes escapes. In `recv`, `{n}` stands for any
decimal number (CAS values, times), so the same transcript holds for any
server. This script starts a fresh Debian memcached for each file, sends every
case and rewrites the `recv:`/`closed:` lines with memcached's answers (CAS
values and other volatile numbers replaced by `{n}` where marked `~`).

Usage: tests/transcripts/record.py FILE.t ...   (needs: apt-get install memcached)
"""
import re
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unescape(text):
    return eval("b'''" + text.replace("'''", "\\'\\'\\'") + "'''")


def escape(data):
    out = []
    for b in data:
        c = chr(b)
        if c == "\\":
            out.append("\\\\")
        elif c == "\r":
            out.append("\\r")
        elif c == "\n":
            out.append("\\n")
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append("\\x%02x" % b)
    return "".join(out)


def exchange(port, data, settle=0.3):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(settle)
    out, closed = b"", False
    while True:
        try:
            chunk = s.recv(1 << 20)
        except socket.timeout:
            break
        if not chunk:
            closed = True
            break
        out += chunk
    s.close()
    return out, closed


# Numbers that differ between servers and runs: CAS values, times, sizes of
# internal structures. They are recorded as {n}.
VOLATILE = [
    (rb"(VALUE \S+ \d+ \d+ )\d+", rb"\1{n}"),
    (rb"( c)\d+", rb"\1{n}"),
    (rb"(cas=)\d+", rb"\1{n}"),
    (rb"(la=)\d+", rb"\1{n}"),
    (rb"( cls=)\d+", rb"\1{n}"),
    (rb"( size=)\d+", rb"\1{n}"),
]


def generalise(data):
    for pattern, replacement in VOLATILE:
        data = re.sub(pattern, replacement, data)
    return data


def record(path):
    port = free_port()
    server = subprocess.Popen(["memcached", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-u", "root"])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        lines = open(path).read().splitlines()
        result = []
        for line in lines:
            if line.startswith("recv:") or line.startswith("closed:"):
                continue
            result.append(line)
            if line.startswith("send:"):
                reply, closed = exchange(port, unescape(line[len("send: "):]))
                result.append("recv: " + escape(generalise(reply)))
                if closed:
                    result.append("closed: yes")
        open(path, "w").write("\n".join(result) + "\n")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    for file in sys.argv[1:]:
        record(file)
        print("recorded", file)
