#!/usr/bin/env bash
# libmemcached's protocol conformance suite (memccapable, from libmemcached-tools)
# against the server in KURA_SERVER_CMD: once with -a (ascii tests only) and
# once with -b (binary protocol tests only). Each run must print
# "All tests passed".  NOTE: memccapable flushes the server.
#
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/memccapable.sh
#
# Env: MEMCCAPABLE_MODES (default "ascii binary"), MEMCCAPABLE_TIMEOUT (s, default 30).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd memccapable timeout
start_server memccapable

failed=0
for mode in ${MEMCCAPABLE_MODES:-ascii binary}; do
    case $mode in
        ascii) flag=-a ;;
        binary) flag=-b ;;
        *) die "unknown mode $mode" ;;
    esac
    out="$CLIENT_TMP/memccapable.$mode.out"
    rc=0
    # -t: per-io timeout so a server that never answers fails instead of hanging.
    run_wait timeout "${MEMCCAPABLE_TIMEOUT:-30}" memccapable -h 127.0.0.1 -p "$PORT" -t 5 "$flag" >"$out" 2>&1 || rc=$?
    if grep -q 'All tests passed' "$out"; then
        echo "memccapable $mode: PASS ($(grep -c '\[pass\]' "$out") tests, rc=$rc)"
    else
        echo "memccapable $mode: FAIL (rc=$rc); output:"
        cat "$out"
        failed=1
    fi
done

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "server died during memccapable; log:"
    tail -n 50 "$SERVER_LOG"
    failed=1
fi
exit "$failed"
