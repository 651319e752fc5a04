#!/usr/bin/env python3
"""Driver for php_sessions.sh (stdlib only).

For each of N sessions: GET /page1.php on web server A (creates a session,
stores ~1 KB random data + sha1 in it, prints "<sid> <sha1>"), take the
PHPSESSID cookie, GET /page2.php on web server B with that cookie (prints
"OK <sid> <sha1 of data read> <stored sha1>" or "MISSING <sid>") and compare.

Phases:
  both   write+read each session right away (default)
  write  only page1 on A; save "<sid> <sha1>" lines to --state
  read   only page2 on B for the sessions in --state

Prints "sessions: N ok, M lost, K corrupted" and exits 1 unless all are ok
(the write phase prints "written: N ok, M failed").  Only 127.0.0.1 is used.
"""

import argparse
import concurrent.futures as cf
import http.client
import os
import re
import sys
import threading
import time

HOST = "127.0.0.1"
SID_RE = re.compile(r"PHPSESSID=([A-Za-z0-9,-]+)")
RETRYABLE = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)

_lock = threading.Lock()
_stats = {"retries": 0, "skipped": 0}
_errors = []
# Fail fast: after this many request errors stop starting new sessions (a
# broken kv server makes every PHP request hang in libmemcached timeouts).
MAX_ERRORS = int(os.environ.get("MAX_ERRORS", "25"))
_abort = threading.Event()


def note_error(msg):
    with _lock:
        _errors.append(msg)
        if len(_errors) >= MAX_ERRORS:
            _abort.set()


def skip():
    with _lock:
        _stats["skipped"] += 1


HTTP_TIMEOUT = float(os.environ.get("HTTP_TIMEOUT", "10"))


def http_get(port, path, cookie=None, timeout=HTTP_TIMEOUT, retries=3):
    """GET http://127.0.0.1:port/path -> (status, headers, body str).

    Connection-level failures before any response (refused/reset by the
    PHP built-in web server under load) are retried a few times; the count
    is reported.  HTTP-level answers are never retried.
    """
    for attempt in range(retries + 1):
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        try:
            headers = {"Connection": "close"}
            if cookie:
                headers["Cookie"] = cookie
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            body = resp.read().decode("utf-8", "replace")
            return resp.status, resp.getheaders(), body
        except RETRYABLE:
            if attempt == retries:
                raise
            with _lock:
                _stats["retries"] += 1
            time.sleep(0.05 * (attempt + 1))
        finally:
            conn.close()


def write_one(port_a, i):
    """-> (sid, sum) or None on failure."""
    if _abort.is_set():
        skip()
        return None
    try:
        status, headers, body = http_get(port_a, "/page1.php?n=%d" % i)
    except Exception as e:  # noqa: BLE001
        note_error("write #%d: %s: %s" % (i, type(e).__name__, e))
        return None
    if status != 200:
        note_error("write #%d: HTTP %d: %r" % (i, status, body[:200]))
        return None
    parts = body.split()
    if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{40}", parts[1]):
        note_error("write #%d: unexpected body %r" % (i, body[:200]))
        return None
    sid, csum = parts
    cookie_sid = None
    for name, value in headers:
        if name.lower() == "set-cookie":
            m = SID_RE.search(value)
            if m:
                cookie_sid = m.group(1)
    if cookie_sid != sid:
        note_error("write #%d: cookie sid %r != page sid %r" % (i, cookie_sid, sid))
        return None
    return sid, csum


def read_one(port_b, sid, csum):
    """-> 'ok' | 'lost' | 'corrupted'."""
    if _abort.is_set():
        skip()
        return "lost"
    try:
        status, _headers, body = http_get(port_b, "/page2.php", cookie="PHPSESSID=" + sid)
    except Exception as e:  # noqa: BLE001
        note_error("read %s: %s: %s" % (sid, type(e).__name__, e))
        return "lost"
    parts = body.split()
    if status != 200:
        note_error("read %s: HTTP %d: %r" % (sid, status, body[:200]))
        return "lost"
    if parts[:1] == ["MISSING"]:
        return "lost"
    if len(parts) != 4 or parts[0] != "OK":
        note_error("read %s: unexpected body %r" % (sid, body[:200]))
        return "lost"
    if parts[1] != sid:
        note_error("read %s: page2 saw sid %s" % (sid, parts[1]))
        return "corrupted"
    if parts[2] != csum or parts[3] != csum:
        note_error("read %s: checksum %s/%s, expected %s" % (sid, parts[2], parts[3], csum))
        return "corrupted"
    return "ok"


def run_pool(fn, items, concurrency):
    with cf.ThreadPoolExecutor(max_workers=concurrency) as ex:
        return list(ex.map(lambda a: fn(*a), items))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port-a", type=int, required=True, help="web server A (writes)")
    ap.add_argument("--port-b", type=int, required=True, help="web server B (reads)")
    ap.add_argument("--sessions", type=int, default=int(os.environ.get("SESSIONS", "1000")))
    ap.add_argument("--concurrency", type=int, default=int(os.environ.get("CONCURRENCY", "64")))
    ap.add_argument("--phase", choices=["both", "write", "read"], default="both")
    ap.add_argument("--state", help="file with '<sid> <sha1>' lines (write/read phases)")
    args = ap.parse_args()
    if args.phase != "both" and not args.state:
        ap.error("--state is required for --phase write/read")

    t0 = time.monotonic()
    n = args.sessions
    lost = corrupted = ok = 0
    exit_code = 0

    if args.phase == "both":
        def both(i):
            w = write_one(args.port_a, i)
            if w is None:
                return "lost"
            return read_one(args.port_b, *w)

        results = run_pool(both, [(i,) for i in range(n)], args.concurrency)
    elif args.phase == "write":
        written = run_pool(lambda i: write_one(args.port_a, i), [(i,) for i in range(n)], args.concurrency)
        good = [w for w in written if w is not None]
        with open(args.state, "w") as f:
            for sid, csum in good:
                f.write("%s %s\n" % (sid, csum))
            # failed writes are recorded so the read phase counts them as lost
            for _ in range(n - len(good)):
                f.write("- -\n")
        print("written: %d ok, %d failed (%.1fs, %d connection retries)"
              % (len(good), n - len(good), time.monotonic() - t0, _stats["retries"]))
        if _abort.is_set():
            print("  ABORTED after %d errors: %d sessions not attempted" % (len(_errors), _stats["skipped"]))
        for e in _errors[:10]:
            print("  error:", e, file=sys.stderr)
        return 0 if len(good) == n else 1
    else:
        pairs = []
        with open(args.state) as f:
            for line in f:
                sid, csum = line.split()
                pairs.append((sid, csum))
        n = len(pairs)
        results = run_pool(
            lambda sid, csum: "lost" if sid == "-" else read_one(args.port_b, sid, csum),
            pairs,
            args.concurrency,
        )

    ok = results.count("ok")
    lost = results.count("lost")
    corrupted = results.count("corrupted")
    elapsed = time.monotonic() - t0
    print("sessions: %d ok, %d lost, %d corrupted" % (ok, lost, corrupted))
    print("  (%d sessions, concurrency %d, %.1fs, %.0f sessions/s, %d connection retries, %d errors)"
          % (n, args.concurrency, elapsed, n / elapsed if elapsed else 0, _stats["retries"], len(_errors)))
    if _abort.is_set():
        print("  ABORTED after %d errors: %d sessions not attempted (counted as lost)"
              % (len(_errors), _stats["skipped"]))
    for e in _errors[:10]:
        print("  error:", e, file=sys.stderr)
    if ok != n or n == 0:
        exit_code = 1
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
