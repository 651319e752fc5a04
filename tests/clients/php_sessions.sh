#!/usr/bin/env bash
# Seed scenario: PHP sessions stored in the kv server through php-memcached.
#
# Two PHP built-in web servers (A and B, docroot tests/clients/php) share the
# kv server as session store.  For each of SESSIONS sessions the driver GETs
# page1.php on A (new session, ~1 KB random data + sha1), then page2.php on B
# with the PHPSESSID cookie and compares checksums.  Must print
# "sessions: N ok, 0 lost, 0 corrupted".
#
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/php_sessions.sh
#
# Env:
#   SESSIONS=1000          number of sessions
#   CONCURRENCY=64         driver threads
#   PHP_WORKERS=8          PHP_CLI_SERVER_WORKERS for each php -S
#   PHP_SESS_BINARY=1      memcached.sess_binary_protocol (php-memcached's
#                          default is 1 = BINARY protocol; 0 = ascii)
#   MAX_ERRORS=25          driver stops starting sessions after this many errors
#   HTTP_TIMEOUT=10        per-request socket timeout (s) in the driver
#   RESTART_BETWEEN=1      write all sessions via A, restart the kv server
#                          (same command, same port), then read all via B.
#                          For persistent engines; memcached loses everything.
#   RESTART_SIGNAL=TERM    signal for the old server on restart (KILL = crash)
#
# What php-memcached sends (validated against memcached 1.6.18):
#   new session id:  add <prefix><sid> 0 0 0 (empty value)  = memcached_exist()
#   lock:            add <prefix>lock.<sid> 0 0 1 "1";  unlock: delete
#   read:            get <prefix><sid>            (binary: GETK)
#   write:           set <prefix><sid> 0 1440 N   (changed data)
#                    touch <prefix><sid> 1440     (unchanged, lazy_write)
#   end:             quit                         (binary: non-quiet QUIT)
#   prefix = "memc.sess.key."
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd php python3 setsid
php_modules=$(php -m 2>/dev/null) || die "php -m failed"
grep -qx memcached <<<"$php_modules" || die "php memcached extension not loaded"

SESSIONS=${SESSIONS:-1000}
CONCURRENCY=${CONCURRENCY:-64}
PHP_WORKERS=${PHP_WORKERS:-8}
PHP_SESS_BINARY=${PHP_SESS_BINARY:-1}
RESTART_BETWEEN=${RESTART_BETWEEN:-0}

start_server php_sessions

PORT_A=$(free_port)
start_php A "$PORT_A" "$PORT"
PORT_B=$(free_port)
start_php B "$PORT_B" "$PORT"

driver=(python3 "$CLIENTS_DIR/php_sessions_driver.py" --port-a "$PORT_A" --port-b "$PORT_B"
    --sessions "$SESSIONS" --concurrency "$CONCURRENCY")
proto=$([[ "$PHP_SESS_BINARY" == 1 ]] && echo binary || echo ascii)
log "php sessions: $SESSIONS sessions, concurrency $CONCURRENCY, php-memcached $proto protocol, restart_between=$RESTART_BETWEEN"

rc=0
if [[ "$RESTART_BETWEEN" == 1 ]]; then
    state="$CLIENT_TMP/sessions.state"
    run_wait "${driver[@]}" --phase write --state "$state" || rc=$?
    if ((rc == 0)); then
        restart_server
        run_wait "${driver[@]}" --phase read --state "$state" || rc=$?
    fi
else
    run_wait "${driver[@]}" --phase both || rc=$?
fi

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "kv server died; log:"
    tail -n 50 "$SERVER_LOG"
    rc=1
fi
for name in A B; do
    errlog="$CLIENT_TMP/php-$name.errors.log"
    if [[ -s "$errlog" ]]; then
        echo "PHP errors on web server $name ($(wc -l <"$errlog") lines), first 10:"
        head -n 10 "$errlog"
        # PHP warnings (e.g. lock failures) are a failure only if sessions failed
    fi
done
exit "$rc"
