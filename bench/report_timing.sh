#!/usr/bin/env bash
# Cold vs warm `make report`: the cold run starts with no results and empty embedding/LLM caches
# (the venv, the llama.cpp build and the model stay: they are set-up, timed by the first `make test`);
# the warm run repeats it with everything cached and must re-install, re-encode and re-ask nothing.
# Usage: bench/report_timing.sh [DATASET]     (prints two lines: cold and warm seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
DATASET="${1:-debian-manuals}"
CACHE="${CACHE:-$HOME/.cache/rerankeval}"
name=$(basename "$DATASET")
stash=$(mktemp -d "$CACHE/.bench-stash.XXXXXX")
restore() { for d in embeddings llm; do [ -d "$stash/$d" ] && { rm -rf "$CACHE/$d"; mv "$stash/$d" "$CACHE/$d"; }; done; rm -rf "$stash"; }
trap restore EXIT
for d in embeddings llm; do [ -d "$CACHE/$d" ] && mv "$CACHE/$d" "$stash/$d"; done
rm -rf "results/$name" "data/.qdrant/$name"
t0=$(date +%s.%N); make report DATASET="$DATASET" >/tmp/report-cold.log 2>&1; t1=$(date +%s.%N)
make report DATASET="$DATASET" >/tmp/report-warm.log 2>&1; t2=$(date +%s.%N)
python3 -c "import sys; a, b, c = map(float, sys.argv[1:4]); n = sys.argv[4]
print(f'cold make report ({n}): {b - a:.0f} s'); print(f'warm make report ({n}): {c - b:.0f} s')" "$t0" "$t1" "$t2" "$name"
