#!/usr/bin/env bash
# The sanitizer and fuzzing runs (docs/TESTING.md), each in
# its own build directory, with clang:
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer (UB aborts)
#                over the whole tree, plus the libFuzzer targets of
#                tests/fuzz/: runs the CTest suite less the scenario runs
#                that scripts/asan_tests.py leaves to the plain build, and
#                each fuzz target for ZS_FUZZ_SECONDS (default 10) from its
#                seeds and the inputs earlier runs found, kept in
#                ZS_FUZZ_CORPUS (default ~/.cache/zeroshard/fuzz-corpus,
#                which CI keeps between runs with the compiler cache).
#   build-tsan/  ThreadSanitizer over the shard server's concurrency tests
#                and the flash kernels' emulation (its threads and barriers):
#                server_unit_test (step tracker and capture, ModelShard
#                snapshot / prepare / apply, restore races, push receiver,
#                KV store) and flash_attention_emulation_test (one OpenMP
#                thread), with libzs_tsan_absl_preload.so preloaded
#                (tests/sanitizers/absl_sync_tsan.cc: abseil's prebuilt locks
#                made visible to TSan) and tests/sanitizers/tsan.supp.
#                server_rpc_test is not run under TSan: Debian's gRPC core is
#                not instrumented, so TSan cannot see how gRPC's threads hand
#                calls to each other and reports every callback reactor.
# CUDA targets are left out of both (sanitizers do not instrument device
# code; GPU tests skip without a device anyway), and so is the Python
# front-end's extension module (an instrumented module cannot load into
# Debian's uninstrumented python3; the plain build's CTest runs its tests).
#
#   bash scripts/sanitize.sh            # both
#   bash scripts/sanitize.sh asan       # or: tsan
#
# Prints, per fuzz target, the executions libFuzzer reported, and ends with
# one line "sanitizers: N passed, N failed" (CTest's counts over both runs;
# a build or run that failed without a count of its own counts as one
# failure). Exit code non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
JOBS=$(nproc)
FUZZ_SECONDS=${ZS_FUZZ_SECONDS:-10}
FUZZ_CORPUS=${ZS_FUZZ_CORPUS:-$HOME/.cache/zeroshard/fuzz-corpus}
ROOT=$PWD
passed=0
failed=0
start=$(date +%s)

symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
export ASAN_SYMBOLIZER_PATH=$symbolizer
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0

# The programs are linked position-dependent (-no-pie): an instrumented
# test program at -O0 carries about 900 000 relative relocations, which the
# loader applied, page by page, in each of the several hundred processes a
# CTest run starts (one per test case, plus the servers and workers they
# start): 0.19 s of each empty run of server_rpc_test, 0.13 s without them;
# the unit tests under ASan took 94-99 s instead of 105-106 s.
configure() {  # DIR SANITIZE [extra cmake args]
  local dir=$1 sanitize=$2
  shift 2
  [ -f "$dir/build.ninja" ] && return 0
  cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" -DZS_HOT_OPT=-O1 \
    -DCMAKE_EXE_LINKER_FLAGS="-fuse-ld=lld -no-pie" -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld \
    -DZS_ENABLE_CUDA=OFF -DZS_PYTHON=OFF -DZS_SANITIZE="$sanitize" "$@" >/dev/null
}

