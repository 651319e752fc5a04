"""pymemcache (ascii protocol) against the server.

Run:  python3 -m pytest -q -p no:cacheprovider tests/clients/pymemcache_test.py
Server: KURA_ADDR=host:port, or started from KURA_SERVER_CMD by conftest.py.

Every expectation below was validated against memcached 1.6.18.  Clients
are created with default_noreply=False, so store commands wait for replies.
pymemcache 4.0 has no gat/gats methods, so those go through raw_command.
"""

import os
import socket
import time

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheServerError,
    MemcacheUnknownCommandError,
)
from pymemcache.serde import (
    FLAG_INTEGER,
    FLAG_PICKLE,
    FLAG_TEXT,
    pickle_serde,
)


def raw(kura_addr, data, until=b"\r\n", timeout=5):
    """Send raw bytes on a fresh connection and read until `until` is seen."""
    with socket.create_connection(kura_addr, timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while not buf.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


# ---------------------------------------------------------------- get / set --


def test_set_get(client, key):
    k = key("a")
    assert client.get(k) is None
    assert client.set(k, b"hello") is True
    assert client.get(k) == b"hello"
    assert client.set(k, b"world") is True
    assert client.get(k) == b"world"
    assert client.set(k, b"") is True
    assert client.get(k) == b""


def test_get_default_and_missing(client, key):
    assert client.get(key("nope")) is None
    assert client.get(key("nope"), default=b"dflt") == b"dflt"


def test_delete(client, key):
    k = key("d")
    assert client.delete(k) is False
    client.set(k, b"v")
    assert client.delete(k) is True
    assert client.get(k) is None
    assert client.delete(k) is False


def test_delete_many(client, key):
    ks = [key("dm%d" % i) for i in range(10)]
    assert client.set_many({k: b"x" for k in ks}) == []
    assert client.delete_many(ks) is True
    assert client.get_many(ks) == {}


# ------------------------------------------------------------------- cas ----


def test_gets_and_cas(client, key):
    k = key("c")
    assert client.gets(k) == (None, None)
    client.set(k, b"one")
    value, token = client.gets(k)
    assert value == b"one"
    assert token is not None and token.isdigit()

    # successful cas -> STORED, token changes
    assert client.cas(k, b"two", token) is True
    value2, token2 = client.gets(k)
    assert value2 == b"two"
    assert token2 != token

    # stale token -> EXISTS (False), value unchanged
    assert client.cas(k, b"three", token) is False
    assert client.get(k) == b"two"

    # any other mutation invalidates the token
    client.set(k, b"four")
    assert client.cas(k, b"five", token2) is False
    assert client.get(k) == b"four"

    # missing key -> NOT_FOUND (None)
    assert client.cas(key("missing"), b"x", token) is None
    assert client.get(key("missing")) is None


def test_gets_many(client, key):
    ks = [key("gm%d" % i) for i in range(5)]
    for i, k in enumerate(ks):
        client.set(k, b"v%d" % i)
    res = client.gets_many(ks + [key("absent")])
    assert set(res) == set(ks)
    tokens = set()
    for i, k in enumerate(ks):
        v, t = res[k]
        assert v == b"v%d" % i
        assert t.isdigit()
        tokens.add(t)
    assert len(tokens) == len(ks), "cas unique must differ per item"


# ------------------------------------------------------------ incr / decr ---


def test_incr_decr(client, key):
    k = key("n")
    assert client.incr(k, 1) is None  # NOT_FOUND
    assert client.decr(k, 1) is None
    client.set(k, b"10")
    assert client.incr(k, 5) == 15
    assert client.get(k) == b"15"
    assert client.decr(k, 3) == 12
    assert client.decr(k, 100) == 0  # decr clamps at 0
    # shrinking numbers are rewritten in place, space padded (memcached quirk)
    assert client.get(k) == b"0 "
    assert client.incr(k, 0) == 0


def test_incr_grows_and_wraps(client, key):
    k = key("w")
    client.set(k, b"99")
    assert client.incr(k, 1) == 100
    assert client.get(k) == b"100"
    client.set(k, b"18446744073709551615")
    assert client.incr(k, 1) == 0  # 64-bit wrap-around
    assert client.get(k) == b"0" + b" " * 19  # in-place rewrite, space padded


def test_decr_shrink_pads_with_spaces(client, key):
    # memcached rewrites a shrinking number in place and pads with spaces:
    # "100" decr 91 -> value bytes "9  " (length stays 3).
    k = key("s")
    client.set(k, b"100")
    assert client.decr(k, 91) == 9
    assert client.get(k) == b"9  "
    assert client.incr(k, 1) == 10


def test_incr_non_numeric_raises(client, key):
    k = key("nn")
    client.set(k, b"abc")
    with pytest.raises(MemcacheClientError) as ei:
        client.incr(k, 1)
    assert b"cannot increment or decrement non-numeric value" in ei.value.args[0]
    # the connection is closed by pymemcache on error; next call reconnects
    with pytest.raises(MemcacheClientError):
        client.decr(k, 1)
    assert client.get(k) == b"abc"


def test_incr_invalid_delta_raw(kura_addr, key):
    k = key("bd").encode()
    out = raw(
        kura_addr,
        b"set " + k + b" 0 0 1\r\n5\r\nincr " + k + b" abc\r\n"
        b"incr " + k + b" -1\r\nincr " + k + b" 18446744073709551616\r\n"
        b"get " + k + b"\r\n",
        until=b"END\r\n",
    )
    err = b"CLIENT_ERROR invalid numeric delta argument\r\n"
    assert out == b"STORED\r\n" + err * 3 + b"VALUE " + k + b" 0 1\r\n5\r\nEND\r\n"


# ----------------------------------------------------------- touch / gat ----


def test_touch(client, key):
    k = key("t")
    assert client.touch(k, 100) is False
    client.set(k, b"v", expire=100)
    assert client.touch(k, 0) is True
    assert client.get(k) == b"v"
    # negative exptime expires immediately
    assert client.touch(k, -1) is True
    assert client.get(k) is None


def test_set_negative_expire_is_immediately_expired(client, key):
    k = key("ne")
    assert client.set(k, b"v", expire=-1) is True
    assert client.get(k) is None


def test_gat_gats_raw(client, key):
    k = key("g")
    kb = k.encode()
    client.set(k, b"hi", flags=5, expire=100)
    assert client.raw_command(b"gat 0 " + kb, b"END\r\n") == b"VALUE " + kb + b" 5 2\r\nhi\r\n"

    out = client.raw_command(b"gats 300 " + kb, b"END\r\n")
    head, body = out.split(b"\r\n", 1)
    parts = head.split(b" ")
    assert parts[:4] == [b"VALUE", kb, b"5", b"2"]
    assert len(parts) == 5 and parts[4].isdigit()
    assert body == b"hi\r\n"
    _, token = client.gets(k)
    assert parts[4] == token  # gats returns the same cas unique as gets

    # miss -> just END
    assert client.raw_command(b"gat 10 " + key("missing").encode(), b"END\r\n") == b""

    # gat with several keys, only present ones are returned
    k2 = key("g2")
    client.set(k2, b"yo")
    out = client.raw_command(
        b"gat 100 " + kb + b" " + key("nokey").encode() + b" " + k2.encode(), b"END\r\n"
    )
    assert out == b"VALUE " + kb + b" 5 2\r\nhi\r\nVALUE " + k2.encode() + b" 0 2\r\nyo\r\n"

    # gat -1 returns the item and then it is expired
    assert client.raw_command(b"gat -1 " + kb, b"END\r\n") == b"VALUE " + kb + b" 5 2\r\nhi\r\n"
    assert client.get(k) is None


# ------------------------------------------------------------- multi-get ----


def test_get_many_300(client, key):
    values = {key("m%03d" % i): (b"value-%d-" % i) * (i % 7 + 1) for i in range(300)}
    assert client.set_many(values) == []
    missing = [key("x%03d" % i) for i in range(20)]
    res = client.get_many(list(values) + missing)
    assert len(res) == 300
    assert res == values
    # same thing via gets_many
    res2 = client.gets_many(list(values))
    assert {k: v for k, (v, _c) in res2.items()} == values


# ------------------------------------------- add / replace / append / prepend


def test_add(client, key):
    k = key("add")
    assert client.add(k, b"first") is True
    assert client.add(k, b"second") is False  # NOT_STORED
    assert client.get(k) == b"first"


def test_replace(client, key):
    k = key("rep")
    assert client.replace(k, b"x") is False
    assert client.get(k) is None
    client.set(k, b"a")
    assert client.replace(k, b"b") is True
    assert client.get(k) == b"b"


def test_append_prepend(client, key):
    k = key("ap")
    assert client.append(k, b"x") is False
    assert client.prepend(k, b"x") is False
    assert client.get(k) is None
    client.set(k, b"mid", flags=7)
    assert client.append(k, b"-end") is True
    assert client.prepend(k, b"start-") is True
    assert client.get(k) == b"start-mid-end"
    # append/prepend keep the original flags (the ones given are ignored)
    out = client.raw_command(b"get " + k.encode(), b"END\r\n")
    assert out == b"VALUE " + k.encode() + b" 7 13\r\nstart-mid-end\r\n"


# ------------------------------------------------------------------ flags ---


def test_flags_roundtrip_serde(kura_addr, key):
    c = Client(kura_addr, serde=pickle_serde, timeout=10, default_noreply=False)
    try:
        cases = {
            key("bytes"): b"raw\x00bytes",
            key("str"): "unicode \u00e9\u4e2d",
            key("int"): 123456789012,
            key("dict"): {"a": [1, 2, 3], "b": ("x", None)},
            key("float"): 3.25,
        }
        for k, v in cases.items():
            assert c.set(k, v) is True
        for k, v in cases.items():
            got = c.get(k)
            assert got == v and type(got) is type(v)
        assert c.get_many(list(cases)) == cases
    finally:
        c.close()

    # the flags are really stored on the server
    plain = Client(kura_addr, timeout=10, default_noreply=False)
    try:
        expected = {"bytes": 0, "str": FLAG_TEXT, "int": FLAG_INTEGER, "dict": FLAG_PICKLE, "float": FLAG_PICKLE}
        assert expected == {"bytes": 0, "str": 16, "int": 2, "dict": 1, "float": 1}
        for name, flags in expected.items():
            k = key(name)
            data, ser_flags = pickle_serde.serialize(k, cases[k])
            assert ser_flags == flags
            data = data if isinstance(data, bytes) else str(data).encode()
            out = plain.raw_command(b"get " + k.encode(), b"END\r\n")
            assert out == b"VALUE %s %d %d\r\n%s\r\n" % (k.encode(), flags, len(data), data)
    finally:
        plain.close()


def test_explicit_flags_32bit(client, key):
    for flags in (0, 1, 0xDEADBEEF, 0xFFFFFFFF):
        k = key("f%d" % flags)
        client.set(k, b"v", flags=flags)
        out = client.raw_command(b"get " + k.encode(), b"END\r\n")
        assert out == b"VALUE " + k.encode() + b" %d 1\r\nv\r\n" % flags


# ---------------------------------------------------------------- noreply ---


def test_noreply_variants(client, key):
    k, n = key("nr"), key("nrn")
    assert client.set(k, b"a", noreply=True) is True
    assert client.add(k, b"ignored", noreply=True) is True  # NOT_STORED, silent
    assert client.append(k, b"b", noreply=True) is True
    assert client.prepend(k, b"_", noreply=True) is True
    assert client.replace(key("nr-missing"), b"x", noreply=True) is True
    client.set(n, b"5", noreply=True)
    assert client.incr(n, 10, noreply=True) is None
    assert client.decr(n, 3, noreply=True) is None
    assert client.touch(n, 0, noreply=True) is True
    # replies (if any were sent) would now be read as the answer to this get
    assert client.get(k) == b"_ab"
    assert client.get(n) == b"12"
    assert client.get(key("nr-missing")) is None
    assert client.delete(k, noreply=True) is True
    assert client.get(k) is None
    assert client.set_many({key("nm1"): b"1", key("nm2"): b"2"}, noreply=True) == []
    assert client.get_many([key("nm1"), key("nm2")]) == {key("nm1"): b"1", key("nm2"): b"2"}


def test_noreply_raw_pipeline(kura_addr, key):
    k = key("rp").encode()
    out = raw(
        kura_addr,
        b"set " + k + b" 0 0 1 noreply\r\n1\r\n"
        b"incr " + k + b" 41 noreply\r\n"
        b"add " + k + b" 0 0 1 noreply\r\nx\r\n"
        b"get " + k + b"\r\n",
        until=b"END\r\n",
    )
    assert out == b"VALUE " + k + b" 0 2\r\n42\r\nEND\r\n"


# ----------------------------------------------------------- large values ---


def test_500kb_value(client, key):
    k = key("big")
    value = os.urandom(500 * 1024)
    assert client.set(k, value) is True
    assert client.get(k) == value
    assert client.append(k, b"tail") is True
    assert client.get(k) == value + b"tail"


def test_too_large_value_rejected(client, key):
    # default item size limit is 1 MB (-I 1m)
    k = key("huge")
    with pytest.raises(MemcacheServerError) as ei:
        client.set(k, b"x" * (2 * 1024 * 1024))
    assert b"object too large for cache" in ei.value.args[0]
    assert client.get(k) is None


# ------------------------------------------------------------ binary-safe ---


def test_binary_safe_values(client, key):
    cases = [
        b"\r\n",
        b"line1\r\nline2\r\n",
        b"END\r\n",
        b"\r\nEND\r\nVALUE foo 0 3\r\nbar\r\n",
        bytes(range(256)) * 4,
        b"\x00" * 100,
        b"trailing\r",
        b"\nleading",
    ]
    for i, v in enumerate(cases):
        k = key("bin%d" % i)
        assert client.set(k, v) is True
        assert client.get(k) == v
    res = client.get_many([key("bin%d" % i) for i in range(len(cases))])
    assert [res[key("bin%d" % i)] for i in range(len(cases))] == cases


# ------------------------------------------------------------------- misc ---


def test_version_and_stats(client, key):
    v = client.version()
    assert v and v[0:1].isdigit()
    before = client.stats()
    assert isinstance(before[b"curr_items"], int)
    assert before[b"pid"] > 0
    k = key("st")
    client.set(k, b"v")
    client.get(k)
    client.get(key("st-miss"))
    after = client.stats()
    assert after[b"cmd_set"] >= before[b"cmd_set"] + 1
    assert after[b"get_hits"] >= before[b"get_hits"] + 1
    assert after[b"get_misses"] >= before[b"get_misses"] + 1


def test_unknown_command(client):
    with pytest.raises(MemcacheUnknownCommandError):
        client.raw_command(b"bogus_command_xyz")


def test_absolute_exptime(client, key):
    # exptime > 30 days is an absolute unix timestamp
    future, past = key("abs-future"), key("abs-past")
    assert client.set(future, b"v", expire=int(time.time()) + 3600) is True
    assert client.get(future) == b"v"
    assert client.set(past, b"v", expire=int(time.time()) - 10) is True
    assert client.get(past) is None
