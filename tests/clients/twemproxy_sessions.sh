#!/usr/bin/env bash
# kura behind twemproxy (examples/twemproxy): three kura masters, each with a
# replica, behind Debian's nutcracker (ketama, auto_eject_hosts), PHP
# sessions through it from two PHP web servers.
#
# Sessions are written through web server A; one master is killed (SIGKILL)
# halfway; the rest are written (nutcracker ejects the dead master and maps
# its keys to the others). Then:
#   - every session a surviving master holds reads back intact through web
#     server B and nutcracker;
#   - every session written before the kill that no survivor holds is on the
#     dead master's replica, intact.
#
# Env: KURA_BIN (default target/release/kura), SESSIONS (default 300).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd php python3 setsid nutcracker
KURA_BIN=${KURA_BIN:-target/release/kura}
SESSIONS=${SESSIONS:-300}
HALF=$((SESSIONS / 2))
PHP_SESS_BINARY=0 # twemproxy speaks memcached's text protocol only
PHP_SESS_LOCKING=0 # a lock key may map to another server than its session

# start_kura NAME PORT [ARGS...]: a kura disk-engine server in its own group.
start_kura() {
    local name=$1 port=$2
    shift 2
    start_group "$CLIENT_TMP/$name.log" "$REPO_ROOT/$KURA_BIN" serve -l 127.0.0.1 -p "$port" \
        --engine disk --dir "$CLIENT_TMP/$name" -m 64 -t 2 "$@"
    eval "PGID_$name=$BG_PID"
    on_exit "kill_group $BG_PID"
    wait_tcp "$port" 20 || { cat "$CLIENT_TMP/$name.log" >&2; die "kura $name did not come up"; }
}

masters=() replicas=()
for n in 1 2 3; do
    port=$(free_port)
    start_kura "kura$n" "$port"
    masters+=("$port")
    replica=$(free_port)
    start_kura "kura${n}_replica" "$replica" --replica-of "127.0.0.1:$port"
    replicas+=("$replica")
done
log "masters ${masters[*]}, replicas ${replicas[*]}"

PROXY=$(free_port)
config="$CLIENT_TMP/nutcracker.yml"
# The example's pool, on this run's ports.
sed -e "s/127.0.0.1:22121/127.0.0.1:$PROXY/" \
    -e "s/127.0.0.1:11211:1/127.0.0.1:${masters[0]}:1/" \
    -e "s/127.0.0.1:11212:1/127.0.0.1:${masters[1]}:1/" \
    -e "s/127.0.0.1:11213:1/127.0.0.1:${masters[2]}:1/" \
    "$REPO_ROOT/examples/twemproxy/nutcracker.yml" >"$config"
start_group "$CLIENT_TMP/nutcracker.log" nutcracker -c "$config"
on_exit "kill_group $BG_PID"
wait_tcp "$PROXY" 20 || { cat "$CLIENT_TMP/nutcracker.log" >&2; die "nutcracker did not come up"; }
log "nutcracker on 127.0.0.1:$PROXY"

PORT_A=$(free_port)
start_php A "$PORT_A" "$PROXY"
PORT_B=$(free_port)
start_php B "$PORT_B" "$PROXY"
driver=(python3 "$CLIENTS_DIR/php_sessions_driver.py" --port-a "$PORT_A" --port-b "$PORT_B" --concurrency 16)

before="$CLIENT_TMP/before.state" after="$CLIENT_TMP/after.state"
"${driver[@]}" --sessions "$HALF" --phase write --state "$before" || die "writing sessions failed"
# Let master 2's replica take the last writes (its position reaches the
# master's last LSN), then kill master 2 mid-run.
python3 - "${masters[1]}" "${replicas[1]}" <<'EOF' || die "master 2's replica did not catch up"
import socket, sys, time
def stats(port, group):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"stats {group}\r\n".encode())
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return dict(line.split(" ")[1:3] for line in data.decode().split("\r\n") if line.startswith("STAT "))
master, replica = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 60
while time.time() < deadline:
    last = int(stats(master, "kura").get("log_last_lsn", "-1"))
    if int(stats(replica, "replication").get("repl_lsn", "-2")) >= last:
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
EOF
log "killing master 2 (port ${masters[1]}) with SIGKILL"
kill -KILL -- "-$PGID_kura2"
# Some writes fail until nutcracker ejects the dead master: they are not counted.
"${driver[@]}" --sessions "$((SESSIONS - HALF))" --phase write --state "$after" || true

# Where each session lives: a surviving master, or (written before the kill)
# the dead master's replica.
python3 - "$CLIENT_TMP" "${masters[0]}" "${masters[2]}" "${replicas[1]}" <<'EOF'
import socket, sys
tmp, survivors, replica = sys.argv[1], [int(p) for p in sys.argv[2:4]], int(sys.argv[4])

def holds(port, sid):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"get memc.sess.key.%s\r\n" % sid.encode())
        reply = b""
        while not reply.endswith(b"END\r\n"):
            reply += s.recv(65536)
    return reply.startswith(b"VALUE")

on_survivors, on_replica, nowhere, unsaved = [], [], [], []
for name in ("before", "after"):
    for line in open(f"{tmp}/{name}.state"):
        sid, csum = line.split()
        if sid == "-":
            continue
        if any(holds(port, sid) for port in survivors):
            on_survivors.append(line)
        elif name == "before" and holds(replica, sid):
            on_replica.append(line)
        elif name == "before":
            nowhere.append(sid)
        else:
            # Written while nutcracker still sent the dead master's keys to it:
            # PHP reports a failed session write only in its log.
            unsaved.append(sid)
open(f"{tmp}/survivors.state", "w").writelines(on_survivors)
print(f"sessions on the surviving masters: {len(on_survivors)}; on the dead master's replica: "
      f"{len(on_replica)}; written before the kill and found nowhere: {len(nowhere)}; "
      f"written after it and not saved: {len(unsaved)}")
if nowhere:
    sys.exit("sessions written before the kill and found nowhere: " + ", ".join(nowhere[:10]))
if not on_survivors or not on_replica:
    sys.exit("expected sessions on the survivors and on the dead master's replica")
EOF

# Every session on a surviving master reads back intact through nutcracker.
"${driver[@]}" --phase read --state "$CLIENT_TMP/survivors.state"