# Adds a CTest log's counts to the totals; a run without a count is one
# failure.
count() {  # LOG RC NAME
  local log=$1 rc=$2 name=$3 total bad
  total=$(sed -n 's/.*tests passed, \([0-9]*\) tests\? failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
  bad=$(sed -n 's/.*tests passed, \([0-9]*\) tests\? failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  if [ -z "$total" ] || [ "$total" = 0 ]; then
    echo "== $name: no test count (rc $rc)"
    failed=$((failed + 1))
    return
  fi
  passed=$((passed + total - bad))
  failed=$((failed + bad))
  if [ "$rc" != 0 ] && [ "$bad" = 0 ]; then failed=$((failed + 1)); fi
}

run_asan() {
  local t0 t1 log=build-asan/sanitize-ctest.log
  bash scripts/install-deps.sh
  t0=$(date +%s)
  # The fuzzing's time and kept corpus (CMake makes its folders), and the
  # scenario programs of which nothing runs here, which are not built.
  local settings
  settings=(-DZS_FUZZ=ON -DZS_FUZZ_SECONDS="$FUZZ_SECONDS"
            -DZS_FUZZ_CORPUS="$FUZZ_CORPUS"
            -DZS_UNBUILT_TESTS="$(python3 scripts/asan_tests.py --unbuilt)")
  if [ -f build-asan/build.ninja ]; then  # an earlier run's: these may differ
    cmake -B build-asan "${settings[@]}" >/dev/null
  fi
  if ! configure build-asan address,undefined "${settings[@]}" ||
     ! cmake --build build-asan -j "$JOBS"; then
    echo "== asan: build FAILED after $(( $(date +%s) - t0 )) s"
    failed=$((failed + 1))
    return
  fi
  t1=$(date +%s)
  echo "== asan: build done in $((t1 - t0)) s"
  # What runs here (scripts/asan_tests.py, from CTest's JSON listing): every
  # unit test and fuzz target, the integration tests of the server's RPC
  # surface (bad and hostile requests over real sockets, TLS, the
  # collectives between processes), and one end-to-end run of each kind: a
  # training run, a cut-and-resumed run, the trainer's fault handling and
  # the ctl against live servers. The other scenario programs train whole
  # runs again and again (random kills, resumes onto other counts, pod
  # restarts, every ZeRO stage and optimizer) through the same code those
  # already run here; they, the multi-host run in network namespaces and the
  # image build run in the plain build's CTest only, to keep CI's time; the
  # programs none of whose tests run here are not built either.
  local numbers
  numbers=$(ctest --test-dir build-asan --show-only=json-v1 | python3 scripts/asan_tests.py)
  if [ -z "$numbers" ]; then
    echo "== asan: no tests selected"
    failed=$((failed + 1))
    return
  fi
  ctest --test-dir build-asan --output-on-failure --no-tests=error \
    -j "$JOBS" --timeout 900 -I "${numbers%%,*},${numbers%%,*},1,$numbers" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "== asan: ctest done in $(( $(date +%s) - t1 )) s"
  count "$log" "$rc" asan
  # Executions per fuzz target, from libFuzzer's "Done N runs in S second(s)".
  local full=build-asan/Testing/Temporary/LastTest.log
  echo "== fuzz executions (${FUZZ_SECONDS} s per target):"
  awk '/^[0-9]+\/[0-9]+ Test: fuzz\./ { name = $3 }
       /^Done [0-9]+ runs in/ && name != "" {
         printf "   %-28s %10d runs in %s s\n", name, $2, $5; name = "" }' "$full"
}

run_tsan() {
  local t0 t1 log=build-tsan/sanitize-ctest.log
  bash scripts/install-deps.sh
  t0=$(date +%s)
  if ! configure build-tsan thread ||
     ! cmake --build build-tsan -j "$JOBS" --target server_unit_test \
         flash_attention_emulation_test zs_tsan_absl_preload; then
    echo "== tsan: build FAILED after $(( $(date +%s) - t0 )) s"
    failed=$((failed + 1))
    return
  fi
  t1=$(date +%s)
  echo "== tsan: build done in $((t1 - t0)) s"
  # Only those two were built: run exactly their tests (CTest's numbers,
  # from its JSON listing; the tree's other tests are the ASan run's). The
  # emulation runs the flash kernels' threads as real threads, so a missing
  # barrier between a shared-memory write and its read is a race TSan sees.
  local numbers
  numbers=$(ctest --test-dir build-tsan --show-only=json-v1 | python3 -c '
import json, sys
tests = json.load(sys.stdin)["tests"]
print(",".join(str(i + 1) for i, t in enumerate(tests)
               if t.get("command") and t["command"][0].endswith(
                   ("/server_unit_test", "/flash_attention_emulation_test"))))')
  if [ -z "$numbers" ]; then
    echo "== tsan: no server tests found"
    failed=$((failed + 1))
    return
  fi
  OMP_NUM_THREADS=1 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/sanitizers/tsan.supp" \
  LD_PRELOAD=$ROOT/build-tsan/lib/libzs_tsan_absl_preload.so \
    ctest --test-dir build-tsan --output-on-failure --no-tests=error \
      -j "$JOBS" --timeout 900 -I "${numbers%%,*},${numbers%%,*},1,$numbers" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "== tsan: ctest done in $(( $(date +%s) - t1 )) s"
  count "$log" "$rc" tsan
}

case "$WHAT" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan; run_tsan ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
echo "== sanitizers done in $(( $(date +%s) - start )) s"
echo "sanitizers: $passed passed, $failed failed"
[ "$failed" = 0 ]
