"""The registry of the variants stage 03 searches, and one shape for every variant (BEIR's style).

A variant is a class with a ``name`` and ``search(queries) -> Run`` (qid -> {unit id: score},
:mod:`rerankeval.core.runs`); ``search_runs`` also returns the chunk-level run the unit run was mapped from. Stage 03
(:class:`rerankeval.retrieve.retriever.Retriever`) builds a variant by name from this registry with the shared budget
:class:`Budget`, over the legs of a :class:`~rerankeval.retrieve.source.Source`, so a new variant (a tuned fusion, a
user's external run) plugs in by registering a class::

    @variants.register
    class MyFusion(variants.Variant):
        name = "my_fusion"
        description = "..."

        def search_runs(self, queries):
            dense, lex = self.source.dense_leg(queries, self.budget.leg_k), ...
            return variants.Runs(run, chunk_run)

    with Retriever(dp, settings) as r:
        found = r.search("my_fusion", queries, leg_k=100, pool_k=10, rrf_k=60)

Registered (see :mod:`rerankeval.retrieve.stage` for the budgets and :mod:`rerankeval.retrieve.fusion` for the
fusions): ``vector``, ``bm25``, ``hybrid``, ``qdrant_hybrid``, the fusion alternatives ``hybrid_combsum``,
``hybrid_combmnz``, ``hybrid_dbsf`` (``hybrid``'s legs and unit mapping, another
:func:`~rerankeval.retrieve.fusion.fuse` method), ``qdrant_dbsf`` (``qdrant_hybrid`` with Qdrant's DBSF) and
``cross_encoder``. Only variants that search are registered: ``hybrid_reformulate`` is a query-rewriting step in
front of ``hybrid`` (:mod:`rerankeval.retrieve.reformulate`), and the names later stages write are in the one
catalogue of names, :mod:`rerankeval.core.names`, with their stage and description (a built-in class takes its
``description`` from there). Other modules use the name constants, never string literals.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

from rerankeval.core import names as catalogue
from rerankeval.core.names import (
    BM25,
    CROSS_ENCODER,
    HYBRID,
    HYBRID_COMBMNZ,
    HYBRID_COMBSUM,
    HYBRID_DBSF,
    QDRANT_DBSF,
    QDRANT_HYBRID,
    VECTOR,
)
from rerankeval.core.runs import Run, best_chunks, to_units
from rerankeval.retrieve.fusion import fuse
from rerankeval.retrieve.source import Source

RRF_FORMULA = "sum w / (rrf_k + rank), rank 1-based"


@dataclass(frozen=True)
class Budget:
    """The budget every stage-03 variant shares: ``leg_k`` chunks per leg, ``pool_k`` fused candidates a
    reranker reorders, the RRF constant ``rrf_k`` (paper convention) and hybrid ``weights`` (dense, bm25; None:
    equal). No defaults: they are stage 03's :class:`rerankeval.retrieve.params.Params`."""

    leg_k: int
    pool_k: int
    rrf_k: int
    weights: Sequence[float] | None = None

    def record(self) -> dict:
        """The parameters as written to ``dp.stage_dir("retrieve")/<variant>.json``."""
        return {
            "leg_k": self.leg_k,
            "pool_k": self.pool_k,
            "rrf_k": self.rrf_k,
            "weights": list(self.weights) if self.weights else None,
        }


class Runs(NamedTuple):
    """A variant's result: ``run`` over relevance units and ``chunk_run`` over chunks, both full depth."""

    run: Run
    chunk_run: Run


class Variant(ABC):
    """One retrieval variant over the built indexes ``source`` (a :class:`~rerankeval.retrieve.retriever.Retriever`).

    A subclass named in :data:`rerankeval.core.names.CATALOGUE` without a ``description`` of its own takes the
    catalogue's."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if not cls.__dict__.get("description") and cls.name in catalogue.CATALOGUE:
            cls.description = catalogue.CATALOGUE[cls.name].description

    def __init__(self, source: Source, budget: Budget) -> None:
        self.source = source
        self.budget = budget

    @abstractmethod
    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        """The unit-level and the chunk-level run for ``queries`` (qid -> text)."""

    def search(self, queries: Mapping[str, str]) -> Run:
        """The unit-level run (what is evaluated) for ``queries`` (qid -> text)."""
        return self.search_runs(queries).run

    @classmethod
    def record(cls, params: Mapping) -> dict:
        """Facts about the parameters written next to them (the RRF convention in use)."""
        return {"rrf_formula": RRF_FORMULA, "qdrant_rrf_k": None}


REGISTRY: dict[str, type[Variant]] = {}


def register(cls: type[Variant], *, replace: bool = False) -> type[Variant]:
    """Add a variant class to the registry (usable as a decorator); a name is registered once."""
    if not cls.name or any(c.isspace() for c in cls.name):
        raise ValueError(f"{cls.__name__}.name must be a non-empty word (it tags TREC lines), got {cls.name!r}")
    if cls.name in REGISTRY and not replace and REGISTRY[cls.name] is not cls:
        raise ValueError(
            f"variant {cls.name!r} is already registered by {REGISTRY[cls.name].__name__}; "
            "choose another name or pass replace=True"
        )
    REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> type[Variant]:
    """The class registered under ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown variant {name!r}; choose from {', '.join(REGISTRY)} "
            "(or register a Variant class with rerankeval.retrieve.variants.register)"
        ) from None


def names() -> tuple[str, ...]:
    """Registered names (the variants stage 03 searches) in registration order."""
    return tuple(REGISTRY)


