#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs missing packages,
# builds, and runs the demo on a local cluster on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bash scripts/build.sh "$BUILD"
exec bash scripts/demo.sh "$BUILD" "$@"
