#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs missing
# packages, builds with CMake, runs CTest, then builds every target with Bazel
# (so that build cannot rot) and runs its unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
start=$(date +%s)
bash scripts/build.sh "$BUILD"
echo "== build done in $(( $(date +%s) - start )) s"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" --timeout 600
echo "== ctest done in $(( $(date +%s) - start )) s"
bash scripts/bazel-test.sh
echo "== bazel done in $(( $(date +%s) - start )) s"
