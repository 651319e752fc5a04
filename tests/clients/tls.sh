#!/usr/bin/env bash
# TLS (-Z) with real clients: a CA and a server certificate made here with
# openssl; pymemcache's TLS client and `openssl s_client` verify the server
# against that CA and set and get through it; a plaintext client on the TLS
# port is refused (a TLS alert, then the connection closes) and the server
# goes on serving. The server also has a plain listener (notls:), as
# memcached offers, which start_server uses to see that it is up.
#
# KURA_SERVER_CMD must contain "-l 127.0.0.1" (run-all.sh's commands do).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd openssl timeout
PYTHON=${PYTHON:-python3}

pki="$CLIENT_TMP/pki"
mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kura test CA" \
    -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$pki/server.key" -out "$pki/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$pki/san.ext"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/san.ext" -out "$pki/server.pem" 2>/dev/null

TLS_PORT=$(free_port)
[[ $KURA_SERVER_CMD == *"-l 127.0.0.1"* ]] || die "KURA_SERVER_CMD has no '-l 127.0.0.1' to replace"
KURA_SERVER_CMD=${KURA_SERVER_CMD/-l 127.0.0.1/-l notls:127.0.0.1:\{port\},127.0.0.1:$TLS_PORT -Z -o ssl_chain_cert=$pki/server.pem,ssl_key=$pki/server.key}
export KURA_SERVER_CMD
start_server tls

failed=0
check() {
    if [[ $2 == "$3" ]]; then
        echo "tls: PASS $1"
    else
        echo "tls: FAIL $1: expected $(printf %q "$3"), got $(printf %q "$2")"
        failed=1
    fi
}

# openssl s_client, verifying the chain to our CA.
# (The sleep keeps stdin open until the replies are in; s_client ends with it.)
got=$({ printf 'set via-openssl 0 0 5\r\nhello\r\nget via-openssl\r\n'; sleep 1; } |
    timeout 10 openssl s_client -connect "127.0.0.1:$TLS_PORT" -CAfile "$pki/ca.pem" \
        -verify_return_error -quiet 2>/dev/null | tr -d '\r' || true)
check "openssl s_client set and get" "$got" $'STORED\nVALUE via-openssl 0 5\nhello\nEND'

# pymemcache's TLS client with an ssl context that trusts only our CA.
got=$(timeout 20 "$PYTHON" - "$TLS_PORT" "$pki/ca.pem" <<'PY'
import ssl, sys
from pymemcache.client.base import Client
context = ssl.create_default_context(cafile=sys.argv[2])
client = Client(("127.0.0.1", int(sys.argv[1])), tls_context=context, connect_timeout=5, timeout=5)
client.set("via-pymemcache", b"x" * 100000)
value = client.get("via-pymemcache")
print("ok" if value == b"x" * 100000 else "wrong value %r" % value[:20])
PY
)
check "pymemcache TLS set and get of a 100 KB value" "$got" "ok"

# A plaintext client on the TLS port: no memcached answer, and the server
# closes the connection (after a TLS alert) rather than waiting.
got=$(timeout 10 "$PYTHON" - "$TLS_PORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"version\r\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print("closed, alert" if data[:1] == b"\x15" else "got %r" % data)
PY
)
check "plaintext on the TLS port is refused and closed" "$got" "closed, alert"

# The plain listener still answers, and sees what TLS clients stored.
got=$(timeout 10 "$PYTHON" - "$PORT" <<'PY' | tr -d '\r'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"get via-openssl\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
PY
)
check "plain listener beside the TLS one" "$got" $'VALUE via-openssl 0 5\nhello\nEND'

exit "$failed"
