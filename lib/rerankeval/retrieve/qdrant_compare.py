"""Qdrant's own fusion against ours (stage 03): do ``qdrant_hybrid`` and ``hybrid`` return the same units, and is a
difference the fusion convention (our RRF over Qdrant's own legs) or the sparse leg (Qdrant's IDF against
rank-bm25's)? :func:`compare_qdrant` computes it from both hybrids' runs and a sample of queries searched again leg by
leg; the stage keys it (:func:`rerankeval.retrieve.runkey.comparison_key`) and saves it beside the runs
(:func:`rerankeval.retrieve.runstore.store_comparison`). Writes nothing."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from rerankeval.core.names import HYBRID, QDRANT_HYBRID
from rerankeval.core.runs import Run, ranked, to_units
from rerankeval.retrieve.fusion import rrf
from rerankeval.retrieve.params import Params
from rerankeval.retrieve.retriever import Retrieval, Retriever


def overlap_at_k(a: Run, b: Run, k: int) -> dict[str, float]:
    """Per query |top-k(a) ∩ top-k(b)| / k (1.0 = same documents, any order)."""
    out = {}
    for q in sorted(set(a) | set(b)):
        ta = {d for d, _ in ranked(a.get(q, {}))[:k]}
        tb = {d for d, _ in ranked(b.get(q, {}))[:k]}
        out[q] = len(ta & tb) / k if k else math.nan
    return out


@dataclass(frozen=True)
class QdrantComparison:
    """``qdrant_hybrid`` against ``hybrid``: top-k overlaps of their runs, and, over the first ``sample`` queries,
    of our RRF over Qdrant's own legs against ``qdrant_hybrid`` and of Qdrant's sparse leg against our BM25 leg."""

    final_k: int
    leg_k: int
    sample: int
    overlap_final: float
    overlap_leg: float
    ours_on_qdrant_legs: float
    sparse_vs_bm25: float

    def summary(self, ndcg: pd.DataFrame) -> pd.DataFrame:
        """The comparison as a one-column table, with ``ndcg`` (qid x variant nDCG@final_k, stage 05's)."""
        diff = ndcg[QDRANT_HYBRID] - ndcg[HYBRID]
        k, n = self.final_k, self.sample
        return pd.Series(
            {
                f"overlap@{k}: hybrid vs qdrant_hybrid": self.overlap_final,
                f"overlap@{self.leg_k}: hybrid vs qdrant_hybrid": self.overlap_leg,
                f"nDCG@{k} qdrant_hybrid - hybrid (mean)": diff.mean(),
                "queries with a different nDCG": int((diff.abs() > 1e-12).sum()),
                f"overlap@{k}: our RRF of Qdrant's legs vs qdrant_hybrid ({n} queries)": self.ours_on_qdrant_legs,
                f"overlap@{k}: Qdrant's sparse leg vs our BM25 leg ({n} queries)": self.sparse_vs_bm25,
            }
        ).to_frame("value")


def compare_qdrant(
    r: Retriever, found: Mapping[str, Retrieval], queries: Mapping[str, str], p: Params
) -> QdrantComparison | None:
    """Why ``qdrant_hybrid`` and ``hybrid`` differ (None unless both are in ``found``): is it the fusion convention
    (our RRF over Qdrant's own legs) or the sparse leg (Qdrant's IDF against rank-bm25's)?"""
    if not {HYBRID, QDRANT_HYBRID} <= set(found):
        return None
    a, b = found[HYBRID].run, found[QDRANT_HYBRID].run
    sample = dict(list(queries.items())[: p.explain_queries])
    bm25_leg, sparse_leg, dense_leg = (
        r.bm25_leg(sample, p.leg_k),
        r.sparse_leg(sample, p.leg_k),
        r.dense_leg(sample, p.leg_k),
    )
    ours_on_qdrant_legs = to_units(rrf([dense_leg, sparse_leg], k=p.rrf_k), r.unit_of)

    def mean_overlap(x: Run, y: Run, k: int) -> float:
        return pd.Series(overlap_at_k(x, y, k)).mean()

    return QdrantComparison(
        p.final_k,
        p.leg_k,
        len(sample),
        mean_overlap(a, b, p.final_k),
        mean_overlap(a, b, p.leg_k),
        mean_overlap(ours_on_qdrant_legs, {q: b[q] for q in sample}, p.final_k),
        mean_overlap(sparse_leg, bm25_leg, p.final_k),
    )
