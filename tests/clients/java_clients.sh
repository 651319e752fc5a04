#!/usr/bin/env bash
# spymemcached 2.12.3 and xmemcached 2.4.8 (Java) against the server, each on
# its text and its binary protocol (modes spy-ascii, spy-binary, xmem-text,
# xmem-binary; XMemcachedClientBuilder + BinaryCommandFactory for binary).
# java/src/main/java/ClientsTest.java runs the same checks in every mode on one
# server started from KURA_SERVER_CMD and prints "PASS mode/check" /
# "FAIL mode/check: why" / "SKIP mode/check: why" (a call the client lacks on
# that protocol), then "java: N passed, M failed, K skipped".
#
#   KURA_SERVER_CMD='memcached -p {port} -U 0 -u root -l 127.0.0.1' bash tests/clients/java_clients.sh
#   JAVA_CLIENT_MODES="xmem-binary" bash tests/clients/java_clients.sh   # one mode
#
# Needs java (17+) and mvn. Maven resolves the pinned jars (java/pom.xml) from
# Maven Central into the local repository (~/.m2, or MVN_ARGS=-Dmaven.repo.local=DIR)
# and writes the classpath into $CLIENT_TMP; the java launcher then compiles
# and runs the single source file in memory (nothing is written to java/).
# A missing java or mvn is a failure, not a skip.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_cmd java mvn

JDIR="$CLIENTS_DIR/java"
CP_FILE="$CLIENT_TMP/java-classpath.txt"
t0=$SECONDS
log "resolving the classpath of $JDIR/pom.xml with $(mvn -v 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g')"
MVN_LOG="$CLIENT_TMP/mvn.log"
# shellcheck disable=SC2086
if ! run_wait mvn -q -B -Dstyle.color=never -f "$JDIR/pom.xml" ${MVN_ARGS:-} \
    -DbuildDir="$CLIENT_TMP/java-target" \
    dependency:build-classpath -Dmdep.outputFile="$CP_FILE" >"$MVN_LOG" 2>&1; then
    tail -n 40 "$MVN_LOG" >&2
    die "mvn dependency:build-classpath failed"
fi
[[ -s "$CP_FILE" ]] || die "mvn wrote no classpath to $CP_FILE"
log "classpath resolved in $((SECONDS - t0)) s"

start_server java_clients

# shellcheck disable=SC2206
modes=(${JAVA_CLIENT_MODES:-})
rc=0
run_wait java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$(cat "$CP_FILE")" \
    "$JDIR/src/main/java/ClientsTest.java" 127.0.0.1 "$PORT" "${modes[@]}" || rc=$?

server_alive || rc=1
exit "$rc"
