#!/usr/bin/env bash
# Run every external-client test against the server command in KURA_SERVER_CMD
# (template with {port}; default target/release/kura serve -p {port} -l 127.0.0.1).
# Each test starts (and stops) its own server instance.
#
#   bash tests/clients/run-all.sh                       # against kura
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/run-all.sh
#   bash tests/clients/run-all.sh pymemcache php_sessions   # only some tests
#
# Env: RUN_RESTART=1 also runs php_sessions_restart (write, restart server,
#      read; only meaningful for persistent engines - memcached fails it).
#      VERBOSE=1 streams each test's output; TEST_TIMEOUT (s, default 300).
#      KEEP_LOGS=1 keeps the per-test logs (path printed at the end).
#      KURA_BIN: the kura binary tyrant_table starts (default target/release/kura).
#      MVN_ARGS: extra mvn arguments for java_clients (e.g. -Dmaven.repo.local=DIR).
# Prints one "PASS name (Ns)" / "FAIL name (Ns, rc=N)" line per test and
# ends with exactly one line "N passed, M failed"; exits 1 if any failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
unset KURA_ADDR # every test starts its own server

ALL_TESTS=(memccapable_ascii memccapable_binary pymemcache php_sessions php_sessions_ascii memcached_tool bench_report tls tyrant_table twemproxy_sessions java_clients go_gomemcache prometheus_exporter)
if [[ "${RUN_RESTART:-0}" == 1 ]]; then
    ALL_TESTS+=(php_sessions_restart)
fi
if (($# > 0)); then TESTS=("$@"); else TESTS=("${ALL_TESTS[@]}"); fi

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/kura-run-all.XXXXXX")"
cleanup() {
    if [[ "${KEEP_LOGS:-0}" == 1 ]]; then echo "logs: $LOGDIR"; else rm -rf "$LOGDIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

test_cmd() {
    case $1 in
        memccapable_ascii) echo "env MEMCCAPABLE_MODES=ascii bash $HERE/memccapable.sh" ;;
        memccapable_binary) echo "env MEMCCAPABLE_MODES=binary bash $HERE/memccapable.sh" ;;
        pymemcache) echo "${PYTHON:-python3} -m pytest -q -p no:cacheprovider $HERE/pymemcache_test.py" ;;
        php_sessions) echo "env PHP_SESS_BINARY=1 RESTART_BETWEEN=0 bash $HERE/php_sessions.sh" ;;
        php_sessions_ascii) echo "env PHP_SESS_BINARY=0 RESTART_BETWEEN=0 bash $HERE/php_sessions.sh" ;;
        php_sessions_restart) echo "env PHP_SESS_BINARY=1 RESTART_BETWEEN=1 bash $HERE/php_sessions.sh" ;;
        memcached_tool) echo "bash $HERE/memcached_tool.sh" ;;
        bench_report) echo "bash $HERE/bench_report.sh" ;;
        tls) echo "bash $HERE/tls.sh" ;;
        # spymemcached + xmemcached, text and binary (needs java, mvn; fetches jars)
        java_clients) echo "bash $HERE/java_clients.sh" ;;
        # gomemcache (needs go; fetches the module)
        go_gomemcache) echo "bash $HERE/go_gomemcache.sh" ;;
        # Prometheus's memcached exporter (needs go; fetches the module)
        prometheus_exporter) echo "bash $HERE/prometheus_exporter.sh" ;;
        # kura's own: starts KURA_BIN itself (disk engine, --tyrant-db table:users).
        tyrant_table) echo "env KURA_BIN=${KURA_BIN:-target/release/kura} ${PYTHON:-python3} -m pytest -q -p no:cacheprovider $HERE/tyrant_table_test.py" ;;
        # kura's own: three masters, their replicas and nutcracker (examples/twemproxy).
        twemproxy_sessions) echo "env KURA_BIN=${KURA_BIN:-target/release/kura} bash $HERE/twemproxy_sessions.sh" ;;
        *) return 1 ;;
    esac
}

if [[ -n "${KURA_SERVER_CMD:-}" ]]; then
    echo "server command: $KURA_SERVER_CMD"
else
    echo "server command: (default, see lib.sh) target/release/kura serve -p {port} -l 127.0.0.1"
fi
passed=0
failed=0
failed_names=()
t_all=$SECONDS
for t in "${TESTS[@]}"; do
    if ! cmd=$(test_cmd "$t"); then
        echo "FAIL $t (unknown test; known: ${ALL_TESTS[*]} php_sessions_restart)"
        failed=$((failed + 1))
        failed_names+=("$t")
        continue
    fi
    logf="$LOGDIR/$t.log"
    t0=$SECONDS
    rc=0
    if [[ "${VERBOSE:-0}" == 1 ]]; then
        echo "=== $t: $cmd"
        # shellcheck disable=SC2086
        timeout "${TEST_TIMEOUT:-300}" $cmd 2>&1 | tee "$logf" || rc=${PIPESTATUS[0]}
    else
        # shellcheck disable=SC2086
        timeout "${TEST_TIMEOUT:-300}" $cmd >"$logf" 2>&1 </dev/null || rc=$?
    fi
    dt=$((SECONDS - t0))
    if ((rc == 0)); then
        passed=$((passed + 1))
        summary=$(grep -a -E '^(tls: PASS plain|sessions: |memccapable [a-z]+: PASS|stats: curr_items|bench report: |(java|gomemcache): [0-9]+ passed|[0-9]+ passed)' "$logf" | tail -n 1 || true)
        echo "PASS $t (${dt}s)${summary:+  -- $summary}"
    else
        failed=$((failed + 1))
        failed_names+=("$t")
        [[ $rc == 124 ]] && note=", timed out after ${TEST_TIMEOUT:-300}s" || note=""
        echo "FAIL $t (${dt}s, rc=$rc$note)"
        if [[ "${VERBOSE:-0}" != 1 ]]; then
            echo "----- last 60 lines of $t output -----"
            tail -n 60 "$logf" | sed 's/^/    /'
            echo "-----"
        fi
    fi
done

echo "total time: $((SECONDS - t_all))s${failed_names[*]:+; failed: ${failed_names[*]}}"
echo "$passed passed, $failed failed"
((failed == 0))
