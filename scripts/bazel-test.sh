#!/usr/bin/env bash
# Builds every Bazel target (the non-CUDA libraries, binaries and tests) fully
# offline and runs the tests not tagged "integration" (the multi-process ones
# run under CTest, which knows where the CMake binaries are): `bazel test
# //...` builds all of //..., the tag filter only chooses what runs.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
bazel test --jobs="$JOBS" --test_tag_filters=-integration,-gpu //...
# Leave no Bazel server running behind the test run.
bazel shutdown
