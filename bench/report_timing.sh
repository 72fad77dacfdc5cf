#!/usr/bin/env bash
# Cold vs warm `make report` (kept for old call sites; bench/report.py does the work and also records the
# seconds and peak memory of each notebook in results/bench/report.json). The cold run starts with no
# results, no index and empty embedding/LLM caches (the venv, the llama.cpp build and the model stay: they
# are set-up); the warm run repeats it with everything cached and must re-install, re-encode and re-ask nothing.
# Usage: bench/report_timing.sh [DATASET]
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${CACHE:-$HOME/.cache/rerankeval}"
exec env RERANKEVAL_CACHE="$CACHE" PYTHONPATH="$PWD/lib" "$CACHE/venv/bin/python" bench/report.py --dataset "${1:-debian-manuals}"
