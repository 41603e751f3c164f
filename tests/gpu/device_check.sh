#!/usr/bin/env bash
# One-shot device check for a session that is lent a GPU machine (about 8
# minutes on 16 cores): builds the CUDA targets it needs, runs every test that
# needs a GPU (they skip cleanly elsewhere), then prints a short table:
# device AdamW bytes/s against the device's copy bandwidth, an NCCL
# reduce-scatter / all-gather size sweep on one GPU, and a server with pinned
# placement. Exits non-zero on the first failure; keep it short, device time
# is scarce.
#   bash tests/gpu/device_check.sh [BUILD_DIR]
#
# Not yet in the table (the GPU worker's step is not built: see README,
# "The GPU path"): tokens/s and MFU of the GPT-2-124M shape, the worker's peak
# device memory against the estimator.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
t0=$SECONDS
echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
echo "== build (CUDA from /usr/local/cuda, sm_90)"
bash scripts/install-deps.sh --build-only >/dev/null
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" --target adam_device_test kernels_cuda_test \
  comm_nccl_test zeroshard-bench zeroshard-server zeroshard-ctl >/dev/null
echo "built in $((SECONDS - t0)) s"
echo "== GPU tests"
for t in adam_device_test kernels_cuda_test comm_nccl_test; do
  "$BUILD/tests/$t" --gtest_brief=1
done
echo "== device AdamW"
"$BUILD/bin/zeroshard-bench" device-adam
echo "== NCCL sweep (one GPU)"
"$BUILD/bin/zeroshard-bench" device-nccl
echo "== pinned placement"
tmp=$(mktemp -d)
"$BUILD/bin/zeroshard-server" --placement=pinned --no_auth --port_file="$tmp/port" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
"$BUILD/bin/zeroshard-ctl" init --servers="127.0.0.1:$(cat "$tmp/port")" --layers=2 --width=64
"$BUILD/bin/zeroshard-ctl" inspect --servers="127.0.0.1:$(cat "$tmp/port")"
kill "$pid"; wait "$pid" || true
echo "== device check done in $((SECONDS - t0)) s"
