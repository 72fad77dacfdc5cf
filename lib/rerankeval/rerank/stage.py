"""Stage 04 plumbing: read the hybrid run and passage texts, write the reranked run, ledger and details.

Reads (stages 01 and 03): ``dp.run_file("hybrid")``, ``dp.chunk_run_file("hybrid")`` (to find the best
chunk of each unit), ``dp.chunks``, ``dp.queries``.
Writes: ``dp.run_file("hybrid_rerank")``, ``dp.ledger`` and, under ``dp.stage_dir("rerank")``,
``candidates.csv`` (LLM score and ranks per candidate), ``stability.csv`` (when a stability pass ran) and
``summary.json`` (model, endpoint kind, mode, parameters, rates, the plan printed before the first call,
original vs this run's LLM seconds, why queries fell back) for the analysis and the report. Their text is
redacted (:mod:`.scrub`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.names import HYBRID
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.llm.scrub import redact_frame, redact_tree
from rerankeval.rerank.core import VARIANT, RerankResult
from rerankeval.rerank.ledger import summarize, write_ledger

SOURCE_VARIANT = HYBRID


def load_inputs(
    dp: DatasetPaths, pool_k: int, variant: str = SOURCE_VARIANT
) -> tuple[runs.Run, dict[str, str], dict[str, dict[str, str]]]:
    """(fused unit-level run, qid -> query text, qid -> unit -> text of its best chunk, for the pool)."""
    fused, queries, chunk_ids = pool_chunks(dp, pool_k, variant)
    chunk_text = corpus.chunk_texts(dp)
    return fused, queries, {q: {d: chunk_text[c] for d, c in units.items()} for q, units in chunk_ids.items()}


def pool_chunks(
    dp: DatasetPaths, pool_k: int, variant: str = SOURCE_VARIANT
) -> tuple[runs.Run, dict[str, str], dict[str, dict[str, str]]]:
    """(fused unit-level run, qid -> query text, qid -> unit -> id of its best chunk, for the pool)."""
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


def write_outputs(dp: DatasetPaths, result: RerankResult, settings: Settings | None = None) -> dict[str, Path]:
    out = {
        "run": runs.write_trec(result.run, dp.run_file(VARIANT), tag=VARIANT),
        "ledger": write_ledger(result.ledger, dp.ledger),
    }
    stage = dp.stage_dir("rerank")
    out["candidates"] = atomic_write_text(stage / "candidates.csv", redact_frame(result.candidates).to_csv(index=False))
    if result.stability is not None:
        out["stability"] = atomic_write_text(stage / "stability.csv", result.stability.to_csv(index=False))
    out["summary"] = atomic_write_json(stage / "summary.json", redact_tree(summary_dict(result, settings)))
    return out


def summary_dict(result: RerankResult, settings: Settings | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "variant": VARIANT,
        "model": result.model,
        "endpoint": endpoint_kind(settings),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(result.config).items()},
        "pool_k": result.pool_k,  # checked against the analysis's pool_k (funnel.recorded_pool_k)
        "wall_s": round(result.wall_s, 2),
        "main": summarize(result.ledger, "main"),
        "plan": result.plan,
    }
    s["main"]["fallback_cause"] = result.fallback_cause
    main = result.ledger[result.ledger["pass"] == "main"] if len(result.ledger) else result.ledger
    if "llm_seconds" in main:
        # what the LLM stage costs (cached replies count their original seconds) vs what this run spent
        s["main"]["llm_seconds"] = round(float(main["llm_seconds"].sum()), 2)
        s["main"]["fresh_llm_seconds"] = round(float(main["fresh_seconds"].sum()), 2)
        s["main"]["budget_skipped"] = int(main["budget_skipped"].astype(bool).sum())
    if result.stability is not None and len(result.stability):
        s["stability"] = {
            "kendall_tau_mean": float(result.stability["kendall_tau"].mean()),
            "top1_agreement": float(result.stability["top1_agree"].mean()),
        }
    return s


def quick_check(dp: DatasetPaths, fused: runs.Run, result: RerankResult, qids: list[str]):
    """Moved to :func:`rerankeval.evaluate.quick.quick_check` (measuring is stage 05's). This delegate only keeps
    ``rerank.quick_check`` resolving until ``rerank/__init__`` stops re-exporting it; then it goes."""
    from rerankeval.evaluate.quick import quick_check as check

    return check(dp, fused, result, qids)


def endpoint_kind(settings: Settings | None) -> str:
    """``local llama-server`` or the endpoint's host (never the key, never a path with tokens)."""
    if settings is None or not settings.base_url:
        return "unknown"
    if (settings.endpoint_id or "").startswith("llama-server"):
        return "local llama-server"
    from urllib.parse import urlsplit

    return urlsplit(settings.base_url).hostname or "custom"
