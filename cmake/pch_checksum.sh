#!/bin/sh
# Compiler launcher for the tests' precompiled header (CMakeLists.txt): runs
# the compile, and when its output is a PCH (.gch from gcc, .pch from clang)
# writes the PCH's SHA-256 beside it as <pch>.sum, which ccache hashes in
# place of the PCH itself (its pch_external_checksum option). Without it
# ccache hashes the whole PCH, about 260 MB, for every object that includes
# it: two seconds of a cache hit that otherwise takes a tenth of one.
# A stale .sum is removed before the compile, so an object can never be
# looked up with the sum of an older PCH; without a .sum ccache hashes the
# PCH as before.
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
case "$out" in
  *.gch | *.pch) ;;
  *) exec "$@" ;;
esac
rm -f "$out.sum"
"$@" || exit $?
sum=$(sha256sum "$out") || exit $?
printf '%s\n' "${sum%% *}" >"$out.sum.tmp" && mv -f "$out.sum.tmp" "$out.sum"
