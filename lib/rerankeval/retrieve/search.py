"""Stage 03's search of one variant over the built indexes, without the run cache (:func:`search`, the
cross-encoder's and the rewrite step's special cases included).

The stage (:func:`rerankeval.retrieve.stage.fetch`) calls it when a variant cannot be read back; it writes nothing
and never calls back into the stage, its key or its store (the walk of a parameter: stage -> runkey -> runstore ->
search -> retriever)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from rerankeval.core.names import CROSS_ENCODER, HYBRID_REFORMULATE
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.retrieve import cross_encoder, reformulate
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


def search(searcher: Searcher, v: str, queries: Mapping[str, str], p: Params, *, cache: LLMCache) -> Searched:
    """Search ``v`` for ``queries`` with the budget of ``p`` (the cross-encoder's and the rewrite step's cases)."""
    budget = dataclasses.asdict(p.budget())
    r = searcher.get()
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
    if v == CROSS_ENCODER:
        spec = cross_encoder.model_name(p.cross_encoder_model, searcher.settings)
        model = cross_encoder.load_local(spec, searcher.dp.roots.cache)
        if model is None:
            return Searched(None, skipped=f"Skipping {v}: {cross_encoder.NOT_ON_DISK}")
        return Searched(r.search(v, queries, cross_encoder=model, **budget))
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
    cache: LLMCache,
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
