#!/usr/bin/env bash
# Installs missing Debian packages, then configures and builds with CMake into
# BUILD (default: build/). Binaries land in BUILD/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
bash scripts/install-deps.sh
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD" -j "$(nproc)"
