"""The vectorised :func:`score_points` (issue 24): every point of a leg setting fused, replayed and evaluated at once.

Same inputs, outputs and values as the per-point loop of :func:`rerankeval.experiments.grid.score_points` (which
dispatches here unless ``vectorised=False``): the long ``point, qid, metric, value`` table in the same row order, and
the seconds per query of each point (legs + its share of the fusion and evaluation). The replay of stage 04's
recorded LLM scores (:func:`replay_gains`) is vectorised too, over any number of blend weights ``alpha`` at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from rerankeval.core.runs import Qrels
from rerankeval.evaluate.metrics import REL_LEVEL, parse_column
from rerankeval.experiments import fastmetrics as fm
from rerankeval.experiments import fastsweep as fs
from rerankeval.retrieve.fusion import SCORE_METHODS

COLUMNS = ["point", "qid", "metric", "value"]


def evaluable(qids: Sequence[str], qrels: Qrels) -> list[str]:
    """The queries a sweep scores, sorted: judged, with a relevant unit (as ``metrics.query_set`` keeps them)."""
    return sorted(q for q in qids if q in qrels and any(g >= REL_LEVEL for g in qrels[q].values()))


def llm_matrix(block: fs.Block, scores: dict[str, dict[str, float]]) -> np.ndarray:
    """``[query, column]`` recorded LLM score of each unit; NaN where the unit was not scored."""
    out = np.full(block.gain.shape, np.nan)
    for qi, q in enumerate(block.qids):
        got = scores.get(q, {})
        for c, d in enumerate(block.docs[qi]):
            if d in got:
                out[qi, c] = got[d]
    return out


def _minmax(x: np.ndarray, inpool: np.ndarray) -> np.ndarray:
    """:func:`rerankeval.rerank.scores.minmax` over each pool (the last axis, ``inpool`` positions): 0 if flat."""
    lo = np.where(inpool, x, np.inf).min(axis=-1, keepdims=True)
    hi = np.where(inpool, x, -np.inf).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(hi > lo, (x - lo) / (hi - lo), 0.0)


def replay_gains(
    block: fs.Block,
    scores: np.ndarray,
    order: np.ndarray,
    llm: np.ndarray,
    alphas: Sequence[float],
    pool_k: int,
    gains: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rerankeval.experiments.replay.replay` for every point and every ``alpha`` at once: the grades at each
    rank ``[alpha, point, query, rank]`` after the top ``pool_k`` is reordered by ``alpha * minmax(LLM) + (1 - alpha)
    * minmax(fused)`` (ties in fused order), and ``[point, query]`` True where the whole pool was scored."""
    depth = order.shape[-1]
    pk = min(pool_k, depth)
    pos = order[..., :pk]
    m = np.minimum(pk, block.n)  # a list shorter than the pool: the pool is the whole list
    inpool = np.broadcast_to(np.arange(pk)[None, :] < m[:, None], pos.shape)
    got = fs.gather(llm, pos)
    covered = (m > 0)[None, :] & np.where(inpool, ~np.isnan(got), True).all(axis=-1)
    a, b = _minmax(got, inpool), _minmax(np.take_along_axis(scores, pos, axis=-1), inpool)
    gains = fs.ranked_gains(block, order) if gains is None else gains
    out = np.empty((len(alphas), *gains.shape), dtype=gains.dtype)
    a, b = np.where(inpool, a, 0.0), np.where(inpool, b, 0.0)  # outside the pool: unused, kept finite
    for i, alpha in enumerate(alphas):
        blend = np.where(inpool, alpha * a + (1 - alpha) * b, -np.inf)
        new = np.argsort(-blend, axis=-1, kind="stable")
        out[i, ..., :pk] = np.take_along_axis(gains[..., :pk], new, axis=-1)
        out[i, ..., pk:] = gains[..., pk:]
    return out, covered


def _groups(points: Sequence) -> dict[tuple, dict[int, list]]:
    """Points by leg setting (chunking, BM25 parameters), then by ``leg_k``, in first-seen order."""
    out: dict[tuple, dict[int, list]] = {}
    for p in points:
        out.setdefault((p.chunking, p.bm25_params), {}).setdefault(p.leg_k, []).append(p)
    return out


def _lengths(engine, p, qids: Sequence[str]) -> np.ndarray:
    """``[leg, query]`` units in each leg of ``p`` (a prefix of the deepest leg's, :meth:`Engine.unit_legs`)."""
    return np.array([[len(leg.get(q, {})) for q in qids] for leg in engine.unit_legs(p)], dtype=np.int64)


