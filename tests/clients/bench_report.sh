#!/usr/bin/env bash
# kura bench against the server in KURA_SERVER_CMD: the seed-001 style command
# line prints mcperf's summary with percentiles, a mixed run with value
# verification writes JSON and a self-contained HTML report with its charts.
#
#   KURA_BENCH=target/debug/kura bash tests/clients/bench_report.sh
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BENCH=${KURA_BENCH:-}
if [[ -z "$BENCH" ]]; then
    for candidate in target/release/kura target/debug/kura; do
        [[ -x "$candidate" ]] && BENCH=$candidate && break
    done
fi
[[ -x "$BENCH" ]] || die "no kura binary to run bench with (set KURA_BENCH)"
start_server bench

summary="$CLIENT_TMP/summary.txt"
run_wait "$BENCH" bench -s 127.0.0.1 -p "$PORT" --linger=0 --timeout=5 --conn-rate=1000 --call-rate=100 \
    --num-calls=200 --num-conns=20 --sizes=u1024,10240 --quiet >"$summary"
for line in "Total: connections 20 requests 4000 responses 4000" "Response rate:" "Response time \[ms\]: p50" \
    "Response type: stored 4000" "Errors: total 0"; do
    grep -q "$line" "$summary" || { cat "$summary"; die "summary lacks '$line'"; }
done

json="$CLIENT_TMP/report.json"
html="$CLIENT_TMP/report.html"
run_wait "$BENCH" bench -s 127.0.0.1 -p "$PORT" --ratio set:get=1:9 --load --keys 2000 --duration 2s \
    --num-conns 10 --verify --quiet --json "$json" --html "$html" >"$summary"
python3 - "$json" "$html" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
run = report["runs"][0]
errors = dict(run["errors"])
assert not errors, f"errors: {errors}"
kinds = dict(run["response_types"])
assert kinds.get("value", 0) > 0, f"no values read back: {kinds}"
assert len(run["timeline"]) >= 2, "no timeline"
html = open(sys.argv[2]).read()
charts = html.count('<svg class="chart"')
assert html.startswith("<!DOCTYPE html>"), "not an HTML document"
assert charts >= 3, f"only {charts} charts"
assert "http://" not in html and "https://" not in html, "the report must not load anything"
print(f"bench report: {run['responses']} responses verified, {charts} charts, {len(html)} bytes of HTML")
PY
