# shellcheck shell=bash
# Shared helpers for the external-client tests in tests/clients/.
#
# Source it from a script that uses `set -euo pipefail`:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   start_server mytest          # exports PORT, SERVER_PID, SERVER_LOG
#   ...
#   restart_server               # same command, same port (for disk engines);
#                                # RESTART_SIGNAL=KILL to simulate a crash
#
# The server command comes from KURA_SERVER_CMD, a template in which every
# `{port}` is replaced by the chosen port.  It is run through `bash -c "exec ..."`
# from the repository root, so relative paths like target/release/kura work.
# Default: target/release/kura serve -p {port} -l 127.0.0.1
# (falls back to target/debug/kura if only the debug binary exists).
#
# To validate the harness against real memcached:
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/run-all.sh
#
# start_server polls until the server answers "version\r\n" with "VERSION ..."
# (SERVER_START_TIMEOUT seconds, default 20), retrying on a new port if the
# process exits during startup (port race).
#
# Every process started through these helpers is killed by an EXIT trap.
# Additional cleanups can be registered with `on_exit 'command ...'`.

CLIENTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLIENTS_DIR/../.." && pwd)"
export CLIENTS_DIR REPO_ROOT

if [[ -z "${KURA_SERVER_CMD:-}" ]]; then
    if [[ ! -x "$REPO_ROOT/target/release/kura" && -x "$REPO_ROOT/target/debug/kura" ]]; then
        KURA_SERVER_CMD='target/debug/kura serve -p {port} -l 127.0.0.1'
    else
        KURA_SERVER_CMD='target/release/kura serve -p {port} -l 127.0.0.1'
    fi
fi
export KURA_SERVER_CMD

# Scratch directory for logs; removed on exit unless KEEP_LOGS=1.
CLIENT_TMP="$(mktemp -d "${TMPDIR:-/tmp}/kura-clients.XXXXXX")"
export CLIENT_TMP

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup ---
_CLEANUP_CMDS=()
on_exit() { _CLEANUP_CMDS+=("$1"); }

