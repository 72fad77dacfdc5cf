"""What each variant costs per query: retrieval seconds recorded by stage 03 (per variant and its inputs'
pipeline), LLM figures from the rerank ledger; and the parameters the stages recorded (``pool_k``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK, LEGS

FUSED, RERANKED = HYBRID, HYBRID_RERANK


def retrieval_seconds(retrieve_dir: str | Path, variants: Iterable[str]) -> dict[str, float]:
    """Retrieval wall seconds per query recorded by stage 03 (``<retrieve_dir>/<variant>.json``)."""
    out: dict[str, float] = {}
    for v in variants:
        p = Path(retrieve_dir) / f"{v}.json"
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
            secs, n = float(rec["seconds"]), int(rec["queries"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if n > 0 and math.isfinite(secs):
            out[v] = secs / n
    return out


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
) -> pd.DataFrame:
    """One row per variant: the ledger figures, ``retrieval_seconds_per_query`` (:func:`pipeline_seconds`)
    and ``seconds_per_query`` = retrieval + LLM seconds (NaN when neither is known)."""
    retrieval_s = dict(retrieval_s or {})
    base = pd.DataFrame({"variant": list(variants)})
    if ledger_sum is not None and len(ledger_sum):
        base = base.merge(ledger_sum.drop(columns=["n_queries"], errors="ignore"), on="variant", how="left")
    base["retrieval_seconds_per_query"] = [pipeline_seconds(retrieval_s, v, inputs_of) for v in base.variant]
    llm = (
        base["llm_seconds_per_query"]
        if "llm_seconds_per_query" in base
        else pd.Series(math.nan, index=base.index)
    )
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
