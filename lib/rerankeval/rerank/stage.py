"""Stage 04 (rerank): read the hybrid run and passage texts, rerank the pool with the LLM, write the reranked run,
ledger and details; with ``expand_compare``, the same again with each candidate's neighbours (:mod:`.expand`).

The stage (notebook 04), through the package's face::

    params = rerank.Params.of(globals())
    result = rerank.run(dp, params, settings)   # both arms; writes nothing
    written = rerank.write(dp, result)          # run files, ledgers, candidates, summary, the expanded texts

Reads (stages 01 and 03): ``dp.run_file("hybrid")``, ``dp.chunk_run_file("hybrid")`` (to find the best
chunk of each unit), ``dp.chunks``, ``dp.queries``.
Writes: ``dp.run_file("hybrid_rerank")``, ``dp.ledger`` and, under ``dp.stage_dir("rerank")``,
``candidates.csv`` (LLM score and ranks per candidate), ``stability.csv`` (when a stability pass ran) and
``summary.json`` (model, endpoint kind, mode, parameters, rates, the plan printed before the first call,
original vs this run's LLM seconds, why queries fell back) for the analysis and the report, and the expansion arm's
files (:func:`.expand.write`). Their text is redacted (:mod:`rerankeval.llm.scrub`). The ``describe_*`` functions
and the ledger tables are what notebook 04 shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.log import get_logger
from rerankeval.core.names import HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.scrub import redact_frame, redact_tree
from rerankeval.rerank import expand
from rerankeval.rerank.config import MAIN_PASS, Params
from rerankeval.rerank.core import Inputs, Result, rerank, select_queries
from rerankeval.rerank.ledger import summarize, write_ledger

log = get_logger(__name__)

SOURCE_VARIANT = HYBRID
LOCAL_ENDPOINT = "local llama-server"


# -- the stage: run(dp, params, settings) -> Result, write(dp, result) --
def run(dp: DatasetPaths, params: Params, settings: Settings, *, progress: bool = True) -> Result:
    """Rerank the pool of every selected query with the LLM of ``settings`` and, with ``params.expand_compare``,
    again with neighbour expansion (:mod:`.expand`); writes nothing (:func:`write`)."""
    inputs = load(dp, params)
    log.info(inputs.describe(dp, params))
    result = rerank(
        inputs,
        params.config(),
        pool_k=params.pool_k,
        stability=params.stability,
        settings=settings,
        cache=LLMCache.under(dp.roots.cache, enabled=params.use_cache),
        progress=progress,
    )
    result.endpoint = endpoint_kind(settings)
    if params.expand_compare and params.expand_n > 0:
        result.expanded = expand.rerank_expanded(dp, inputs, params, settings=settings, progress=progress)
    else:
        log.info("No expansion arm (expand_compare is false or expand_n is 0).")
    return result


def load(dp: DatasetPaths, params: Params) -> Inputs:
    """Stage 03's hybrid run, the queries, the text of each pool unit's best chunk, and the queries to rerank."""
    fused, queries, chunk_ids = pool_chunks(dp, params.pool_k)
    chunk_text = corpus.chunk_texts(dp)
    texts = {q: {d: chunk_text[c] for d, c in units.items()} for q, units in chunk_ids.items()}
    return Inputs(fused, queries, texts, select_queries(fused, queries, params.max_queries), chunk_ids)


def pool_chunks(
    dp: DatasetPaths, pool_k: int, variant: str = SOURCE_VARIANT
) -> tuple[runs.Run, dict[str, str], dict[str, dict[str, str]]]:
    """(fused unit-level run, qid -> query text, qid -> unit -> id of its best chunk, for the pool) of ``variant``
    (the hybrid run; bench/scifact_rerank.py reranks the tuned one)."""
    run_path = dp.run_file(variant)
    if not run_path.exists():
        raise StageMissing(f"{run_path} is missing: run the retrieval stage first (notebook 03-retrieve).")
    fused = runs.read_trec(run_path)
    queries = corpus.load_queries(dp)
    unit_of = corpus.unit_of(dp)
    chunk_path = dp.chunk_run_file(variant)
    best: dict[str, dict[str, str]] = {}
    if chunk_path.exists():
        best = runs.best_chunks(runs.read_trec(chunk_path), unit_of)
    chunk_ids: dict[str, dict[str, str]] = {}
    for q, docs in fused.items():
        chunk_ids[q] = {}
        for d, _ in runs.ranked(docs)[:pool_k]:
            cid = best.get(q, {}).get(d)
            if cid is None:
                if d in unit_of:  # BEIR: chunk == document
                    cid = d
                else:
                    raise KeyError(f"no chunk for unit {d!r} of query {q!r}: {chunk_path} is missing or lacks it")
            chunk_ids[q][d] = cid
    return fused, queries, chunk_ids


def write(dp: DatasetPaths, result: Result) -> dict[str, Path]:
    """Write the reranked run, the ledger, ``candidates.csv``, ``stability.csv`` and ``summary.json``, and the
    expansion arm's files (``expanded_<name>``); name -> path."""
    out = {
        "run": runs.write_trec(result.run, dp.run_file(HYBRID_RERANK), tag=HYBRID_RERANK),
        "ledger": write_ledger(result.ledger, dp.ledger),
    }
    stage = dp.stage_dir("rerank")
    out["candidates"] = atomic_write_text(stage / "candidates.csv", redact_frame(result.candidates).to_csv(index=False))
    if result.stability is not None:
        out["stability"] = atomic_write_text(stage / "stability.csv", result.stability.to_csv(index=False))
    out["summary"] = atomic_write_json(stage / "summary.json", redact_tree(summary_dict(result)))
    if result.expanded is not None:
        out |= {f"expanded_{k}": v for k, v in expand.write(dp, result.expanded).items()}
    return out


