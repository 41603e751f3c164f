#!/usr/bin/env bash
# Prints the source id an image is labelled with: the checkout's HEAD commit,
# plus "-dirty-" and a hash of the uncommitted changes to tracked files when
# there are any. build-images.sh reuses an image whose label matches.
set -euo pipefail
cd "$(dirname "$0")/../.."
head=$(git rev-parse HEAD)
if git diff --quiet HEAD --; then
  echo "$head"
else
  echo "$head-dirty-$(git diff HEAD -- | sha256sum | cut -c1-12)"
fi
