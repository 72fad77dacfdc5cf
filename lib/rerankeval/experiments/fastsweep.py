"""The vectorised sweep (issue 24): many fusion points fused and evaluated at once, as array operations.

For one set of legs (a chunking, BM25 ``k1``/``b`` and ``leg_k``), a :class:`Block` holds, per evaluated query (a
row), the union of both legs' units as columns, ordered by the fusion's tie-break (best single-leg rank, then
unit id): each leg's 1-based rank and normalised scores there (computed by :mod:`rerankeval.retrieve.fusion`'s own
normalisations), and the unit's qrels grade. Every fusion method of :data:`~rerankeval.retrieve.fusion.FUSION_METHODS`
is then a few array operations on the block, for all queries at once, in the same floating-point order as
:func:`rerankeval.retrieve.fusion.fuse`; a stable sort of the negated scores gives fuse()'s order, ties included
(columns are already in tie-break order). The top ``depth`` gains go to :mod:`.fastmetrics`.

Scores, order and metrics equal the per-point path's (:func:`rerankeval.experiments.grid.score_points` with
``vectorised=False``): ``tests/experiments/test_fastsweep.py`` compares them on every method and on random runs.
Only the fusion and evaluation are vectorised: a BM25 or chunking point's legs are still searched by the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from rerankeval.core.runs import Qrels, Run, ranked
from rerankeval.retrieve.fusion import DEGENERATE_MINMAX, SCORE_METHODS

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
    ranked: list[list[tuple[np.ndarray, np.ndarray]]] | None = None  # [leg][query]: (columns, scores) by rank
    _idrank: np.ndarray | None = None  # [query, column] rank of the unit's id in its query (computed once, by cut)

    @property
    def idrank(self) -> np.ndarray:
        if self._idrank is None:
            self._idrank = np.zeros(self.gain.shape, dtype=np.int64)
            for qi, ids in enumerate(self.docs):
                self._idrank[qi, np.argsort(np.array(ids, dtype=object), kind="stable")] = np.arange(len(ids))
        return self._idrank

    @property
    def valid(self) -> np.ndarray:
        return np.arange(self.gain.shape[1])[None, :] < self.n[:, None]

    @property
    def hits(self) -> np.ndarray:
        return np.isfinite(self.rank).sum(axis=0)


def columns(legs: Sequence[Sequence[str]]) -> list[str]:
    """The union of the legs' ranked ids in the fusion's tie-break order (best single-leg rank, then id), without a
    sort: a unit is first met at its best rank, and at most one new unit per leg comes in at each rank."""
    seen: set[str] = set()
    out: list[str] = []
    for r in range(max((len(ids) for ids in legs), default=0)):
        new = [ids[r] for ids in legs if r < len(ids) and ids[r] not in seen]
        if len(new) == 2:
            a, b = new
            new = [a] if a == b else [a, b] if a < b else [b, a]
        elif len(new) > 2:
            new = sorted(set(new))
        seen.update(new)
        out += new
    return out


def _ranked(scores: dict[str, float]) -> list[tuple[str, float]]:
    """:func:`rerankeval.core.runs.ranked` (a stable sort by score): a list already in non-increasing order, as the
    engine's unit-level legs are, is returned as it is (the stable sort's result)."""
    items = list(scores.items())
    s = np.fromiter((v for _, v in items), dtype=np.float64, count=len(items))
    return items if len(s) < 2 or bool((s[1:] <= s[:-1]).all()) else ranked(scores)


def norm_rows(name: str, rows: Sequence[np.ndarray]) -> list[np.ndarray]:
    """:mod:`rerankeval.retrieve.fusion`'s normalisation ``name`` (``minmax_norm``, ``zscore_norm``, ``dbsf_norm``)
    of many score lists at once: lists of one length are stacked and reduced along rows (numpy's row reduction is
    the same pairwise sum as its 1-D one, so the values are bit-identical; a test checks it)."""
    out: list[np.ndarray] = [np.empty(0)] * len(rows)
    by_len: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_len.setdefault(len(r), []).append(i)
    for n, idx in by_len.items():
        if n:
            for i, v in zip(idx, _norm_stack(name, np.stack([rows[i] for i in idx])), strict=True):
                out[i] = v
    return out


def _norm_stack(name: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "minmax_norm":
            lo, hi = a.min(axis=1, keepdims=True), a.max(axis=1, keepdims=True)
            return np.where(hi == lo, DEGENERATE_MINMAX, (a - lo) / (hi - lo))
        if a.shape[1] < 2:
            return np.full(a.shape, 0.0 if name == "zscore_norm" else DEGENERATE_MINMAX)
        if name == "zscore_norm":
            sd = a.std(axis=1, keepdims=True)
            return np.where(sd == 0.0, 0.0, (a - a.mean(axis=1, keepdims=True)) / sd)
        if name == "dbsf_norm":
            sd = a.std(axis=1, ddof=1, keepdims=True)
            lo = a.mean(axis=1, keepdims=True) - 3.0 * sd
            return np.where(sd == 0.0, DEGENERATE_MINMAX, (a - lo) / (6.0 * sd))
    raise ValueError(
        f"unknown normalisation {name!r}; fusion.SCORE_METHODS has "
        f"{', '.join(sorted({fn.__name__ for fn, _ in SCORE_METHODS.values()}))}"
    )


def build_block(legs: Sequence[Run], qids: Sequence[str], qrels: Qrels, norms: Sequence[str] | None = None) -> Block:
    """The block of ``legs`` (unit-level runs, dense then bm25) over ``qids``, with the normalisations ``norms``
    (names of :data:`~rerankeval.retrieve.fusion.SCORE_METHODS`' functions; all of them if None)."""
    names = sorted({fn.__name__ for fn, _ in SCORE_METHODS.values()}) if norms is None else list(dict.fromkeys(norms))
    items = [[_ranked(r.get(q, {})) for r in legs] for q in qids]
    docs = [columns([[d for d, _ in leg] for leg in its]) for its in items]
    width = max([len(c) for c in docs] or [0]) or 1
    shape = (len(legs), len(qids), width)
    rank, gain = np.full(shape, np.inf), np.zeros((len(qids), width), dtype=np.int64)
    where: list[tuple[int, int, np.ndarray]] = []  # (leg, query, columns) of each non-empty leg list
    scores: list[np.ndarray] = []
    for qi, (q, its, cols) in enumerate(zip(qids, items, docs, strict=True)):
        pos = {d: i for i, d in enumerate(cols)}
        for li, leg in enumerate(its):
            if leg:
                at = np.fromiter((pos[d] for d, _ in leg), dtype=np.int64, count=len(leg))
                rank[li, qi, at] = np.arange(1, len(leg) + 1)
                where.append((li, qi, at))
                scores.append(np.fromiter((s for _, s in leg), dtype=np.float64, count=len(leg)))
        judged = qrels.get(q, {})
        gain[qi, : len(cols)] = [judged.get(d, 0) for d in cols]
    norm = {k: np.zeros(shape) for k in names}
    for k in names:
        for (li, qi, at), v in zip(where, norm_rows(k, scores), strict=True):
            norm[k][li, qi, at] = v
    by_rank = [[(np.empty(0, dtype=np.int64), np.empty(0)) for _ in qids] for _ in legs]
    for (li, qi, at), v in zip(where, scores, strict=True):
        by_rank[li][qi] = (at, v)
    return Block(list(qids), docs, np.array([len(c) for c in docs], dtype=np.int64), rank, norm, gain, by_rank)


def cut(block: Block, lengths: np.ndarray, norms: Sequence[str]) -> Block:
    """The block of shallower legs: leg ``l`` of query ``q`` keeps its first ``lengths[l, q]`` units (a shallower
    ``leg_k`` cuts each leg to a prefix of its units). Columns are re-ordered by the fusion's tie-break among the
    units kept (best rank in the kept lists, then id) and the normalisations recomputed on the kept scores: the
    same block :func:`build_block` makes from the cut legs, without re-reading them."""
    inleg = block.rank <= lengths[:, :, None]
    rank = np.where(inleg, block.rank, np.inf)
    best = rank.min(axis=0)
    order = np.lexsort((block.idrank, best), axis=-1)  # by best rank, then id; the units not kept (inf) last
    n = np.isfinite(best).sum(axis=1)
    width = max(int(n.max(initial=0)), 1)
    order = order[:, :width]
    inside = np.arange(width)[None, :] < n[:, None]
    new_rank = np.where(
        inside, np.take_along_axis(rank, np.broadcast_to(order, rank.shape[:1] + order.shape), -1), np.inf
    )
    gain = np.where(inside, np.take_along_axis(block.gain, order, -1), 0)
    docs = [[block.docs[qi][c] for c in order[qi, : n[qi]]] for qi in range(len(block.qids))]
    inverse = np.zeros(best.shape, dtype=np.int64)
    np.put_along_axis(inverse, order, np.broadcast_to(np.arange(width), order.shape), -1)
    where, scores = [], []
    by_rank = [[(np.empty(0, dtype=np.int64), np.empty(0)) for _ in block.qids] for _ in range(len(lengths))]
    for li in range(len(lengths)):
        for qi in range(len(block.qids)):
            k = int(lengths[li, qi])
            if k:
                at, v = block.ranked[li][qi]
                at, v = inverse[qi, at[:k]], v[:k]
                where.append((li, qi, at))
                scores.append(v)
                by_rank[li][qi] = (at, v)
    norm = {k: np.zeros(new_rank.shape) for k in dict.fromkeys(norms)}
    for k in norm:
        for (li, qi, at), v in zip(where, norm_rows(k, scores), strict=True):
            norm[k][li, qi, at] = v
    return Block(list(block.qids), docs, n.astype(np.int64), new_rank, norm, gain, by_rank)


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


def top(scores: np.ndarray, depth: int | None, n: np.ndarray | None = None) -> np.ndarray:
    """``[point, query, rank]`` column of each rank: fuse()'s order (score descending; ties keep the columns'
    tie-break order), cut at ``depth``. Positions past a query's ``n`` columns (the block's, when given) are
    fillers (callers mask them).

    With a cut, a compiled selection (:func:`_select`) keeps each row's best ``depth`` in one pass; without one, a
    stable argsort. Both give the stable sort's order: a column displaces only strictly lower scores."""
    if depth is None:
        return np.argsort(-scores, axis=-1, kind="stable")
    flat = np.ascontiguousarray(scores.reshape(-1, scores.shape[-1]))
    if n is None:  # columns in use per row (the padding, -inf, sits after them)
        rows = np.isfinite(flat).sum(axis=-1).astype(np.int64)
    else:  # the block's n per query, for every point
        rows = np.ascontiguousarray(np.broadcast_to(n, scores.shape[:-1]).reshape(-1), dtype=np.int64)
    return _select(flat, rows, int(depth)).reshape(*scores.shape[:-1], int(depth))


@numba.njit(cache=True)
def _select(scores: np.ndarray, n: np.ndarray, depth: int) -> np.ndarray:  # pragma: no cover - compiled
    """Per row, the columns of the ``depth`` best scores among its first ``n`` columns, best first, ties in column
    order (insertion into a sorted list of at most ``depth``; a later equal score goes after)."""
    out = np.full((scores.shape[0], depth), scores.shape[1] - 1, dtype=np.int64)
    vals = np.empty(depth)
    for r in range(scores.shape[0]):
        cnt = 0
        for c in range(n[r]):
            v = scores[r, c]
            if cnt == depth and v <= vals[depth - 1]:
                continue
            j = cnt if cnt < depth else depth - 1
            while j > 0 and vals[j - 1] < v:
                vals[j] = vals[j - 1]
                out[r, j] = out[r, j - 1]
                j -= 1
            vals[j] = v
            out[r, j] = c
            if cnt < depth:
                cnt += 1
    return out


def gather(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``values[query, column]`` (or ``[point, query, column]``) at ``order[point, query, rank]``."""
    if values.ndim == 2:
        return values[np.arange(values.shape[0])[:, None], order]
    return np.take_along_axis(values, order, axis=-1)


def ranked_gains(block: Block, order: np.ndarray) -> np.ndarray:
    """The qrels grade at each rank of each point's list (0 past the end of a query's list)."""
    g = gather(block.gain, order)
    inside = np.arange(order.shape[-1]) < block.n[:, None]
    return np.where(inside, g, 0)


def to_run(block: Block, scores: np.ndarray, order: np.ndarray) -> Run:
    """One point's fused run (``scores``/``order`` of that point: ``[query, column]``/``[query, rank]``)."""
    out: Run = {}
    for qi, q in enumerate(block.qids):
        cols = [int(c) for c in order[qi][: block.n[qi]]]
        out[q] = {block.docs[qi][c]: float(scores[qi, c]) for c in cols}
    return out


def chunks(n_points: int, block: Block) -> list[slice]:
    """Slices of the points fused together so that one chunk holds at most :data:`MAX_CELLS` cells."""
    per = max(1, MAX_CELLS // max(1, block.gain.size))
    return [slice(i, min(n_points, i + per)) for i in range(0, n_points, per)]
