#!/usr/bin/env bash
# A sweep on this machine: a Dask LocalCluster (one single-threaded worker
# process per core by default), then the post-analysis (table + heat maps).
#
# Usage (from anywhere):
#   workflows/local/run_local.sh [SWEEP.yaml] [STORE.zarr] [WORKERS]
# defaults: configs/sweeps/rscr_lengths_angles.yaml, out/<sweep name>.zarr,
#           one worker per core.
# Extra options for `mechsweep sweep` go in MECHSWEEP_SWEEP_ARGS, e.g.
#   MECHSWEEP_SWEEP_ARGS=--overwrite workflows/local/run_local.sh
# Running it again resumes an interrupted sweep (finished batches are kept).
# Environment: MECHSWEEP_VENV (default .venv in the repository).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
SWEEP=${1:-configs/sweeps/rscr_lengths_angles.yaml}
STORE=${2:-out/$(basename "$SWEEP" .yaml).zarr}
WORKERS=${3:-$(nproc 2>/dev/null || echo 2)}
VENV=${MECHSWEEP_VENV:-$ROOT/.venv}
if [ ! -x "$VENV/bin/mechsweep" ]; then
    echo "run_local.sh: no mechsweep in $VENV (run 'make install' first, or set MECHSWEEP_VENV)" >&2
    exit 2
fi
mkdir -p "$(dirname "$STORE")"

"$VENV/bin/mechsweep" sweep "$SWEEP" --dry-run
# Exit code 1: some designs failed; they are in the store with their status
# and the post-analysis marks them.  2 and above: bad input or a crash.
rc=0
# shellcheck disable=SC2086
"$VENV/bin/mechsweep" sweep "$SWEEP" --out "$STORE" --workers "$WORKERS" ${MECHSWEEP_SWEEP_ARGS:-} || rc=$?
if [ "$rc" -ge 2 ]; then
    echo "run_local.sh: mechsweep sweep failed with exit code $rc" >&2
    exit "$rc"
fi
"$VENV/bin/mechsweep" status "$STORE"
"$VENV/bin/python" workflows/post_analysis.py "$STORE"
