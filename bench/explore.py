"""Benchmark: the explorer's time per query (``rerankeval.apps.explore``), cold and warm.

On a dataset the chain has run (01-05, the saved indexes and runs), measures:

- ``open``: creating the explorer (runs, chunk table, qrels, ledger);
- ``judged``: a query id, read from the saved runs (the first ``--n`` judged queries, each shown once after a
  warm-up query);
- ``free_text``: free text (each judged query's text with a word added, so it is not recognised as the query):
  the first call opens the indexes and loads the embedding model (cold), the next ``--n`` are warm; the
  reranked column goes through the LLM (a new query is ``pool_k`` fresh calls, a repeated one is served by the
  cache), so the repeat of each free-text query is timed too (``free_text_cached``).

Writes ``results/bench/explore.json``; the last line printed is ``explore_free_text_warm_s=<median>`` (new free
text, explorer warm, fresh LLM calls).

    python bench/explore.py [--dataset debian-manuals] [--n 5] [--k 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rerankeval.apps import explore
from rerankeval.core import paths
from rerankeval.core.ioutil import atomic_write_json


def timed(ex: explore.Explorer, query: str, k: int) -> tuple[float, explore.Exploration]:
    t0 = time.perf_counter()
    x = ex.show(query, k)
    return time.perf_counter() - t0, x


def reranker_state(x: explore.Exploration) -> str:
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
    args = ap.parse_args()
    dp = paths.resolve_dataset(args.dataset)
    t0 = time.perf_counter()
    ex = explore.Explorer(dp)
    out: dict = {"dataset": dp.name, "k": args.k, "open_s": round(time.perf_counter() - t0, 3)}
    qids = [q for q in ex.table if q in ex.qrels][: args.n + 1]
    out["judged_s"] = [round(timed(ex, q, args.k)[0], 4) for q in qids[1:]]
    texts = [f"{ex.table[q]} please" for q in qids]
    out["free_text_cold_s"] = round(timed(ex, texts[0], args.k)[0], 3)
    for key in ("free_text", "free_text_cached"):  # new texts (fresh LLM calls), then the same again (cached)
        got = [timed(ex, t, args.k) for t in texts[1:]]
        out[f"{key}_s"] = [round(s, 3) for s, _ in got]
        out[f"{key}_reranker"] = [reranker_state(x) for _, x in got]
    ex.close()
    for key in ("judged_s", "free_text_s", "free_text_cached_s"):
        out[key.replace("_s", "_median_s")] = round(statistics.median(out[key]), 4) if out[key] else None
    atomic_write_json(paths.results_dir() / "bench" / "explore.json", out)
    for key, value in out.items():
        print(f"{key}: {value}")
    print(f"explore_free_text_warm_s={out['free_text_median_s']}")


if __name__ == "__main__":
    main()
