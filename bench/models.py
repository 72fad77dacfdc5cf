"""Which local model should rerank by default? Each local model on one dataset, measured the same way (issue 22).

For each ``--models`` name (a LOCAL_MODEL value) it starts the local llama-server with that model, reranks the top
``--pool-k`` of the hybrid run with stage 04's defaults (``RerankParams``: mode yesno, one plain token, alpha 0.1,
200 characters per passage) for every query (or the first ``--queries``) in each of ``--modes`` (``yesno``, the
stage's default; ``setwise``: Zhuang et al., SIGIR 2024, a heap sort over sets of ``set_size`` passages), and records

- nDCG@10 of the reranked run and of the hybrid run over the same queries (ir_measures, the analysis's
  ``evaluate.metrics``), with the bootstrap CI and the paired randomisation test (``evaluate.stats.compare``);
- ROC AUC of the LLM score (p(yes)) for relevant against non-relevant candidates: per query (sklearn's
  ``roc_auc_score``; queries with one class only are left out), macro-averaged with a bootstrap CI, and pooled;
  a candidate not in the qrels counts as non-relevant, as the metrics count it (the number is recorded);
- LLM calls, cache hits, tokens (sent now plus those of cached replies), the LLM seconds per query as the calls
  took when first made (the ledger), this run's fresh LLM seconds and wall time, and the load average;
- the blend weight chosen honestly (``kfold``): the recorded scores are replayed at each of ``--alphas`` (no further
  call); each of ``--folds`` folds of the queries takes the alpha with the best mean nDCG@10 on the other folds
  (ties: the smaller alpha) and is scored with it, so the out-of-fold run never saw its own queries; that run
  against hybrid with the same paired test.

Replies go to the normal reply cache (keyed by model), so a second run is free and ``make report`` with the same
``LOCAL_MODEL`` reuses them. The decision rule of issue 22 is applied to the figures and written with them.

    nice -n 10 python bench/models.py                                  # both models, debian-manuals, 60 queries
    python bench/models.py --models qwen2.5-coder-1.5b --queries 10
    python bench/models.py --modes yesno,setwise                       # the two modes side by side, with cost

Writes ``results/bench/rerank_models.json``: ``models`` (yes/no, the rows the default rule reads) and ``modes`` (every
model and mode, keyed ``<model> <mode>``); rows of other models and modes already there are kept. Timings taken while
other processes load the CPU are upper bounds (the load average is recorded).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import DEFAULT_DATASET, ROOT, DatasetPaths, resolve_dataset
from rerankeval.core.settings import LOCAL_MODELS, Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import metrics, stats
from rerankeval.experiments import splits
from rerankeval.experiments.replay import RecordedLLM, replay
from rerankeval.llm import server as llm_server
from rerankeval.rerank import stage
from rerankeval.rerank.config import MAIN_PASS, MODES, Params
from rerankeval.rerank.core import Inputs
from rerankeval.rerank.ledger import summarize

METRIC = "ndcg@10"
OUT = ROOT / "results" / "bench" / "rerank_models.json"
MAX_REPORT_S = 15 * 60  # issue 22: the cold `make report` must stay within 15 minutes with the default model
ALPHAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)


@contextlib.contextmanager
def local_settings(model: str) -> Iterator[Settings]:
    """Settings pointing at a freshly started local server running ``model`` (never an endpoint from .env)."""
    base = load_settings()
    own = Settings(
        local_model=model,
        llama_threads=base.llama_threads,
        llama_backend=base.llama_backend,
        timeout=max(base.timeout, 300.0),
        max_retries=base.max_retries,
    )
    with llm_server.endpoint(own) as served:
        yield Settings(
            base_url=served.base_url,
            api_key=served.api_key,
            model=served.model,
            endpoint_id=served.endpoint_id,
            timeout=served.timeout,
            max_retries=served.max_retries,
        )


def auc_summary(
    cands: pd.DataFrame, qrels: runs.Qrels, qids: list[str], score: str = "llm_score", n_boot: int = stats.N_BOOT
) -> dict[str, Any]:
    """Per-query ROC AUC of ``score`` (relevant: grade >= REL_LEVEL; not in the qrels: non-relevant), its macro
    mean with a bootstrap CI, and the pooled AUC over every candidate."""
    keep = set(qids)
    c = cands[cands.qid.isin(keep) & cands[score].notna()]
    if "pass" in c:
        c = c[c["pass"] == MAIN_PASS]
    grade = [qrels.get(q, {}).get(d) for q, d in zip(c.qid, c.docid, strict=True)]
    rel = np.array([g is not None and g >= metrics.REL_LEVEL for g in grade])
    by_q = {
        q: float(roc_auc_score(g.rel, g[score])) for q, g in c.assign(rel=rel).groupby("qid") if g.rel.nunique() == 2
    }
    per_q = list(by_q.values())
    mean, lo, hi = stats.bootstrap_ci(per_q, n_boot=n_boot) if per_q else (math.nan,) * 3
    pooled = float(roc_auc_score(rel, c[score])) if len(set(rel)) == 2 else math.nan
    return {
        "auc_macro": mean,
        "auc_ci": [lo, hi],
        "auc_pooled": pooled,
        "auc_queries": len(per_q),
        "auc_one_class_queries": int(c.qid.nunique() - len(per_q)),
        "candidates": int(len(c)),
        "relevant": int(rel.sum()),
        "unjudged_as_non_relevant": int(sum(g is None for g in grade)),
        "auc_per_query": {q: round(v, 4) for q, v in by_q.items()},
    }


def first_stage_auc(
    cands: pd.DataFrame, qrels: runs.Qrels, qids: list[str], n_boot: int = stats.N_BOOT
) -> dict[str, Any]:
    """:func:`auc_summary` of the first stage's own order of the same candidates (score: minus the fused rank),
    keys prefixed ``first_stage_``: what the LLM's AUC must beat before a blend can help."""
    c = cands.assign(first_stage=-pd.to_numeric(cands.fused_rank, errors="coerce"))
    got = auc_summary(c[c.llm_score.notna()], qrels, qids, score="first_stage", n_boot=n_boot)
    return {f"first_stage_{k}": v for k, v in got.items() if k in ("auc_macro", "auc_ci", "auc_queries")}


