"""Benchmark: the explorer's time per query (``rerankeval.apps.explore``), cold and warm.

On a dataset the chain has run (01-05, the saved indexes and runs), measures:

- ``open``: creating the explorer (runs, chunk table, qrels, ledger);
- ``judged``: a query id, read from the saved runs (the first ``--n`` judged queries, each shown once after a
  warm-up query);
- ``free_text``: free text (each judged query's text with a word added, so it is not recognised as the query):
  the first call opens the indexes and loads the embedding model (cold), the next ``--n`` are warm; the
  reranked column goes through the LLM (a new query is ``pool_k`` fresh calls, a repeated one is served by the
  cache), so the repeat of each free-text query is timed too (``free_text_cached``).

The cold free-text call also records what a newcomer sees (issue 35 item 10): ``free_text_cold_first_signal_s``,
the time until the first sign of progress (a status the explorer says, or any line written to the cell's stdout or
stderr), and ``free_text_cold_output_lines``, the lines written to stdout/stderr during it (a model's "Loading
weights" bar, log lines): the widget shows one status line instead, so these should be 0.

Writes ``results/bench/explore.json`` (or ``--out``); the last line printed is ``explore_free_text_warm_s=<median>``
(new free text, explorer warm, fresh LLM calls).

    python bench/explore.py [--dataset debian-manuals] [--n 5] [--k 10] [--out FILE]

Without the default dataset's indexes and runs, ``--prepare`` builds them first from its stage-01 outputs (stage 02,
then the bm25, vector and hybrid runs; no LLM), best under scratch folders, then time in a fresh process::

    RERANKEVAL_RESULTS=/tmp/r RERANKEVAL_QDRANT_PATH=/tmp/q python bench/explore.py --prepare   # copy 01 first
    RERANKEVAL_RESULTS=/tmp/r RERANKEVAL_QDRANT_PATH=/tmp/q python bench/explore.py
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import statistics
import time

from rerankeval.apps.explore.engine import Explorer
from rerankeval.apps.explore.view import Exploration
from rerankeval.core import paths
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.settings import load_settings


def timed(ex: Explorer, query: str, k: int) -> tuple[float, Exploration]:
    t0 = time.perf_counter()
    x = ex.show(query, k)
    return time.perf_counter() - t0, x


class _Seen(io.StringIO):
    """stdout/stderr during a call: what was written, and when the first thing was."""

    def __init__(self, t0: float, first: list[float]) -> None:
        super().__init__()
        self.t0, self.first = t0, first

    def write(self, s: str) -> int:
        if s.strip() and not self.first:
            self.first.append(time.perf_counter() - self.t0)
        return super().write(s)


def watched(ex: Explorer, query: str, k: int) -> dict:
    """One call of ``ex.show`` with stdout/stderr captured: seconds, first sign of progress, lines written."""
    first: list[float] = []
    t0 = time.perf_counter()
    out, err = _Seen(t0, first), _Seen(t0, first)
    say = {"say": lambda m: first or first.append(time.perf_counter() - t0)}  # the widget's status line
    kw = say if "say" in inspect.signature(ex.show).parameters else {}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        ex.show(query, k, **kw)
    seconds = time.perf_counter() - t0
    lines = [ln for ln in (out.getvalue() + err.getvalue()).replace("\r", "\n").splitlines() if ln.strip()]
    return {
        "s": round(seconds, 3),
        "first_signal_s": round(first[0], 3) if first else None,
        "output_lines": len(lines),
        "output_head": lines[:3],
    }


def prepare(dp: paths.DatasetPaths) -> None:
    """Stage 02 and the bm25, vector and hybrid runs of ``dp`` from its stage-01 outputs (no LLM), if missing."""
    from rerankeval import index
    from rerankeval.core import runs
    from rerankeval.corpus import contract
    from rerankeval.retrieve.retriever import Retriever

    settings = load_settings()
    if not dp.index_manifest.exists():
        index.write(dp, index.run(dp, index.Params.of({}), settings))
    queries = contract.load_queries(dp)
    budget = {"leg_k": 100, "pool_k": 30, "rrf_k": 60}  # the variant record the live search reads its budget from
    with Retriever(dp, settings, progress=False) as r:
        for v in ("bm25", "vector", "hybrid"):
            got = r.search(v, queries, **budget)
            runs.write_trec(got.chunk_run, dp.chunk_run_file(v), v)
            runs.write_trec(got.run, dp.run_file(v), v)
            atomic_write_json(dp.variant_record(v), {"variant": v, **budget, "queries": len(queries)})
    print(f"prepared {dp.root}: index and runs of bm25, vector, hybrid for {len(queries)} queries")


def reranker_state(x: Exploration) -> str:
    """How the hybrid_rerank column was made: its ledger (status, fresh calls / calls), or why it is missing."""
    col = next((c for c in x.columns if c.variant == "hybrid_rerank"), None)
    if col is None or col.unavailable or not x.ledger:
        return f"unavailable: {col.unavailable[:80] if col else 'no hybrid_rerank run'}"
    return f"{x.ledger['status']}, {x.ledger['requests']} requests for {x.ledger['llm_calls']} calls"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=paths.DEFAULT_DATASET)
    ap.add_argument("--n", type=int, default=5, help="queries timed per kind")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", default=None, help="the JSON written (default results/bench/explore.json)")
    ap.add_argument("--prepare", action="store_true", help="build the indexes and runs first, then stop")
    args = ap.parse_args()
    settings = load_settings()
    dp = paths.resolve_dataset(args.dataset, settings)
    if args.prepare:
        prepare(dp)
        return
    t0 = time.perf_counter()
    ex = Explorer(dp, settings)
    out: dict = {"dataset": dp.name, "k": args.k, "open_s": round(time.perf_counter() - t0, 3)}
    qids = [q for q in ex.table if q in ex.qrels][: args.n + 1]
    out["judged_s"] = [round(timed(ex, q, args.k)[0], 4) for q in qids[1:]]
    texts = [f"{ex.table[q]} please" for q in qids]
    cold = watched(ex, texts[0], args.k)
    out["free_text_cold_s"] = cold["s"]
    out.update({f"free_text_cold_{key}": v for key, v in cold.items() if key != "s"})
    for key in ("free_text", "free_text_cached"):  # new texts (fresh LLM calls), then the same again (cached)
        got = [timed(ex, t, args.k) for t in texts[1:]]
        out[f"{key}_s"] = [round(s, 3) for s, _ in got]
        out[f"{key}_reranker"] = [reranker_state(x) for _, x in got]
    ex.close()
    for key in ("judged_s", "free_text_s", "free_text_cached_s"):
        out[key.replace("_s", "_median_s")] = round(statistics.median(out[key]), 4) if out[key] else None
    atomic_write_json(args.out or dp.roots.results / "bench" / "explore.json", out)
    for key, value in out.items():
        print(f"{key}: {value}")
    print(f"explore_free_text_warm_s={out['free_text_median_s']}")


if __name__ == "__main__":
    main()
