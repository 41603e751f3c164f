#!/usr/bin/env bash
# Runs a command the way a fresh Debian 12 machine would: in a NEW minimal
# bookworm root (mmdebstrap --variant=apt, the host's Debian apt sources) that
# holds only this checkout's files (tracked + untracked-not-ignored: no build/,
# bazel-*, out/), as root, with cwd the copied checkout (/root/zeroshard),
# HOME=/root and a writable /tmp. Everything the command needs beyond a
# minimal Debian it must install itself (scripts/install-deps.sh does).
#
#   bash scripts/fresh-root.sh -- bash scripts/test.sh
#   bash scripts/fresh-root.sh -- bash      # look around in a fresh root
#
# Exits with the command's exit code; prints the time of each phase (root,
# copy, command, remove) to stderr. Needs root, mmdebstrap and unshare.
#
# How:
# - All mounts (mmdebstrap's own, proc, /dev, /sys, the .deb cache and a
#   read-only /usr/local/cuda where the host has it, so CUDA targets keep
#   compiling) are made inside one `unshare --mount --propagation private
#   --pid` namespace, so none reaches the host's mount table and all vanish
#   with it, also when the run fails or is interrupted. Being its own PID
#   namespace, every process left behind (a Bazel server, a stray test
#   server) is killed when the command ends.
# - The root is deleted afterwards (trap) from the host's namespace, where
#   no bind mount exists, so removal can never reach into /dev or the cache.
# - Downloaded .deb files are kept between runs in $ZS_FRESH_ROOT_CACHE
#   (default /var/cache/zeroshard-fresh-root/debs), bind-mounted over the
#   root's /var/cache/apt/archives both while mmdebstrap builds it and while
#   the command runs, so apt-get install inside reuses them. The root itself,
#   package lists included, is new on every run.
#
# Environment: ZS_FRESH_ROOT_CARRY (space-separated paths of the checkout
# that git ignores, copied too: a prebuilt pack, say), ZS_FRESH_ROOT_CACHE
# (.deb cache), ZS_FRESH_ROOT_HOME_CACHE (build caches), ZS_FRESH_ROOT_TMP (where the
# root is made, default /var/tmp), ZS_FRESH_ROOT_SOURCES (apt sources, default
# the host's /etc/apt/sources.list.d/debian.sources; other lists there, such
# as third-party repositories, are not used; its Suites: lines decide what
# the root gets; without the file, mmdebstrap's default mirror for bookworm).
set -euo pipefail

