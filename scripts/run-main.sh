#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the packages the
# build needs, builds the three programs it runs (zeroshard-train,
# zeroshard-server, zeroshard-worker; without CUDA on a machine with no
# usable GPU), then trains a small GPT (examples/gpt-small.json: 4 layers, 4 heads,
# width 128, context 128, 300 steps) with zeroshard-train on a local cluster
# of 2 shard servers and 2 workers on this machine. Outputs in out/main:
# metrics.csv, loss.svg, logs/, cluster.json; the summary prints at the end.
#
#   bash scripts/run-main.sh [extra zeroshard-train flags, e.g. --steps=50]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bash scripts/build.sh "$BUILD" zeroshard-train zeroshard-server zeroshard-worker
exec "$BUILD/bin/zeroshard-train" --config=examples/gpt-small.json \
  --out=out/main "$@"
