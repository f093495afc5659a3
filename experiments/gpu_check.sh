#!/usr/bin/env bash
# The device check of issue #32 (see experiments/gpu_check.py and docs/performance.md): at most 8 minutes on
# one H100 or H200, with no network. It installs only the wheels carried beside it (experiments/wheels/*.whl,
# without their dependencies, into a folder of its own: the machine's own jax is used; fetch them with
# experiments/fetch_wheels.sh), then runs each stage in its own process under its own time limit, so a stage
# that fails or overruns loses only itself, and writes OUT/gpu_check.md.
#   bash experiments/gpu_check.sh [--dry-run] [--out DIR] [--accuracy-runs N]
# --dry-run: the smallest sizes on whatever device there is (a CPU: a few minutes); installs nothing.
# --accuracy-runs N: also the demo's target run N times in float32 and in bfloat16 (0, the default: skip), after
#   the launch, within the same time limit (GPU_CHECK_SECONDS, 480 by default).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
python="${PYTHON:-python3}"
dry=0 out="" runs=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --out) out="$2"; shift ;;
    --accuracy-runs) runs="$2"; shift ;;
    *) echo "gpu_check.sh: unknown argument $1 (allowed: --dry-run, --out DIR, --accuracy-runs N)" >&2; exit 2 ;;
  esac
  shift
done
out="${out:-$(mktemp -d -t gpu_check-XXXX)}"
mkdir -p "$out"
site=""
if [ "$dry" = 0 ] && compgen -G "$here/wheels/*.whl" > /dev/null; then
  site="$(mktemp -d -t gpu_check_site-XXXX)"
  "$python" -m pip install --quiet --no-index --no-deps --no-compile --target "$site" "$here"/wheels/*.whl || exit 1
fi
cd "$root"
export PYTHONPATH="$root${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
# Each stage is its own process: memory grows as needed, so no stage holds three quarters of the GPU.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
flags=(--out "$out"); [ "$dry" = 1 ] && flags+=(--dry-run)
# A dry run checks the script on a shared CPU, where time says nothing: its limits are five times longer.
scale=$((dry ? 5 : 1))
deadline=$((SECONDS + scale * ${GPU_CHECK_SECONDS:-480}))
stage() {  # name, seconds it may take at most (never past the deadline)
  local left=$((deadline - SECONDS)); local limit=$(( scale * $2 < left ? scale * $2 : left ))
  if [ "$limit" -le 5 ]; then echo "stage $1: skipped, the time is spent"; return; fi
  timeout "$limit" "$python" "$here/gpu_check.py" --stage "$1" --runs "$runs" "${flags[@]}" \
    || echo "stage $1: exit $? (limit ${limit} s)"
}
stage launch 60
[ "$runs" -gt 0 ] && stage accuracy 170
stage precision 130
stage ratios 200
"$python" "$here/gpu_check.py" --report --out "$out"
