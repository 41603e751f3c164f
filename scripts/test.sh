#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs missing
# packages, builds with CMake, runs CTest, then builds every target with Bazel
# (so that build cannot rot) and runs its unit tests. Ends with one line
# "N passed, N failed" over both runners.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
start=$(date +%s)
bash scripts/build.sh "$BUILD"
echo "== build done in $(( $(date +%s) - start )) s"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" --timeout 600 | tee "$log" || status=1
echo "== ctest done in $(( $(date +%s) - start )) s"
bash scripts/bazel-test.sh | tee -a "$log" || status=1
echo "== bazel done in $(( $(date +%s) - start )) s"
ctest_total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
ctest_failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
bazel_passed=$(sed -n 's/^Executed [0-9]* out of [0-9]* tests\?: \([0-9]*\) tests\? pass.*/\1/p' "$log" | tail -1)
bazel_failed=$(sed -n 's/^Executed [0-9]* out of [0-9]* tests\?: .* \([0-9]*\) fail.*/\1/p' "$log" | tail -1)
layering_ok=$(sed -n 's/^layering: \([0-9]*\) forbidden dependencies refused, \([0-9]*\) accepted$/\1/p' "$log" | tail -1)
layering_bad=$(sed -n 's/^layering: \([0-9]*\) forbidden dependencies refused, \([0-9]*\) accepted$/\2/p' "$log" | tail -1)
passed=$(( ${ctest_total:-0} - ${ctest_failed:-0} + ${bazel_passed:-0} + ${layering_ok:-0} ))
failed=$(( ${ctest_failed:-0} + ${bazel_failed:-0} + ${layering_bad:-0} ))
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi  # a runner broke
echo "$passed passed, $failed failed"
exit "$status"
