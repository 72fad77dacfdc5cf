"""Benchmark: rank-bm25's ``get_scores`` vs the sparse fast path of :mod:`rerankeval.index.bm25` on SciFact.

Times all judged test queries (300) through both, on the same analysed corpus and queries, checks the
top-100 lists are identical (positive scores; score descending, then id) and prints the speed-up
(goal >= 20x). Skips with a message when ../shared/data is absent.

    python bench/bm25_speed.py [--dataset scifact] [--k 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.index.bm25 import Analyzer, BM25Index, BM25Params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="scifact", help="folder name under ../shared/data (or a path)")
    ap.add_argument("--k", type=int, default=100, help="depth of the compared top lists")
    ap.add_argument("--k1", type=float, default=1.2)
    ap.add_argument("--b", type=float, default=0.75)
    args = ap.parse_args(argv)

    if not (paths.SHARED_DATA_DIR / args.dataset).is_dir() and not Path(args.dataset).is_dir():
        print(f"SKIP: {paths.SHARED_DATA_DIR / args.dataset} is absent (this benchmark needs ../shared/data).")
        return 0
    from rerankeval import corpus as corpus_stage

    dp = paths.resolve_dataset(args.dataset, load_settings())
    # skipped when already up to date
    corpus_stage.write(dp, corpus_stage.run(dp, corpus_stage.Params(), load_settings()))
    texts = corpus.chunk_texts(dp)
    queries = corpus.load_queries(dp)
    ids = sorted(texts)

    an = Analyzer()
    t = time.perf_counter()
    docs = [an(texts[i]) for i in ids]
    qtok = {q: an(text) for q, text in queries.items()}
    t_an = time.perf_counter() - t
    t = time.perf_counter()
    idx = BM25Index.from_tokens(ids, docs, params=BM25Params(k1=args.k1, b=args.b), analyzer=an)
    _ = idx.weights  # precompute the term matrix (part of the index build)
    t_fast_build = time.perf_counter() - t
    t = time.perf_counter()
    ref = idx.to_rank_bm25(docs)
    t_ref_build = time.perf_counter() - t
    print(
        f"{dp.name}: {len(ids)} documents, {len(queries)} queries, vocabulary {len(idx.vocab)}; "
        f"analysis {t_an:.2f} s; build: rank-bm25 {t_ref_build:.2f} s, fast path {t_fast_build:.2f} s"
    )

    def top(scores: np.ndarray) -> list[str]:
        return [d for d, _ in idx.top_k(scores, args.k)]

    t = time.perf_counter()
    ref_scores = {q: ref.get_scores(tok) for q, tok in qtok.items()}
    t_ref = time.perf_counter() - t
    t = time.perf_counter()
    fast_scores = {q: idx.scores_tokens(tok) for q, tok in qtok.items()}
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    fast_run = {q: top(s) for q, s in fast_scores.items()}
    t_top = time.perf_counter() - t

    max_diff = max(float(np.max(np.abs(fast_scores[q] - ref_scores[q]))) for q in qtok)
    same = sum(fast_run[q] == top(ref_scores[q]) for q in qtok)
    speedup = t_ref / t_fast
    n = len(qtok)
    print(
        f"scoring {n} queries: rank-bm25 get_scores {t_ref:.3f} s ({1000 * t_ref / n:.2f} ms/q), "
        f"fast path {t_fast:.3f} s ({1000 * t_fast / n:.3f} ms/q); top-{args.k} selection {t_top:.3f} s"
    )
    print(f"max |score difference| = {max_diff:.3g}; identical top-{args.k} lists: {same}/{len(qtok)}")
    print(
        f"speed-up (get_scores vs fast path): {speedup:.1f}x "
        f"(with top-{args.k} selection: {t_ref / (t_fast + t_top):.1f}x; goal >= 20x)"
    )
    ok = same == len(qtok) and max_diff <= 1e-9 and speedup >= 20
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
