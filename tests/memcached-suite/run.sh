#!/usr/bin/env bash
# Runs memcached 1.6.18's own test suite (the t/ directory of Debian's source
# package) against kura.
#
#   bash tests/memcached-suite/run.sh memory            # kura serve --engine memory
#   bash tests/memcached-suite/run.sh disk              # kura serve --engine disk
#   bash tests/memcached-suite/run.sh memory incrdecr cas   # only these files
#
# The source package is fetched once with apt-get (a private apt configuration
# holding a deb-src entry for bookworm, so the machine's sources stay
# untouched) and kept under target/memcached-suite/. Nothing of memcached is
# committed. The suite starts "memcached-debug" from its build directory; a
# small wrapper there starts kura with the suite's flags instead.
#
# Env: KURA_BIN (default target/debug/kura), SUITE_JOBS (files run at once,
#      default 4), SUITE_TIMEOUT (seconds per file, default 240),
#      VERBOSE=1 prints every file's output. The last run's logs are kept in
#      target/memcached-suite/logs-ENGINE/.
#
# Prints one line per file (PASS / FAIL / SKIP / N/A / XFAIL) and ends with
# "memcached suite (ENGINE): N passed, N failed, N skipped, N not applicable".
# A file listed in docs/COMPATIBILITY.md as not applicable is not run; one
# listed as a known gap (for that engine) may fail without failing the run.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

engine=${1:-memory}
shift || true
case $engine in memory | disk) ;; *) echo "usage: $0 memory|disk [file ...]" >&2; exit 64 ;; esac

KURA_BIN=$(realpath "${KURA_BIN:-target/debug/kura}")
[[ -x $KURA_BIN ]] || { echo "memcached suite: no kura binary at $KURA_BIN (cargo build first)" >&2; exit 1; }
CACHE="$ROOT/target/memcached-suite"
SOURCE="$CACHE/memcached-1.6.18"

fetch_source() {
    [[ -f $SOURCE/t/lib/MemcachedTest.pm ]] && return 0
    command -v dpkg-source >/dev/null || apt_install dpkg-dev
    local apt="$CACHE/apt"
    rm -rf "$apt" "$SOURCE"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/download"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" >"$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1)
    apt-get "${opts[@]}" update -qq
    (cd "$apt/download" && apt-get "${opts[@]}" source --download-only -qq memcached 2>/dev/null)
    dpkg-source -x "$apt/download"/memcached_1.6.18-*.dsc "$SOURCE" >/dev/null 2>&1
    rm -rf "$apt"
}

apt_install() {
    local sudo_cmd=""
    [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
}

# The lists in docs/COMPATIBILITY.md: lines "| `file.t` | engines | reason |"
# under the headings "Not applicable" and "Known gaps".
listed() {
    local heading=$1
    awk -v heading="$heading" '
        /^## / { inside = index($0, heading) > 0; next }
        inside && /^\| `[^`]+\.t`/ { split($0, cells, "|"); gsub(/[ `]/, "", cells[2]); gsub(/ /, "", cells[3]); print cells[2], cells[3] }
    ' docs/COMPATIBILITY.md
}

fetch_source
perl -MIO::Socket::SSL -e 1 2>/dev/null || apt_install libio-socket-ssl-perl
command -v saslpasswd2 >/dev/null || apt_install sasl2-bin
# binary-sasl.t authenticates through libsasl2's PLAIN and CRAM-MD5 plugins,
# which libsasl2-2 only recommends.
compgen -G "/usr/lib/*/sasl2/libplain.so*" >/dev/null || apt_install libsasl2-modules