def quality(
    first: runs.Run, reranked: runs.Run, qrels: runs.Qrels, qids: list[str], first_name: str, n_boot: int = stats.N_BOOT
) -> dict[str, Any]:
    """nDCG@10 of both runs over the judged ``qids`` both answer, CIs, and the paired test (reranked vs first)."""
    both = {
        first_name: {q: first[q] for q in qids if q in first},
        "reranked": {q: reranked[q] for q in qids if q in reranked},
    }
    qs = metrics.query_set(both, qrels, qids)
    pq = metrics.evaluate(both, qrels, qs, [METRIC])
    row = stats.compare(pq, METRIC, [("reranked", first_name)], n_boot=n_boot).iloc[0]
    ci = {v: stats.bootstrap_ci(pq[(pq.variant == v)].sort_values("qid").value.to_numpy(), n_boot=n_boot) for v in both}
    return {
        "n_queries": int(row.n),
        "ndcg10": ci["reranked"][0],
        "ndcg10_ci": list(ci["reranked"][1:]),
        "first_stage_ndcg10": ci[first_name][0],
        "first_stage_ndcg10_ci": list(ci[first_name][1:]),
        "diff": float(row["diff"]),
        "diff_ci": [float(row.diff_ci_low), float(row.diff_ci_high)],
        "p_randomization": float(row.p),
        "p_t": stats.paired_t_test(*_pair(pq, first_name)),
        "wins": int(row.wins),
        "ties": int(row.ties),
        "losses": int(row.losses),
    }


def _pair(pq: pd.DataFrame, first_name: str) -> tuple[np.ndarray, np.ndarray]:
    t = pq.pivot(index="qid", columns="variant", values="value")
    return t["reranked"].to_numpy(dtype=float), t[first_name].to_numpy(dtype=float)


