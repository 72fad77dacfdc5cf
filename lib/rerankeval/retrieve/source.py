"""What a variant or a query-rewriting step searches through: the legs of the built indexes.

:class:`rerankeval.retrieve.retriever.Retriever` is one; a test passes a stand-in with the same members. The variants
(:mod:`rerankeval.retrieve.variants`) and the rewrite step (:mod:`rerankeval.retrieve.reformulate`) depend on this
protocol only, never on the stage that builds them (no import cycle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from rerankeval.core.runs import Run


class Legs(Protocol):
    """The chunk-level legs and the chunk -> unit map (enough for the hybrids and the rewrite step)."""

    unit_of: Mapping[str, str]

    def dense_leg(self, queries: Mapping[str, str], k: int) -> Run:
        """Dense top-``k`` chunks per query."""
        ...

    def bm25_leg(self, queries: Mapping[str, str], k: int) -> Run:
        """BM25 top-``k`` chunks per query."""
        ...


class Source(Legs, Protocol):
    """Every leg a variant may search, the chunk texts and whether to show progress."""

    texts: Mapping[str, str]
    progress: bool

    def qdrant_fused(
        self,
        queries: Mapping[str, str],
        *,
        leg_k: int,
        limit: int,
        rrf_k: int,
        weights: Sequence[float] | None = None,
        fusion: str = "rrf",
    ) -> Run:
        """Qdrant's own fusion of its dense and sparse legs, top ``limit`` chunks."""
        ...
