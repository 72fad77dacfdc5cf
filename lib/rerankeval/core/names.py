"""The variant names: the one catalogue (a leaf module; every other module, :mod:`rerankeval.core.runs` included,
uses these constants, never string literals).

:data:`CATALOGUE` gives each name the stage that produces it and a one-line description, in pipeline order.
:mod:`rerankeval.retrieve.variants` holds the classes of the names stage 03 *searches*; ``hybrid_reformulate``
is stage 03's too, made by a query-rewriting step in front of ``hybrid`` (:mod:`rerankeval.retrieve.stage`);
the others are written by later stages.
"""

from __future__ import annotations

from typing import NamedTuple

VECTOR = "vector"
BM25 = "bm25"
HYBRID = "hybrid"
QDRANT_HYBRID = "qdrant_hybrid"
HYBRID_COMBSUM = "hybrid_combsum"  # the hybrid's legs fused by min-max CombSUM
HYBRID_COMBMNZ = "hybrid_combmnz"  # ... by min-max CombMNZ
HYBRID_DBSF = "hybrid_dbsf"  # ... by distribution-based score fusion, client-side
QDRANT_DBSF = "qdrant_dbsf"  # qdrant_hybrid's legs fused by Qdrant's own DBSF
FUSION_VARIANTS = (HYBRID_COMBSUM, HYBRID_COMBMNZ, HYBRID_DBSF, QDRANT_DBSF)  # fusion alternatives (not run by default)
CROSS_ENCODER = "cross_encoder"
HYBRID_RERANK = "hybrid_rerank"
HYBRID_REFORMULATE = "hybrid_reformulate"  # hybrid with an LLM rewrite of weak queries, kept only if better
HYBRID_RERANK_EXPAND = "hybrid_rerank_expand"  # hybrid_rerank with neighbouring chunks attached to each candidate
HYBRID_TUNED = "hybrid_tuned"  # the fusion setting a sweep chose on other queries (06-sweep, make sweep)
LEGS = (VECTOR, BM25)  # the single legs every hybrid fuses
REPORT_ORDER = (
    BM25,
    VECTOR,
    HYBRID,
    QDRANT_HYBRID,
    *FUSION_VARIANTS,
    HYBRID_REFORMULATE,
    CROSS_ENCODER,
    HYBRID_RERANK,
    HYBRID_RERANK_EXPAND,
    HYBRID_TUNED,
)  # tables and plots

RETRIEVE = "retrieve"  # stage 03 (notebook 03-retrieve)
RERANK = "rerank"  # stage 04 (notebook 04-rerank)
SWEEP = "sweep"  # stage 06 (notebook 06-sweep, make sweep)


class Entry(NamedTuple):
    """What the catalogue knows of a name: the stage that writes its run, and one line saying what it is."""

    stage: str
    description: str


CATALOGUE: dict[str, Entry] = {
    VECTOR: Entry(RETRIEVE, "dense cosine top-leg_k chunks from Qdrant (all-MiniLM-L6-v2)"),
    BM25: Entry(RETRIEVE, "BM25 (rank-bm25 statistics, sparse fast path) top-leg_k chunks"),
    HYBRID: Entry(RETRIEVE, "client-side RRF of the vector and bm25 legs, each leg mapped to units before fusing"),
    QDRANT_HYBRID: Entry(
        RETRIEVE, "Qdrant's Query API: dense + native sparse BM25 prefetch fused by RrfQuery (k = rrf_k + 1)"
    ),
    HYBRID_COMBSUM: Entry(
        RETRIEVE, "CombSUM of the vector and bm25 legs' min-max normalised scores (units, as hybrid)"
    ),
    HYBRID_COMBMNZ: Entry(
        RETRIEVE, "CombMNZ (CombSUM x legs that found it) of the legs' min-max normalised scores (as hybrid)"
    ),
    HYBRID_DBSF: Entry(
        RETRIEVE, "client-side distribution-based score fusion (Qdrant's DBSF) of the vector and bm25 legs"
    ),
    QDRANT_DBSF: Entry(
        RETRIEVE, "Qdrant's Query API: dense + native sparse BM25 prefetch fused by FusionQuery(Fusion.DBSF)"
    ),
    CROSS_ENCODER: Entry(
        RETRIEVE, "the top pool_k hybrid units reordered by a local sentence-transformers CrossEncoder"
    ),
    HYBRID_RERANK: Entry(
        RERANK, "the top pool_k hybrid units reordered by the LLM reranker (stage 04, rerankeval.rerank)"
    ),
    HYBRID_TUNED: Entry(
        SWEEP,
        "hybrid fused with the setting a sweep chose on other queries (train split or other "
        "folds); its run covers only the queries that did not choose it (stage 06, "
        "rerankeval.experiments.sweep)",
    ),
    HYBRID_RERANK_EXPAND: Entry(
        RERANK,
        "hybrid_rerank with each candidate chunk expanded by its neighbours on the "
        "same page (stage 04, expand_n / expand_chars; rerankeval.rerank.expand)",
    ),
    HYBRID_REFORMULATE: Entry(
        RETRIEVE,
        "hybrid; a query whose top fused score is below a threshold is rewritten by "
        "the LLM and fused with its rewrite, unless the rewrite's legs agree less "
        "(judgment-free revert guard)",
    ),
}


def names(stage: str | None = None) -> tuple[str, ...]:
    """Every catalogued name in pipeline order, optionally only those ``stage`` produces."""
    return tuple(n for n, e in CATALOGUE.items() if stage is None or e.stage == stage)


def describe() -> dict[str, str]:
    """``name -> description`` of every catalogued name."""
    return {n: e.description for n, e in CATALOGUE.items()}


def stage_of(name: str) -> str | None:
    """The stage that produces ``name``'s run; None for a name the catalogue does not know (another system's run)."""
    entry = CATALOGUE.get(name)
    return entry.stage if entry else None
