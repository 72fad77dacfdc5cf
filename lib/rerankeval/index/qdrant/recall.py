"""What approximate dense search costs: recall@10 of the search stage 03 runs against exact search.

Qdrant searches a segment exhaustively until the segment's vectors pass the optimizer's indexing threshold
(``indexing_threshold_kb``, 10,000 KB by default: about 6,500 vectors of 384 float32 dimensions), then
builds an HNSW graph (Malkov & Yashunin, "Efficient and robust approximate nearest neighbor search using
Hierarchical Navigable Small World graphs", IEEE TPAMI 2020) and searches it approximately. Stage 02 records
which of the two the collection got (:class:`DenseSearch`) and measures, on a sample of the dataset's
queries, the share of the exact top 10 that the approximate search finds (:func:`recall_at_k`): 1.0 below
the threshold (the search is exact), what HNSW loses above it. Beside it, the epsilon recall of ANN-Benchmarks
(Aumüller, Bernhardsson & Faithfull, Information Systems 2020; :func:`recall_within`): the share of the approximate
top 10 whose cosine distance is within 1 % of the exact 10th neighbour's, which tells a neighbour missed for a
near-tie (a near-duplicate chunk found in its place) from a neighbour missed for a worse one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from rerankeval.core.runs import Run
from rerankeval.index.qdrant.store import point_id

K = 10
SAMPLE = 100  # queries sampled for the check (all of them when the dataset has fewer)
SEED = 0
INDEXING_THRESHOLD_KB = 10_000  # Qdrant's default optimizers.indexing_threshold_kb (config/config.yaml)
LOW_RECALL = 0.95  # below it, 02's line names the way to exact search
EPS = 0.01  # epsilon recall: within (1 + EPS) times the exact k-th neighbour's cosine distance
EXACT = "exact"
HNSW = "hnsw"


def sample_queries(queries: Mapping[str, str], n: int = SAMPLE, seed: int = SEED) -> dict[str, str]:
    """``n`` of ``queries`` drawn without replacement (seeded, so every run checks the same ones), in qid order."""
    qids = sorted(queries)
    if len(qids) > n:
        pick = np.random.default_rng(seed).choice(len(qids), size=n, replace=False)
        qids = [qids[i] for i in sorted(pick)]
    return {q: queries[q] for q in qids}


def recall_at_k(approx: Run, exact: Run, k: int = K) -> float | None:
    """Mean over the queries of ``exact`` with results of |approx top k ∩ exact top k| / |exact top k|
    (runs list their chunks best first); None when no query has an exact result."""
    vals = []
    for q, ranking in exact.items():
        want = set(list(ranking)[:k])
        if want:
            vals.append(len(want & set(list(approx.get(q, {}))[:k])) / len(want))
    return float(np.mean(vals)) if vals else None


def recall_within(approx: Run, exact: Run, k: int = K, eps: float = EPS) -> float | None:
    """Mean over the queries of ``exact`` with k results of the share of ``approx``'s top k whose cosine distance
    (1 - score) is at most (1 + eps) times the exact k-th result's (ANN-Benchmarks' epsilon recall); None when no
    query has k exact results. Runs hold cosine similarities, best first."""
    vals = []
    for q, ranking in exact.items():
        top = list(ranking.values())[:k]
        if len(top) < k:
            continue
        bound = (1.0 + eps) * (1.0 - float(top[-1]))
        vals.append(sum(1.0 - float(s) <= bound for s in list(approx.get(q, {}).values())[:k]) / k)
    return float(np.mean(vals)) if vals else None


def threshold_points(dim: int, threshold_kb: int = INDEXING_THRESHOLD_KB) -> int:
    """How many float32 vectors of ``dim`` dimensions fill Qdrant's indexing threshold."""
    return int(threshold_kb * 1024 // (4 * int(dim)))


@dataclass(frozen=True)
class DenseSearch:
    """How stage 03 searches the dense vectors, and what that costs against exact search.

    ``mode``: :data:`EXACT` (every point scored) or :data:`HNSW`; ``hnsw_points``: dense vectors in an HNSW
    graph (None when the backend does not say); ``recall_at_10``: the approximate search's recall@10 against
    exact search over ``queries`` sampled queries (None when not measured, ``reason`` says why);
    ``recall_at_10_eps``: :func:`recall_within` on the same queries."""

    backend: str
    mode: str
    points: int
    hnsw_points: int | None
    threshold_points: int | None
    recall_at_10: float | None
    queries: int
    seconds: float = 0.0
    reason: str = ""
    recall_at_10_eps: float | None = None

    def record(self) -> dict:
        return asdict(self)

    def describe(self, exact_in_03: bool = False) -> str:
        """One line for notebook 02: the mode, why, and the measured recall (``exact_in_03``: stage 03 is told to
        search exactly anyway, ``RERANKEVAL_DENSE_EXACT``)."""
        if self.mode == HNSW:
            how = (
                f"approximate (HNSW graph over {self.hnsw_points:,} of {self.points:,} vectors: the collection "
                f"is above Qdrant's indexing threshold of about {self.threshold_points:,} vectors)"
            )
        else:
            below = (
                f"{self.points:,} vectors, below Qdrant's indexing threshold of about {self.threshold_points:,} vectors"
                if self.threshold_points
                else self.reason or "exhaustive"
            )
            how = f"exact ({below})"
        if self.recall_at_10 is None:
            measured = f"recall@10 not measured: {self.reason}" if self.reason else "recall@10 not measured"
        else:
            measured = f"recall@10 against exact search on {self.queries} sampled queries: {self.recall_at_10:.3f}"
            if self.recall_at_10_eps is not None and self.recall_at_10 < 1.0:
                measured += (
                    f" ({self.recall_at_10_eps:.3f} of its top 10 within {EPS:.0%} of the exact 10th "
                    "neighbour's distance: the difference between the two is hits missed for near-ties, "
                    "the rest of the shortfall from 1 is closer neighbours missed)"
                )
        if exact_in_03 and self.mode == HNSW:
            measured += "; stage 03 scores every vector instead (RERANKEVAL_DENSE_EXACT), so its search is exact"
        elif self.mode == HNSW and self.recall_at_10 is not None and self.recall_at_10 < LOW_RECALL:
            measured += "; set RERANKEVAL_DENSE_EXACT=true for exact search in stage 03 (slower per query)"
        return f"Dense search ({self.backend} backend): {how}; {measured}."


Search = Callable[..., Run]  # search(qids, vectors, limit, id_to_chunk, *, exact) -> Run


def measure(
    search: Search, qids: Sequence[str], vectors: np.ndarray, id_to_chunk: Mapping[str, str], k: int = K
) -> tuple[float | None, float | None]:
    """(:func:`recall_at_k`, :func:`recall_within`) of ``search`` as stage 03 calls it (``exact=False``) against
    ``exact=True``."""
    if not len(qids):
        return None, None
    approx = search(list(qids), vectors, k, id_to_chunk, exact=False)
    exact = search(list(qids), vectors, k, id_to_chunk, exact=True)
    return recall_at_k(approx, exact, k), recall_within(approx, exact, k)


def check(
    search: Search,
    queries: Mapping[str, str],
    embedder,
    chunk_ids: Sequence[str],
    *,
    backend: str,
    dim: int,
    hnsw: int | None,
) -> DenseSearch:
    """:func:`measure` on :func:`sample_queries` of ``queries`` (encoded by ``embedder``, through its cache), as a
    :class:`DenseSearch` of a collection of ``chunk_ids`` with ``hnsw`` dense vectors in an HNSW graph."""
    t = time.perf_counter()
    sample = sample_queries(queries)
    qvecs = (
        embedder.encode(list(sample.values()), desc="embedding sampled queries")
        if sample
        else np.zeros((0, dim), dtype=np.float32)
    )
    r, r_eps = measure(search, list(sample), qvecs, {point_id(c): c for c in chunk_ids})
    return DenseSearch(
        backend,
        HNSW if hnsw else EXACT,
        len(chunk_ids),
        hnsw,
        threshold_points(dim),
        r,
        len(sample),
        time.perf_counter() - t,
        "" if sample else "the dataset has no queries",
        r_eps,
    )
