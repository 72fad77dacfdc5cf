"""Stage 03 (retrieve): every retrieval variant behind one signature.

The stage (notebook 03)::

    result = run(dp, RetrieveParams(variants=["bm25", "hybrid"]))   # searches, writes nothing
    write(dp, result)                                             # run files, records, the rewrite ledger

One variant::

    with Retriever(dp) as r:
        res = r.search("hybrid", queries, leg_k=100)   # -> Retrieval(variant, run, chunk_run, ...)
    write_runs(dp, res)

or in one call ``retrieve(dp, "hybrid")`` (loads the judged queries, searches, writes both run files).
The indexes come from stage 02 (:mod:`rerankeval.index.build`); the variants are classes in the registry of
:mod:`rerankeval.retrieve.variants` (one shape: a name, its parameters, ``search(queries) -> Run``), composed
with a query-rewriting step for ``hybrid_reformulate`` (:data:`REWRITES`, :mod:`rerankeval.retrieve.reformulate`).

Variants (all chunk-level first, then mapped to relevance units with :func:`rerankeval.core.runs.to_units`):

- ``vector``: dense cosine top-``leg_k`` chunks from Qdrant;
- ``bm25``: BM25 (:mod:`rerankeval.index.bm25`, fast path, rank-bm25 statistics) top-``leg_k`` chunks;
- ``hybrid``: client-side Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) of the two
  legs, ``sum 1/(rrf_k + rank)`` with 1-based ranks and ``rrf_k = 60``; each leg is mapped to units
  *before* fusing, so a page/document never splits its credit across chunks (ties: fused score, best
  single-leg rank, id; see :mod:`rerankeval.retrieve.fusion`);
- ``qdrant_hybrid``: the same fusion done by Qdrant's Query API (prefetch dense + native sparse BM25
  with Qdrant's IDF, ``RrfQuery`` with ``k = rrf_k + 1``); Qdrant fuses chunks, so units are mapped after
  fusing (identical to ``hybrid``'s mapping when chunk = unit, as in BEIR);
- ``hybrid_combsum``, ``hybrid_combmnz``, ``hybrid_dbsf`` (fusion alternatives, not run by default): ``hybrid``'s
  legs and unit mapping fused by min-max CombSUM/CombMNZ or DBSF (:func:`rerankeval.retrieve.fusion.fuse`);
  ``qdrant_dbsf``: ``qdrant_hybrid`` with Qdrant's own DBSF (``docs/CONVENTIONS.md#fusion``);
- ``cross_encoder`` (optional): the top ``pool_k`` units of the ``hybrid`` run reordered by a
  sentence-transformers CrossEncoder scoring (query, the unit's best chunk); the rest keep their fused
  order (the same pool contract as the LLM reranker of stage 04);
- ``hybrid_reformulate``: ``hybrid``, then the LLM's rewrite of each weak query fused with it unless a
  judgment-free guard reverts it (:class:`rerankeval.retrieve.reformulate.Reformulate`, a step, not a variant).

Budgets, equal for every variant: ``leg_k`` chunks per leg (so any metric at a cutoff <= ``leg_k``
compares equal budgets); ``pool_k`` fused candidates go to a reranker; ``final_k`` is the cutoff of the
headline metric (nDCG@final_k). Runs are written at full depth, never truncated to ``pool_k`` or
``final_k``: single legs hold up to ``leg_k`` chunks/units, fused runs the union of both legs.
"""


from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.names import BM25, CROSS_ENCODER, HYBRID, HYBRID_REFORMULATE, QDRANT_HYBRID, VECTOR
from rerankeval.core.paths import DEFAULT_DATASET, DatasetPaths
from rerankeval.core.runs import Run, ranked, to_units, write_trec
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.retrieve import cross_encoder, reformulate, variants
from rerankeval.retrieve.fusion import RRF_K, rrf
from rerankeval.retrieve.retriever import BASE_VARIANTS as BASE_VARIANTS  # re-exported: callers import them here
from rerankeval.retrieve.retriever import REWRITES as REWRITES
from rerankeval.retrieve.retriever import VARIANTS as VARIANTS
from rerankeval.retrieve.retriever import Retrieval, Retriever

if TYPE_CHECKING:
    from rerankeval.llm.cache import LLMCache


