#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs missing
# packages, builds with CMake, runs CTest, then builds every target with Bazel
# (so that build cannot rot), runs its unit tests and checks the layering,
# then the sanitizer and fuzzing runs (scripts/sanitize.sh: the suite under
# ASan + UBSan, the fuzz targets, the server's tests under TSan;
# ZS_NO_SANITIZE=1 leaves them out).
# Ends with one line "N passed, N failed" over all of them; a runner that
# broke without reporting (a failed build, no tests found) counts as one
# failure, and the exit code is non-zero whenever anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
start=$(date +%s)
log=$(mktemp)
san_log=$(mktemp)  # apart: its CTest summaries must not be read as the main one
trap 'rm -f "$log" "$san_log"' EXIT
broken=0   # runners that failed without a count of their own

if ! bash scripts/build.sh "$BUILD"; then
  echo "== build FAILED after $(( $(date +%s) - start )) s"
  echo "0 passed, 1 failed"
  exit 1
fi
t_build=$(( $(date +%s) - start ))
echo "== build done in $t_build s"

ctest --test-dir "$BUILD" --output-on-failure --no-tests=error \
  -j "$(nproc)" --timeout 600 2>&1 | tee "$log"
ctest_rc=${PIPESTATUS[0]}
t_ctest=$(( $(date +%s) - start - t_build ))
echo "== ctest done in $(( $(date +%s) - start )) s"
bash scripts/bazel-test.sh 2>&1 | tee -a "$log"
bazel_rc=${PIPESTATUS[0]}
t_bazel=$(( $(date +%s) - start - t_build - t_ctest ))
echo "== bazel done in $(( $(date +%s) - start )) s"
san_rc=0
if [ "${ZS_NO_SANITIZE:-0}" != 1 ]; then
  bash scripts/sanitize.sh 2>&1 | tee "$san_log"
  san_rc=${PIPESTATUS[0]}
  echo "== sanitizers done in $(( $(date +%s) - start )) s"
fi

last() { sed -n "$1" "$log" | tail -1; }
ctest_total=$(last 's/.*tests passed, \([0-9]*\) tests\? failed out of \([0-9]*\).*/\2/p')
ctest_failed=$(last 's/.*tests passed, \([0-9]*\) tests\? failed out of \([0-9]*\).*/\1/p')
# Bazel's test cases (scripts/bazel-test.sh reads them from each program's
# test.xml); a program that failed to build or run has no cases of its own,
# so Bazel's count of failed programs stands in where no case failed.
bazel_summary=$(grep -E '^Executed [0-9]+ out of [0-9]+ tests?:' "$log" | tail -1)
bazel_cases=$(grep -E '^bazel: [0-9]+ test cases passed, [0-9]+ failed in [0-9]+ programs$' "$log" | tail -1)
bazel_passed=$(sed -n 's/^bazel: \([0-9]*\) test cases passed.*/\1/p' <<<"$bazel_cases")
bazel_failed=$(sed -n 's/^bazel: [0-9]* test cases passed, \([0-9]*\) failed.*/\1/p' <<<"$bazel_cases")
# "N fail to build", "N fails locally", ...: every such count.
bazel_programs_failed=$(grep -oE '[0-9]+ fails?\b' <<<"$bazel_summary" | awk '{s += $1} END {print s + 0}')
if [ "${bazel_failed:-0}" = 0 ]; then bazel_failed=$bazel_programs_failed; fi
layering_ok=$(last 's/^layering: \([0-9]*\) forbidden dependencies refused, \([0-9]*\) accepted$/\1/p')
layering_bad=$(last 's/^layering: \([0-9]*\) forbidden dependencies refused, \([0-9]*\) accepted$/\2/p')
san_passed=0
san_failed=0
if [ "${ZS_NO_SANITIZE:-0}" != 1 ]; then
  san_passed=$(sed -n 's/^sanitizers: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$san_log" | tail -1)
  san_failed=$(sed -n 's/^sanitizers: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$san_log" | tail -1)
  if [ -z "$san_passed" ]; then broken=$((broken + 1)); fi
  if [ "$san_rc" != 0 ] && [ "${san_failed:-0}" = 0 ]; then broken=$((broken + 1)); fi
fi

if [ "$ctest_rc" != 0 ] && [ "${ctest_failed:-0}" = 0 ]; then broken=$((broken + 1)); fi
if [ -z "$ctest_total" ] || [ "$ctest_total" = 0 ]; then broken=$((broken + 1)); fi
if [ "$bazel_rc" != 0 ] && [ "$bazel_failed" = 0 ] && [ "${layering_bad:-0}" = 0 ]; then
  broken=$((broken + 1))
fi
if [ -z "$bazel_passed" ] || [ -z "$layering_ok" ]; then broken=$((broken + 1)); fi

# The names of what failed, again at the end: CI keeps only the tail.
failures=$( { sed -n '/The following tests FAILED:/,/^Errors while running CTest/p' "$log" "$san_log" |
                grep -E '^[[:space:]]+[0-9]+ - ' ;
              grep -E '^//[^ ]+ +.*(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" ;
              grep -E '^layering: .*(NOT refused| [1-9][0-9]* accepted$)' "$log" ;
              grep -hE '^== .*FAILED' "$log" "$san_log" ; } 2>/dev/null | sed 's/^/  /' )
if [ -n "$failures" ]; then
  echo "== why (each failed CTest test's own lines, gtest's frame left out):"
  # The output CTest printed under each failed test, up to the next test's
  # line: enough of it lands in the tail CI keeps to tell why.
  awk '
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception)/ {
      on = 1; n = 0; print "  " $0; next }
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / || /^ +Start +[0-9]+: / { on = 0 }
    on && !/^\[( RUN|==========|----------|  PASSED|  FAILED) *\]/ &&
        !/^(Running main|Note: Google Test filter|$| [0-9]+ FAILED TEST)/ {
      if (++n <= 20) print "    " $0 }
  ' "$log" "$san_log" | head -150
  echo "== what failed:"
  echo "$failures"
fi

# Each phase's time, in the tail CI keeps (the sanitizer phases as
# scripts/sanitize.sh timed them).
phase() { sed -n "s/^== $1 done in \([0-9]*\) s$/\1/p" "$san_log" | tail -1; }
phases="build ${t_build} s, ctest ${t_ctest} s, bazel ${t_bazel} s"
for p in "asan: build" "asan: ctest" "tsan: build" "tsan: ctest"; do
  t=$(phase "$p")
  [ -z "$t" ] || phases+=", ${p/: / } $t s"
done
echo "== phases: $phases; total $(( $(date +%s) - start )) s"

passed=$(( ${ctest_total:-0} - ${ctest_failed:-0} + ${bazel_passed:-0} + ${layering_ok:-0} + ${san_passed:-0} ))
failed=$(( ${ctest_failed:-0} + bazel_failed + ${layering_bad:-0} + ${san_failed:-0} + broken ))
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
