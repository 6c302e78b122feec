#!/bin/bash
# Compiles LuceneBench.java against Debian's liblucene8-java (8.8.1; the jars
# are named *-8.7.0.jar) into a temporary directory and runs it.
#   run.sh index DOCS MAPPING OUT [--threads N] [--ram-mb M]
#   run.sh query INDEX QUERIES REPEAT
#   run.sh scores DOCS QUERIES [MAPPING]
# JAVA_OPTS overrides the JVM options (default -Xms2g -Xmx2g).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JARS=/usr/share/java
CP=""
for j in lucene-core lucene-analyzers-common; do
  jars=("$JARS/$j"-8*.jar) # a glob, not `ls | head -1` (SIGPIPE under pipefail)
  f=${jars[0]}
  [ -e "$f" ] || { echo "lucene/run.sh: $JARS/$j-8*.jar missing: apt-get install liblucene8-java" >&2; exit 2; }
  CP="$CP${CP:+:}$f"
done
command -v javac >/dev/null || { echo "lucene/run.sh: javac missing (a JDK >= 11)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/lucenebench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
javac -nowarn -d "$TMP" -cp "$CP" "$HERE/LuceneBench.java"
java ${JAVA_OPTS:--Xms2g -Xmx2g} -cp "$TMP:$CP" LuceneBench "$@"
