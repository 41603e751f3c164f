#!/usr/bin/env bash
# Rehearses the device check before device time is spent on it: packs the
# GPU programs (tests/gpu/pack.sh) and runs tests/gpu/device_check.sh from
# the pack in a fresh minimal Debian 12 root (scripts/fresh-root.sh, with
# .gpu carried and /usr/local/cuda bound read-only), which like the lent
# GPU machines has none of Debian's C++ packages. There is no GPU in it, so
# the device stages are skipped and the rest must pass: every packed program
# finds its libraries, the GPU tests load and skip, the benchmarks load and
# say "no CUDA device", and the main job runs from the packed programs on
# the CPU, with 2 workers and with 1.
#
#   bash tests/gpu/rehearse.sh [BUILD_DIR]     # needs root, mmdebstrap
#
# Exits with the device check's exit code.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/gpu/pack.sh "${1:-build}"
ZS_FRESH_ROOT_CARRY=.gpu exec bash scripts/fresh-root.sh -- bash tests/gpu/device_check.sh
