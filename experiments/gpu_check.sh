#!/usr/bin/env bash
# The device check of issue #32 (see experiments/gpu_check.py and docs/performance.md), at most ~8 minutes
# on one H100 or H200, with no network: it installs only the wheels carried beside it
# (experiments/wheels/*.whl, without their dependencies: the machine's own jax is used), then measures.
#   bash experiments/gpu_check.sh [--dry-run] [--out DIR]
# --dry-run: the smallest sizes on whatever device there is (a CPU: well under a minute); installs nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
python="${PYTHON:-python3}"
dry=0
for arg in "$@"; do [ "$arg" = "--dry-run" ] && dry=1; done
if [ "$dry" = 0 ] && compgen -G "$here/wheels/*.whl" > /dev/null; then
  "$python" -m pip install --quiet --no-index --no-deps "$here"/wheels/*.whl
fi
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 480 "$python" "$here/gpu_check.py" "$@"
