#!/usr/bin/env bash
# One-shot device check for a session that is lent a GPU machine: builds with
# CUDA, runs the tests that need a GPU (they skip cleanly elsewhere), and
# starts a server with pinned placement. Prints what it found; exits non-zero
# on the first failure. Keep it short: device time is scarce.
#   bash tests/gpu/device_check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
echo "== build (CUDA from /usr/local/cuda)"
bash scripts/build.sh "$BUILD" >/dev/null
echo "== GPU tests"
ctest --test-dir "$BUILD" --output-on-failure -R "Nccl|Pinned|Gpu|Cuda" --timeout 300
echo "== pinned placement"
tmp=$(mktemp -d)
"$BUILD/bin/zeroshard-server" --placement=pinned --no_auth --port_file="$tmp/port" &
pid=$!
for _ in $(seq 100); do [ -f "$tmp/port" ] && break; sleep 0.1; done
"$BUILD/bin/zeroshard-ctl" init --servers="127.0.0.1:$(cat "$tmp/port")" --layers=2 --width=64
"$BUILD/bin/zeroshard-ctl" inspect --servers="127.0.0.1:$(cat "$tmp/port")"
kill "$pid"; wait "$pid" || true
echo "== device check done"
