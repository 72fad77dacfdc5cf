# ReRankEval: `make report` runs the whole chain and renders HTML; `make test` runs the tests.
# Expensive set-up (venv, llama.cpp build, model weights, embeddings, LLM replies) is cached under
# $(CACHE), outside the clone, so a second run installs and builds nothing.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules --warn-undefined-variables

PYTHON ?= python3
# a setting as rerankeval.core.settings finds it: variable $(1) from the environment (or make's command line), else
# its value in .env, read by the same reader as Python's (lib/rerankeval/core/envfile.py, standard library only, so
# the system python3 runs it before the venv exists): quotes, `export`, inline `# comments`, CRLF alike
env_file = $(shell $(PYTHON) lib/rerankeval/core/envfile.py .env $(1))
setting = $(strip $(or $(if $(filter environment% command%,$(origin $(1))),$($(1))),$(call env_file,$(1))))

# the cache root: CACHE=..., else RERANKEVAL_CACHE (environment, then .env), else ~/.cache/rerankeval
ifeq ($(origin CACHE),undefined)
CACHE := $(or $(patsubst ~%,$(HOME)%,$(call setting,RERANKEVAL_CACHE)),$(HOME)/.cache/rerankeval)
endif
export RERANKEVAL_CACHE := $(CACHE)
REQ_HASH := $(shell cat requirements.txt pyproject.toml | sha256sum | cut -c1-12)
VENV ?= $(CACHE)/venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(REQ_HASH)
EDITABLE_STAMP := $(VENV)/.editable-$(shell echo "$(CURDIR)" | sha256sum | cut -c1-12)
KERNEL := rerankeval
DATASET ?= debian-manuals
# a path given relative to where make runs is made absolute; a bare name is looked up in data/ and ../shared/data
DATASET_ARG := $(if $(wildcard $(DATASET)),$(abspath $(DATASET)),$(DATASET))
P ?=
FORCE ?=
# P="pool_k=30 variants=[vector, bm25]" reaches the chain whole (single-quoted for the shell); the chain splits it
# before each `name=`, so a list value may hold spaces
P_ARG := $(if $(strip $(P)),--params '$(subst ','\'',$(P))')
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONHASHSEED := 0
# the venv is shared by every clone (it lives in $(CACHE)); this clone's package source always wins over
# whichever clone last did the editable install, in this process and in every notebook kernel it starts
export PYTHONPATH := $(CURDIR)/lib

.PHONY: help setup report questions sweep bench-sweep test test-unit lab lint clean llama llama-if-local pyserver \
  system-deps embed-server

help: ## show this help
	@echo "ReRankEval: does hybrid retrieval plus LLM reranking retrieve better on my documents?"
	@echo
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/; s|\$$\(CACHE\)|$(CACHE)|g' | awk -F'\t' '{printf "  make %-12s %s\n", $$1, $$2}'
	@echo
	@echo "Variables: DATASET=name-or-path (default $(DATASET)), P=\"key=value ...\" notebook parameter overrides"
	@echo "           FORCE=1 runs every notebook, also those whose inputs did not change (skipped otherwise)"
	@echo "           LOCAL_MODEL=qwen2.5-coder-1.5b: the bigger local model (default qwen2.5-coder-0.5b; also in .env)"

$(STAMP): ## (internal) create the venv and install pinned requirements once
	@echo "[setup] installing requirements into $(VENV) (once per requirements.txt)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -c 'from rerankeval.evaluate.conformance import warm_up; warm_up()'  # ranx's numba kernels, compiled once
	rm -f $(VENV)/.installed-*
	touch $@