def write_runs(dp: DatasetPaths, res: Retrieval) -> tuple[Path, Path]:
    """Write ``dp.run_file(variant)`` (units) and ``dp.chunk_run_file(variant)`` (chunks), full depth,
    and the variant's parameters to ``dp.stage_dir("retrieve")/<variant>.json``."""
    a = write_trec(res.run, dp.run_file(res.variant), tag=res.variant)
    b = write_trec(res.chunk_run, dp.chunk_run_file(res.variant), tag=res.variant)
    record = variants.REGISTRY.get(res.variant, variants.Variant).record(res.params)
    atomic_write_json(dp.stage_dir("retrieve") / f"{res.variant}.json", {
        "variant": res.variant, **res.params, **record, "seconds": round(res.seconds, 3), "queries": len(res.run),
    })
    return a, b


def retrieve(
    dp: DatasetPaths,
    variant: str,
    queries: Mapping[str, str] | None = None,
    *,
    leg_k: int = 100,
    pool_k: int = 20,
    rrf_k: int = RRF_K,
    weights: Sequence[float] | None = None,
    cross_encoder=None,
    write: bool = True,
    retriever: Retriever | None = None,
) -> Retrieval:
    """One call per variant: search ``queries`` (default: the judged queries of ``dp``) and write the runs."""
    queries = corpus.load_queries(dp) if queries is None else queries
    if retriever is None:
        with Retriever(dp) as r:
            res = r.search(variant, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights,
                           cross_encoder=cross_encoder)
    else:
        res = retriever.search(variant, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights,
                               cross_encoder=cross_encoder)
    if write:
        write_runs(dp, res)
    return res


def overlap_at_k(a: Run, b: Run, k: int) -> dict[str, float]:
    """Per query |top-k(a) ∩ top-k(b)| / k (1.0 = same documents, any order)."""
    out = {}
    for q in sorted(set(a) | set(b)):
        ta = {d for d, _ in ranked(a.get(q, {}))[:k]}
        tb = {d for d, _ in ranked(b.get(q, {}))[:k]}
        out[q] = len(ta & tb) / k if k else math.nan
    return out


