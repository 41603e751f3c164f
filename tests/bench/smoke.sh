#!/usr/bin/env bash
# One benchmark at a tiny size (zeroshard-bench NAME --smoke): it must exit 0
# and print its "NAME ratio=" line, so that no benchmark can stop running
# unseen; the ratio's value is not checked (tiny sizes measure nothing).
# A device benchmark on a machine without a CUDA device exits 77 (CTest's
# skip) after saying so.
#   bash tests/bench/smoke.sh BENCH_BINARY NAME
set -uo pipefail
bench=$1 name=$2
out=$("$bench" "$name" --smoke 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" != 0 ]; then
  echo "smoke: zeroshard-bench $name --smoke exited $rc"
  exit 1
fi
if printf '%s\n' "$out" | grep -q "^$name ratio="; then
  echo "smoke: $name ran end to end"
  exit 0
fi
if printf '%s\n' "$out" | grep -q "^no CUDA device"; then
  echo "smoke: $name needs a CUDA device; skipped"
  exit 77
fi
echo "smoke: zeroshard-bench $name printed no '$name ratio=' line"
exit 1
