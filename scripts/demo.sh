#!/usr/bin/env bash
# A hand-driven look at the shard servers: a 2-server cluster on this machine.
# Starts two zeroshard-server processes on 127.0.0.1 (free ports), initialises
# a small GPT manifest on them, pushes and gathers a few steps as two
# simulated workers, prints the servers' Inspect table, and stops them. Every
# call goes over mutual TLS with development certificates
# (scripts/make-dev-credentials.sh): the tools' role comes from the
# certificate they present (ctl for inspect and health, admin otherwise).
#
#   bash scripts/demo.sh [BUILD_DIR]      # default: build
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
for b in zeroshard-server zeroshard-ctl; do
  if [ ! -x "$BIN/$b" ]; then
    echo "demo: $BIN/$b not found; build first (make build)" >&2
    exit 1
  fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zeroshard-demo.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Bounded wait (5 s), then SIGKILL.
  for _ in $(seq 50); do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

CREDS="$TMP/credentials"
bash "$(dirname "$0")/make-dev-credentials.sh" "$CREDS"
S=2
for k in $(seq 0 $((S - 1))); do
  "$BIN/zeroshard-server" --listen=127.0.0.1:0 --server_index="$k" \
    --num_servers="$S" --port_file="$TMP/$k.port" --credentials="$CREDS" \
    >"$TMP/server$k.out" 2>"$TMP/server$k.log" &
  PIDS+=($!)
done

SERVERS=""
for k in $(seq 0 $((S - 1))); do
  for _ in $(seq 300); do            # up to 30 s
    [ -s "$TMP/$k.port" ] && break
    if ! kill -0 "${PIDS[$k]}" 2>/dev/null; then
      echo "demo: server $k exited; its log:" >&2
      cat "$TMP/server$k.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [ ! -s "$TMP/$k.port" ]; then
    echo "demo: server $k did not start within 30 s" >&2
    exit 1
  fi
  SERVERS="${SERVERS:+$SERVERS,}127.0.0.1:$(cat "$TMP/$k.port")"
done
echo "== 2 shard servers: $SERVERS"

SHAPE=(--layers=4 --heads=4 --width=128 --vocab=256 --context=128 --workers=2)
echo "== zeroshard-ctl layout"
"$BIN/zeroshard-ctl" layout --num_servers="$S" "${SHAPE[@]}"
echo
echo "== zeroshard-ctl init"
timeout 60 "$BIN/zeroshard-ctl" init --servers="$SERVERS" --credentials="$CREDS" "${SHAPE[@]}" --seed=1 --lr=1e-3
echo
echo "== zeroshard-ctl smoke --steps=5"
timeout 120 "$BIN/zeroshard-ctl" smoke --servers="$SERVERS" --credentials="$CREDS" --steps=5
echo
echo "== zeroshard-ctl inspect"
timeout 60 "$BIN/zeroshard-ctl" inspect --servers="$SERVERS" --credentials="$CREDS"
echo
echo "== zeroshard-ctl health"
timeout 60 "$BIN/zeroshard-ctl" health --servers="$SERVERS" --credentials="$CREDS"