$(EDITABLE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --prefix $(VENV) --name $(KERNEL) --display-name "Python (rerankeval)" >/dev/null
	rm -f $(VENV)/.editable-*
	touch $@

setup: $(EDITABLE_STAMP) ## create the venv and install everything (idempotent)

# needs no venv (pip only downloads the sdist and the model parts), so it can run while the venv installs.
# The local server is llama-server compiled for this CPU (about 4 minutes, once per CPU signature); with
# RERANKEVAL_LLAMA_BACKEND=wheel only the model is assembled and the prebuilt server in the venv (xllamacpp) runs.
# A build that fails is not fatal: the chain then starts the prebuilt server and says so.
llama: ## build llama-server for this CPU and assemble the local GGUF model (once, cached)
	@PYTHON=$(PYTHON) bash scripts/llama_setup.sh \
	  $(if $(filter wheel,$(call setting,RERANKEVAL_LLAMA_BACKEND)),model,all) >/dev/null \
	  || { echo "[setup] the llama-server build failed (above): the prebuilt llama.cpp server (xllamacpp) will be used"; \
	       PYTHON=$(PYTHON) bash scripts/llama_setup.sh model >/dev/null; }

# the local llama-server only when no endpoint is configured: OPENAI_BASE_URL in the environment, else in .env.
# This only decides what set-up builds; the chain reads the endpoint through rerankeval.core.settings and builds the
# local server itself if it needs one that is missing.
llama-if-local:
ifneq ($(call setting,OPENAI_BASE_URL),)
	@echo "[setup] LLM endpoint configured (OPENAI_BASE_URL): no local llama-server needed"
else
	@$(MAKE) --no-print-directory llama
endif

pyserver: setup ## (tests) llama-cpp-python's own OpenAI-compatible server, same llama.cpp (once, cached)
	@PYTHON=$(PY) bash scripts/llama_setup.sh pyserver >/dev/null \
	  || echo "[setup] llama-cpp-python[server] could not be built: its endpoint test will be skipped"

# a real OpenAI-compatible embeddings server (infinity-emb) in its own venv, $(CACHE)/embed-server-venv, never the
# project's; rerankeval.index.embed_server starts it on the bundled all-MiniLM-L6-v2 (tests, bench/embed_server.py)
embed-server: ## (tests) Infinity's embeddings server for the EMBED_BASE_URL test (own venv, once, cached)
	@PYTHON=$(PYTHON) bash scripts/embed_server_setup.sh >/dev/null \
	  || echo "[setup] infinity-emb could not be installed: the embeddings-server test will be skipped"

system-deps: ## install Debian packages the report checks need (chromium, pdflatex), when root and missing
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "[setup] installing chromium (once) for the report screenshot test"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "[setup] could not install chromium: the screenshot test will be skipped"; \
	  else echo "[setup] chromium missing and not root: the screenshot test will be skipped"; fi; \
	fi
	@if ! command -v pdflatex >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "[setup] installing pdflatex (once) for the headline.tex compile test"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      texlive-latex-base texlive-latex-recommended >/dev/null) \
	      || echo "[setup] could not install pdflatex: the headline.tex compile test will be skipped"; \
	  else echo "[setup] pdflatex missing and not root: the headline.tex compile test will be skipped"; fi; \
	fi

# the chain starts as soon as the venv is ready: the local llama-server build (compiler-bound, minutes; needs no
# venv) runs in the background from the start, beside the venv install and then beside notebooks 01-03, its output
# in $(LLAMA_LOG). scripts/llama_setup.sh holds a lock while it builds, and the first LLM notebook waits for it with
# a line saying what it waits for and for how long (rerankeval.llm.build_wait); a failed build still falls back to
# the prebuilt server.
LLAMA_LOG := $(CACHE)/llama-build.log
report: ## run every notebook on DATASET and render results/<dataset>/report/index.html
	@mkdir -p "$(CACHE)"; ( $(MAKE) --no-print-directory llama-if-local >"$(LLAMA_LOG)" 2>&1 || true ) </dev/null &
	@$(MAKE) --no-print-directory setup
	$(PY) -m rerankeval.apps.chain --dataset "$(DATASET_ARG)" $(P_ARG) $(if $(FORCE),--force)

questions: setup llama-if-local ## draft questions for DATASET with the LLM (01 then 08-questions): queries.draft.jsonl, qrels/draft.tsv
	$(PY) -m rerankeval.apps.chain --dataset "$(DATASET_ARG)" --only 01 --only 08 --set draft=always $(P_ARG)

sweep: setup ## run notebook 06-sweep with the large grid on DATASET (needs 01-03 done) and write runs/hybrid_tuned.trec
	$(PY) -m rerankeval.apps.chain --dataset "$(DATASET_ARG)" --only 06 --set grid=large --set write_tuned=true \
	  $(P_ARG)

bench-sweep: setup ## fusion points/s and the grids' wall times on SciFact (results/bench/sweep.json)
	PYTHONPATH=$(CURDIR)/lib nice -n 10 $(PY) bench/sweep.py

test: setup llama pyserver embed-server system-deps ## run the unit tests and a smoke run of the whole notebook chain
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: setup ## the fast tests: no llama-server build, no second server, no chromium, nothing marked slow or llm
	$(PY) -m pytest -m "not slow and not llm" $(PYTEST_ARGS)

lab: setup llama-if-local ## JupyterLab with the project kernel on DATASET (00-explore opens it; a local LLM server if none is configured)
	$(PY) -m rerankeval.apps.lab --dataset "$(DATASET_ARG)"

lint: setup ## ruff (lint and format check) over the package, tests and benchmarks, and the import layers (.importlinter)
	$(VENV)/bin/ruff check lib tests bench
	$(VENV)/bin/ruff format --check lib tests bench
	PYTHONPATH=$(CURDIR)/lib $(VENV)/bin/lint-imports

.PHONY: format
format: setup ## ruff format over the package, tests and benchmarks (rewrites files in place)
	$(VENV)/bin/ruff format lib tests bench

clean: ## remove results (caches under $(CACHE) are kept)
	find results -mindepth 1 -not -name .gitkeep -delete
