#!/usr/bin/env bash
# A torch example from a fresh Debian 12 machine: installs what the build
# and torch need, builds the PyTorch front-end and zeroshard-server, then
# runs examples/torch/train_<NAME>.py (gpt: a nanoGPT-style GPT under
# ZeRO-3 and BF16 on the main job's corpus; cnn: a BatchNorm CNN under
# ZeRO-2) on 2 local shard servers. Outputs in out/torch-<NAME>.
#
#   bash scripts/run-torch-example.sh gpt|cnn [--steps=N] [--out=DIR] [--resume]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
name=${1:-gpt}
shift || true
case "$name" in
  gpt|cnn) ;;
  *) echo "usage: $0 gpt|cnn [example flags]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh --torch
bash scripts/build.sh "$BUILD" zs_python zeroshard-server
PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" ZEROSHARD_BIN_DIR="$PWD/$BUILD/bin" \
  exec /usr/bin/python3 "examples/torch/train_$name.py" "$@"
