"""Tokyo Tyrant's binary protocol against kura serving a table
(`--tyrant-db table:users`, disk engine), from a client written here in
Python as Tokyo Tyrant's own Ruby and Perl clients are: struct-packed,
big-endian, one socket. Covers every table function: the binary commands
on a table, and `misc` with put, putkeep, putcat, out, get, putlist,
outlist, getlist, iterinit, iternext, setindex, genuid, vanish, and
search / metasearch with addcond, setorder, setlimit, get, out, count,
hint, mstype and next.

The server is started here (KURA_BIN, default target/debug/kura) on a fresh
data directory, and killed and restarted once to show the table persists.
"""

import os
import signal
import shutil
import socket
import struct
import subprocess
import tempfile
import time

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAGIC = 0xC8


class TyrantError(Exception):
    pass


class Tyrant:
    """A minimal Tokyo Tyrant client (the protocol of ttserver 1.1.41)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def close(self):
        self.sock.close()

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise TyrantError("connection closed")
            buf += chunk
        return buf

    def _u32(self):
        return struct.unpack(">I", self._recv(4))[0]

    def _code(self):
        return self._recv(1)[0]

    def _send(self, command, *parts):
        self.sock.sendall(struct.pack(">BB", MAGIC, command) + b"".join(parts))

    @staticmethod
    def _sized(*items):
        return b"".join(struct.pack(">I", len(i)) for i in items) + b"".join(items)

    @staticmethod
    def columns(cols):
        return b"\0".join(k + b"\0" + v for k, v in cols)

    @staticmethod
    def parse_columns(value):
        fields = value.split(b"\0")
        return list(zip(fields[0::2], fields[1::2]))

    # Binary commands.
    def put(self, key, cols, command=0x10):
        self._send(command, self._sized(key, self.columns(cols)))
        return self._code() == 0

    def putkeep(self, key, cols):
        return self.put(key, cols, 0x11)

    def putcat(self, key, cols):
        return self.put(key, cols, 0x12)

    def putnr(self, key, cols):
        self._send(0x18, self._sized(key, self.columns(cols)))

    def out(self, key):
        self._send(0x20, self._sized(key))
        return self._code() == 0

    def get(self, key):
        self._send(0x30, self._sized(key))
        if self._code() != 0:
            return None
        return self.parse_columns(self._recv(self._u32()))

    def mget(self, keys):
        self._send(0x31, struct.pack(">I", len(keys)), b"".join(struct.pack(">I", len(k)) + k for k in keys))
        assert self._code() == 0
        found = {}
        for _ in range(self._u32()):
            ksiz, vsiz = struct.unpack(">II", self._recv(8))
            key = self._recv(ksiz)
            found[key] = self.parse_columns(self._recv(vsiz))
        return found

    def vsiz(self, key):
        self._send(0x38, self._sized(key))
        return self._u32() if self._code() == 0 else -1

    def iterinit(self):
        self._send(0x50)
        return self._code() == 0

    def iternext(self):
        self._send(0x51)
        return self._recv(self._u32()) if self._code() == 0 else None

    def fwmkeys(self, prefix, maximum=-1):
        self._send(0x58, struct.pack(">Ii", len(prefix), maximum), prefix)
        assert self._code() == 0
        return [self._recv(self._u32()) for _ in range(self._u32())]

    def addint(self, key, num):
        self._send(0x60, struct.pack(">Ii", len(key), num), key)
        return struct.unpack(">i", self._recv(4))[0] if self._code() == 0 else None

    def adddouble(self, key, num):
        integral = int(num)
        fraction = int(round((num - integral) * 1e12))
        self._send(0x61, struct.pack(">Iqq", len(key), integral, fraction), key)
        if self._code() != 0:
            return None
        integral, fraction = struct.unpack(">qq", self._recv(16))
        return integral + fraction / 1e12

    def simple(self, command):
        self._send(command)
        return self._code() == 0

    def rnum(self):
        self._send(0x80)
        assert self._code() == 0
        return struct.unpack(">Q", self._recv(8))[0]

    def size(self):
        self._send(0x81)
        assert self._code() == 0
        return struct.unpack(">Q", self._recv(8))[0]

    def stat(self):
        self._send(0x88)
        assert self._code() == 0
        text = self._recv(self._u32()).decode()
        return dict(line.split("\t", 1) for line in text.splitlines())

    def misc(self, name, args=(), opts=0):
        self._send(
            0x90,
            struct.pack(">III", len(name), opts, len(args)),
            name,
            b"".join(struct.pack(">I", len(a)) + a for a in args),
        )
        code = self._code()
        items = [self._recv(self._u32()) for _ in range(self._u32())]
        return code, items

    def search(self, *commands, name=b"search"):
        code, items = self.misc(name, [b"\0".join(c) for c in commands])
        assert code == 0, (commands, items)
        return items


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _start(data_dir, port):
    binary = os.environ.get("KURA_BIN", os.path.join(REPO_ROOT, "target", "debug", "kura"))
    argv = [binary, "serve", "--engine", "disk", "--dir", data_dir, "-l", "127.0.0.1",
            "-p", str(_free_port()), "--tyrant-port", str(port), "--tyrant-db", "table:users"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("kura exited: " + proc.stderr.read().decode(errors="replace"))
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("kura did not listen on the tyrant port")


@pytest.fixture
def server():
    data = tempfile.mkdtemp(prefix="kura-tyrant-")
    port = _free_port()
    state = {"proc": _start(data, port), "port": port, "dir": data}
    yield state
    state["proc"].kill()
    state["proc"].wait()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def tt(server):
    client = Tyrant(server["port"])
    yield client
    client.close()


def load(tt):
    people = [
        (b"k1", [(b"name", b"Bob Smith"), (b"age", b"30"), (b"tags", b"red,green")]),
        (b"k2", [(b"name", b"ann"), (b"age", b"25"), (b"tags", b"blue")]),
        (b"k3", [(b"name", b"Bob"), (b"age", b"41"), (b"text", b"Hello World")]),
        (b"k4", [(b"name", b"zed"), (b"age", b"25")]),
    ]
    for key, cols in people:
        assert tt.put(key, cols)
    return people


def test_binary_commands_on_a_table(tt):
    people = load(tt)
    assert tt.get(b"k1") == people[0][1]
    # Tokyo Cabinet's size of a record: tcmapdump's, each name and value
    # after its length (one byte here).
    assert tt.vsiz(b"k1") == sum(2 + len(k) + len(v) for k, v in people[0][1])
    assert not tt.putkeep(b"k1", [(b"name", b"Eve")])
    assert tt.putcat(b"k4", [(b"name", b"X"), (b"city", b"Kyoto")])
    assert tt.get(b"k4") == [(b"name", b"zed"), (b"age", b"25"), (b"city", b"Kyoto")]
    tt.putnr(b"k5", [(b"name", b"quiet")])
    assert tt.get(b"k5") == [(b"name", b"quiet")]
    assert tt.mget([b"k2", b"none", b"k5"]) == {b"k2": people[1][1], b"k5": [(b"name", b"quiet")]}
    assert tt.out(b"k5") and not tt.out(b"k5")
    assert tt.get(b"k5") is None
    assert tt.iterinit()
    assert [tt.iternext() for _ in range(5)] == [b"k1", b"k2", b"k3", b"k4", None]
    assert tt.fwmkeys(b"k", 2) == [b"k1", b"k2"]
    assert tt.addint(b"n", 5) == 5 and tt.addint(b"n", -2) == 3
    assert tt.get(b"n") == [(b"_num", b"3")]
    assert tt.adddouble(b"d", 1.5) == pytest.approx(1.5)
    assert tt.adddouble(b"d", 0.25) == pytest.approx(1.75)
    assert tt.get(b"d") == [(b"_num", b"1.75")]
    assert tt.simple(0x70)  # sync
    tt._send(0x71, tt._sized(b""))  # optimize, without parameters
    assert tt._code() == 0
    stat = tt.stat()
    assert stat["type"] == "table" and stat["rnum"] == "6"
    assert tt.rnum() == 6 and tt.size() > 0
    assert tt.simple(0x72)  # vanish
    assert tt.rnum() == 0


def test_misc_table_functions(tt):
    assert tt.misc(b"put", [b"a", b"name", b"Ann", b"age", b"31"]) == (0, [])
    assert tt.misc(b"putkeep", [b"a", b"name", b"X"])[0] == 1
    assert tt.misc(b"putcat", [b"a", b"name", b"X", b"city", b"Oslo"])[0] == 0
    assert tt.misc(b"get", [b"a"]) == (0, [b"name", b"Ann", b"age", b"31", b"city", b"Oslo"])
    assert tt.misc(b"get", [b"nope"]) == (1, [])
    assert tt.misc(b"putlist", [b"b", b"name\0Ben", b"c", b"name\0Cy"]) == (0, [])
    assert tt.misc(b"getlist", [b"b", b"nope", b"c"]) == (0, [b"b", b"name\0Ben", b"c", b"name\0Cy"])
    assert tt.misc(b"outlist", [b"b", b"nope"]) == (0, [])
    assert tt.misc(b"out", [b"c"]) == (0, [])
    assert tt.misc(b"out", [b"c"])[0] == 1
    assert tt.misc(b"setindex", [b"age", b"DECIMAL", b"name", b"LEXICAL"]) == (0, [])
    assert tt.misc(b"setindex", [b"age", b"NOSUCH"])[0] == 1
    first = int(tt.misc(b"genuid")[1][0])
    assert int(tt.misc(b"genuid")[1][0]) == first + 1
    assert tt.misc(b"iterinit") == (0, [])
    assert tt.misc(b"iternext") == (0, [b"a", b"name\0Ann\0age\x0031\0city\0Oslo"])
    assert tt.misc(b"iternext")[0] == 1
    assert tt.misc(b"sync") == (0, []) and tt.misc(b"optimize") == (0, [])
    assert tt.misc(b"vanish") == (0, [])
    assert tt.rnum() == 0
    assert tt.misc(b"nosuch")[0] == 1


def test_search_and_metasearch(tt):
    load(tt)
    assert tt.search([b"addcond", b"name", b"STRBW", b"Bob"]) == [b"k1", b"k3"]
    assert tt.search([b"addcond", b"age", b"NUMGE", b"25"], [b"setorder", b"age", b"NUMDESC"],
                     [b"setlimit", b"2", b"1"]) == [b"k1", b"k2"]
    assert tt.search([b"addcond", b"tags", b"STROR", b"blue,red"]) == [b"k1", b"k2"]
    assert tt.search([b"addcond", b"text", b"FTSPH", b"hello world"]) == [b"k3"]
    assert tt.search([b"addcond", b"name", b"!STRINC", b"o"], [b"get", b"", b"age"]) == \
        [b"\0k2\0age\x0025", b"\0k4\0age\x0025"]
    assert tt.search([b"addcond", b"age", b"NUMEQ", b"41"], [b"get"]) == \
        [b"\0k3\0name\0Bob\0age\x0041\0text\0Hello World"]
    assert tt.search([b"addcond", b"age", b"NUMLT", b"31"], [b"count"]) == [b"3"]
    hint = tt.search([b"addcond", b"age", b"NUMEQ", b"25"], [b"hint"])
    assert hint[:2] == [b"k2", b"k4"]
    assert hint[2].startswith(b"\0\0[[HINT]]\n") and b"result set size: 2" in hint[2]
    meta = [[b"addcond", b"name", b"STRBW", b"Bob"], [b"next"], [b"addcond", b"age", b"NUMEQ", b"30"]]
    assert tt.search(*meta, [b"mstype", b"UNION"], name=b"metasearch") == [b"k1", b"k3"]
    assert tt.search(*meta, [b"mstype", b"ISECT"]) == [b"k1"]
    assert tt.search(*meta, [b"mstype", b"DIFF"]) == [b"k3"]
    assert tt.search([b"addcond", b"age", b"NUMEQ", b"25"], [b"out"]) == []
    assert tt.search() == [b"k1", b"k3"]


def test_the_table_survives_a_kill(server):
    tt = Tyrant(server["port"])
    load(tt)
    tt.close()
    server["proc"].send_signal(signal.SIGKILL)
    server["proc"].wait()
    server["proc"] = _start(server["dir"], server["port"])
    tt = Tyrant(server["port"])
    assert tt.search([b"addcond", b"age", b"NUMEQ", b"25"]) == [b"k2", b"k4"]
    assert tt.get(b"k3") == [(b"name", b"Bob"), (b"age", b"41"), (b"text", b"Hello World")]
    tt.close()
