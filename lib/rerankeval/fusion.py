"""Client-side rank fusion: Reciprocal Rank Fusion (conventions: ``docs/CONVENTIONS.md#rrf``).

RRF (Cormack, Clarke and Buettcher, "Reciprocal rank fusion outperforms Condorcet and individual rank
learning methods", SIGIR 2009, pp. 758-759)::

    score(d) = sum over legs i that retrieved d of  w_i / (k + rank_i(d))

with 1-based ranks, ``k = 60`` (the paper's value) and weights ``w_i = 1`` unless given. A leg's ranking
is its dict order after a stable sort by score (:func:`rerankeval.runs.ranked`).

Tie policy (deterministic): fused score descending, then the best (smallest) single-leg rank, then the
document id ascending.

Conventions elsewhere, for cross-checks:

- ``ranx.fuse(runs, method="rrf", norm=None, params={"k": 60})`` is the same formula (it ranks each run by
  its dict order); its ties are unordered.
- Qdrant (server and qdrant-client's local mode, ``qdrant_client/hybrid/fusion.py``) scores
  ``1 / (rank + k - 1)`` with 1-based rank, so the paper's ``k = 60`` is Qdrant's ``k = 61``
  (:func:`qdrant_k`); Qdrant's default k is 2. Qdrant's *weighted* RRF divides the rank by the weight,
  ``1 / (rank / w + k - 1)``, which is not ``w / (k + rank)``: weighted runs of the two differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from .runs import Run, ranked

RRF_K = 60


def qdrant_k(paper_k: int = RRF_K) -> int:
    """Qdrant's RRF constant giving the paper's ``1/(paper_k + rank)``: ``paper_k + 1``."""
    return int(paper_k) + 1


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
    if weights is not None and len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    ws = [1.0] * len(runs) if weights is None else [float(w) for w in weights]
    qids: list[str] = []
    seen: set[str] = set()
    for r in runs:
        for q in r:
            if q not in seen:
                seen.add(q)
                qids.append(q)
    out: Run = {}
    for q in qids:
        score: dict[str, float] = {}
        best: dict[str, int] = {}
        for r, w in zip(runs, ws, strict=True):
            for rank, (doc, _) in enumerate(ranked(r.get(q, {})), start=1):
                score[doc] = score.get(doc, 0.0) + w / (k + rank)
                if rank < best.get(doc, 1 << 62):
                    best[doc] = rank
        order = sorted(score, key=lambda d: (-score[d], best[d], d))
        if depth is not None:
            order = order[:depth]
        out[q] = {d: score[d] for d in order}
    return out
