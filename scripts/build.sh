#!/usr/bin/env bash
# Installs missing Debian packages, then configures and builds with CMake into
# BUILD (default: build/). Binaries land in BUILD/bin.
#
#   bash scripts/build.sh [BUILD]              # everything (the test command)
#   bash scripts/build.sh BUILD TARGET...      # only these (the main job)
#
# Everything: every target, the CUDA ones included wherever the toolkit is (a
# build directory configured without them is switched back on), and every
# package scripts/install-deps.sh lists: those compiling needs first, the
# rest installed in the background while CMake compiles. Only some targets: the packages the
# build needs (install-deps.sh --build-only) and, when BUILD is new, CUDA
# only if this machine has a usable GPU (nvidia-smi lists one): the CPU
# workers need none of the device code.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # What compiling needs first; the rest (Bazel, clang, torch, the test
  # tools) is downloaded and unpacked while CMake compiles, and must be in
  # place before this script returns.
  t0=$(date +%s)
  bash scripts/install-deps.sh --build-only
  t_pkgs=$(( $(date +%s) - t0 ))
  deps_log=$(mktemp)
  bash scripts/install-deps.sh >"$deps_log" 2>&1 &
  deps_pid=$!
  deps_done() {  # waits for the background install; fails naming it
    local rc=0
    wait "$deps_pid" || rc=$?
    cat "$deps_log" >&2
    rm -f "$deps_log"
    if [ "$rc" != 0 ]; then
      echo "build: installing the test packages (scripts/install-deps.sh) failed: exit $rc" >&2
    fi
    return "$rc"
  }
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release || { deps_done; exit 1; }
  elif grep -q '^ZS_ENABLE_CUDA:BOOL=OFF$' "$BUILD/CMakeCache.txt"; then
    echo "build: $BUILD was configured without CUDA; turning the CUDA targets on" >&2
    cmake -S . -B "$BUILD" -DZS_ENABLE_CUDA=ON >/dev/null || { deps_done; exit 1; }
  fi
  build_rc=0
  t1=$(date +%s)
  cmake --build "$BUILD" -j "$(nproc)" || build_rc=$?
  t2=$(date +%s)
  deps_done || exit 1
  # Where the time went (CI's tail shows it): a warm build waits on the
  # test packages' install more than on the compiler.
  echo "build: build packages $t_pkgs s, configure $((t1 - t0 - t_pkgs)) s, compile $((t2 - t1)) s, then $(( $(date +%s) - t2 )) s waiting for the test packages" >&2
  exit "$build_rc"
fi
bash scripts/install-deps.sh --build-only
if [ ! -f "$BUILD/build.ninja" ]; then
  cuda=ON
  if ! gpus=$(nvidia-smi -L 2>/dev/null) || ! grep -q '^GPU ' <<<"$gpus"; then
    cuda=OFF
    echo "build: no usable GPU here (nvidia-smi lists none): building without CUDA; the workers train on the CPU" >&2
  fi
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZS_ENABLE_CUDA=$cuda >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
