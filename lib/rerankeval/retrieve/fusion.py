"""Client-side fusion of ranked lists (conventions: ``docs/CONVENTIONS.md#fusion``).

:func:`fuse` is the one entry point; ``method`` is one of :data:`FUSION_METHODS`:

- ``rrf``: Reciprocal Rank Fusion (Cormack, Clarke and Buettcher, "Reciprocal rank fusion outperforms
  Condorcet and individual rank learning methods", SIGIR 2009, pp. 758-759)::

      score(d) = sum over legs i that retrieved d of  w_i / (k + rank_i(d))

  with 1-based ranks, ``k = 60`` (the paper's value) and weights ``w_i = 1`` unless given (:func:`rrf`).
- ``combsum_minmax`` / ``combsum_zscore``: CombSUM (Fox and Shaw, "Combination of multiple searches",
  TREC-2, 1994) of per-query, per-leg normalised scores, ``score(d) = sum_i w_i * norm_i(d)``;
- ``combmnz_minmax`` / ``combmnz_zscore``: CombMNZ (Fox and Shaw 1994), CombSUM times the number of legs
  that retrieved ``d``;
- ``dbsf``: Qdrant's distribution-based score fusion (Qdrant docs, "Hybrid Queries", Fusion.DBSF, since
  v1.11): CombSUM of scores normalised by ``(s - (mean - 3 sd)) / (6 sd)`` with the *sample* standard
  deviation, as Qdrant's server (``score_fusion.rs``) and qdrant-client's local mode
  (``qdrant_client/hybrid/fusion.py``) do; like them we do not clip to [0, 1].

Normalisation is per query and per leg, over the documents that leg retrieved; a document a leg did
not retrieve contributes 0 from it. Degenerate legs (one document, or all scores equal): min-max and
DBSF give every document 0.5 (Qdrant's convention), z-score gives 0 (the mean). z-score uses the
population standard deviation (ranx's ``zmuv``). A leg's ranking is its dict order after a stable sort
by score (:func:`rerankeval.core.runs.ranked`).

Tie policy (every method, deterministic): fused score descending, then the best (smallest) single-leg
rank, then the document id ascending.

Conventions elsewhere, for cross-checks (``tests/retrieve/test_fusion.py``):

- ``ranx.fuse(runs, method="rrf", norm=None, params={"k": 60})`` is the same RRF (it ranks each run by
  its dict order); ``method="sum"``/``"mnz"`` with ``norm="min-max"``/``"zmuv"`` are our CombSUM/CombMNZ
  except on degenerate legs (ranx maps them to 0) and ranx leaves ties unordered. ranx 0.3 has no DBSF.
- Qdrant (server and qdrant-client's local mode) scores RRF as ``1 / (rank + k - 1)`` with 1-based rank,
  so the paper's ``k = 60`` is Qdrant's ``k = 61`` (:func:`rerankeval.index.qdrant.rrf.qdrant_k`); Qdrant's
  default k is 2. Qdrant's *weighted* RRF divides the rank by the weight, ``1 / (rank / w + k - 1)``, which is not
  ``w / (k + rank)``: weighted runs of the two differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rerankeval.core.runs import Run, ranked
from rerankeval.index.qdrant.rrf import RRF_K  # the paper's k, owned by the index layer (its one home)

FUSION_METHODS: tuple[str, ...] = (
    "rrf",
    "combsum_minmax",
    "combsum_zscore",
    "combmnz_minmax",
    "combmnz_zscore",
    "dbsf",
)
DEGENERATE_MINMAX = 0.5  # min-max and DBSF value of every document of a one-document or all-equal leg

# a leg's contribution: (its ranked (doc, score) items, its weight) -> one value per item
Contribution = Callable[[list[tuple[str, float]], float], list[float]]


def minmax_norm(scores: Sequence[float]) -> list[float]:
    """``(s - min) / (max - min)``; 0.5 for each score when max == min (one score, or all equal)."""
    lo, hi = min(scores), max(scores)
    if hi == lo:
        return [DEGENERATE_MINMAX] * len(scores)
    return [(s - lo) / (hi - lo) for s in scores]


def zscore_norm(scores: Sequence[float]) -> list[float]:
    """``(s - mean) / sd`` with the population sd (ranx's ``zmuv``); 0 for each score when sd == 0."""
    a = np.asarray(scores, dtype=np.float64)
    sd = float(a.std())
    if len(a) < 2 or sd == 0.0:
        return [0.0] * len(a)
    return [float(x) for x in (a - a.mean()) / sd]


def dbsf_norm(scores: Sequence[float]) -> list[float]:
    """Qdrant's DBSF normalisation ``(s - (mean - 3 sd)) / (6 sd)``, sample sd, not clipped; 0.5 for each
    score of a one-score or zero-variance list (as Qdrant)."""
    a = np.asarray(scores, dtype=np.float64)
    if len(a) < 2:
        return [DEGENERATE_MINMAX] * len(a)
    sd = float(a.std(ddof=1))
    if sd == 0.0:
        return [DEGENERATE_MINMAX] * len(a)
    lo = float(a.mean()) - 3.0 * sd
    return [float(x) for x in (a - lo) / (6.0 * sd)]


# score-based methods: (per-leg normalisation, multiply by the number of legs that retrieved the doc)
SCORE_METHODS: dict[str, tuple[Callable[[Sequence[float]], list[float]], bool]] = {
    "combsum_minmax": (minmax_norm, False),
    "combsum_zscore": (zscore_norm, False),
    "combmnz_minmax": (minmax_norm, True),
    "combmnz_zscore": (zscore_norm, True),
    "dbsf": (dbsf_norm, False),
}


def _qids(runs: Sequence[Run]) -> list[str]:
    """Every query of any run, in first-seen order."""
    return list(dict.fromkeys(q for r in runs for q in r))


def _combine(runs: Sequence[Run], ws: list[float], contribution: Contribution, *, mnz: bool, depth: int | None) -> Run:
    """Sum each leg's ``contribution`` per document (times the number of legs that retrieved it if
    ``mnz``); order by fused score, best single-leg rank, id; keep ``depth`` per query."""
    out: Run = {}
    for q in _qids(runs):
        score: dict[str, float] = {}
        best: dict[str, int] = {}
        hits: dict[str, int] = {}
        for r, w in zip(runs, ws, strict=True):
            items = ranked(r.get(q, {}))
            values = contribution(items, w) if items else []
            for rank, ((doc, _), v) in enumerate(zip(items, values, strict=True), start=1):
                score[doc] = score.get(doc, 0.0) + v
                hits[doc] = hits.get(doc, 0) + 1
                if rank < best.get(doc, 1 << 62):
                    best[doc] = rank
        if mnz:
            score = {d: s * hits[d] for d, s in score.items()}
        order = sorted(score, key=lambda d: (-score[d], best[d], d))
        if depth is not None:
            order = order[:depth]
        out[q] = {d: score[d] for d in order}
    return out


def _weights(runs: Sequence[Run], weights: Sequence[float] | None) -> list[float]:
    if weights is not None and len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs: give one weight per run (leg)")
    return [1.0] * len(runs) if weights is None else [float(w) for w in weights]


def rrf(
    runs: Sequence[Run],
    *,
    k: float = RRF_K,
    weights: Sequence[float] | None = None,
    depth: int | None = None,
) -> Run:
    """Fuse runs with Reciprocal Rank Fusion; keep the best ``depth`` documents per query (all if None).

    Every query of any run appears in the output (a query some legs lack is fused from the others).
    """
    ws = _weights(runs, weights)
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")

    def reciprocal(items: list[tuple[str, float]], w: float) -> list[float]:
        return [w / (k + rank) for rank in range(1, len(items) + 1)]

    return _combine(runs, ws, reciprocal, mnz=False, depth=depth)


def _normalised(norm: Callable[[Sequence[float]], list[float]]) -> Contribution:
    def contribution(items: list[tuple[str, float]], w: float) -> list[float]:
        return [w * v for v in norm([s for _, s in items])]

    return contribution


def fuse(
    runs: Sequence[Run],
    method: str = "rrf",
    *,
    k: float = RRF_K,
    weights: Sequence[float] | None = None,
    depth: int | None = None,
) -> Run:
    """Fuse ``runs`` with ``method`` (one of :data:`FUSION_METHODS`, see the module docstring).

    ``k``: the RRF constant (used by ``rrf`` only); ``weights``: one per run, multiplying its RRF term or
    its normalised score; ``depth``: keep the best ``depth`` documents per query (all if None). Every query
    of any run appears in the output. ``fuse(runs, "rrf", ...)`` is :func:`rrf`.
    """
    if method not in FUSION_METHODS:
        raise ValueError(f"unknown fusion method {method!r}; choose from {', '.join(FUSION_METHODS)}")
    if method == "rrf":
        return rrf(runs, k=k, weights=weights, depth=depth)
    norm, mnz = SCORE_METHODS[method]
    return _combine(runs, _weights(runs, weights), _normalised(norm), mnz=mnz, depth=depth)
