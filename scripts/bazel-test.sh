#!/usr/bin/env bash
# Builds every Bazel target (the non-CUDA libraries, binaries and tests) fully
# offline and runs the tests not tagged "integration" (the multi-process ones
# run under CTest, which knows where the CMake binaries are): `bazel test
# //...` builds all of //..., the tag filter only chooses what runs.
#
# Then checks the layering (docs/ARCHITECTURE.md): every target tagged
# "layering_probe" names a dependency the architecture forbids, and each must
# fail Bazel's analysis with "is not visible". Prints
# "layering: N forbidden dependencies refused, M accepted" (M > 0 fails).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
# Leave no Bazel server running behind the test run.
trap 'bazel shutdown 2>/dev/null || true' EXIT
status=0
bazel test --jobs="$JOBS" --test_tag_filters=-integration,-gpu //... || status=$?

probes=$(bazel query --noshow_progress 'attr(tags, "layering_probe", //...)' 2>/dev/null)
out=$(bazel build --nobuild --keep_going --noshow_progress $probes 2>&1 || true)
refused=0
accepted=()
for p in $probes; do
  if grep -q "is not visible from target '$p'" <<<"$out"; then
    refused=$((refused + 1))
  else
    accepted+=("$p")
  fi
done
echo "layering: ${refused} forbidden dependencies refused, ${#accepted[@]} accepted"
for p in "${accepted[@]}"; do
  echo "layering: $p was NOT refused: its dependency is visible" >&2
done
if [ "${#accepted[@]}" -gt 0 ] || [ -z "$probes" ]; then status=1; fi
exit "$status"
