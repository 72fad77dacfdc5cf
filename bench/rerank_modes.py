"""Which LLM rerank mode and blend weight help on this dataset? hybrid vs hybrid_rerank, per mode and alpha.

Reranks the top ``--pool-k`` of the hybrid run for the first ``--queries`` queries (sorted qid) with each
mode once (LLM calls, cached under the rerankeval cache), then re-blends with every ``--alphas`` value from
the cached replies (no further calls), writes each variant as a TREC file and scores it with ir_measures
(nDCG@10, MRR@10) against the same queries of the hybrid run. Also reports seconds and calls per query
(from the ledger of the run that made the calls), fallback and repair rates, wins/losses per query, and
how well the LLM score alone separates relevant from non-relevant candidates (mean per-query AUC).

    python bench/rerank_modes.py --dataset scifact --queries 100 --pool-k 10
    python bench/rerank_modes.py --dataset debian-manuals --queries 0 --modes yesno-plain

Needs results/<dataset>/runs/hybrid.trec (notebook 03). Uses the endpoint from .env / the environment, or
starts the local llama-server. Outputs go to results/<dataset>/rerank/bench/pool<k>_q<n>/ (modes.csv, one
TREC file per mode and alpha, ledgers); timings of runs that made their calls (not cache hits) are kept in
results/<dataset>/rerank/bench/timing.json. The table also goes to ``results/bench/rerank_modes.json`` (with
the machine's load average); the headline is ``best_ndcg10_delta``: the best (mode, alpha)'s nDCG@10 minus
the hybrid run's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import ir_measures
import pandas as pd
from ir_measures import MRR, nDCG

from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.paths import ROOT, resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.llm import server as llm_server
from rerankeval.rerank import stage
from rerankeval.rerank.config import MAIN_PASS, Params
from rerankeval.rerank.ledger import summarize

MODES = {
    "listwise": {"mode": "listwise"},
    "pointwise": {"mode": "pointwise", "batch_size": 1},
    "pointwise-batch": {"mode": "pointwise", "batch_size": 20},
    "yesno": {"mode": "yesno", "yesno_json": True},
    "yesno-plain": {"mode": "yesno", "yesno_json": False},
}
MEASURES = [nDCG @ 10, MRR @ 10]


def evaluate(run_file: Path, qrels: list) -> tuple[dict[str, float], dict[str, float]]:
    run = list(ir_measures.read_trec_run(str(run_file)))
    agg = ir_measures.calc_aggregate(MEASURES, qrels, run)
    per_q = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, run)}
    return {str(k): float(v) for k, v in agg.items()}, per_q


def auc(cands: pd.DataFrame, qrels: dict) -> float:
    """Mean over queries of P(score of a relevant candidate > a non-relevant one), ties count half."""
    vals = []
    for q, g in cands.groupby("qid"):
        g = g[g.llm_score.notna()]
        rel = [s for d, s in zip(g.docid, g.llm_score, strict=True) if qrels.get(q, {}).get(d, 0) > 0]
        non = [s for d, s in zip(g.docid, g.llm_score, strict=True) if qrels.get(q, {}).get(d, 0) <= 0]
        if rel and non:
            vals.append(sum((r > n) + 0.5 * (r == n) for r in rel for n in non) / (len(rel) * len(non)))
    return sum(vals) / len(vals) if vals else math.nan


def save(path: Path, df: pd.DataFrame) -> None:
    """Merge with the rows of earlier invocations (other modes) in the same folder."""
    if path.exists():
        old = pd.read_csv(path)
        old = old[~old["mode"].isin(set(df["mode"]))]
        df = pd.concat([old, df], ignore_index=True)
    atomic_write_text(path, df.to_csv(index=False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--queries", type=int, default=100, help="first N queries by qid (0 = all)")
    ap.add_argument("--pool-k", type=int, default=10)
    ap.add_argument("--modes", default="yesno-plain,pointwise,listwise", help=f"comma list of {list(MODES)}")
    ap.add_argument("--alphas", default="0,0.1,0.2,0.3,0.5,0.7,1")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--step", type=int, default=10)
    ap.add_argument("--max-passage-chars", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args(argv)

    dp = resolve_dataset(args.dataset, load_settings())
    inputs = stage.load(dp, Params(pool_k=args.pool_k, max_queries=args.queries))
    fused, qids = inputs.fused, inputs.qids
    bench_dir = dp.stage_dir("rerank") / "bench"
    out = bench_dir / f"pool{args.pool_k}_q{len(qids)}"
    out.mkdir(parents=True, exist_ok=True)
    qrels_d = corpus.load_qrels(dp)
    judged = [q for q in qids if q in qrels_d]
    qrels = [ir_measures.Qrel(q, d, int(r)) for q in judged for d, r in qrels_d[q].items()]
    base_file = runs.write_trec({q: fused[q] for q in qids}, out / f"hybrid_q{len(qids)}.trec", "hybrid")
    base, base_pq = evaluate(base_file, qrels)
    alphas = [float(a) for a in args.alphas.split(",")]
    timing_path = bench_dir / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    rows = [{"mode": "hybrid (no rerank)", "alpha": None, **base}]
    print(
        f"{dp.name}: {len(qids)} queries ({len(judged)} judged), pool {args.pool_k}; hybrid {base}",
        flush=True,
    )

    with llm_server.endpoint(load_settings()) as settings:
        for name in [m.strip() for m in args.modes.split(",") if m.strip()]:
            kw = {
                **MODES[name],
                "window": args.window,
                "step": args.step,
                "max_passage_chars": args.max_passage_chars,
                "concurrency": args.concurrency,
            }
            if kw.get("batch_size", 1) > 1:
                kw["batch_size"] = args.pool_k
            t0 = time.perf_counter()
            params = Params(pool_k=args.pool_k, max_queries=args.queries, **kw)
            first = rerank.run(dp, replace(params, alpha=1.0), settings)
            wall = time.perf_counter() - t0
            led = first.ledger
            s = summarize(led)
            key = f"{name}|pool{args.pool_k}|q{len(qids)}|chars{args.max_passage_chars}"
            fresh = led[(led["pass"] == MAIN_PASS) & (led["cache_hits"] == 0) & (led["requests"] > 0)]
            if len(fresh):  # time only the queries whose replies were computed now, not cache hits
                timing[key] = {
                    "seconds_per_query": float(fresh["latency_s"].mean()),
                    "timed_queries": len(fresh),
                    "wall_s": wall,
                    "calls_per_query": s["calls_per_query"],
                    "requests_per_query": float(fresh["requests"].mean()),
                    "model": first.model,
                    "prompt_tokens_per_query": float(fresh["prompt_tokens"].mean()),
                    "completion_tokens_per_query": float(fresh["completion_tokens"].mean()),
                }
                atomic_write_json(timing_path, timing)
            t = timing.get(key, {})
            atomic_write_text(out / f"ledger_{name}.csv", led.to_csv(index=False))
            signal = auc(first.candidates, qrels_d)
            for a in alphas:
                res = first if a == 1.0 else rerank.run(dp, replace(params, alpha=a), settings, progress=False)
                f = runs.write_trec(res.run, out / f"{name}_a{a:g}.trec", "hybrid_rerank")
                agg, pq = evaluate(f, qrels)
                better = sum(pq.get(q, 0) > base_pq.get(q, 0) + 1e-12 for q in judged)
                worse = sum(pq.get(q, 0) < base_pq.get(q, 0) - 1e-12 for q in judged)
                rows.append(
                    {
                        "mode": name,
                        "alpha": a,
                        **agg,
                        "better": better,
                        "worse": worse,
                        "fallback_rate": s["fallback_rate"],
                        "repaired_rate": s["repaired_rate"],
                        "calls_per_query": s["calls_per_query"],
                        "seconds_per_query": t.get("seconds_per_query"),
                        "llm_auc": signal,
                        "model": first.model,
                    }
                )
            df = pd.DataFrame(rows)
            save(out / "modes.csv", df)
            print(df[df["mode"] == name].to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print("\n" + table.to_string(index=False))
    print(f"\nwrote {out / 'modes.csv'}")
    return headline(table, dp.name, args, len(qids))


def headline(table: pd.DataFrame, dataset: str, args: argparse.Namespace, n_queries: int) -> int:
    """Write results/bench/rerank_modes.json and print the best blend's nDCG@10 gain over hybrid last."""
    ndcg = str(nDCG @ 10)
    base = float(table[ndcg].iloc[0])
    best = table.iloc[1:].sort_values(ndcg, ascending=False).head(1)
    delta = float(best[ndcg].iloc[0]) - base if len(best) else math.nan
    out = {
        "dataset": dataset,
        "queries": n_queries,
        "pool_k": args.pool_k,
        "max_passage_chars": args.max_passage_chars,
        "loadavg": list(os.getloadavg()),
        "rows": json.loads(table.to_json(orient="records")),
        "best": json.loads(best.to_json(orient="records")),
    }
    print(f"wrote {atomic_write_json(ROOT / 'results' / 'bench' / 'rerank_modes.json', out)}")
    print(f"best_ndcg10_delta={delta:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
