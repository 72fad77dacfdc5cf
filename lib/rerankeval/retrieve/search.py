"""Stage 03's searches, without the run cache: one variant searched over the built indexes (:func:`search`, the
cross-encoder's and the rewrite step's special cases included) and the Qdrant comparison (:func:`compare_qdrant`).

:mod:`rerankeval.retrieve.runcache` calls them when a variant cannot be read back; they write nothing and never
call back into the run cache or the stage (the walk of a parameter: stage -> runcache -> search -> retriever)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_REFORMULATE, QDRANT_HYBRID
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, ranked, to_units
from rerankeval.core.settings import Settings
from rerankeval.retrieve import cross_encoder, reformulate
from rerankeval.retrieve.fusion import rrf
from rerankeval.retrieve.params import Params
from rerankeval.retrieve.retriever import Retrieval, Retriever

if TYPE_CHECKING:
    from rerankeval.llm.cache import LLMCache


class Searcher(contextlib.AbstractContextManager):
    """The :class:`Retriever`, opened on first use: a run whose variants are all read back never opens the indexes."""

    def __init__(self, dp: DatasetPaths, settings: Settings) -> None:
        self.dp, self.settings, self._r = dp, settings, None

    def get(self) -> Retriever:
        self._r = self._r or Retriever(self.dp, self.settings)
        return self._r

    def __exit__(self, *exc) -> None:
        if self._r is not None:
            self._r.close()


class Searched(NamedTuple):
    """What :func:`search` found: the variant's retrieval (None: skipped, ``skipped`` says why) and, for
    ``hybrid_reformulate``, the rewrite ledger."""

    retrieval: Retrieval | None
    ledger: pd.DataFrame | None = None
    skipped: str = ""


def search(searcher: Searcher, v: str, queries: Mapping[str, str], p: Params, *, cache: LLMCache | None) -> Searched:
    """Search ``v`` for ``queries`` with the budget of ``p`` (the cross-encoder's and the rewrite step's cases)."""
    budget = dataclasses.asdict(p.budget())
    r = searcher.get()
    if v == CROSS_ENCODER:
        model = cross_encoder.load_local(cross_encoder.model_name(p.cross_encoder_model, searcher.settings))
        if model is None:
            return Searched(None, skipped=f"Skipping {v}: {cross_encoder.NOT_ON_DISK}")
        return Searched(r.search(v, queries, cross_encoder=model, **budget))
    if v == HYBRID_REFORMULATE:
        res, ledger = search_reformulated(
            r,
            queries,
            threshold=p.reformulate_threshold,
            guard_k=p.reformulate_guard_k,
            settings=searcher.settings,
            cache=cache,
            **budget,
        )
        return Searched(res, ledger)
    return Searched(r.search(v, queries, **budget))


def search_reformulated(
    retriever: Retriever,
    queries: Mapping[str, str],
    *,
    leg_k: int,
    pool_k: int,
    rrf_k: int,
    weights=None,
    threshold: float,
    guard_k: int,
    settings: Settings,
    cache: LLMCache | None,
) -> tuple[Retrieval, pd.DataFrame]:
    """``hybrid_reformulate``: ``hybrid``, then the rewrite step on the LLM of ``settings``; (its Retrieval, whose
    ``params`` hold the step's record, the ledger). Without a reachable endpoint every weak query keeps its
    original result (status ``llm_failed``). Writes nothing."""
    t0 = time.perf_counter()
    with reformulate.open_rewriter(settings, cache) as (rewriter, problem):
        step = reformulate.Reformulate(rewriter, threshold, guard_k)
        res = retriever.search(
            HYBRID_REFORMULATE, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights, rewrite=step
        )
    step.no_endpoint(problem)
    res.params.update(step.record())
    res.seconds = time.perf_counter() - t0
    return res, step.ledger


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
