#!/usr/bin/env bash
# Builds the zeroshard-server image (deploy/docker/server.Dockerfile) with
# podman on a machine that reaches no container registry: the Debian 12
# bases the Dockerfile names are made here with mmdebstrap from the host's
# apt sources and imported under those names, then the Dockerfile is built
# with --isolation=chroot (no container runtime can run on this kind of
# machine; buildah's chroot isolation runs the RUN steps with chroot).
# Needs root, podman and mmdebstrap (scripts/install-deps.sh --images).
#
# Usage: deploy/docker/build-images.sh [--force]
#   Builds from the committed tree (git archive HEAD: uncommitted edits in
#   the checkout cannot break or leak into the image), or with
#   ZS_IMAGE_CONTEXT=worktree from the working tree as it is (tracked and
#   untracked files, less .containerignore's). Reuses the image when its
#   label org.opencontainers.image.revision equals that source id (the HEAD
#   commit; for a working tree plus a hash of its uncommitted changes,
#   source-id.sh); --force rebuilds. Prints the image name last.
# Environment: ZS_IMAGE (default localhost/zeroshard-server:dev),
#   ZS_IMAGE_JOBS (compile jobs, default 2), ZS_IMAGE_SOURCES (apt sources
#   for mmdebstrap, default /etc/apt/sources.list.d/debian.sources),
#   ZS_IMAGE_CACHE (.deb cache bound into the RUN steps, default
#   /var/cache/zeroshard-images/debs), ZS_IMAGE_REBASE=1 remakes the bases.
# The worker image (worker.Dockerfile) needs nvidia/cuda bases from a
# registry and is not built here.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${ZS_IMAGE:-localhost/zeroshard-server:dev}
JOBS=${ZS_IMAGE_JOBS:-2}
SOURCES=${ZS_IMAGE_SOURCES-/etc/apt/sources.list.d/debian.sources}
CACHE=${ZS_IMAGE_CACHE:-/var/cache/zeroshard-images/debs}
BUILDER_BASE=docker.io/library/debian:bookworm
RUNTIME_BASE=docker.io/library/debian:bookworm-slim
log() { echo "build-images: $*" >&2; }

force=0
case "${1:-}" in
  "") ;;
  --force) force=1 ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { log "needs root (mmdebstrap, podman's root storage)"; exit 1; }
for t in podman mmdebstrap; do
  command -v "$t" >/dev/null || { log "$t missing: bash scripts/install-deps.sh --images"; exit 1; }
done

case "${ZS_IMAGE_CONTEXT:-head}" in
  head) SOURCE_ID=$(git -C "$REPO" rev-parse HEAD) ;;
  worktree) SOURCE_ID=$("$HERE/source-id.sh") ;;
  *) log "ZS_IMAGE_CONTEXT is head or worktree"; exit 2 ;;
esac
have=$(podman image inspect --format '{{index .Labels "org.opencontainers.image.revision"}}' \
         "$IMAGE" 2>/dev/null || true)
if [ "$force" = 0 ] && [ "$have" = "$SOURCE_ID" ]; then
  log "$IMAGE is already built from $SOURCE_ID"
  echo "$IMAGE"
  exit 0
fi

# 1. The bases, as Debian's official images are made: debian:bookworm is
#    a minbase root (Debian's required packages + apt); debian:bookworm-slim
#    the same with dpkg excluding documentation, manuals and translations
#    (what debuerreotype's slim variant excludes; the exclusion stays in the
#    image's /etc/dpkg/dpkg.cfg.d, so packages installed later are slim too).
#    mmdebstrap's merged-usr hook makes /usr merged itself and installs
#    usr-is-merged, so that usrmerge, and with it perl (~50 MB), stays out.
make_base() {                  # NAME [mmdebstrap options...]
  local name=$1 tmp; shift
  tmp=$(mktemp -d /var/tmp/zeroshard-base.XXXXXX)
  log "making $name (mmdebstrap --variant=minbase $*)"
  if mmdebstrap --quiet --mode=root --variant=minbase \
       --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr "$@" \
       --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
       bookworm "$tmp/base.tar" ${SOURCES:+"$SOURCES"} \
     && podman import --quiet --change 'CMD ["/bin/bash"]' "$tmp/base.tar" "$name" >/dev/null; then
    rm -rf "$tmp"
  else
    rm -rf "$tmp"; log "could not make $name"; return 1
  fi
}
rebase=${ZS_IMAGE_REBASE:-0}
if [ "$rebase" = 1 ] || ! podman image exists "$BUILDER_BASE"; then
  make_base "$BUILDER_BASE"
fi
if [ "$rebase" = 1 ] || ! podman image exists "$RUNTIME_BASE" \
   || [ "$(podman image inspect --format '{{.Id}}' "$RUNTIME_BASE")" = \
        "$(podman image inspect --format '{{.Id}}' "$BUILDER_BASE")" ]; then
  make_base "$RUNTIME_BASE" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
fi

# 2. The image. The .deb cache (seeded from scripts/fresh-root.sh's, when
#    there is one) spares repeated downloads of the build packages.
mkdir -p "$CACHE/partial"
if [ -d /var/cache/zeroshard-fresh-root/debs ]; then
  cp -n --link /var/cache/zeroshard-fresh-root/debs/*.deb "$CACHE/" 2>/dev/null || true
fi
CONTEXT=$REPO
if [ "${ZS_IMAGE_CONTEXT:-head}" = head ]; then
  CONTEXT=$(mktemp -d /var/tmp/zeroshard-context.XXXXXX)
  trap 'rm -rf "$CONTEXT"' EXIT
  git -C "$REPO" archive "$SOURCE_ID" | tar -x -C "$CONTEXT"
fi
log "building $IMAGE from $SOURCE_ID (podman build --isolation=chroot, -j$JOBS)"
start=$(date +%s)
podman build --isolation=chroot --layers \
  --volume "$CACHE:/var/cache/apt/archives" \
  --build-arg BUILDER_BASE="$BUILDER_BASE" --build-arg RUNTIME_BASE="$RUNTIME_BASE" \
  --build-arg JOBS="$JOBS" --build-arg SOURCE_COMMIT="$SOURCE_ID" \
  --label org.opencontainers.image.revision="$SOURCE_ID" \
  -f "$CONTEXT/deploy/docker/server.Dockerfile" -t "$IMAGE" "$CONTEXT" >&2
log "built $IMAGE in $(( $(date +%s) - start )) s," \
    "$(podman image inspect --format '{{.Size}}' "$IMAGE") bytes"
echo "$IMAGE"
