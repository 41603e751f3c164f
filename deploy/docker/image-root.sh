#!/usr/bin/env bash
# Prints the root directory of the built zeroshard-server image, mounted
# read-only with `podman image mount` (stays mounted until
# `podman image unmount IMAGE`). Tests start the image's binaries from it
# with chroot, e.g. inside a network namespace:
#   root=$(deploy/docker/image-root.sh) && chroot "$root" zeroshard-server ...
# Usage: deploy/docker/image-root.sh [IMAGE]   (default $ZS_IMAGE or
#   localhost/zeroshard-server:dev). Build it first: build-images.sh.
set -euo pipefail
IMAGE=${1:-${ZS_IMAGE:-localhost/zeroshard-server:dev}}
podman image exists "$IMAGE" || { echo "image-root: no image $IMAGE (run deploy/docker/build-images.sh)" >&2; exit 1; }
podman image mount "$IMAGE"
