"""SciFact with a second stage: each local model reranks the best first stage, alpha chosen on train (issue 22).

The first stage is the tuned fusion (``runs/hybrid_tuned.trec`` and its recorded setting, notebook 06 with
``write_tuned``) when ``results/scifact`` has one, else the hybrid run (stage 03), and the JSON says which. For each
``--models`` name (a LOCAL_MODEL value) it

1. prints the cost plan (calls, cache hits, tokens and expected time as the reranker estimates them) before a call;
2. reranks the first stage's top ``--pool-k`` for a seeded sample of ``--train-queries`` judged train queries
   (``qrels/train.tsv``; their first stage computed by the sweep's engine, the same setting) with the yes/no mode,
   and chooses the blend weight alpha on them alone: the recorded scores are replayed at each of ``--alphas``
   (``experiments.replay.replay`` with ``RecordedLLM(alpha=...)``, no further call) and the best nDCG@10 on train
   wins (ties: the smaller alpha);
3. reranks the test queries in batches of ``--batch`` (the first ``--max-queries`` by qid; 0: all 300) and writes
   the JSON after each batch, so an interrupted run keeps what it measured; every reply is in the LLM cache (keyed
   by model), so a second run, or one with a larger ``--max-queries``, pays only for the new queries;
4. scores the chosen alpha once on the test queries done: nDCG@10 with its bootstrap CI, the paired randomisation
   test against the first stage on the same queries, ROC AUC of p(yes) (relevant vs not; unjudged count as not),
   calls, tokens (sent now plus those of cached replies), LLM seconds as first made, this run's wall time.

    nice -n 10 python bench/scifact_rerank.py --models qwen2.5-coder-0.5b
    nice -n 10 python bench/scifact_rerank.py --models qwen2.5-coder-1.5b --max-queries 60

Needs ``results/scifact`` (stages 01-03: ``make report DATASET=../shared/data/scifact`` or the chain ``--only 01
--only 02 --only 03``). Writes ``results/bench/scifact_rerank.json`` (other models' rows are kept); each row says how
many test queries it covers (``test.n_queries`` of ``test.n_test_queries``). Timings under load are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from models import auc_summary, choose_alpha, cost, first_stage_auc, local_settings, quality, reranked_at

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, DatasetPaths, Roots, resolve_dataset
from rerankeval.core.settings import LOCAL_MODELS, Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import metrics, stats
from rerankeval.experiments import splits
from rerankeval.experiments.grid import Engine, Point
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank import core, stage
from rerankeval.rerank.config import NO_STABILITY, Params, RerankConfig
from rerankeval.rerank.core import build_pools, select_queries
from rerankeval.rerank.reranker import Reranker

OUT = ROOT / "results" / "bench" / "scifact_rerank.json"
TUNED = "hybrid_tuned"
ALPHAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
Inputs = tuple[runs.Run, dict[str, str], dict[str, dict[str, str]], list[str]]  # fused, queries, texts, qids


def first_stage(dp: DatasetPaths) -> tuple[str, Point, str]:
    """(variant, its sweep point, why): the tuned fusion when notebook 06 wrote it with its setting, else hybrid."""
    run, record = dp.run_file(TUNED), dp.variant_record(TUNED)
    if run.is_file() and record.is_file():
        setting = json.loads(record.read_text(encoding="utf-8")).get("setting") or {}
        if len(setting) == 1:  # train/test: one setting (k-fold has one per fold: no single point to apply)
            point = Point(**next(iter(setting.values())))
            return TUNED, point, f"the tuned fusion ({point.name}, {run.name}) chosen by notebook 06"
    why = (
        f"results/{dp.name} has no tuned run with one recorded setting ({run.name} and {record.name}, written by "
        "notebook 06 with write_tuned on a train split): the hybrid run of stage 03 is reranked instead"
    )
    return stage.SOURCE_VARIANT, Point(), why


def test_inputs(dp: DatasetPaths, variant: str, pool_k: int, max_queries: int) -> Inputs:
    fused, queries, chunk_ids = stage.pool_chunks(dp, pool_k, variant)
    chunk_text = corpus.chunk_texts(dp)
    texts = {q: {d: chunk_text[c] for d, c in units.items()} for q, units in chunk_ids.items()}
    return fused, queries, texts, select_queries(fused, queries, max_queries)


def train_inputs(dp: DatasetPaths, point: Point, n: int, seed: int, pool_k: int) -> tuple[Inputs, runs.Qrels]:
    """A seeded sample of ``n`` judged train queries, their first stage (``point``, by the sweep's engine) and the
    pool's texts (a BEIR unit is its own chunk; otherwise the unit's first chunk)."""
    train = splits.train_split(dp)
    if train is None:
        raise SystemExit(
            f"{dp.name} has no train split (qrels/train.tsv with judged queries): alpha cannot be "
            "chosen on train queries"
        )
    qids = sorted(random.Random(seed).sample(train.qids, min(n, len(train.qids))))
    queries = {q: train.queries[q] for q in qids}
    with Engine.open(dp, queries, max_leg_k=point.leg_k, settings=load_settings()) as eng:
        fused, _ = eng.run(point, qids)
    chunk_text, unit_of = corpus.chunk_texts(dp), corpus.unit_of(dp)
    first_chunk: dict[str, str] = {}
    for c, u in unit_of.items():
        first_chunk.setdefault(u, c)
    texts = {
        q: {d: chunk_text[d if d in unit_of else first_chunk[d]] for d, _ in runs.ranked(fused[q])[:pool_k]}
        for q in qids
        if q in fused
    }
    return (fused, queries, texts, [q for q in qids if q in texts]), {q: train.qrels[q] for q in qids}


def plan(inputs: Sequence[Inputs], cfg: RerankConfig, settings: Settings, pool_k: int) -> dict[str, Any]:
    """The reranker's own estimate for every pool of ``inputs`` (calls, cache hits, tokens, expected seconds)."""
    queries: dict[str, str] = {}
    pools: dict[str, list] = {}
    for i, (fused, qs, texts, qids) in enumerate(inputs):
        for q, cands in build_pools(fused, texts, qids, pool_k).items():
            pools[f"{i}:{q}"], queries[f"{i}:{q}"] = cands, qs[q]
    with Reranker(cfg, settings, cache=LLMCache.under(Roots.of(settings).cache)) as rr:
        p = rr.estimate(queries, rr.tasks(pools, NO_STABILITY))
    print(p.message(priced=False), flush=True)
    return p.to_dict()


