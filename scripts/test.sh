#!/usr/bin/env bash
# The whole test suite: CTest over the CMake build, then the Bazel build of the
# same non-CUDA targets (so that it cannot rot) and its unit tests.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" --timeout 600
if [ -f WORKSPACE ]; then
  bash scripts/bazel-test.sh
fi
