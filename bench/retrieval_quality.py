"""Benchmark: retrieval quality of every variant on BEIR datasets from ../shared/data.

For each dataset: stage 01 (``corpus.run``/``write``), stage 02 (``index.run``/``index.write``, cold/warm
timing printed), stage 03 (every variant written to ``dp.run_file``/``dp.chunk_run_file``), then
nDCG@10 and Recall@100 computed by ir_measures from the written unit-level run files. Targets on
SciFact test (published figures, ../shared/data/README.md): bm25 >= .680, vector .645 +- .005 with
R@100 >= .92, hybrid >= .710.
Skips with a message when ../shared/data is absent.

    python bench/retrieval_quality.py [--datasets scifact cranfield] [--leg-k 100] [--pool-k 100]

Outputs go where the workbench puts them (``RERANKEVAL_RESULTS``, ``RERANKEVAL_QDRANT_PATH``); the
first SciFact run encodes 5,183 abstracts (~3 min on 2 cores), later runs reuse the embedding cache.
"""

from __future__ import annotations

import argparse
import sys
import time

import ir_measures
import pandas as pd

from rerankeval import corpus, index, retrieve
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.retrieve.retriever import BASE_VARIANTS, Retriever

TARGETS = {  # SciFact test, nDCG@10 (R@100 for vector): (low, high)
    ("scifact", "bm25", "nDCG@10"): (0.680, 1.0),
    ("scifact", "vector", "nDCG@10"): (0.640, 0.650),
    ("scifact", "vector", "R@100"): (0.92, 1.0),
    ("scifact", "hybrid", "nDCG@10"): (0.710, 1.0),
}


def run_dataset(name: str, variants: list[str], leg_k: int, pool_k: int) -> pd.DataFrame:
    dp = paths.resolve_dataset(name, load_settings())
    t = time.perf_counter()
    rep = corpus.run(dp, corpus.Params(), load_settings())
    corpus.write(dp, rep)
    print(
        f"[{dp.name}] corpus: {rep.stats['chunks']} chunks, {rep.stats['queries']} queries "
        f"({'reused' if rep.reused else 'built'}, {time.perf_counter() - t:.1f} s)"
    )
    for label in ("first", "second"):
        result = index.run(dp, index.Params(), load_settings().model_copy(update={"progress": "off"}))
        index.write(dp, result)
        info = result.info
        print(
            f"[{dp.name}] index build ({label} call, {'cold' if info.cold else 'warm'}): "
            f"{info.seconds['total']:.2f} s  "
            + ", ".join(f"{k} {v:.2f}s ({info.actions.get(k, '')})" for k, v in info.seconds.items() if k != "total")
        )
    queries = corpus.contract.load_queries(dp)
    qrels = corpus.contract.load_qrels(dp)
    measures = [ir_measures.parse_measure("nDCG@10"), ir_measures.parse_measure("R@100")]
    rows = []
    with Retriever(dp, load_settings(), progress=False) as r:
        for v in variants:
            res = r.search(v, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=retrieve.Params().rrf_k)
            unit_file, _ = retrieve.write(dp, retrieve.Result(retrievals={v: res}))
            agg = ir_measures.calc_aggregate(measures, qrels, ir_measures.read_trec_run(str(unit_file)))
            rows.append(
                {
                    "dataset": dp.name,
                    "variant": v,
                    "nDCG@10": float(agg[measures[0]]),
                    "R@100": float(agg[measures[1]]),
                    "seconds": round(res.seconds, 2),
                }
            )
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["scifact", "cranfield"])
    ap.add_argument("--variants", nargs="+", default=list(BASE_VARIANTS))
    ap.add_argument("--leg-k", type=int, default=100)
    ap.add_argument("--pool-k", type=int, default=100)
    args = ap.parse_args(argv)

    if not paths.SHARED_DATA_DIR.is_dir():
        print(f"SKIP: {paths.SHARED_DATA_DIR} is absent (this benchmark needs ../shared/data).")
        return 0
    tables = []
    for name in args.datasets:
        if not (paths.SHARED_DATA_DIR / name).is_dir():
            print(f"SKIP {name}: {paths.SHARED_DATA_DIR / name} is absent.")
            continue
        tables.append(run_dataset(name, args.variants, args.leg_k, args.pool_k))
    if not tables:
        return 0
    table = pd.concat(tables, ignore_index=True)
    print()
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    failed = []
    for (ds, v, m), (lo, hi) in TARGETS.items():
        hit = table[(table.dataset == ds) & (table.variant == v)]
        if len(hit):
            val = float(hit[m].iloc[0])
            ok = lo <= val <= hi
            print(f"target {ds} {v} {m} in [{lo}, {hi}]: {val:.4f} {'ok' if ok else 'MISSED'}")
            if not ok:
                failed.append((ds, v, m))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
