"""What each variant costs per query: retrieval seconds recorded by stage 03 (per variant and its inputs'
pipeline), LLM figures from the rerank ledger and, for a variant whose 03 step called an LLM (the rewrite of
``hybrid_reformulate``), from its record (:func:`step_llm_costs`); and the parameters the stages recorded (``pool_k``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK, LEGS

FUSED, RERANKED = HYBRID, HYBRID_RERANK


MODEL_LOAD = "model_load_seconds"  # a stage-03 record's one-off model load (embedding model, cross-encoder), in seconds


def _record(retrieve_dir: str | Path, variant: str) -> dict | None:
    """Stage 03's record of ``variant`` (``<retrieve_dir>/<variant>.json``), None when missing or unreadable."""
    try:
        rec = json.loads((Path(retrieve_dir) / f"{variant}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def model_load_seconds(retrieve_dir: str | Path, variants: Iterable[str]) -> dict[str, float]:
    """Per variant, the one-off model load its stage-03 record counts inside its seconds (:data:`MODEL_LOAD`),
    where above 0: paid once per run, whatever the number of queries, so never part of a per-query cost."""
    out: dict[str, float] = {}
    for v in variants:
        try:
            load = float((_record(retrieve_dir, v) or {}).get(MODEL_LOAD) or 0.0)
        except (TypeError, ValueError):
            continue
        if math.isfinite(load) and load > 0:
            out[v] = load
    return out


def retrieval_seconds(retrieve_dir: str | Path, variants: Iterable[str]) -> dict[str, float]:
    """Retrieval wall seconds per query recorded by stage 03 (``<retrieve_dir>/<variant>.json``), without the
    one-off model load the record counts (:func:`model_load_seconds`): loading the embedding model once is not a
    cost of each query (``vector``, the first variant to embed the queries, used to carry it)."""
    variants = list(variants)
    loads = model_load_seconds(retrieve_dir, variants)
    out: dict[str, float] = {}
    for v in variants:
        try:
            rec = _record(retrieve_dir, v)
            secs, n = float(rec["seconds"]), int(rec["queries"])  # type: ignore[index]
        except (ValueError, KeyError, TypeError):
            continue
        if n > 0 and math.isfinite(secs):
            out[v] = max(0.0, secs - loads.get(v, 0.0)) / n
    return out


STEP_TOKENS = ("prompt_tokens", "completion_tokens", "saved_prompt_tokens", "saved_completion_tokens")


def step_llm_costs(retrieve_dir: str | Path, variants: Iterable[str]) -> pd.DataFrame:
    """Per variant whose stage-03 record counts LLM tokens (``<retrieve_dir>/<variant>.json``: the rewrite step's
    ``prompt_tokens`` ... ``saved_completion_tokens``, ``llm_calls``, ``llm_cache_hits``, ``llm_seconds``): the
    ledger summary's columns per query of the record's ``queries`` (every query, rewritten or not)."""
    rows = []
    for v in variants:
        try:
            rec = json.loads((Path(retrieve_dir) / f"{v}.json").read_text(encoding="utf-8"))
            n = int(rec["queries"])
            fresh, saved = (sum(int(rec.get(k) or 0) for k in pair) for pair in (STEP_TOKENS[:2], STEP_TOKENS[2:]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if n <= 0 or not any(k in rec for k in STEP_TOKENS):
            continue
        calls, secs = rec.get("llm_calls"), rec.get("llm_seconds")  # absent from records older than issue 23
        rows.append(
            {
                "variant": v,
                "tokens_per_query": (fresh + saved) / n,
                "fresh_tokens_per_query": fresh / n,
                "llm_seconds_per_query": float(secs) / n if secs is not None else math.nan,
                "calls_per_query": int(calls) / n if calls is not None else math.nan,
                "cache_hit_rate": int(rec.get("llm_cache_hits") or 0) / int(calls) if calls else math.nan,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "variant",
            "tokens_per_query",
            "fresh_tokens_per_query",
            "llm_seconds_per_query",
            "calls_per_query",
            "cache_hit_rate",
        ],
    )


PIPELINE_INPUTS = {FUSED: LEGS, RERANKED: (FUSED,), CROSS_ENCODER: (FUSED,)}


def pipeline_seconds(
    own: Mapping[str, float], variant: str, inputs_of: Mapping[str, Sequence[str]] = PIPELINE_INPUTS
) -> float:
    """Retrieval seconds per query of a variant's whole pipeline: its own recorded time plus its inputs'.

    Stage 03 memoises the legs, so ``hybrid`` records only the fusion and the legs are added here;
    ``hybrid_rerank`` adds ``hybrid``'s pipeline (its LLM time is the ledger's). NaN when a part is unknown.
    Approximate: work shared between variants (e.g. query embeddings) is counted where it was recorded.
    """
    inputs = list(inputs_of.get(variant, ()))
    if variant in own:
        base = float(own[variant])
    elif inputs:
        base = 0.0
    else:
        return math.nan
    return base + sum(pipeline_seconds(own, u, inputs_of) for u in inputs)


def cost_table(
    variants: Sequence[str],
    ledger_sum: pd.DataFrame | None = None,
    retrieval_s: Mapping[str, float] | None = None,
    inputs_of: Mapping[str, Sequence[str]] = PIPELINE_INPUTS,
    step_llm: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per variant: the ledger figures (and ``step_llm``'s, :func:`step_llm_costs`, for a variant the
    ledger has not), ``retrieval_seconds_per_query`` (:func:`pipeline_seconds`; a step's LLM seconds, included in
    its recorded time, moved to ``llm_seconds_per_query``) and ``seconds_per_query`` = retrieval + LLM seconds
    (NaN when neither is known)."""
    retrieval_s = dict(retrieval_s or {})
    base = pd.DataFrame({"variant": list(variants)})
    if ledger_sum is not None and len(ledger_sum):
        base = base.merge(ledger_sum.drop(columns=["n_queries"], errors="ignore"), on="variant", how="left")
    if step_llm is not None and len(step_llm):
        step = step_llm[step_llm.variant.isin(base.variant)]
        columns = list(base.columns) + [c for c in step.columns if c not in base.columns]
        merged = base.set_index("variant").combine_first(step.set_index("variant"))  # the ledger's figures win
        base = merged.reindex(list(base.variant)).reset_index()[columns]
        for _, r in step.iterrows():
            if r.variant in retrieval_s and not math.isnan(r.llm_seconds_per_query):
                retrieval_s[r.variant] = max(0.0, retrieval_s[r.variant] - float(r.llm_seconds_per_query))
    base["retrieval_seconds_per_query"] = [pipeline_seconds(retrieval_s, v, inputs_of) for v in base.variant]
    llm = base["llm_seconds_per_query"] if "llm_seconds_per_query" in base else pd.Series(math.nan, index=base.index)
    both = pd.concat([base.retrieval_seconds_per_query, llm], axis=1)
    base["seconds_per_query"] = both.sum(axis=1, min_count=1)
    return base


def recorded_pool_k(*stage_dirs: str | Path, variants: Iterable[str] | None = None) -> dict[str, int]:
    """``file -> pool_k`` recorded by the retrieve/rerank stages (``<stage>/<variant>.json``, the rerank
    ``summary.json``; top-level ``pool_k`` or ``config.pool_k``). ``variants`` limits the retrieve records
    to the variants analysed (a stale record of a variant left out does not count)."""
    keep = None if variants is None else {f"{v}.json" for v in variants} | {"summary.json"}
    out: dict[str, int] = {}
    for d in stage_dirs:
        for p in sorted(Path(d).glob("*.json")) if Path(d).is_dir() else []:
            if keep is not None and p.name not in keep:
                continue
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            k = rec.get("pool_k", (rec.get("config") or {}).get("pool_k")) if isinstance(rec, dict) else None
            if isinstance(k, int):
                out[f"{Path(d).name}/{p.name}"] = k
    return out
