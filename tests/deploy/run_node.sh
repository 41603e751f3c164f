#!/bin/sh
# Runs node (Debian: nodejs) on the arguments, or skips (exit 77) when it is
# missing. Looked for when the test runs, not when CMake configures: the test
# command installs it while CMake compiles (scripts/build.sh).
node=$(command -v node || command -v nodejs) || {
  echo 'SKIP: node is missing (Debian: apt-get install nodejs)'
  exit 77
}
exec "$node" "$@"
