#!/bin/sh
# The image's entry point: `python -m dht node` on the container's port and its data
# volume, all interfaces (the container's network is the boundary). The secret and the
# TLS files come as file paths (compose secrets land in /run/secrets) rather than as
# flags, where any process could read them. Flags given to the container come last and
# win over these.
set -eu

if [ -n "${DHT_SECRET_FILE:-}" ]; then
    DHT_SECRET=$(cat "$DHT_SECRET_FILE")
    export DHT_SECRET
fi

# The node refuses a partial set of TLS files, and says which is missing.
if [ -n "${DHT_TLS_CERT:-}" ]; then set -- --tls-cert "$DHT_TLS_CERT" "$@"; fi
if [ -n "${DHT_TLS_KEY:-}" ]; then set -- --tls-key "$DHT_TLS_KEY" "$@"; fi
if [ -n "${DHT_TLS_CA:-}" ]; then set -- --tls-ca "$DHT_TLS_CA" "$@"; fi

# exec: the node is PID 1 and gets podman's SIGTERM itself; it stops on it as on Ctrl-C
# (its own handler, which PID 1 needs: the kernel drops signals it has none for).
exec python -m dht node --host 0.0.0.0 --port "$DHT_PORT" --data-dir /var/lib/dht \
    --cluster "${DHT_CLUSTER:-http://127.0.0.1:$DHT_PORT}" "$@"