def summary_dict(result: Result) -> dict[str, Any]:
    """``rerank/summary.json``: what the analysis, the report and the explorer read of the run."""
    s: dict[str, Any] = {
        "variant": HYBRID_RERANK,
        "model": result.model,
        "endpoint": result.endpoint,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(result.config).items()},
        "pool_k": result.pool_k,  # checked against the analysis's pool_k (funnel.recorded_pool_k)
        "wall_s": round(result.wall_s, 2),
        MAIN_PASS: summarize(result.ledger, MAIN_PASS),
        "plan": result.plan,
    }
    s[MAIN_PASS]["fallback_cause"] = result.fallback_cause
    main = result.ledger[result.ledger["pass"] == MAIN_PASS] if len(result.ledger) else result.ledger
    if "llm_seconds" in main:
        # what the LLM stage costs (cached replies count their original seconds) vs what this run spent
        s[MAIN_PASS]["llm_seconds"] = round(float(main["llm_seconds"].sum()), 2)
        s[MAIN_PASS]["fresh_llm_seconds"] = round(float(main["fresh_seconds"].sum()), 2)
        s[MAIN_PASS]["budget_skipped"] = int(main["budget_skipped"].astype(bool).sum())
    if result.stability is not None and len(result.stability):
        s["stability"] = {
            "kendall_tau_mean": float(result.stability["kendall_tau"].mean()),
            "top1_agreement": float(result.stability["top1_agree"].mean()),
        }
    return s


def endpoint_kind(settings: Settings | None) -> str:
    """``local llama-server`` or the endpoint's host (never the key, never a path with tokens)."""
    if settings is None or not settings.base_url:
        return "unknown"
    if (settings.endpoint_id or "").startswith("llama-server"):
        return LOCAL_ENDPOINT
    from urllib.parse import urlsplit

    return urlsplit(settings.base_url).hostname or "custom"


# -- what notebook 04 shows --
LOCAL_NOTE = (
    "Note: this is a small local model (LOCAL_MODEL), plumbing-grade, that checks the pipeline end to end; "
    "its ranking judgement is weak. For real conclusions set OPENAI_BASE_URL, OPENAI_API_KEY and "
    "RERANK_MODEL in .env (see .env.example) to a stronger OpenAI-compatible endpoint and re-run."
)
PROBLEM_COLUMNS = ["qid", "pass", "status", "n_invalid", "n_duplicate", "n_missing", "n_failed", "retries", "error"]


def describe_run(result: Result, params: Params, written: Mapping[str, Path]) -> str:
    """The model and endpoint, the time spent (now and when the calls were first made), the files written."""
    endpoint = result.endpoint
    llm_s, fresh_s = result.ledger.llm_seconds.sum(), result.ledger.fresh_seconds.sum()
    lines = [
        f"Reranker: {result.model} ({endpoint}), mode {params.mode}, alpha {params.alpha}; {result.wall_s:.0f} s "
        f"in all, {fresh_s:.0f} s of LLM calls now; the stage's LLM calls took {llm_s:.0f} s when first made."
    ]
    if endpoint == LOCAL_ENDPOINT:
        lines.append(LOCAL_NOTE)
    return "\n".join([*lines, *(f"wrote {name}: {path}" for name, path in written.items())])


def describe_ledger(ledger: pd.DataFrame) -> str:
    """The main pass's fallback and repair rates, calls and seconds per query, requests, cache hits, tokens, cost."""
    s = summarize(ledger, MAIN_PASS)
    return (
        f"Fallback rate {s['fallback_rate']:.1%} and repair rate {s['repaired_rate']:.1%} over {s['queries']} "
        f"queries; {s['calls_per_query']:.1f} LLM calls and {s['seconds_per_query']:.2f} s per query.\n"
        f"Calls made to the endpoint: {s['requests']} (retries included); cache hits: {s['cache_hits']} of "
        f"{s['llm_calls']} calls; tokens saved by the cache: {s['tokens_saved']:,}; tokens spent: "
        f"{s['prompt_tokens'] + s['completion_tokens']:,}; cost: ${s['cost_usd']:.4f}."
    )


def ledger_by_status(ledger: pd.DataFrame) -> pd.DataFrame:
    """Queries, repairs, failed calls, retries and seconds per pass and status."""
    return ledger.groupby(["pass", "status"]).agg(
        queries=("qid", "count"),
        invalid=("n_invalid", "sum"),
        duplicate=("n_duplicate", "sum"),
        missing=("n_missing", "sum"),
        failed_calls=("n_failed", "sum"),
        retries=("retries", "sum"),
        seconds=("latency_s", "sum"),
    )


def ledger_problems(ledger: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The first ``n`` rows of the ledger whose status is not ok (repaired, fallback ...)."""
    return ledger[ledger.status != "ok"][PROBLEM_COLUMNS].head(n)


def describe_stability(result: Result, stability: str) -> str:
    """The stability pass's mean Kendall tau and top-1 agreement, or how to ask for one."""
    st = result.stability
    if st is None or not len(st):
        return 'No stability pass (set stability = "reversed" or "shuffled").'
    return (
        f"{stability} pass: mean Kendall tau {st.kendall_tau.mean():.3f}, top-1 agreement "
        f"{st.top1_agree.mean():.1%} over {len(st)} queries."
    )
