#!/usr/bin/env bash
# Prometheus's memcached exporter (github.com/prometheus/memcached_exporter,
# the version pinned in exporter/go.mod) against the server: it reads
# `stats`, `stats settings`, `stats items` and `stats slabs` and serves them
# as metrics. Versions up to 0.14 parse every class of `stats slabs` and
# report `memcached_up 0` when a class lacks a command count; a name that
# comes as two metric types (a class's `mem_requested`) makes /metrics an
# HTTP 500. The test stores ITEMS items, reads each READS times, then checks:
#   /metrics answers 200, memcached_up is 1,
#   memcached_current_items == ITEMS,
#   memcached_commands_total{command="get",status="hit"} == ITEMS * READS,
#   the per-class get hits (memcached_slab_commands_total) sum to the same.
#
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/prometheus_exporter.sh
#
# Needs go (1.22+: the exporter's own go.mod asks for it; Debian bookworm's
# golang-go 1.19 is too old). The modules (hashes in exporter/go.sum) come
# through the Go module proxy; a missing go is a failure, not a skip.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd go python3

ITEMS=${ITEMS:-50}
READS=${READS:-3}
GODIR="$CLIENTS_DIR/exporter"
BIN="$CLIENT_TMP/memcached_exporter"
t0=$SECONDS
log "building the exporter in $GODIR (go $(go env GOVERSION))"
run_wait go build -C "$GODIR" -buildvcs=false -trimpath -o "$BIN" \
    github.com/prometheus/memcached_exporter/cmd/memcached_exporter ||
    die "go build failed in $GODIR"
log "built in $((SECONDS - t0)) s"

start_server prometheus_exporter

python3 - "$PORT" "$ITEMS" "$READS" <<'EOF'
import socket, sys
port, items, reads = (int(a) for a in sys.argv[1:])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
f = s.makefile("rb")
s.sendall(b"flush_all\r\n")
assert f.readline() == b"OK\r\n"
for i in range(items):
    value = b"v" * (10 + 97 * i)  # several size classes
    s.sendall(b"set metric_%d 0 0 %d\r\n%s\r\n" % (i, len(value), value))
    assert f.readline() == b"STORED\r\n"
for _ in range(reads):
    for i in range(items):
        s.sendall(b"get metric_%d\r\n" % i)
        header = f.readline()
        assert header.startswith(b"VALUE "), header
        f.read(int(header.split()[3]) + 2)
        assert f.readline() == b"END\r\n"
print("stored %d items, read each %d times" % (items, reads))
EOF

EXPORTER_PORT=$(free_port)
EXPORTER_LOG="$CLIENT_TMP/exporter.log"
"$BIN" --memcached.address="127.0.0.1:$PORT" --web.listen-address="127.0.0.1:$EXPORTER_PORT" \
    >"$EXPORTER_LOG" 2>&1 &
EXPORTER_PID=$!
on_exit "kill_pid $EXPORTER_PID"
wait_tcp "$EXPORTER_PORT" 20 || die "the exporter did not listen; log: $(tail -n 20 "$EXPORTER_LOG")"

rc=0
python3 - "$EXPORTER_PORT" "$ITEMS" "$READS" <<'EOF' || rc=$?
import re, sys, urllib.error, urllib.request
port, items, reads = (int(a) for a in sys.argv[1:])
try:
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=20) as reply:
        status, text = reply.status, reply.read().decode()
except urllib.error.HTTPError as error:
    status, text = error.code, error.read().decode()
failed = 0
def check(ok, what):
    global failed
    print(("PASS " if ok else "FAIL ") + what)
    failed += not ok
check(status == 200, "/metrics answers 200 (got %d%s)" % (status, "" if status == 200 else ": " + text[:300]))
def value(name, labels=""):
    pattern = r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels))
    found = re.findall(pattern, text, re.M)
    return float(found[0]) if found else None
check(value("memcached_up") == 1, "memcached_up is 1 (got %s)" % value("memcached_up"))
check(value("memcached_current_items") == items,
      "memcached_current_items is %d (got %s)" % (items, value("memcached_current_items")))
hits = value("memcached_commands_total", '{command="get",status="hit"}')
check(hits == items * reads, "get hits are %d (got %s)" % (items * reads, hits))
per_class = re.findall(r'^memcached_slab_commands_total\{command="get",slab="\d+",status="hit"\} (\S+)$', text, re.M)
check(len(per_class) > 1 and sum(float(v) for v in per_class) == items * reads,
      "per-class get hits in %d classes sum to %d (got %s)" % (len(per_class), items * reads, sum(float(v) for v in per_class)))
print("prometheus_exporter: %d checks failed" % failed)
sys.exit(1 if failed else 0)
EOF

server_alive || rc=1
exit "$rc"