def score_points(
    engine, points: Sequence, qids: Sequence[str], qrels: Qrels, cols: Sequence[str]
) -> tuple[pd.DataFrame, dict[str, float]]:
    """:func:`rerankeval.experiments.grid.score_points`, vectorised (see the module docstring)."""
    qids = evaluable(qids, qrels)
    pool_ks = [int(c.split("@")[1]) for c in cols if c.startswith("recall@")]
    depth = max(parse_column(c)[1] for c in cols)
    judged = fm.Judgments([qrels[q] for q in qids])
    segments: dict[str, list[Segment]] = {}
    secs: dict[str, float] = {}
    for by_depth in _groups(points).values():
        t_block = time.perf_counter()
        deepest = by_depth[max(by_depth)][0]
        dense, lex = engine.unit_legs(deepest)
        master = fs.build_block(
            [{q: dense.get(q, {}) for q in qids}, {q: lex.get(q, {}) for q in qids}], qids, qrels, norms=[]
        )
        shared = (time.perf_counter() - t_block) / sum(len(g) for g in by_depth.values())
        for group in by_depth.values():
            t_cut = time.perf_counter()
            norms = [SCORE_METHODS[p.method][0].__name__ for p in group if p.method in SCORE_METHODS]
            block = fs.cut(master, _lengths(engine, group[0], qids), norms)
            llm = llm_matrix(block, engine.llm.scores) if engine.llm is not None else None
            leg_s = engine.leg("dense", group[0]).seconds_per_query + engine.leg("bm25", group[0]).seconds_per_query
            leg_s += (shared + (time.perf_counter() - t_cut) / len(group)) / max(1, len(qids))  # the blocks' share
            for part in fs.chunks(len(group), block):
                t0 = time.perf_counter()
                got = _score_chunk(block, group[part], depth, cols, judged, llm, engine, pool_ks)
                per_q = (time.perf_counter() - t0) / max(1, len(qids)) / len(group[part])
                for p, segs in zip(group[part], got, strict=True):
                    segments[p.name], secs[p.name] = segs, per_q + leg_s
    return _frame(points, segments, qids), secs


Segment = tuple[str, np.ndarray, np.ndarray]  # metric, qids (object array), values


def _score_chunk(
    block: fs.Block,
    points: Sequence,
    depth: int,
    cols: Sequence[str],
    judged: fm.Judgments,
    llm: np.ndarray | None,
    engine,
    pool_ks: Sequence[int],
) -> list[list[Segment]]:
    """Per point, its segments ``(metric, qids, values)``: every column, then each pool's replayed rerank."""
    scores = fs.fused_scores(block, points)
    order = fs.top(scores, depth, block.n)
    gains = fs.ranked_gains(block, order)
    values = {c: fm.metric(gains, c, judged) for c in cols}
    qarr = np.asarray(block.qids, dtype=object)
    out = [[(c, qarr, values[c][i]) for c in cols] for i in range(len(points))]
    if llm is None:
        return out
    col = cols[0]
    for pk in pool_ks:
        rr, covered = replay_gains(block, scores, order, llm, [engine.llm.alpha], pk, gains)
        rr_values = fm.metric(rr[0], col, judged)
        for i in range(len(points)):
            keep = np.flatnonzero(covered[i])
            if not len(keep):
                continue
            q = qarr[keep]
            out[i] += [(f"reranked@{pk} {col}", q, rr_values[i, keep]), (f"fused@{pk} {col}", q, values[col][i, keep])]
    return out


def _frame(points: Sequence, segments: dict[str, list[Segment]], qids: Sequence[str]) -> pd.DataFrame:
    """The long table, in the points' order and, inside a point, in its segments' order."""
    segs = [(p.name, *seg) for p in points for seg in segments.get(p.name, [])]
    if not segs:
        return pd.DataFrame(columns=COLUMNS)
    sizes = [len(q) for _, _, q, _ in segs]
    names = np.repeat(np.array([s[0] for s in segs], dtype=object), sizes)
    metrics = np.repeat(np.array([s[1] for s in segs], dtype=object), sizes)
    qs = np.concatenate([q if isinstance(q, np.ndarray) else np.asarray(q, dtype=object) for _, _, q, _ in segs])
    vals = np.concatenate([np.asarray(v, dtype=np.float64) for *_, v in segs])
    return pd.DataFrame({"point": names, "qid": qs, "metric": metrics, "value": vals})[COLUMNS]
