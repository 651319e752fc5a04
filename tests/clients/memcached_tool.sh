#!/usr/bin/env bash
# memcached-tool (perl, /usr/share/memcached/scripts/memcached-tool) against
# the server: stores ITEMS items of mixed sizes (16 B .. 100 KB), then
#   memcached-tool 127.0.0.1:PORT display  -> >= 1 slab-class row with Count > 0
#                                             and the Counts sum to ITEMS
#   memcached-tool 127.0.0.1:PORT stats    -> curr_items == ITEMS
#
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/memcached_tool.sh
#
# What memcached-tool reads (see MEMCACHED_TOOL_FIELDS.txt for the full list):
#  display mode:
#   sends "stats items\r\n", reads lines until one starting with "END";
#     parses /^STAT items:(\d+):(\w+) (\d+)/  (value must be an integer) and uses
#     items:<cls>:number, :age, :evicted, :evicted_time, :outofmemory
#   then "stats slabs\r\n" on the same connection, until "END";
#     parses /^STAT (\d+):(\w+) (\d+)/ and uses
#     <cls>:chunk_size, :total_pages, :total_chunks, :used_chunks;
#     the LAST class id seen in "stats slabs" is the highest class printed.
#     Classes with total_pages == 0 are skipped, so a class holding items
#     must report total_pages >= 1. (Global lines like "STAT active_slabs 3"
#     and "STAT total_malloced N" are ignored by the regex.)
#   stats mode: "stats\r\n" until "END"; prints every /^STAT\s+(\S*)\s+(.*)/.
#  (settings: "stats settings"; sizes: "stats sizes";
#   dump/keys: "lru_crawler metadump all" -> "key=<urlenc> exp=<n> la=.. cas=.. fetch=.. cls=.. size=.." lines, "END";
#   dump then does "get <key>" for each.)  Those modes are not tested here.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TOOL=${MEMCACHED_TOOL:-/usr/share/memcached/scripts/memcached-tool}
ITEMS=${ITEMS:-300}
[[ -r "$TOOL" ]] || die "memcached-tool not found at $TOOL"
require_cmd perl python3 timeout

start_server memcached_tool

# Store ITEMS items of mixed sizes over a raw ascii connection.
python3 - "$PORT" "$ITEMS" <<'EOF'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
sizes = [16, 100, 500, 1000, 3000, 10000, 50000, 100000]
s = socket.create_connection(("127.0.0.1", port), timeout=10)
f = s.makefile("rb")
s.sendall(b"flush_all\r\n")
assert f.readline() == b"OK\r\n"
for i in range(n):
    size = sizes[i % len(sizes)]
    val = (b"%08d" % i) * (size // 8) + b"x" * (size % 8)
    s.sendall(b"set tool_key_%d %d 0 %d\r\n%s\r\n" % (i, i, len(val), val))
    line = f.readline()
    if line != b"STORED\r\n":
        sys.exit("set tool_key_%d (%d bytes): %r" % (i, size, line))
# read one back to be sure
s.sendall(b"get tool_key_7\r\n")
hdr = f.readline()
assert hdr.startswith(b"VALUE tool_key_7 7 "), hdr
f.read(int(hdr.split()[3]) + 2)
assert f.readline() == b"END\r\n"
s.sendall(b"quit\r\n")
print("stored %d items" % n)
EOF

failed=0

# ----------------------------------------------------------------- display --
out="$CLIENT_TMP/display.out"
rc=0
timeout 20 perl "$TOOL" "127.0.0.1:$PORT" display >"$out" 2>&1 || rc=$?
echo "--- memcached-tool display (rc=$rc)"
cat "$out"
# Rows look like:
#   "  #  Item_Size  Max_age   Pages   Count   Full?  Evicted Evict_Time OOM"
#   "  5     240B         1s       1      38     yes        0        0    0"
if ((rc != 0)); then
    echo "FAIL: memcached-tool display exited with $rc"
    failed=1
elif ! grep -q '^  #  Item_Size  Max_age   Pages   Count   Full?  Evicted Evict_Time OOM$' <<<"$(head -n1 "$out")"; then
    echo "FAIL: display header missing"
    failed=1
else
    read -r rows nonzero total < <(awk '
        NR > 1 && $1 ~ /^[0-9]+$/ && $3 ~ /^-?[0-9]+s$/ { rows++; if ($5 > 0) nz++; sum += $5 }
        END { printf "%d %d %d\n", rows, nz, sum }' "$out")
    echo "display: $rows slab-class rows, $nonzero with items, item count sum $total"
    if ((nonzero < 1)); then
        echo "FAIL: no slab-class row with a nonzero item count"
        failed=1
    elif ((total != ITEMS)); then
        echo "FAIL: slab-class item counts sum to $total, expected $ITEMS"
        failed=1
    fi
fi

# ------------------------------------------------------------------- stats --
out="$CLIENT_TMP/stats.out"
rc=0
timeout 20 perl "$TOOL" "127.0.0.1:$PORT" stats >"$out" 2>&1 || rc=$?
echo "--- memcached-tool stats (rc=$rc), selected fields:"
grep -E '^ *(pid|version|curr_items|total_items|curr_connections|cmd_set|cmd_get|bytes|limit_maxbytes|threads) ' "$out" | tr -d '\r' || true
# memcached-tool only chomps "\n", so values keep the protocol's "\r": strip it.
tr -d '\r' <"$out" >"$out.clean"
curr=$(awk '$1 == "curr_items" { print $2 }' "$out.clean")
total_items=$(awk '$1 == "total_items" { print $2 }' "$out.clean")
if ((rc != 0)); then
    echo "FAIL: memcached-tool stats exited with $rc"
    failed=1
elif [[ "$curr" != "$ITEMS" ]]; then
    echo "FAIL: curr_items is '${curr}', expected $ITEMS"
    failed=1
elif [[ -z "$total_items" ]] || ((total_items < ITEMS)); then
    echo "FAIL: total_items is '${total_items}', expected >= $ITEMS"
    failed=1
else
    echo "stats: curr_items=$curr total_items=$total_items"
fi

if ((failed == 0)); then echo "memcached-tool: PASS"; else echo "memcached-tool: FAIL"; fi
exit "$failed"
