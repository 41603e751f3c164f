#!/usr/bin/env bash
# Runs every benchmark once (not part of the test suite). Each prints figures
# measured in the same run against this machine's own limits and ends with
# "NAME ratio=X target=Y"; this script collects those last lines at the end.
#   bash scripts/bench.sh [BUILD_DIR] [NAME ...]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
BENCH="$BUILD/bin/zeroshard-bench"
if [ ! -x "$BENCH" ]; then
  echo "bench: $BENCH not found; run: bash scripts/build.sh $BUILD" >&2
  exit 1
fi
NAMES=("$@")
if [ ${#NAMES[@]} -eq 0 ]; then
  NAMES=(adam rpc comm gemm step netstep memory activation)
fi
summary=()
for name in "${NAMES[@]}"; do
  echo "=== zeroshard-bench $name"
  out=$("$BENCH" "$name" 2>&1 | tee /dev/stderr)
  summary+=("$(printf '%s\n' "$out" | grep -E "^$name ratio=" | tail -1)")
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
