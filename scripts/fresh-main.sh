#!/usr/bin/env bash
# Checks the README's main command on a fresh machine: in a new minimal
# Debian 12 root (scripts/fresh-root.sh) runs `bash scripts/run-main.sh
# --steps=30` (the main job, shortened) and checks, inside the root before it
# is removed, that it exited 0 and wrote out/main/metrics.csv with rows.
# Prints the time of each step (packages, build, main job) and of each of
# fresh-root's phases; exits non-zero when any of it failed.
#
#   bash scripts/fresh-main.sh [STEPS]        # default 30
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-30}

# Runs inside the root, in the copied checkout. run-main.sh installs and
# builds by itself; install-deps.sh and build.sh are run first only to time
# those steps apart (run-main.sh then finds both done).
inside='
set -euo pipefail
steps=$1
t=$(date +%s)
lap() { local now; now=$(date +%s); echo "fresh-main: $1 took $((now - t)) s" >&2; laps+=("$1 $((now - t)) s"); t=$now; }
laps=()
bash scripts/install-deps.sh --build-only
lap "install-deps.sh --build-only (apt-get update + install)"
bash scripts/build.sh build zeroshard-train zeroshard-server zeroshard-worker
lap "build.sh (CMake configure + the three programs)"
rc=0
bash scripts/run-main.sh --steps="$steps" || rc=$?
lap "run-main.sh --steps=$steps"
if [ "$rc" != 0 ]; then
  echo "fresh-main: FAIL: run-main.sh exited $rc" >&2
  exit "$rc"
fi
csv=out/main/metrics.csv
if [ ! -s "$csv" ]; then
  echo "fresh-main: FAIL: no $csv" >&2
  exit 1
fi
rows=$(( $(wc -l <"$csv") - 1 ))     # less the header
if [ "$rows" -lt 1 ]; then
  echo "fresh-main: FAIL: $csv has no rows" >&2
  exit 1
fi
echo "fresh-main: $csv has $rows rows (asked for $steps steps); last: $(tail -1 "$csv")" >&2
echo "fresh-main: steps inside the root: $(IFS=";"; echo "${laps[*]}")" >&2
echo "fresh-main: OK" >&2
'
exec bash scripts/fresh-root.sh -- bash -c "$inside" fresh-main "$STEPS"
