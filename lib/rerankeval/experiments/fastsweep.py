"""The vectorised sweep (issue 24): many fusion points fused and evaluated at once, as array operations.

For one set of legs (a chunking, BM25 ``k1``/``b`` and ``leg_k``), a :class:`Block` holds, per evaluated query (a
row), the union of both legs' units as columns, ordered by the fusion's tie-break (best single-leg rank, then
unit id): each leg's 1-based rank and normalised scores there (computed by :mod:`rerankeval.retrieve.fusion`'s own
normalisations), and the unit's qrels grade. Every fusion method of :data:`~rerankeval.retrieve.fusion.FUSION_METHODS`
is then a few array operations on the block, for all queries at once, in the same floating-point order as
:func:`rerankeval.retrieve.fusion.fuse`; a stable sort of the negated scores gives fuse()'s order, ties included
(columns are already in tie-break order). The top ``depth`` gains go to :mod:`.fastmetrics`.

Scores, order and metrics equal the per-point path's (:func:`rerankeval.experiments.grid.score_points` with
``vectorised=False``): ``tests/test_sweep_vectorised.py`` compares them on every method and on random runs.
Only the fusion and evaluation are vectorised: a BM25 or chunking point's legs are still searched by the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rerankeval.core.runs import Qrels, Run, ranked
from rerankeval.retrieve.fusion import SCORE_METHODS

LEGS = 2  # dense, bm25 (the engine's order, as stage 03 fuses them)
MAX_CELLS = 4_000_000  # points x queries x columns fused in one go (memory: ~8 bytes each, a few arrays)


@dataclass
class Block:
    """Both legs of one leg setting over the evaluated queries, as ``[leg, query, column]`` arrays."""

    qids: list[str]
    docs: list[list[str]]  # per query, the unit of each column
    n: np.ndarray  # [query] columns in use (the rest is padding)
    rank: np.ndarray  # [leg, query, column] 1-based rank in the leg; inf where the leg did not retrieve the unit
    norm: dict[str, np.ndarray]  # normalisation name -> [leg, query, column] normalised score (0 where absent)
    gain: np.ndarray  # [query, column] qrels grade of the unit (0 unjudged or padding)

    @property
    def valid(self) -> np.ndarray:
        return np.arange(self.gain.shape[1])[None, :] < self.n[:, None]

    @property
    def hits(self) -> np.ndarray:
        return np.isfinite(self.rank).sum(axis=0)


def build_block(legs: Sequence[Run], qids: Sequence[str], qrels: Qrels, norms: Sequence[str] | None = None) -> Block:
    """The block of ``legs`` (unit-level runs, dense then bm25) over ``qids``, with the normalisations ``norms``
    (names of :data:`~rerankeval.retrieve.fusion.SCORE_METHODS`' functions; all of them if None)."""
    fns = {fn.__name__: fn for fn, _ in SCORE_METHODS.values()}
    names = list(fns) if norms is None else list(dict.fromkeys(norms))
    items = [[ranked(r.get(q, {})) for r in legs] for q in qids]
    width = max([len({d for leg in its for d, _ in leg}) for its in items] or [0]) or 1
    shape = (len(legs), len(qids), width)
    rank = np.full(shape, np.inf)
    norm = {k: np.zeros(shape) for k in names}
    gain = np.zeros((len(qids), width), dtype=np.int64)
    docs, n = [], np.zeros(len(qids), dtype=np.int64)
    for qi, (q, its) in enumerate(zip(qids, items, strict=True)):
        best: dict[str, int] = {}
        for leg in its:
            for r, (d, _) in enumerate(leg, start=1):
                if r < best.get(d, 1 << 62):
                    best[d] = r
        cols = sorted(best, key=lambda d: (best[d], d))
        pos = {d: i for i, d in enumerate(cols)}
        for li, leg in enumerate(its):
            if not leg:
                continue
            at = np.fromiter((pos[d] for d, _ in leg), dtype=np.int64, count=len(leg))
            rank[li, qi, at] = np.arange(1, len(leg) + 1)
            for k in names:
                norm[k][li, qi, at] = fns[k]([s for _, s in leg])
        judged = qrels.get(q, {})
        gain[qi, : len(cols)] = [judged.get(d, 0) for d in cols]
        docs.append(cols)
        n[qi] = len(cols)
    return Block(list(qids), docs, n, rank, norm, gain)


def fused_scores(block: Block, points: Sequence) -> np.ndarray:
    """``[point, query, column]`` fused scores of ``points`` (objects with ``method``, ``rrf_k``, ``weights``), as
    :func:`rerankeval.retrieve.fusion.fuse` computes them (same operations, same order); padding is -inf."""
    out = np.empty((len(points), *block.gain.shape))
    hits = None
    for i, p in enumerate(points):
        ws = [1.0] * LEGS if p.weights is None else [float(w) for w in p.weights]
        if p.method == "rrf":
            parts = [w / (p.rrf_k + block.rank[li]) for li, w in enumerate(ws)]
        else:
            fn, mnz = SCORE_METHODS[p.method]
            parts = [w * block.norm[fn.__name__][li] for li, w in enumerate(ws)]
        s = parts[0]
        for extra in parts[1:]:
            s = s + extra
        if p.method != "rrf" and SCORE_METHODS[p.method][1]:
            hits = block.hits if hits is None else hits
            s = s * hits
        out[i] = s
    out[:, ~block.valid] = -np.inf
    return out


def top(scores: np.ndarray, depth: int | None) -> np.ndarray:
    """``[point, query, rank]`` column of each rank: fuse()'s order (score descending; ties keep the columns'
    tie-break order, as the sort is stable), cut at ``depth``."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    return order if depth is None else order[..., :depth]


def gather(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``values[query, column]`` (or ``[point, query, column]``) at ``order[point, query, rank]``."""
    full = np.broadcast_to(values, order.shape[:-1] + values.shape[-1:]) if values.ndim == 2 else values
    return np.take_along_axis(full, order, axis=-1)


def ranked_gains(block: Block, order: np.ndarray) -> np.ndarray:
    """The qrels grade at each rank of each point's list (0 past the end of a query's list)."""
    g = gather(block.gain, order)
    inside = np.arange(order.shape[-1]) < block.n[:, None]
    return np.where(inside, g, 0)


def to_run(block: Block, scores: np.ndarray, order: np.ndarray) -> Run:
    """One point's fused run (``scores``/``order`` of that point: ``[query, column]``/``[query, rank]``)."""
    out: Run = {}
    for qi, q in enumerate(block.qids):
        cols = [int(c) for c in order[qi] if c < block.n[qi]]
        out[q] = {block.docs[qi][c]: float(scores[qi, c]) for c in cols}
    return out


def chunks(n_points: int, block: Block) -> list[slice]:
    """Slices of the points fused together so that one chunk holds at most :data:`MAX_CELLS` cells."""
    per = max(1, MAX_CELLS // max(1, block.gain.size))
    return [slice(i, min(n_points, i + per)) for i in range(0, n_points, per)]
