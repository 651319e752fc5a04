#!/usr/bin/env bash
# gomemcache (Go, github.com/bradfitz/gomemcache, ascii protocol) against the
# server: go/main.go runs its checks on one server started from KURA_SERVER_CMD
# and prints "PASS name" / "FAIL name: why" per check, then
# "gomemcache: N passed, M failed".
#
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/go_gomemcache.sh
#
# Needs go (1.19+, Debian bookworm's golang-go). The module (pinned in go/go.mod, hashes in go/go.sum) is
# downloaded through the Go module proxy into the usual module cache; the
# binary is built into $CLIENT_TMP. A missing go is a failure, not a skip.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd go

GODIR="$CLIENTS_DIR/go"
BIN="$CLIENT_TMP/gomemcache-test"
t0=$SECONDS
log "building $GODIR (go $(go env GOVERSION))"
run_wait go build -C "$GODIR" -buildvcs=false -trimpath -o "$BIN" . ||
    die "go build failed in $GODIR"
log "built in $((SECONDS - t0)) s"

start_server go_gomemcache

rc=0
run_wait "$BIN" -addr "127.0.0.1:$PORT" || rc=$?

server_alive || rc=1
exit "$rc"
