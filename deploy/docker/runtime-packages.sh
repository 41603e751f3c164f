#!/usr/bin/env bash
# Prints the Debian/Ubuntu packages that own the shared libraries the given
# binaries load (ldd), one per line, sorted: the runtime stage of an image
# installs exactly these. Run in the builder stage, where the -dev packages
# pulled the runtime ones in. Fails when a library is "not found" or owned by
# no package (a library built into the tree would have to be copied instead).
# Usage: runtime-packages.sh BINARY...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
owner() {                      # PATH: the package owning it, or nothing
  local f=$1 c
  # ldd names /lib/... where dpkg registered /usr/lib/... (merged /usr) or
  # a symlink where dpkg registered its target: try each spelling.
  for c in "$f" "/usr$f" "${f#/usr}" "$(readlink -f "$f")" "/usr$(readlink -f "$f")" \
           "$(readlink -f "$(dirname "$f")")/$(basename "$f")"; do
    [ -n "$c" ] || continue
    dpkg-query -S "$c" 2>/dev/null | sed -n '1s/:.*//p' | sed 's/:[a-z0-9_]*$//' && return 0
  done
  return 1
}
libs=$(ldd "$@" | awk '/=>/ {print}')
if grep -q "not found" <<<"$libs"; then
  echo "runtime-packages: missing libraries:" >&2
  grep "not found" <<<"$libs" >&2
  exit 1
fi
pkgs=()
while read -r path; do
  p=$(owner "$path" || true)
  [ -n "$p" ] || { echo "runtime-packages: no package owns $path" >&2; exit 1; }
  pkgs+=("${p%%,*}")
done < <(awk '/=>/ && $3 ~ /^\// {print $3}' <<<"$libs" | sort -u)
printf '%s\n' "${pkgs[@]}" | sort -u