def cost(ledger: pd.DataFrame, wall_s: float) -> dict[str, Any]:
    """Calls, tokens (sent now + those of cached replies) and seconds, per query, from the main pass's ledger."""
    s = summarize(ledger, MAIN_PASS)
    main = ledger[ledger["pass"] == MAIN_PASS]
    n = max(1, s["queries"])
    tokens = int(
        main[["prompt_tokens", "completion_tokens", "saved_prompt_tokens", "saved_completion_tokens"]].to_numpy().sum()
    )
    llm_s = float(main["llm_seconds"].sum())
    return {
        "queries": s["queries"],
        "llm_calls": s["llm_calls"],
        "cache_hits": s["cache_hits"],
        "tokens": tokens,
        "tokens_per_query": round(tokens / n, 1),
        "llm_seconds": round(llm_s, 1),
        "seconds_per_query": round(llm_s / n, 2),
        "fresh_llm_seconds": round(float(main["fresh_seconds"].sum()), 1),
        "wall_s": round(wall_s, 1),
        "fallback_rate": s["fallback_rate"],
    }


def reranked_at(
    fused: runs.Run, cands: pd.DataFrame, alpha: float, pool_k: int, qids: Sequence[str]
) -> tuple[runs.Run, int]:
    """The first stage reordered by the recorded LLM scores at ``alpha``; a query with an unscored candidate keeps
    its first-stage order (counted), as stage 04's fallback does."""
    main = cands[(cands["pass"] == MAIN_PASS) & cands.llm_score.notna()]
    scores: dict[str, dict[str, float]] = {}
    for q, d, s in zip(main.qid, main.docid, main.llm_score, strict=True):
        scores.setdefault(q, {})[d] = float(s)
    sub = {q: fused[q] for q in qids}
    got = replay(sub, RecordedLLM(scores, alpha, 0.0, 0.0), pool_k)
    return {q: got.get(q, sub[q]) for q in qids}, sum(q not in got for q in qids)


def choose_alpha(curve: Mapping[float, float]) -> float:
    """The alpha of the best mean nDCG@10; ties go to the smaller alpha (closer to the first stage)."""
    best = max(v for v in curve.values() if not math.isnan(v))
    return min(a for a, v in curve.items() if v >= best - 1e-12)


def ndcg_per_query(run: runs.Run, qrels: runs.Qrels, qids: Sequence[str]) -> dict[str, float]:
    pq = metrics.evaluate({"r": run}, qrels, metrics.query_set({"r": run}, qrels, qids), [METRIC])
    return dict(zip(pq.qid, pq.value.astype(float), strict=True))


