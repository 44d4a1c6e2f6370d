#!/bin/sh
# `gregor broker` with the image's config (or GREGOR_CONFIG_FILE), one --override per
# GREGOR_OVERRIDE_<KEY> variable, then the container's arguments (more options).
# Key names as in Apache Kafka's image: upper case, `.` written `_`, `_` written `__`,
# `-` written `___`; GREGOR_OVERRIDE_LOG_DIRS=/data sets log.dirs.
# exec: the broker replaces this shell and gets SIGTERM itself.
set -eu

for name in $(env | sed -n 's/^GREGOR_OVERRIDE_\([A-Za-z0-9_]*\)=.*/\1/p'); do
    key=$(printf '%s' "$name" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/\//g' -e 's/_/./g' -e 's/\//_/g')
    eval "value=\${GREGOR_OVERRIDE_$name}"
    set -- --override "$key=$value" "$@"
done
exec gregor broker --config "${GREGOR_CONFIG_FILE:-/etc/gregor/broker.yaml}" "$@"