# The suite's build directory: its t/ and the two programs it starts.
# Each run has its own directory, so two runs at once do not clobber each other.
build="$CACHE/run-$engine-$$"
rm -rf "$build"
mkdir -p "$build"
trap 'rm -rf "$build"' EXIT
ln -s "$SOURCE/t" "$build/t"
cat >"$build/memcached-debug" <<WRAPPER
#!/usr/bin/env bash
# Stands in for memcached-debug: kura with the suite's flags. exec keeps the
# pid, so the suite's signals (TERM, INT, USR1) reach kura itself.
case " \$* " in *" -h "*) exec "$KURA_BIN" serve -h ;; esac
# kura's default connection limit is 16384; the suite counts on memcached's 1024.
limit=(-c 1024)
case " \$* " in *" -c "*) limit=() ;; esac
exec "$KURA_BIN" serve --engine $engine --dir "\${SUITE_DATA:-$build/data}/\$\$" "\${limit[@]}" "\$@"
WRAPPER
# memcached's timedrun: run a command, kill it after N seconds. A watchdog
# rather than a parent process, so the command keeps timedrun's pid. The
# watchdog kills that pid only if it is still the same process (the same
# start time): a command that ended long before leaves its pid to another
# process, which a blind kill once took down (a compiler, a test's server).
cat >"$build/timedrun" <<'TIMEDRUN'
#!/usr/bin/env bash
seconds=$1
shift
# Field 22 of /proc/PID/stat, counted after the command name's ")".
started() { local stat; read -r stat <"/proc/$1/stat" 2>/dev/null || return 0; set -- ${stat##*) }; echo "${20}"; }
(
    self=$(started $$)
    sleep "$seconds"
    [[ -n $self && $(started $$) == "$self" ]] && kill -KILL $$
) </dev/null >/dev/null 2>&1 &
exec "$@"
TIMEDRUN
chmod +x "$build/memcached-debug" "$build/timedrun"

declare -A not_applicable=() known_gap=()
while read -r file engines; do not_applicable[$file]=$engines; done < <(listed "Not applicable")
while read -r file engines; do known_gap[$file]=$engines; done < <(listed "Known gaps")
applies_to() { [[ $1 == all || ,$1, == *,$engine,* ]]; }

if (($# > 0)); then
    files=("$@")
else
    mapfile -t files < <(cd "$SOURCE/t" && ls -1 ./*.t | sed 's|^\./||')
fi

logs="$build/logs"
mkdir -p "$logs"
run_one() {
    local file=${1%.t}.t
    cd "$build"
    local tls=""
    # The TLS files run only with SSL_TEST; with it, every file would speak TLS.
    [[ $file == ssl_* ]] && tls=1
    # Each file's servers keep their data under one folder, removed when the
    # file ends: a disk-engine server reserves 64 MiB of log, and the suite
    # starts over a hundred.
    local data="$build/data/$file"
    SUITE_DATA=$data SSL_TEST=$tls RUN_SASL_TESTS=1 timeout "${SUITE_TIMEOUT:-240}" perl "t/$file" >"$logs/$file.log" 2>&1 </dev/null
    echo $? >"$logs/$file.rc"
    # A server the file left running goes first, or it writes on as the
    # folder is removed.
    pkill -KILL -f -- "--dir $data/" 2>/dev/null
    sleep 0.2
    rm -rf "$data" 2>/dev/null || true
}
export -f run_one
export build logs SUITE_TIMEOUT
to_run=()
for f in "${files[@]}"; do
    f=${f%.t}.t
    if [[ -n ${not_applicable[$f]:-} ]] && applies_to "${not_applicable[$f]}"; then continue; fi
    to_run+=("$f")
done
printf '%s\n' "${to_run[@]}" | xargs -P "${SUITE_JOBS:-4}" -I{} bash -c 'run_one {}'

passed=0 failed=0 skipped=0 na=0 xfail=0
failed_names=()
for f in "${files[@]}"; do
    f=${f%.t}.t
    if [[ -n ${not_applicable[$f]:-} ]] && applies_to "${not_applicable[$f]}"; then
        echo "N/A   $f"
        na=$((na + 1))
        continue
    fi
    rc=$(cat "$logs/$f.rc" 2>/dev/null || echo 255)
    if grep -qi '^1\.\.0 # skip' "$logs/$f.log"; then
        echo "SKIP  $f ($(grep -m1 '^1\.\.0' "$logs/$f.log" | sed 's/^1\.\.0 # [Ss][Kk][Ii][Pp]\w* *//'))"
        skipped=$((skipped + 1))
    elif [[ $rc == 0 ]]; then
        echo "PASS  $f"
        passed=$((passed + 1))
    elif [[ -n ${known_gap[$f]:-} ]] && applies_to "${known_gap[$f]}"; then
        echo "XFAIL $f (a known gap, docs/COMPATIBILITY.md)"
        xfail=$((xfail + 1))
    else
        echo "FAIL  $f (exit $rc)"
        failed=$((failed + 1))
        failed_names+=("$f")
    fi
    if [[ ${VERBOSE:-0} == 1 || ($rc != 0 && -z ${known_gap[$f]:-}) ]] && [[ $rc != 0 || ${VERBOSE:-0} == 1 ]]; then
        grep -E '^(not ok|#|Bail)' "$logs/$f.log" | head -n 30 | sed 's/^/      /' || true
    fi
done
# The logs of the last run stay for reading.
rm -rf "$CACHE/logs-$engine"
cp -r "$logs" "$CACHE/logs-$engine"
echo "memcached suite ($engine): $passed passed, $failed failed, $skipped skipped, $na not applicable, $xfail known gaps${failed_names[*]:+; failed: ${failed_names[*]}}"
((failed == 0))
