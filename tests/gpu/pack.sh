#!/usr/bin/env bash
# Packs what tests/gpu/device_check.sh runs, for a GPU machine that cannot
# build zeroshard itself: the lent device machines have nvcc, CMake and the
# CUDA libraries but none of Debian's C++ packages (gRPC, Abseil, oneDNN,
# Gloo, GoogleTest) and no network. Builds the GPU tests, zeroshard-bench,
# zeroshard-server and zeroshard-ctl here (CMake with CUDA), copies them
# stripped with every shared library they load except glibc's and the CUDA
# toolkit's (the device machine has its own, matched to its driver), and
# writes one gzip archive (gzip is on every machine; xz and Python may not
# be, and the archive with the working tree stays under the device tool's
# 64 MiB):
#   bash tests/gpu/pack.sh [BUILD_DIR]        # -> .gpu/pack.tar.gz
# Then carry `.gpu` to the device machine and run
#   bash tests/gpu/device_check.sh            # finds .gpu/pack.tar.gz
# (.gpu/ is in .gitignore.) tests/gpu/rehearse.sh tries the pack first in a
# fresh Debian 12 root, which lacks every library the pack brings.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
TESTS=(adam_device_test kernels_cuda_test comm_test shard_store_device_test
  device_gpt_test device_llama_test engine_device_test compute_device_test)
BINS=(zeroshard-bench zeroshard-server zeroshard-ctl zeroshard-train zeroshard-worker)
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
if ! grep -q "^ZS_NCCL_LIBRARY:.*nccl" "$BUILD/CMakeCache.txt"; then
  echo "pack: $BUILD has no CUDA/NCCL build (is /usr/local/cuda there?)" >&2
  exit 1
fi
cmake --build "$BUILD" -j "$(nproc)" --target "${TESTS[@]}" "${BINS[@]}" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
files=()
for t in "${TESTS[@]}"; do files+=("$BUILD/tests/$t"); done
for b in "${BINS[@]}"; do files+=("$BUILD/bin/$b"); done
for f in "${files[@]}"; do
  cp "$f" "$stage/bin/"
  strip "$stage/bin/$(basename "$f")"
done
# Every resolved library, less glibc's own and CUDA's.
for f in "${files[@]}"; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/usr/local/cuda|/libc\.so|/libm\.so|/libpthread\.so|/libdl\.so|/librt\.so|/ld-linux|/libcuda\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true
git describe --always --dirty >"$stage/COMMIT" 2>/dev/null || echo unknown >"$stage/COMMIT"
mkdir -p .gpu
rm -f .gpu/pack.tar.xz
tar -C "$stage" -czf .gpu/pack.tar.gz .
echo "pack: .gpu/pack.tar.gz ($(du -h .gpu/pack.tar.gz | cut -f1)): ${#files[@]} programs, $(ls "$stage/lib" | wc -l) libraries; carry .gpu"