log() { echo "fresh-root: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------
# Inner part: runs as PID 1 of a private mount + PID namespace (see below).
# ---------------------------------------------------------------------------
if [ "${1:-}" = "--inner" ]; then
  shift
  WORK=$ZS_FR_WORK SRC=$ZS_FR_SRC CACHE=$ZS_FR_CACHE HOME_CACHE=$ZS_FR_HOME_CACHE
  ROOT=$WORK/root
  DEST=/root/zeroshard          # the checkout's place inside the root
  phase_start=$(date +%s)
  phase_done() {                # NAME: logs and records the phase's time
    local now; now=$(date +%s)
    echo "$1 $((now - phase_start))" >>"$WORK/timings"
    log "phase $1: $((now - phase_start)) s"
    phase_start=$now
  }

  # 1. A new minimal root. The cache is bound over var/cache/apt/archives
  #    while mmdebstrap downloads (and kept: essential/unlink skipped), and
  #    unbound before its cleanup step runs `apt-get clean`.
  log "making a minimal Debian root (bookworm) in $ROOT"
  mkdir "$ROOT"
  chmod 0755 "$ROOT"
  q_cache=$(printf '%q' "$CACHE")
  mmdebstrap --mode=root --variant=apt --skip=essential/unlink \
    --setup-hook="mkdir -p \"\$1/var/cache/apt/archives\" && mount --bind $q_cache \"\$1/var/cache/apt/archives\"" \
    --customize-hook='umount "$1/var/cache/apt/archives"' \
    bookworm "$ROOT" ${ZS_FR_SOURCES:+"$ZS_FR_SOURCES"}
  # mmdebstrap copies the host's resolv.conf and hostname; a real machine
  # also has /etc/hosts (localhost).
  [ -e "$ROOT/etc/hosts" ] || cp /etc/hosts "$ROOT/etc/hosts"
  chmod 1777 "$ROOT/tmp"
  phase_done root

  # 2. The checkout: tracked and untracked-but-not-ignored files that exist
  #    (a tracked file deleted in the working tree is skipped), or, outside
  #    git, everything but build outputs.
  mkdir -p "$ROOT$DEST"
  if git -c safe.directory='*' -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -c safe.directory='*' -C "$SRC" ls-files -z -co --exclude-standard |
      (cd "$SRC" && while IFS= read -r -d '' f; do
         if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
       done) |
      tar -C "$SRC" --null --no-recursion -T - -cf - |
      tar -C "$ROOT$DEST" -xpf -
  else
    tar -C "$SRC" --exclude=./.git --exclude='./build*' --exclude='./bazel-*' \
      --exclude=./out -cf - . | tar -C "$ROOT$DEST" -xpf -
  fi
  for c in ${ZS_FR_CARRY:-}; do
    [ -e "$SRC/$c" ] || die "ZS_FRESH_ROOT_CARRY: no $SRC/$c"
    tar -C "$SRC" -cf - "$c" | tar -C "$ROOT$DEST" -xpf -
    log "carried $c"
  done
  log "copied $(find "$ROOT$DEST" -type f | wc -l) files of $SRC to $DEST"
  phase_done copy

  # 3. Mounts for the command (private to this namespace), then the command.
  mount -t proc proc "$ROOT/proc"
  mount --rbind /dev "$ROOT/dev"
  mount --rbind /sys "$ROOT/sys"
  mount --bind "$CACHE" "$ROOT/var/cache/apt/archives"
  if [ -n "$HOME_CACHE" ]; then
    mkdir -p "$ROOT/root/.cache"
    mount --bind "$HOME_CACHE" "$ROOT/root/.cache"
    log "bound $HOME_CACHE over /root/.cache (ccache, Bazel): $(du -sh "$HOME_CACHE" 2>/dev/null | cut -f1) kept"
  else
    log "no build cache kept (ZS_FRESH_ROOT_HOME_CACHE empty): a cold build"
  fi
  # apt downloads as _apt: let it write the cache's partial/ in this root.
  chroot "$ROOT" chown _apt:root /var/cache/apt/archives/partial 2>/dev/null || true
  if [ -d /usr/local/cuda ]; then
    # Bind the real directory read-only at its own path; recreate the
    # symlink when /usr/local/cuda is one (cuda -> cuda-13.0).
    real=$(readlink -f /usr/local/cuda)
    mkdir -p "$ROOT$real"
    mount --bind "$real" "$ROOT$real"
    mount -o remount,bind,ro "$ROOT$real"
    if [ -L /usr/local/cuda ]; then
      ln -sfn "$(readlink /usr/local/cuda)" "$ROOT/usr/local/cuda"
    fi
    log "bound $real read-only into the root"
  fi
  shown="$*"; shown=${shown//$'\n'/ }
  [ ${#shown} -le 160 ] || shown="${shown:0:160}..."
  log "running in the root (cwd $DEST): $shown"
  rc=0
  # The outer part starts this namespace as a background job, which bash
  # starts with SIGINT and SIGQUIT ignored: give the command their defaults.
  chroot "$ROOT" /usr/bin/env --default-signal=INT,QUIT -C "$DEST" \
    HOME=/root USER=root LOGNAME=root TMPDIR=/tmp "$@" 9>&- || rc=$?
  phase_done command
  exit "$rc"
fi

# ---------------------------------------------------------------------------
# Outer part: on the host.
# ---------------------------------------------------------------------------
if [ "${1:-}" = "--" ]; then shift; fi
[ $# -gt 0 ] || die "usage: bash scripts/fresh-root.sh -- COMMAND [ARG...]"
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, mounts, chroot)"
command -v mmdebstrap >/dev/null || die "mmdebstrap missing: apt-get install mmdebstrap"
command -v unshare >/dev/null || die "unshare missing (util-linux)"

SELF=$(readlink -f "${BASH_SOURCE[0]}")
SRC=$(cd "$(dirname "$SELF")/.." && pwd)
CACHE=${ZS_FRESH_ROOT_CACHE:-/var/cache/zeroshard-fresh-root/debs}
HOME_CACHE=${ZS_FRESH_ROOT_HOME_CACHE-/var/cache/zeroshard-fresh-root/home-cache}
TMPBASE=${ZS_FRESH_ROOT_TMP:-/var/tmp}
SOURCES=${ZS_FRESH_ROOT_SOURCES-/etc/apt/sources.list.d/debian.sources}
if [ -n "$SOURCES" ] && [ ! -f "$SOURCES" ]; then
  log "no $SOURCES: using mmdebstrap's default mirror"
  SOURCES=""
fi
install -d -m 0755 "$CACHE" "$CACHE/partial"
if [ -n "$HOME_CACHE" ]; then install -d -m 0700 "$HOME_CACHE"; fi
mkdir -p "$TMPBASE"

t0=$(date +%s)
# Each run holds WORK/lock (fd 9, inherited by PID 1 of its namespace) for as
# long as anything of it runs. Under a global lock (so as not to race a run
# being set up): remove the roots of earlier runs that were killed before
# their trap ran (lock free: no process and so no mount of theirs is left),
# then make this run's.
exec 8>"$TMPBASE/.zeroshard-fresh-root.lock"
flock 8
for old in "$TMPBASE"/zeroshard-fresh-root.*; do
  [ -d "$old" ] || continue
  if [ ! -e "$old/lock" ] || flock -n "$old/lock" true; then
    log "removing the root of an earlier, killed run: $old"
    rm -rf --one-file-system "$old"
  fi
done
WORK=$(mktemp -d "$TMPBASE/zeroshard-fresh-root.XXXXXX")
chmod 0755 "$WORK"
exec 9>"$WORK/lock"
flock 9
exec 8>&-
: >"$WORK/timings"
child=""

cleanup() {
  local rc=$? t timings=""
  trap - EXIT INT TERM HUP
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    # unshare ignores INT/TERM; killing it kills its child (--kill-child),
    # PID 1 of the namespace, and with it every process in there.
    kill -KILL "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  t=$(date +%s)
  # The mounts lived in the namespace, which is gone; make sure anyway.
  if grep -q " $WORK/" /proc/mounts; then
    log "unexpected mounts under $WORK on the host; unmounting them"
    grep -o " $WORK/[^ ]*" /proc/mounts | sort -r |
      while read -r m; do umount -l "$m" || true; done
  fi
  if [ -f "$WORK/timings" ]; then
    timings=$(while read -r name secs; do printf ' %s %s s,' "$name" "$secs"; done <"$WORK/timings")
  fi
  rm -rf --one-file-system "$WORK"
  log "phase remove: $(($(date +%s) - t)) s"
  log "timings:$timings remove $(($(date +%s) - t)) s; total $(($(date +%s) - t0)) s; exit code $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

export ZS_FR_WORK=$WORK ZS_FR_SRC=$SRC ZS_FR_CACHE=$CACHE ZS_FR_SOURCES=$SOURCES \
  ZS_FR_HOME_CACHE=$HOME_CACHE \
  ZS_FR_CARRY=${ZS_FRESH_ROOT_CARRY:-}
# In the background so that a signal runs the trap at once (bash delays traps
# while a foreground command runs); stdin passed on explicitly.
{ exec 3<&0; } 2>/dev/null || exec 3</dev/null    # CI may close stdin
unshare --mount --propagation private --pid --fork --kill-child --mount-proc \
  bash "$SELF" --inner "$@" <&3 3<&- &
child=$!
rc=0
wait "$child" || rc=$?
child=""
exit "$rc"