# -- the stage: run(dp, params) -> RetrieveResult, write(dp, result) --
@dataclass(frozen=True)
class RetrieveParams:
    """Stage 03's parameters: notebook 03's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    leg_k: int = 100  # chunks per leg
    pool_k: int = 10  # hybrid units the cross_encoder reorders (the LLM reranker's pool in 04)
    final_k: int = 10  # cutoff of the headline metric (and of the Qdrant comparison's first overlap)
    rrf_k: int = RRF_K  # paper convention 1/(rrf_k + rank); Qdrant is sent rrf_k + 1
    variants: Sequence[str] = (VECTOR, BM25, HYBRID, QDRANT_HYBRID, CROSS_ENCODER, HYBRID_REFORMULATE)
    cross_encoder_model: str = ""  # local folder or cached name; empty: the configured one, else the default
    explain_queries: int = 50  # queries of the Qdrant comparison (Qdrant's local sparse search is slow)
    reformulate_threshold: float = reformulate.THRESHOLD
    reformulate_guard_k: int = reformulate.GUARD_K


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
        return pd.Series({
            f"overlap@{k}: hybrid vs qdrant_hybrid": self.overlap_final,
            f"overlap@{self.leg_k}: hybrid vs qdrant_hybrid": self.overlap_leg,
            f"nDCG@{k} qdrant_hybrid - hybrid (mean)": diff.mean(),
            "queries with a different nDCG": int((diff.abs() > 1e-12).sum()),
            f"overlap@{k}: our RRF of Qdrant's legs vs qdrant_hybrid ({n} queries)": self.ours_on_qdrant_legs,
            f"overlap@{k}: Qdrant's sparse leg vs our BM25 leg ({n} queries)": self.sparse_vs_bm25,
        }).to_frame("value")


@dataclass
class RetrieveResult:
    """What :func:`run` found: each variant's runs in the order run, the variants skipped and why, the
    rewrite ledger of ``hybrid_reformulate`` and the Qdrant comparison (when both hybrids ran)."""

    retrievals: dict[str, Retrieval] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    ledger: pd.DataFrame | None = None
    qdrant: QdrantComparison | None = None

    @property
    def runs(self) -> dict[str, Run]:
        """variant -> its unit-level run."""
        return {v: res.run for v, res in self.retrievals.items()}

    def table(self, dp: DatasetPaths) -> pd.DataFrame:
        """One row per variant: seconds, mean units and chunks per query, its run file."""
        return pd.DataFrame([{
            "variant": v, "seconds": round(res.seconds, 2),
            "units per query (mean)": sum(map(len, res.run.values())) / max(1, len(res.run)),
            "chunks per query (mean)": sum(map(len, res.chunk_run.values())) / max(1, len(res.chunk_run)),
            "run file": str(dp.run_file(v).relative_to(dp.root))} for v, res in self.retrievals.items()])


def run(dp: DatasetPaths, params: RetrieveParams, *, settings: Settings | None = None,
        cache: LLMCache | None = None) -> RetrieveResult:
    """Search each of ``params.variants`` for the judged queries of ``dp``, in order; writes nothing (:func:`write`).

    ``cross_encoder`` is skipped (with the reason in ``skipped``) when no weights are on disk; ``hybrid_reformulate``
    asks the LLM of ``settings`` (default: the environment's) and falls back to ``hybrid`` without one."""
    queries = corpus.load_queries(dp)
    result = RetrieveResult()
    with Retriever(dp) as r:
        for v in params.variants:
            _run_variant(r, v, queries, params, result, settings=settings, cache=cache)
        result.qdrant = compare_qdrant(r, result.retrievals, queries, params)
    return result


def _run_variant(r: Retriever, v: str, queries: Mapping[str, str], p: RetrieveParams, result: RetrieveResult,
                 **llm) -> None:
    """Search ``v`` into ``result`` (the cross-encoder's and the rewrite step's special cases)."""
    budget = {"leg_k": p.leg_k, "pool_k": p.pool_k, "rrf_k": p.rrf_k}
    if v == CROSS_ENCODER:
        model = cross_encoder.load_local(p.cross_encoder_model or None)
        if model is None:
            result.skipped[v] = f"Skipping {v}: {cross_encoder.NOT_ON_DISK}"
            return
        result.retrievals[v] = r.search(v, queries, cross_encoder=model, **budget)
    elif v == HYBRID_REFORMULATE:
        result.retrievals[v], result.ledger = search_reformulated(
            r, queries, threshold=p.reformulate_threshold, guard_k=p.reformulate_guard_k, **budget, **llm)
    else:
        result.retrievals[v] = r.search(v, queries, **budget)


def search_reformulated(retriever: Retriever, queries: Mapping[str, str], *, leg_k: int = 100, pool_k: int = 20,
                        rrf_k: int = RRF_K, threshold: float = reformulate.THRESHOLD,
                        guard_k: int = reformulate.GUARD_K, settings: Settings | None = None,
                        cache: LLMCache | None = None) -> tuple[Retrieval, pd.DataFrame]:
    """``hybrid_reformulate``: ``hybrid``, then the rewrite step on the LLM of ``settings``; (its Retrieval, whose
    ``params`` hold the step's record, the ledger). Without a reachable endpoint every weak query keeps its
    original result (status ``llm_failed``). Writes nothing."""
    t0 = time.perf_counter()
    with reformulate.open_rewriter(settings, cache) as (rewriter, problem):
        step = reformulate.Reformulate(rewriter, threshold, guard_k)
        res = retriever.search(HYBRID_REFORMULATE, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, rewrite=step)
    step.no_endpoint(problem)
    res.params.update(step.record())
    res.seconds = time.perf_counter() - t0
    return res, step.ledger


def compare_qdrant(r: Retriever, found: Mapping[str, Retrieval], queries: Mapping[str, str],
                   p: RetrieveParams) -> QdrantComparison | None:
    """Why ``qdrant_hybrid`` and ``hybrid`` differ (None unless both are in ``found``): is it the fusion convention
    (our RRF over Qdrant's own legs) or the sparse leg (Qdrant's IDF against rank-bm25's)?"""
    if not {HYBRID, QDRANT_HYBRID} <= set(found):
        return None
    a, b = found[HYBRID].run, found[QDRANT_HYBRID].run
    sample = dict(list(queries.items())[: p.explain_queries])
    bm25_leg, sparse_leg, dense_leg = (r.bm25_leg(sample, p.leg_k), r.sparse_leg(sample, p.leg_k),
                                       r.dense_leg(sample, p.leg_k))
    ours_on_qdrant_legs = to_units(rrf([dense_leg, sparse_leg], k=p.rrf_k), r.unit_of)

    def mean_overlap(x: Run, y: Run, k: int) -> float:
        return pd.Series(overlap_at_k(x, y, k)).mean()

    return QdrantComparison(p.final_k, p.leg_k, len(sample), mean_overlap(a, b, p.final_k),
                            mean_overlap(a, b, p.leg_k),
                            mean_overlap(ours_on_qdrant_legs, {q: b[q] for q in sample}, p.final_k),
                            mean_overlap(sparse_leg, bm25_leg, p.final_k))


def write(dp: DatasetPaths, result: RetrieveResult) -> list[Path]:
    """Write each variant's runs and record (:func:`write_runs`) and the rewrite ledger; the files written."""
    out = [f for res in result.retrievals.values() for f in write_runs(dp, res)]
    if result.ledger is not None:
        out.append(reformulate.write_ledger(dp, result.ledger))
    return out
