"""pytest fixtures for the external-client tests.

If KURA_ADDR (host:port) is set, tests run against that server.  Otherwise a
server is started for the test session from the KURA_SERVER_CMD template
(same convention as lib.sh: `{port}` is replaced by a free port, the command
runs via `bash -c "exec ..."` from the repository root) and KURA_ADDR is exported for the tests.
"""

import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest
from pymemcache.client.base import Client

def _sigterm_to_interrupt(signum, frame):
    # `timeout` (run-all.sh) sends SIGTERM: turn it into KeyboardInterrupt so
    # pytest runs the fixture finalizers and stops the server it started.
    raise KeyboardInterrupt("SIGTERM")


signal.signal(signal.SIGTERM, _sigterm_to_interrupt)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _default_cmd():
    rel = os.path.join(REPO_ROOT, "target", "release", "kura")
    dbg = os.path.join(REPO_ROOT, "target", "debug", "kura")
    binary = "target/debug/kura" if (not os.path.exists(rel) and os.path.exists(dbg)) else "target/release/kura"
    return binary + " serve -p {port} -l 127.0.0.1"


def _die_with_parent():
    """preexec_fn: SIGTERM the server if pytest dies (e.g. killed by timeout)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort, Linux only
        pass


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _answers_version(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"version\r\n")
            buf = b""
            while b"\n" not in buf:
                chunk = s.recv(256)
                if not chunk:
                    return False
                buf += chunk
            return buf.startswith(b"VERSION ")
    except OSError:
        return False


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def kura_addr():
    addr = os.environ.get("KURA_ADDR")
    if addr:
        host, port = addr.rsplit(":", 1)
        yield host, int(port)
        return

    template = os.environ.get("KURA_SERVER_CMD") or _default_cmd()
    last_err = None
    for _attempt in range(3):
        port = _free_port()
        # same as lib.sh: run through bash so quoting/env works identically
        argv = ["bash", "-c", "exec " + template.replace("{port}", str(port))]
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if _answers_version(port):
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if proc.poll() is None and _answers_version(port):
            os.environ["KURA_ADDR"] = "127.0.0.1:%d" % port
            try:
                yield "127.0.0.1", port
            finally:
                _stop(proc)
                os.environ.pop("KURA_ADDR", None)
                log.close()
            return
        exited = proc.poll() is not None
        _stop(proc)
        log.seek(0)
        last_err = log.read().decode(errors="replace")[-2000:]
        log.close()
        if not exited:
            last_err = "no VERSION reply within 20 s; output: " + last_err
            break  # running but not answering: retrying will not help
    pytest.exit("could not start server %r: %s" % (template, last_err), returncode=2)


@pytest.fixture
def client(kura_addr):
    """A plain bytes client; every store waits for the reply unless asked."""
    c = Client(kura_addr, connect_timeout=5, timeout=10, default_noreply=False)
    yield c
    c.close()


@pytest.fixture
def key():
    """key('name') -> a key unique to this test run (no flush needed)."""
    prefix = "t" + uuid.uuid4().hex[:12]

    def make(name=""):
        return "%s_%s" % (prefix, name)

    return make