_run_cleanups() {
    local rc=$? i
    set +e
    for ((i = ${#_CLEANUP_CMDS[@]} - 1; i >= 0; i--)); do
        eval "${_CLEANUP_CMDS[$i]}"
    done
    if [[ "${KEEP_LOGS:-0}" == 1 ]]; then
        log "logs kept in $CLIENT_TMP"
    else
        rm -rf "$CLIENT_TMP"
    fi
    return "$rc"
}
trap _run_cleanups EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# kill_pid PID [GRACE_SECONDS] [SIGNAL]: send SIGNAL (default TERM), wait,
# then SIGKILL. Only that PID.
kill_pid() {
    local pid=$1 grace=${2:-5} sig=${3:-TERM} i
    [[ -n "$pid" ]] || return 0
    kill -0 "$pid" 2>/dev/null || { { wait "$pid"; } 2>/dev/null || true; return 0; }
    kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not exit after SIG$sig, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    { wait "$pid"; } 2>/dev/null || true
    return 0
}

# run_wait CMD ARGS...: run CMD in the background and wait for it, so that a
# SIGTERM/SIGINT to this script is handled at once (bash defers traps while a
# foreground child runs); the child is killed by the EXIT trap if still alive.
# Returns CMD's exit status.
run_wait() {
    local pid rc=0
    "$@" &
    pid=$!
    on_exit "kill_pid $pid 2"
    wait "$pid" || rc=$?
    return "$rc"
}

# start_group LOGFILE CMD ARGS...: run CMD in its own session/process group
# (so forked workers can be killed with it). Sets BG_PID (= the group id).
start_group() {
    local logfile=$1
    shift
    setsid "$@" >>"$logfile" 2>&1 </dev/null &
    BG_PID=$!
}

# _group_alive PGID: true if a non-zombie process is left in the group
# (orphaned zombies are reaped by init whenever it gets to it).
_group_alive() {
    ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

# kill_group PGID [GRACE_SECONDS]: SIGTERM the whole process group started by
# start_group, wait, then SIGKILL whatever is left of that group.
kill_group() {
    local pgid=$1 grace=${2:-5} i
    [[ -n "$pgid" ]] || return 0
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for ((i = 0; i < grace * 20; i++)); do
        _group_alive "$pgid" || break
        sleep 0.05
    done
    if _group_alive "$pgid"; then
        log "process group $pgid still alive after SIGTERM, sending SIGKILL"
        kill -KILL -- "-$pgid" 2>/dev/null || true
    fi
    { wait "$pgid"; } 2>/dev/null || true
    return 0
}

# ------------------------------------------------------------------ ports ---
# free_port: print a TCP port on 127.0.0.1 that is free right now.
free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# port_answers_version PORT: true if a connection to 127.0.0.1:PORT answers
# "version\r\n" with a line starting with "VERSION ".
port_answers_version() {
    local port=$1 line=""
    # Subshell so the fd is always closed; connection refused fails fast.
    (
        exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
        printf 'version\r\n' >&3
        IFS= read -r -t 2 line <&3 || exit 1
        exec 3>&-
        [[ "$line" == VERSION\ * ]]
    ) 2>/dev/null
}

# wait_tcp PORT [SECONDS]: poll until something accepts TCP connections on PORT.
wait_tcp() {
    local port=$1 deadline=$((SECONDS + ${2:-20}))
    while ((SECONDS < deadline)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

# --------------------------------------------------------------- server -----
SERVER_PID=""
SERVER_NAME=""
SERVER_LOG=""

_server_cmd_for_port() { local c=$KURA_SERVER_CMD; printf '%s' "${c//\{port\}/$1}"; }

# _launch_server: start the command for $PORT, poll until it answers
# "version" with "VERSION ..." (SERVER_START_TIMEOUT, default 20 s).
_launch_server() {
    local cmd deadline
    cmd="$(_server_cmd_for_port "$PORT")"
    log "starting server '$SERVER_NAME': $cmd"
    (cd "$REPO_ROOT" && exec bash -c "exec $cmd") >>"$SERVER_LOG" 2>&1 </dev/null &
    SERVER_PID=$!
    export SERVER_PID
    deadline=$((SECONDS + ${SERVER_START_TIMEOUT:-20}))
    while ((SECONDS < deadline)); do
        if port_answers_version "$PORT"; then
            log "server '$SERVER_NAME' up on 127.0.0.1:$PORT (pid $SERVER_PID)"
            return 0
        fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            { wait "$SERVER_PID"; } 2>/dev/null || true
            SERVER_PID=""
            return 2 # exited (e.g. port taken): caller may retry
        fi
        sleep 0.05
    done
    log "server '$SERVER_NAME' did not answer 'version' within ${SERVER_START_TIMEOUT:-20} s"
    return 1
}

_server_failed() {
    log "server log ($SERVER_LOG):"
    tail -n 50 "$SERVER_LOG" >&2 || true
    die "could not start server '$SERVER_NAME' with: $(_server_cmd_for_port "$PORT")"
}

# start_server NAME: start KURA_SERVER_CMD on a free port.
# Exports PORT, SERVER_PID, SERVER_NAME, SERVER_LOG. Killed on exit.
start_server() {
    SERVER_NAME=${1:-server}
    SERVER_LOG="$CLIENT_TMP/$SERVER_NAME.server.log"
    export SERVER_NAME SERVER_LOG
    local attempt rc
    on_exit 'stop_server'
    for attempt in 1 2 3; do
        PORT=$(free_port)
        export PORT
        rc=0
        _launch_server || rc=$?
        ((rc == 0)) && return 0
        ((rc == 2)) || break
        log "server exited during startup (attempt $attempt), retrying on another port"
    done
    [[ -n "$SERVER_PID" ]] && kill_pid "$SERVER_PID"
    _server_failed
}

# server_alive: true while the server started by start_server runs; once it
# died, prints FAIL and its log's tail, and is false.
server_alive() {
    kill -0 "$SERVER_PID" 2>/dev/null && return 0
    echo "FAIL server died; log:"
    tail -n 50 "$SERVER_LOG"
    return 1
}

# stop_server [SIGNAL]: stop the server started by start_server (idempotent).
# SIGNAL defaults to TERM; SIGKILL follows after 5 s.
stop_server() {
    if [[ -n "${SERVER_PID:-}" ]]; then
        kill_pid "$SERVER_PID" 5 "${1:-TERM}"
        SERVER_PID=""
    fi
}

# restart_server: stop the server and start the same command on the same PORT.
# RESTART_SIGNAL (default TERM = graceful; KILL simulates a crash) is what the
# old process receives. Retries while the port is still busy (max 20 s).
restart_server() {
    log "restarting server '$SERVER_NAME' on port $PORT (SIG${RESTART_SIGNAL:-TERM})"
    stop_server "${RESTART_SIGNAL:-TERM}"
    local deadline=$((SECONDS + 20)) rc
    while :; do
        rc=0
        _launch_server || rc=$?
        ((rc == 0)) && return 0
        if ((rc != 2 || SECONDS >= deadline)); then
            [[ -n "$SERVER_PID" ]] && kill_pid "$SERVER_PID"
            _server_failed
        fi
        sleep 0.2
    done
}

# ------------------------------------------------------------------ php ----
# start_php NAME PORT STORE_PORT: php -S on 127.0.0.1:PORT in its own process
# group, docroot tests/clients/php, sessions in the memcached server on
# 127.0.0.1:STORE_PORT. Env: PHP_WORKERS (8), PHP_SESS_BINARY (1),
# PHP_SESS_LOCKING (1).
start_php() {
    local name=$1 port=$2 store=$3
    local weblog="$CLIENT_TMP/php-$name.log" errlog="$CLIENT_TMP/php-$name.errors.log"
    : >"$errlog"
    PHP_CLI_SERVER_WORKERS=${PHP_WORKERS:-8} start_group "$weblog" \
        php -S "127.0.0.1:$port" -t "$CLIENTS_DIR/php" \
        -d display_errors=0 -d log_errors=1 -d "error_log=$errlog" \
        -d session.save_handler=memcached \
        -d "session.save_path=127.0.0.1:$store" \
        -d session.use_strict_mode=0 \
        -d session.gc_probability=0 \
        -d "memcached.sess_binary_protocol=${PHP_SESS_BINARY:-1}" \
        -d "memcached.sess_locking=${PHP_SESS_LOCKING:-1}" \
        -d memcached.sess_lock_retries=20 \
        -d memcached.sess_lock_wait_min=50 \
        -d memcached.sess_lock_wait_max=200 \
        -d memcached.sess_persistent=0
    local pgid=$BG_PID
    on_exit "kill_group $pgid"
    wait_tcp "$port" 20 || { cat "$weblog" >&2; die "php -S $name did not come up on port $port"; }
    # sanity: the page sees the right session settings
    local out
    out=$(python3 - "$port" <<'EOF'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("GET", "/index.php"); print(c.getresponse().read().decode().strip())
EOF
    )
    [[ "$out" == "ok memcached 127.0.0.1:$store" ]] || die "php -S $name: unexpected index.php answer: $out"
    log "php -S $name on 127.0.0.1:$port (pgid $pgid, ${PHP_WORKERS:-8} workers)"
}


# ------------------------------------------------------------- misc ---------
# require_cmd CMD...: fail with a clear message if a tool is missing.
require_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "required command not found: $c"
    done
}