def rerank_batches(
    inputs: Inputs,
    cfg: RerankConfig,
    settings: Settings,
    pool_k: int,
    batch: int,
    on_batch: Callable[[pd.DataFrame, pd.DataFrame, float], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Candidates, ledger and wall seconds of reranking ``inputs``' queries, ``batch`` queries at a time."""
    fused, queries, texts, qids = inputs
    cands, ledgers, wall = [], [], 0.0
    for s in range(0, len(qids), batch):
        part = qids[s : s + batch]
        t0 = time.perf_counter()
        batch_inputs = core.Inputs({q: fused[q] for q in part}, {q: queries[q] for q in part}, texts, list(part), {})
        res = core.rerank(
            batch_inputs,
            cfg,
            pool_k=pool_k,
            stability=NO_STABILITY,
            settings=settings,
            cache=LLMCache.under(Roots.of(settings).cache),
            progress=False,
        )  # rerank.run's reranking step, batch by batch
        wall += time.perf_counter() - t0
        cands.append(res.candidates)
        ledgers.append(res.ledger)
        c, led = pd.concat(cands, ignore_index=True), pd.concat(ledgers, ignore_index=True)
        print(f"  {s + len(part)}/{len(qids)} queries, {wall:.0f} s", flush=True)
        if on_batch is not None:
            on_batch(c, led, wall)
    return pd.concat(cands, ignore_index=True), pd.concat(ledgers, ignore_index=True), wall


def ndcg_by_alpha(
    fused: runs.Run, cands: pd.DataFrame, qrels: runs.Qrels, qids: Sequence[str], pool_k: int, alphas: Sequence[float]
) -> dict[float, float]:
    out = {}
    for a in alphas:
        run, _ = reranked_at(fused, cands, a, pool_k, qids)
        qs = metrics.query_set({"r": run}, qrels, qids)
        pq = metrics.evaluate({"r": run}, qrels, qs, ["ndcg@10"])
        out[a] = float(pq.value.mean()) if len(pq) else math.nan
    return out


def test_row(
    inputs: Inputs,
    cands: pd.DataFrame,
    ledger: pd.DataFrame,
    wall: float,
    alpha: float,
    qrels: runs.Qrels,
    first_name: str,
    pool_k: int,
    n_total: int,
) -> dict[str, Any]:
    """nDCG@10 (CI), the paired test vs the first stage, AUC and cost over the test queries reranked so far."""
    fused = inputs[0]
    done = sorted(set(cands.qid))
    run, fell_back = reranked_at(fused, cands, alpha, pool_k, done)
    judged = [q for q in done if q in metrics.relevant_queries(qrels)]
    return {
        "n_test_queries": n_total,
        "reranked_queries": len(done),
        "fallback_queries": fell_back,
        **quality({q: fused[q] for q in judged}, run, qrels, judged, first_name),
        **auc_summary(cands, qrels, judged),
        **first_stage_auc(cands, qrels, judged),
        **cost(ledger, wall),
        "test_ndcg10_by_alpha_not_used_to_choose": {
            str(a): round(v, 4) for a, v in ndcg_by_alpha(fused, cands, qrels, judged, pool_k, ALPHAS).items()
        },
    }


def save(path: Path, head: dict[str, Any], model: str, row: dict[str, Any]) -> None:
    """Merge ``row`` into the JSON (rows of other models kept when the setup is the same)."""
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    same = all(old.get(k) == head[k] for k in ("dataset", "first_stage", "pool_k", "max_passage_chars"))
    models = dict(old.get("models", {})) if same else {}
    models[model] = row
    atomic_write_json(path, {**head, "models": models, "loadavg": list(os.getloadavg())})


def run_model(
    args,
    dp: DatasetPaths,
    model: str,
    head: dict[str, Any],
    test: Inputs,
    train: Inputs,
    qrels: runs.Qrels,
    train_qrels: runs.Qrels,
) -> dict[str, Any]:
    """One model: the plan, the train sample and its alpha, then the test queries batch by batch."""
    cfg = Params(mode="yesno", yesno_json=False, alpha=0.1, max_passage_chars=args.max_passage_chars).config()
    with local_settings(model) as settings:
        print(f"[scifact] {model}: the plan for {len(train[3])} train + {len(test[3])} test queries", flush=True)
        row: dict[str, Any] = {
            "model": settings.model,
            "endpoint_id": settings.endpoint_id,
            "plan": plan([train, test], cfg, settings, args.pool_k),
        }
        tc, tl, tw = rerank_batches(train, cfg, settings, args.pool_k, args.batch)
        curve = ndcg_by_alpha(train[0], tc, train_qrels, train[3], args.pool_k, args.alphas)
        alpha = choose_alpha(curve)
        row["train"] = {
            "queries": len(train[3]),
            "seed": args.seed,
            "ndcg10_by_alpha": {str(a): round(v, 4) for a, v in curve.items()},
            "alpha": alpha,
            **auc_summary(tc, train_qrels, train[3]),
            **first_stage_auc(tc, train_qrels, train[3]),
            **cost(tl, tw),
        }
        print(
            f"[scifact] {model}: alpha {alpha} on {len(train[3])} train queries (nDCG@10 {curve[alpha]:.4f}; "
            f"first stage {curve.get(0.0, math.nan):.4f})",
            flush=True,
        )
        row["test"] = {"n_test_queries": head["test_queries"], "reranked_queries": 0}
        save(args.out, head, model, row)  # the train part is kept even if the test part is interrupted

        def on_batch(c: pd.DataFrame, led: pd.DataFrame, wall: float) -> None:
            row["test"] = test_row(
                test, c, led, wall, alpha, qrels, head["first_stage"], args.pool_k, head["test_queries"]
            )
            save(args.out, head, model, row)

        rerank_batches(test, cfg, settings, args.pool_k, args.batch, on_batch)
    t = row["test"]
    print(
        f"[scifact] {model}: nDCG@10 {t['ndcg10']:.4f} vs {head['first_stage']} {t['first_stage_ndcg10']:.4f} "
        f"on {t['n_queries']} test queries (p = {t['p_randomization']:.3f}, {t['wins']}/{t['ties']}/{t['losses']}),"
        f" AUC {t['auc_macro']:.3f}, {t['seconds_per_query']:.1f} s/query",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    ap.add_argument("--models", default=",".join(LOCAL_MODELS), help=f"comma list of {', '.join(LOCAL_MODELS)}")
    ap.add_argument("--max-queries", type=int, default=0, help="test queries, the first N by qid (0: all)")
    ap.add_argument("--train-queries", type=int, default=40, help="train queries sampled to choose alpha on")
    ap.add_argument("--seed", type=int, default=0, help="the train sample's seed")
    ap.add_argument("--pool-k", type=int, default=10)
    ap.add_argument("--max-passage-chars", type=int, default=600)
    ap.add_argument("--alphas", type=lambda s: [float(a) for a in s.split(",")], default=list(ALPHAS))
    ap.add_argument("--batch", type=int, default=10, help="test queries per batch (the JSON is written after each)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if set(models) - set(LOCAL_MODELS):
        ap.error(f"unknown model(s) {sorted(set(models) - set(LOCAL_MODELS))}: choose from {', '.join(LOCAL_MODELS)}")
    dp = resolve_dataset(args.dataset, load_settings())
    name, point, why = first_stage(dp)
    print(f"[scifact] first stage: {why}", flush=True)
    test = test_inputs(dp, name, args.pool_k, args.max_queries)
    train, train_qrels = train_inputs(dp, point, args.train_queries, args.seed, args.pool_k)
    qrels = corpus.load_qrels(dp)
    head = {
        "dataset": dp.name,
        "first_stage": name,
        "first_stage_why": why,
        "point": point.record(),
        "pool_k": args.pool_k,
        "max_passage_chars": args.max_passage_chars,
        "mode": "yesno (one plain token)",
        "test_queries": len(select_queries(test[0], test[1], 0)),
        "alphas": args.alphas,
        "n_boot": stats.N_BOOT,
    }
    calls = len(models) * args.pool_k * (len(train[3]) + len(test[3]))
    print(
        f"[scifact] cost plan: {len(models)} model(s) x {args.pool_k} candidates x ({len(train[3])} train + "
        f"{len(test[3])} test queries) = {calls} yes/no calls at most (cached replies are free); each model's "
        "own estimate follows before its first call",
        flush=True,
    )
    for m in models:
        run_model(args, dp, m, head, test, train, qrels, train_qrels)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
