#!/usr/bin/env bash
# Builds every Bazel target (the non-CUDA libraries, binaries and tests) fully
# offline and runs the tests not tagged "integration" (the multi-process ones
# run under CTest, which knows where the CMake binaries are): `bazel test
# //...` builds all of //..., the tag filter only chooses what runs.
#
# Each test target is a GoogleTest program of many cases (one program per
# test folder, as in CMake): from the test.xml each ran (or that Bazel's
# cache restored), prints "bazel: N test cases passed, M failed in P
# programs", which scripts/test.sh counts.
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

# The test programs that ran (the tag filter's complement), and their cases.
ran=$(bazel query --noshow_progress \
  'tests(//...) except attr(tags, "integration|gpu", tests(//...))' 2>/dev/null)
python3 - "$(bazel info bazel-testlogs 2>/dev/null)" $ran <<'PY' || status=1
import os
import sys
import xml.etree.ElementTree as ET

logs, targets = sys.argv[1], sys.argv[2:]
passed = failed = 0
for t in targets:
    path = os.path.join(logs, t.lstrip("/").replace(":", "/"), "test.xml")
    try:
        cases = ET.parse(path).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        print("bazel: %s: no test cases read from %s (%s)" % (t, path, e))
        failed += 1
        continue
    for c in cases:
        if c.find("failure") is not None or c.find("error") is not None:
            failed += 1
        elif c.get("result", "completed") == "completed" and c.get("status", "run") == "run":
            passed += 1
print("bazel: %d test cases passed, %d failed in %d programs" % (passed, failed, len(targets)))
sys.exit(1 if failed or not targets else 0)
PY

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
