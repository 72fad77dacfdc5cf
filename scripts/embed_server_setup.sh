#!/usr/bin/env bash
# The local embeddings server for the endpoint test and bench/embed_server.py: infinity-emb (PyPI) in its own venv,
# $RERANKEVAL_CACHE/embed-server-venv (never the project's venv), installed once; rerankeval.index.embed_server starts
# it on the bundled all-MiniLM-L6-v2 folder. Prints the path of its `infinity_emb` command.
# Usage: scripts/embed_server_setup.sh     (PYTHON: the interpreter that makes the venv, default python3)
set -euo pipefail

CACHE="${RERANKEVAL_CACHE:-$HOME/.cache/rerankeval}"
PY="${PYTHON:-python3}"
VERSION="0.0.78"        # rerankeval.index.embed_server.VERSION
TORCH_VERSION="2.13.0"  # the Makefile's, so pip's cache (or a local wheel) serves both venvs
VENV="$CACHE/embed-server-venv"
STAMP="$VENV/.installed-$VERSION"

log() { echo "[embed_server_setup] $*" >&2; }

mkdir -p "$CACHE"
if command -v flock >/dev/null; then exec 9>"$CACHE/.embed_server.lock"; flock 9; fi
if [ -f "$STAMP" ] && [ -x "$VENV/bin/infinity_emb" ]; then echo "$VENV/bin/infinity_emb"; exit 0; fi

log "installing infinity-emb==$VERSION into $VENV (once, a few minutes)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" >&2
"$VENV/bin/python" -m pip install --quiet "infinity-emb[server,torch]==$VERSION" >&2 \
  || { log "could not install infinity-emb==$VERSION"; rm -rf "$VENV"; exit 1; }
rm -f "$VENV"/.installed-*
touch "$STAMP"
echo "$VENV/bin/infinity_emb"