def describe() -> dict[str, str]:
    """``name -> description`` of every registered variant."""
    return {n: c.description for n, c in REGISTRY.items()}


def create(name: str, source: Source, budget: Budget, **options) -> Variant:
    """An instance of the variant ``name``. ``options`` (e.g. ``cross_encoder``) go to the variants whose
    constructor takes them; the others ignore them, so one call shape serves every variant."""
    cls = get(name)
    takes = set(inspect.signature(cls).parameters) - {"source", "budget"}
    return cls(source, budget, **{k: v for k, v in options.items() if k in takes and v is not None})


def complete(runs: Runs, queries: Mapping[str, str]) -> Runs:
    """Both runs with every query of ``queries``, in its order (a query without results gets {})."""
    return Runs({q: runs.run.get(q, {}) for q in queries}, {q: runs.chunk_run.get(q, {}) for q in queries})


def rank_scores(items: Sequence[str]) -> dict[str, float]:
    """A ranking as a run: score = n - rank + 1 (the order is what matters; scores strictly decrease)."""
    n = len(items)
    return {d: float(n - i) for i, d in enumerate(items)}


@register
class VectorLeg(Variant):
    name = VECTOR

    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        chunk_run = self.source.dense_leg(queries, self.budget.leg_k)
        return Runs(to_units(chunk_run, self.source.unit_of), chunk_run)


@register
class Bm25Leg(Variant):
    name = BM25

    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        chunk_run = self.source.bm25_leg(queries, self.budget.leg_k)
        return Runs(to_units(chunk_run, self.source.unit_of), chunk_run)


@register
class Hybrid(Variant):
    name = HYBRID
    fusion: ClassVar[str] = "rrf"  # the rerankeval.retrieve.fusion.fuse method

    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        p, s = self.budget, self.source
        dense, lex = s.dense_leg(queries, p.leg_k), s.bm25_leg(queries, p.leg_k)
        chunk_run = fuse([dense, lex], self.fusion, k=p.rrf_k, weights=p.weights)
        run = fuse([to_units(dense, s.unit_of), to_units(lex, s.unit_of)], self.fusion, k=p.rrf_k, weights=p.weights)
        return Runs(run, chunk_run)


@register
class QdrantHybrid(Variant):
    name = QDRANT_HYBRID

    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        p = self.budget
        chunk_run = self.source.qdrant_fused(
            queries, leg_k=p.leg_k, limit=2 * p.leg_k, rrf_k=p.rrf_k, weights=p.weights
        )
        return Runs(to_units(chunk_run, self.source.unit_of), chunk_run)

    @classmethod
    def record(cls, params: Mapping) -> dict:
        return {"rrf_formula": RRF_FORMULA, "qdrant_rrf_k": params["rrf_k"] + 1}  # fusion.qdrant_k


class ScoreFusedHybrid(Hybrid):
    """``hybrid`` with a score-based fusion of its two legs (min-max, z-score or DBSF normalised per query
    and leg, then summed; ``weights`` multiply the normalised scores; ``rrf_k`` is unused)."""

    @classmethod
    def record(cls, params: Mapping) -> dict:
        return {"rrf_formula": None, "qdrant_rrf_k": None, "fusion": cls.fusion}


@register
class HybridCombSum(ScoreFusedHybrid):
    name = HYBRID_COMBSUM
    fusion = "combsum_minmax"


@register
class HybridCombMnz(ScoreFusedHybrid):
    name = HYBRID_COMBMNZ
    fusion = "combmnz_minmax"


@register
class HybridDbsf(ScoreFusedHybrid):
    name = HYBRID_DBSF
    fusion = "dbsf"


@register
class QdrantDbsf(QdrantHybrid):
    name = QDRANT_DBSF

    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        p = self.budget
        chunk_run = self.source.qdrant_fused(
            queries, leg_k=p.leg_k, limit=2 * p.leg_k, rrf_k=p.rrf_k, weights=p.weights, fusion="dbsf"
        )
        return Runs(to_units(chunk_run, self.source.unit_of), chunk_run)

    @classmethod
    def record(cls, params: Mapping) -> dict:
        return {"rrf_formula": None, "qdrant_rrf_k": None, "fusion": "dbsf"}


@register
class CrossEncoderRerank(Variant):
    name = CROSS_ENCODER

    def __init__(self, source: Source, budget: Budget, cross_encoder, cache: Path | None = None) -> None:
        super().__init__(source, budget)
        self.cross_encoder = cross_encoder  # a loaded CrossEncoder (anything with predict) or a path/name
        self.cache = cache  # the cache folder whose models/ a name is looked up in (the retriever's dp.roots.cache)

    def search_runs(self, queries: Mapping[str, str]) -> Runs:
        from rerankeval.retrieve import cross_encoder as ce

        model = self.cross_encoder
        if not hasattr(model, "predict"):
            model = ce.load_cross_encoder(model, self.cache)
        s = self.source
        base = complete(Hybrid(s, self.budget).search_runs(queries), queries)
        best = best_chunks(base.chunk_run, s.unit_of)
        heads = {q: [best[q][u] for u in list(base.run[q])[: self.budget.pool_k]] for q in base.run}
        scored = ce.rerank(model, queries, heads, s.texts, progress=s.progress)
        run, chunk_run = {}, {}
        for q in base.run:
            head = list(scored[q])
            in_head = set(head)
            units = [s.unit_of[c] for c in head] + list(base.run[q])[len(head) :]
            chunk_run[q] = rank_scores(head + [c for c in base.chunk_run[q] if c not in in_head])
            run[q] = rank_scores(units)
        return Runs(run, chunk_run)
