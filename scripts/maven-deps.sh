#!/usr/bin/env bash
# Copy the runtime classpath of one of the poms in scripts/kafka/ from Maven Central (through
# the local Maven repository, ~/.m2, so a second copy downloads nothing) into DEST_DIR, which
# then holds exactly those jars and a `.installed` stamp.
#
# usage: scripts/maven-deps.sh POM DEST_DIR [-Dproperty=value ...]
#   scripts/maven-deps.sh scripts/kafka/pom.xml .deps/kafka-4.4 -Dkafka.version=4.4.0   (Kafka 4.4.0)
#   scripts/maven-deps.sh scripts/kafka/clients-pom.xml .deps/java -Dkafka.version=3.9.2
set -euo pipefail

POM=${1:?usage: maven-deps.sh POM DEST_DIR [-Dproperty=value ...]}
DEST=${2:?usage: maven-deps.sh POM DEST_DIR [-Dproperty=value ...]}
shift 2

command -v mvn >/dev/null || { echo "maven-deps: no mvn on PATH (Debian: apt-get install maven)" >&2; exit 1; }
mkdir -p "$DEST"
rm -f "$DEST/.installed" "$DEST"/*.jar
echo "maven-deps: $POM $* -> $DEST" >&2
mvn -q -B -f "$POM" "$@" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$(cd "$DEST" && pwd)"
touch "$DEST/.installed"
echo "maven-deps: $(ls "$DEST" | wc -l) jars in $DEST" >&2
