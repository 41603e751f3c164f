#!/usr/bin/env bash
# One-shot device check for a session that is lent a GPU machine (a few
# minutes of device time, all tries together): runs every test that needs a
# GPU (they skip cleanly elsewhere), then the device benchmarks (device AdamW
# bytes/s against the device's copy bandwidth, an NCCL reduce-scatter /
# all-gather size sweep on one GPU, the GPT-2-124M shape's tokens/s, MFU and
# peak memory against the estimator: the model alone, then the whole step
# with 1 worker + 1 server, the server's state on the host and then on the
# device), servers with pinned and device placement, and the main job
# (zeroshard-train, whose worker picks the GPU by itself: its "compute:" and
# "engine:" lines are printed) with 2 workers and with 1 (the engine's units
# and gradients in device memory).
#
# Every stage runs, whatever an earlier one gave: a failure costs its own
# figures, not the rest of the run. Each stage has a time limit, and the
# whole script a budget (ZS_CHECK_BUDGET_S, default 480 s): a hung test is
# killed with its process group and reported, and what no longer fits is
# reported as not run. The end is a summary table (each stage: ok, FAILED,
# TIMED OUT, skipped, not run, with its seconds) and every benchmark's
# "ratio=" line. Exits non-zero when a stage failed or did not run. The
# whole output is also written to $OUT/device_check.log when OUT is set (the
# device tool brings $OUT back), else to a temporary file.
#
# Without a GPU (nvidia-smi lists none) the stages that need one are
# skipped; the rest still runs: the GPU tests load and skip, the benchmarks
# load and say "no CUDA device", the main jobs run on the CPU. That is the
# rehearsal (tests/gpu/rehearse.sh runs it from the pack in a fresh Debian
# 12 root, which has none of the libraries the pack brings).
#
# The lent machines cannot build zeroshard (no Debian C++ packages, no
# network), so the programs come prebuilt: here, `bash tests/gpu/pack.sh`
# writes .gpu/pack.tar.gz; the device run carries `.gpu` and this script
# unpacks it. On a GPU machine with the Debian packages it builds instead:
#   bash tests/gpu/device_check.sh [BUILD_DIR]
# ZS_CHECK_BUILD=DIR takes the programs of a CUDA build in DIR as they are;
# ZS_CHECK_REHEARSAL=1 hides CUDA's devices, so nothing runs on a GPU even
# where there is one (CTest runs the script with both, as
# device_check_rehearsal_test).
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
BUDGET=${ZS_CHECK_BUDGET_S:-480}
log=${OUT:+$OUT/device_check.log}
log=${log:-$(mktemp /tmp/device_check.XXXXXX.log)}
exec > >(tee -a "$log") 2>&1
tee_pid=$!
# The stage running now (its process group) and its watcher: killed with
# the script, so a stage never outlives a check that was stopped.
pid="" watcher=""
on_exit() {
  local rc=$?
  [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  # Everything reaches the log before the script ends.
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== device"
have_gpu=0
if [ "${ZS_CHECK_REHEARSAL:-}" = 1 ]; then
  # CTest's rehearsal: the script and the programs, never a device run, even
  # on a machine with a GPU.
  export CUDA_VISIBLE_DEVICES=""
  echo "rehearsal: CUDA devices hidden, the stages that need one are skipped"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  have_gpu=1
  # A runtime that sees no device fails the tests and benchmarks here
  # instead of skipping them (tests/support/cuda_device.h).
  export ZS_EXPECT_CUDA_DEVICE=1
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
else
  echo "no GPU (nvidia-smi lists none): the stages that need one are skipped"
fi

pack=""
for p in .gpu/pack.tar.gz .gpu/pack.tar.xz; do [ -f "$p" ] && { pack=$p; break; }; done
if [ -n "${ZS_CHECK_BUILD:-}" ]; then
  # A CMake build with CUDA that holds every program already (CTest's
  # device_check_rehearsal_test).
  BIN="$ZS_CHECK_BUILD/bin"; TESTS="$ZS_CHECK_BUILD/tests"
  echo "== programs of $ZS_CHECK_BUILD"
elif [ -n "$pack" ]; then
  root=/tmp/zs-pack
  rm -rf "$root"; mkdir -p "$root"
  if ! tar -C "$root" -xaf "$pack"; then
    echo "device_check: cannot unpack $pack"; exit 1
  fi
  echo "== prebuilt programs of commit $(cat "$root/COMMIT") (unpacked in $((SECONDS - t0)) s)"
  BIN="$root/bin"; TESTS="$root/bin"
  # The CUDA libraries this machine has (toolkit, or the Python wheels').
  py_sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  # shellcheck disable=SC2086
  cuda_dirs=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/lib/x86_64-linux-gnu $py_sites \
      \( -name 'libcublasLt.so.1*' -o -name 'libnccl.so.2*' -o -name 'libcudart.so.1*' \) \
      -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
  export LD_LIBRARY_PATH="$root/lib:${cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libraries: $LD_LIBRARY_PATH"
  missing=$(for f in "$BIN"/*; do ldd "$f" 2>&1 | grep 'not found' | sed "s|^|$(basename "$f"): |"; done)
  if [ -n "$missing" ]; then
    echo "device_check: libraries not found:"; echo "$missing"; exit 1
  fi
else
  BUILD=${1:-build-gpu}
  echo "== build (CUDA from /usr/local/cuda, sm_90)"
  bash scripts/install-deps.sh --build-only >/dev/null || exit 1
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  fi
  cmake --build "$BUILD" -j "$(nproc)" --target adam_device_test kernels_cuda_test \
    comm_test shard_store_device_test device_gpt_test device_llama_test engine_device_test \
    compute_device_test \
    zeroshard-bench zeroshard-server zeroshard-ctl zeroshard-train \
    zeroshard-worker >/dev/null || exit 1
  BIN="$BUILD/bin"; TESTS="$BUILD/tests"
  echo "built in $((SECONDS - t0)) s"
fi
export BIN TESTS

summary=()
bad=0
# stage NAME LIMIT_S NEEDS_GPU COMMAND...: runs COMMAND in its own process
# group, killed (TERM, then KILL 5 s later) after LIMIT_S or when the budget
# runs out, whichever is first; what is left of the group when COMMAND ends
# (a server, a worker) is killed then.
stage() {
  local name=$1 limit=$2 gpu=$3 left start rc=0
  shift 3
  if [ "$gpu" = 1 ] && [ "$have_gpu" = 0 ]; then
    summary+=("$(printf '%-34s %-10s' "$name" skipped) (no GPU)")
    echo "== $name: skipped (no GPU)"
    return
  fi
  left=$((BUDGET - (SECONDS - t0)))
  if [ "$left" -lt 10 ]; then
    summary+=("$(printf '%-34s %-10s' "$name" "not run") (budget of $BUDGET s spent)")
    echo "== $name: not run (budget spent)"
    bad=1
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "== $name (limit $limit s)"
  start=$SECONDS
  setsid "$@" &
  pid=$!
  # The watcher holds no output (a reader of the log would wait for it) and
  # takes its sleep with it when it is stopped.
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    sleep "$limit" & nap=$!; wait "$nap"
    kill -TERM -- "-$pid" 2>/dev/null
    sleep 5 & nap=$!; wait "$nap"
    kill -KILL -- "-$pid" 2>/dev/null
  ) >/dev/null 2>&1 &
  watcher=$!
  wait "$pid" || rc=$?
  kill -KILL -- "-$pid" 2>/dev/null
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  pid="" watcher=""
  local took=$((SECONDS - start)) result=ok
  if [ "$rc" != 0 ]; then
    bad=1
    result=FAILED
    if [ "$took" -ge "$limit" ]; then result="TIMED OUT"; fi
  fi
  summary+=("$(printf '%-34s %-10s %4d s' "$name" "$result" "$took")$([ "$rc" = 0 ] || echo " (exit $rc)")")
  echo "== $name: $result in $took s"
}

# A server with `placement`, initialised and inspected over RPC.
placement_server() {
  local placement=$1 tmp pid rc=0
  tmp=$(mktemp -d)
  "$BIN/zeroshard-server" --placement="$placement" --no_auth --port_file="$tmp/port" &
  pid=$!
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  if [ ! -s "$tmp/port" ]; then
    echo "the $placement server did not start"; kill "$pid" 2>/dev/null; return 1
  fi
  "$BIN/zeroshard-ctl" init --servers="127.0.0.1:$(cat "$tmp/port")" --layers=2 --width=64 &&
    "$BIN/zeroshard-ctl" inspect --servers="127.0.0.1:$(cat "$tmp/port")" || rc=$?
  kill "$pid"; wait "$pid" 2>/dev/null
  return "$rc"
}

# The main job, 30 steps; extra flags follow.
main_job() {
  local out
  out=$(mktemp -d)
  if ! "$BIN/zeroshard-train" --config=examples/gpt-small.json --steps=30 --out="$out" \
      --quiet "$@"; then
    tail -20 "$out"/logs/*.log; return 1
  fi
  grep -h "compute:\|engine:" "$out"/logs/worker*.log
  head -1 "$out/metrics.csv"; tail -2 "$out/metrics.csv"
  if [ "${ZS_EXPECT_CUDA_DEVICE:-}" = 1 ] && grep -q "compute: cpu" "$out"/logs/worker*.log; then
    echo "a worker computed on the CPU although a GPU is listed"; return 1
  fi
}
export -f placement_server main_job

for t in adam_device_test kernels_cuda_test shard_store_device_test device_gpt_test device_llama_test \
    engine_device_test compute_device_test; do
  stage "$t" 120 0 "$TESTS/$t" --gtest_brief=1
done
# The NCCL group's tests, of the collectives' program (comm_test).
stage "comm_test (NCCL)" 120 0 "$TESTS/comm_test" --gtest_brief=1 \
  --gtest_filter='NcclWorkerGroupTest.*'

stage "device AdamW (device-adam)" 60 0 "$BIN/zeroshard-bench" device-adam
stage "NCCL sweep, one GPU (device-nccl)" 90 0 "$BIN/zeroshard-bench" device-nccl
# Without a device (the rehearsal) device-gpt still runs its whole-step rig,
# on the CPU model at a tiny shape, so that a broken rig shows before a
# device run spends its minutes on it.
gpt_smoke=""
[ "$have_gpu" = 1 ] || gpt_smoke="--smoke"
stage "GPT-2-124M BF16 (device-gpt)" 240 0 "$BIN/zeroshard-bench" device-gpt $gpt_smoke
for placement in pinned device; do
  stage "server, $placement placement" 30 1 bash -c "placement_server $placement"
done
stage "main job, 2 workers (gloo)" 120 0 bash -c "main_job"
stage "main job, 1 worker (device memory)" 120 0 bash -c "main_job --workers=1"

echo
echo "== summary ($((SECONDS - t0)) s; log: $log)"
printf '%s\n' "${summary[@]}"
echo "-- benchmark ratios"
grep -h "ratio=" "$log" | grep -v "^== " || echo "(none)"
if [ "$bad" != 0 ]; then
  echo "device check: some stages FAILED or did not run (see above)"
  exit 1
fi
echo "device check: every stage ok or skipped"
