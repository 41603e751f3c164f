#!/usr/bin/env bash
# One-shot device check for a session that is lent a GPU machine (a few
# minutes): runs every test that needs a GPU (they skip cleanly elsewhere),
# then prints a short table: device AdamW bytes/s against the device's copy
# bandwidth, an NCCL reduce-scatter / all-gather size sweep on one GPU, the
# GPT-2-124M shape's tokens/s, MFU and peak activations (the model alone on
# the device, then the whole step with 1 worker + 1 server, the server's
# state on the host and then on the device), servers with pinned and device
# placement, and the main job (zeroshard-train, whose worker picks the GPU by
# itself: its "compute:" and "engine:" lines are printed) with 2 workers
# and with 1 (the engine's units and gradients in device memory). Exits non-zero on the first
# failure.
#
# The lent machines cannot build zeroshard (no Debian C++ packages, no
# network), so the programs come prebuilt: here, `bash tests/gpu/pack.sh`
# writes .gpu/pack.tar.xz; the device run carries `.gpu` and this script
# unpacks it. On a GPU machine with the Debian packages it builds instead:
#   bash tests/gpu/device_check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
if [ -f .gpu/pack.tar.xz ]; then
  root=/tmp/zs-pack
  rm -rf "$root"; mkdir -p "$root"
  tar -C "$root" -xJf .gpu/pack.tar.xz
  echo "== prebuilt programs of commit $(cat "$root/COMMIT")"
  BIN="$root/bin"; TESTS="$root/bin"
  # The CUDA libraries this machine has (toolkit, or the Python wheels').
  cuda_dirs=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/lib/x86_64-linux-gnu \
      $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
      \( -name 'libcublasLt.so.1*' -o -name 'libnccl.so.2*' -o -name 'libcudart.so.1*' \) \
      -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
  export LD_LIBRARY_PATH="$root/lib:${cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libraries: $LD_LIBRARY_PATH"
else
  BUILD=${1:-build-gpu}
  echo "== build (CUDA from /usr/local/cuda, sm_90)"
  bash scripts/install-deps.sh --build-only >/dev/null
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD" -j "$(nproc)" --target adam_device_test kernels_cuda_test \
    comm_nccl_test shard_store_device_test device_gpt_test engine_device_test compute_device_test \
    zeroshard-bench zeroshard-server zeroshard-ctl zeroshard-train \
    zeroshard-worker >/dev/null
  BIN="$BUILD/bin"; TESTS="$BUILD/tests"
  echo "built in $((SECONDS - t0)) s"
fi
echo "== GPU tests"
for t in adam_device_test kernels_cuda_test comm_nccl_test \
    shard_store_device_test device_gpt_test engine_device_test compute_device_test; do
  "$TESTS/$t" --gtest_brief=1
done
echo "== device AdamW"
"$BIN/zeroshard-bench" device-adam
echo "== NCCL sweep (one GPU)"
"$BIN/zeroshard-bench" device-nccl
echo "== GPT-2-124M shape, BF16"
"$BIN/zeroshard-bench" device-gpt
for placement in pinned device; do
  echo "== $placement placement"
  tmp=$(mktemp -d)
  "$BIN/zeroshard-server" --placement=$placement --no_auth --port_file="$tmp/port" &
  pid=$!
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || { echo "the $placement server did not start"; exit 1; }
  "$BIN/zeroshard-ctl" init --servers="127.0.0.1:$(cat "$tmp/port")" --layers=2 --width=64
  "$BIN/zeroshard-ctl" inspect --servers="127.0.0.1:$(cat "$tmp/port")"
  kill "$pid"; wait "$pid" || true
done
echo "== main job on the GPU (30 steps; 2 workers share it over gloo, host buffers)"
out=$(mktemp -d)
"$BIN/zeroshard-train" --config=examples/gpt-small.json --steps=30 --out="$out" \
  --quiet || { tail -20 "$out"/logs/*.log; exit 1; }
grep -h "compute:\|engine:" "$out"/logs/worker*.log
head -1 "$out/metrics.csv"; tail -2 "$out/metrics.csv"
echo "== main job, 1 worker: units and gradients in device memory (30 steps)"
out1=$(mktemp -d)
"$BIN/zeroshard-train" --config=examples/gpt-small.json --workers=1 --steps=30 \
  --out="$out1" --quiet || { tail -20 "$out1"/logs/*.log; exit 1; }
grep -h "compute:\|engine:" "$out1"/logs/worker*.log
head -1 "$out1/metrics.csv"; tail -2 "$out1/metrics.csv"
echo "== device check done in $((SECONDS - t0)) s"