def kfold(
    first: runs.Run,
    cands: pd.DataFrame,
    qrels: runs.Qrels,
    qids: Sequence[str],
    pool_k: int,
    alphas: Sequence[float],
    k: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The blend weight chosen by ``k``-fold: each fold's queries are reranked at the alpha with the best mean
    nDCG@10 on the other folds (ties: the smaller alpha), and that out-of-fold run is compared with ``first``."""
    judged = [q for q in qids if q in metrics.relevant_queries(qrels) and q in first]
    if len(judged) < max(k, 2):
        return {"kfold_note": f"{len(judged)} judged queries: too few for {k}-fold"}
    at = {a: reranked_at(first, cands, a, pool_k, judged)[0] for a in alphas}
    values = {a: ndcg_per_query(run, qrels, judged) for a, run in at.items()}
    fold = splits.folds(judged, k, seed)
    chosen: dict[int, float] = {}
    out_of_fold: runs.Run = {}
    for f in range(k):
        rest = [q for q in judged if fold[q] != f]
        chosen[f] = choose_alpha({a: float(np.mean([values[a].get(q, 0.0) for q in rest])) for a in alphas})
        out_of_fold.update({q: at[chosen[f]][q] for q in judged if fold[q] == f})
    q = quality(first, out_of_fold, qrels, judged, "first")
    return {
        "kfold_k": k,
        "kfold_seed": seed,
        "kfold_alpha_by_fold": [chosen[f] for f in range(k)],
        **{
            f"kfold_{key}": v
            for key, v in q.items()
            if key not in ("n_queries", "first_stage_ndcg10", "first_stage_ndcg10_ci")
        },
        "ndcg10_by_alpha_all_queries": {str(a): round(float(np.mean(list(v.values()))), 4) for a, v in values.items()},
    }


def measure(
    dp: DatasetPaths,
    model: str,
    params: Params,
    inputs: Inputs,
    qrels: runs.Qrels,
    alphas: Sequence[float] = ALPHAS,
    k: int = 5,
) -> dict[str, Any]:
    """One model's row in ``params.mode``: rerank with it (cached replies reused), then quality at the stage's
    alpha, AUC, cost, and the out-of-fold blend (:func:`kfold`)."""
    load0 = os.getloadavg()
    with local_settings(model) as settings:
        t0 = time.perf_counter()
        res = rerank.run(dp, params, settings, progress=False)
        wall = time.perf_counter() - t0
    first = {q: inputs.fused[q] for q in inputs.qids}
    return {
        "local_model": model,
        "model": res.model,
        "endpoint_id": settings.endpoint_id,
        "mode": params.mode,
        "set_size": params.set_size if params.mode == "setwise" else None,
        "alpha": params.alpha,
        **quality(first, res.run, qrels, inputs.qids, stage.SOURCE_VARIANT),
        **auc_summary(res.candidates, qrels, inputs.qids),
        **first_stage_auc(res.candidates, qrels, inputs.qids),
        **cost(res.ledger, wall),
        **kfold(first, res.candidates, qrels, inputs.qids, params.pool_k, alphas, k),
        "loadavg": [list(load0), list(os.getloadavg())],
    }


def table(rows: Mapping[str, dict[str, Any]]) -> pd.DataFrame:
    """One line per model and mode: quality, discrimination and cost side by side."""
    cols = {
        "local_model": "model",
        "mode": "mode",
        "n_queries": "queries",
        "first_stage_ndcg10": "hybrid",
        "ndcg10": "ndcg10@alpha",
        "p_randomization": "p",
        "kfold_ndcg10": "ndcg10_kfold",
        "kfold_p_randomization": "p_kfold",
        "auc_macro": "auc",
        "first_stage_auc_macro": "auc_first_stage",
        "llm_calls": "calls",
        "tokens_per_query": "tokens/q",
        "seconds_per_query": "s/q",
    }
    t = pd.DataFrame([{new: r.get(old) for old, new in cols.items()} for r in rows.values()])
    t["calls/q"] = [
        r["llm_calls"] / max(1, r["queries"]) if r.get("llm_calls") is not None else None for r in rows.values()
    ]
    return t.drop(columns=["calls"]).round(4)


def report_seconds(dp: DatasetPaths) -> float | None:
    """The wall time of the last cold ``make report`` of the dataset, when bench/report.py recorded one."""
    path = ROOT / "results" / "bench" / "report.json"
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cold = got.get("cold") if isinstance(got, dict) else None
    if isinstance(cold, Mapping) and got.get("dataset") in (None, dp.name):
        wall = cold.get("wall_s")
        return float(wall) if isinstance(wall, int | float) else None
    return None


def decision(rows: Mapping[str, dict[str, Any]], report_s: float | None) -> dict[str, Any]:
    """Issue 22's rule: the 1.5B becomes the default only if it beats the hybrid run on nDCG@10 with p < .05
    and the cold ``make report`` (the 0.5B's, with the 1.5B's LLM seconds instead) stays within 15 minutes."""
    small, big = rows.get("qwen2.5-coder-0.5b"), rows.get("qwen2.5-coder-1.5b")
    if small is None or big is None:
        return {"default": "qwen2.5-coder-0.5b", "why": "both models are needed to decide; the default is unchanged"}
    better = big["diff"] > 0 and big["p_randomization"] < 0.05
    est = None if report_s is None else report_s - small["llm_seconds"] + big["llm_seconds"]
    fits = est is not None and est <= MAX_REPORT_S
    why = (
        f"1.5B vs hybrid: nDCG@10 {big['diff']:+.4f}, p = {big['p_randomization']:.3f} "
        f"({'significant' if better else 'not significant'} at .05); cold make report with the 1.5B at least "
        + (
            f"{est / 60:.1f} min (the 0.5B's {report_s / 60:.1f} min with the 1.5B's rerank LLM seconds instead of "
            "the 0.5B's; 07-ask and query rewriting call the model too)"
            if est is not None
            else "unknown (no --report-s, no results/bench/report.json)"
        )
        + f", limit {MAX_REPORT_S / 60:.0f} min"
    )
    return {
        "default": "qwen2.5-coder-1.5b" if better and fits else "qwen2.5-coder-0.5b",
        "why": why,
        "improves_p05": bool(better),
        "report_estimate_s": est,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=DEFAULT_DATASET)
    ap.add_argument("--models", default=",".join(LOCAL_MODELS), help=f"comma list of {', '.join(LOCAL_MODELS)}")
    ap.add_argument("--queries", type=int, default=0, help="0: all; else the first N by qid")
    ap.add_argument("--pool-k", type=int, default=Params.pool_k)
    ap.add_argument("--modes", default="yesno", help=f"comma list of {', '.join(MODES)} (default yesno)")
    ap.add_argument(
        "--alphas",
        type=lambda s: [float(a) for a in s.split(",")],
        default=list(ALPHAS),
        help="blend weights the k-fold choice replays",
    )
    ap.add_argument("--folds", type=int, default=5, help="k of the out-of-fold alpha choice")
    ap.add_argument(
        "--report-s",
        type=float,
        default=None,
        help="seconds of a cold `make report` with the 0.5B (default: results/bench/report.json)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(LOCAL_MODELS))
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(LOCAL_MODELS)}")
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        ap.error(f"unknown mode(s) {sorted(set(modes) - set(MODES))}: choose from {', '.join(MODES)}")
    dp = resolve_dataset(args.dataset, load_settings())
    params = Params(dataset=dp.name, pool_k=args.pool_k, max_queries=args.queries)
    inputs, qrels = stage.load(dp, params), corpus.load_qrels(dp)
    old = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    same = old.get("dataset") == dp.name and old.get("queries") == len(inputs.qids) and old.get("pool_k") == args.pool_k
    rows: dict[str, dict[str, Any]] = dict(old.get("models", {})) if same else {}
    by_mode: dict[str, dict[str, Any]] = dict(old.get("modes", {})) if same else {}
    for m in models:
        for mode in modes:
            print(
                f"[models] {m} {mode}: reranking the top {args.pool_k} of {len(inputs.qids)} queries of {dp.name}",
                flush=True,
            )
            r = by_mode[f"{m} {mode}"] = measure(
                dp, m, replace(params, mode=mode), inputs, qrels, args.alphas, args.folds
            )
            if mode == params.mode:
                rows[m] = r
            print(
                f"[models] {m} {mode}: nDCG@10 {r['ndcg10']:.4f} vs hybrid {r['first_stage_ndcg10']:.4f} "
                f"(p = {r['p_randomization']:.3f}, {r['wins']}/{r['ties']}/{r['losses']}); k-fold alpha "
                f"{r.get('kfold_alpha_by_fold')} {r.get('kfold_ndcg10', math.nan):.4f} "
                f"(p = {r.get('kfold_p_randomization', math.nan):.3f}); AUC {r['auc_macro']:.3f}, "
                f"{r['seconds_per_query']:.1f} s/query",
                flush=True,
            )
    out = {
        "dataset": dp.name,
        "queries": len(inputs.qids),
        "pool_k": args.pool_k,
        "mode": params.mode,
        "yesno_json": params.yesno_json,
        "alpha": params.alpha,
        "max_passage_chars": params.max_passage_chars,
        "metric": METRIC,
        "first_stage": stage.SOURCE_VARIANT,
        "alphas": args.alphas,
        "folds": args.folds,
        "models": rows,
        "modes": by_mode,
        "decision": decision(rows, args.report_s if args.report_s is not None else report_seconds(dp)),
    }
    print(table(by_mode).to_string(index=False))
    print(f"[models] {out['decision']['why']} -> default {out['decision']['default']}")
    print(f"wrote {atomic_write_json(args.out, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
