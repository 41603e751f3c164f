#!/usr/bin/env bash
# Runs the front-end's pytest suite with PYTHON; exit 77 (CTest's skip) when
# PYTHON has no torch or no pytest.
#   run_pytest.sh /usr/bin/python3 tests/python [pytest args...]
set -euo pipefail
py=$1
dir=$2
shift 2
for m in torch pytest; do
  if ! "$py" -c "import $m" 2>/dev/null; then
    echo "python_frontend_test: skipped: $py has no $m (scripts/install-deps.sh installs it)"
    exit 77
  fi
done
exec "$py" -m pytest -q -p no:cacheprovider "$dir" "$@"
