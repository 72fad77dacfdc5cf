"""The RRF constant in the paper's convention, and Qdrant's equivalent (owned here: both backends send it).

Reciprocal Rank Fusion (Cormack, Clarke and Buettcher, SIGIR 2009) scores ``1 / (k + rank)`` with 1-based ranks and
``k = 60``. Qdrant (server and qdrant-client's local mode) scores ``1 / (rank + k - 1)``, so the paper's ``k`` is
Qdrant's ``k + 1`` (:func:`qdrant_k`); see :mod:`rerankeval.retrieve.fusion` for the client-side fusions.
"""

from __future__ import annotations

RRF_K = 60  # the paper's constant (and ranx's default)


def qdrant_k(paper_k: int = RRF_K) -> int:
    """Qdrant's RRF constant giving the paper's ``1/(paper_k + rank)``: ``paper_k + 1``."""
    return int(paper_k) + 1
