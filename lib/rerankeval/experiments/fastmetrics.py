"""Per-query metrics of many ranked lists at once, as numpy arrays (the vectorised sweep, issue 24).

The input is the graded gain of the unit at each rank, ``gains[..., query, rank]`` (0 for an unjudged unit or a
position past the end of a list), and per query the qrels' grades. The values are trec_eval's, computed in its
order of operations so that they equal, bit for bit, what :func:`rerankeval.evaluate.metrics.evaluate` gets from
ir_measures (pytrec_eval) on the same ranking (``tests/experiments/test_fastsweep.py`` checks it, and checks ranx):

- ``ndcg@k``: sum over ranks ``i = 1..k`` of ``grade / log2(i + 1)`` (grades > 0 only, linear gain), accumulated
  rank by rank, over the same sum for the ideal ordering of **all judged units of the query** (Jarvelin and
  Kekalainen, "Cumulated gain-based evaluation of IR techniques", TOIS 2002; trec_eval's ``ndcg_cut``);
- ``recall@k``: relevant units (grade >= :data:`REL_LEVEL`) in the top k over the query's relevant units;
- ``mrr@k``: ``1 / rank`` of the first relevant unit within k, else 0; ``success@k``: 1 if any;
- ``precision@k``: relevant units in the top k over k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from rerankeval.evaluate.metrics import REL_LEVEL, parse_column

FAMILIES = ("ndcg", "mrr", "recall", "success", "precision")


def supported(cols: Sequence[str]) -> bool:
    """True when every column is one this module computes (``map`` is not: the per-point path does it)."""
    return all(parse_column(c)[0] in FAMILIES for c in cols)


def discounts(n: int) -> list[float]:
    """``log2(i + 1)`` for ranks ``i = 1..n``, with the C library's log2 (as trec_eval)."""
    return [math.log2(i + 2) for i in range(n)]


def ideal_dcg(grades: Sequence[Mapping[str, int]], k: int) -> np.ndarray:
    """Per query, the DCG@k of its judged units in the best order, accumulated rank by rank."""
    disc = discounts(k)
    out = np.zeros(len(grades))
    for i, g in enumerate(grades):
        total = 0.0
        for r, v in enumerate(sorted((v for v in g.values() if v > 0), reverse=True)[:k]):
            total += v / disc[r]
        out[i] = total
    return out


def n_relevant(grades: Sequence[Mapping[str, int]]) -> np.ndarray:
    """Per query, the number of units graded >= :data:`REL_LEVEL`."""
    return np.array([sum(v >= REL_LEVEL for v in g.values()) for g in grades], dtype=np.int64)


class Judgments:
    """The qrels of the evaluated queries (rows), with the ideal DCG per cutoff and the relevant counts cached."""

    def __init__(self, grades: Sequence[Mapping[str, int]]) -> None:
        self.grades = list(grades)
        self.nrel = n_relevant(self.grades)
        self._ideal: dict[int, np.ndarray] = {}

    def ideal(self, k: int) -> np.ndarray:
        if k not in self._ideal:
            self._ideal[k] = ideal_dcg(self.grades, k)
        return self._ideal[k]


def metric(gains: np.ndarray, col: str, judged: Judgments) -> np.ndarray:
    """``col`` (e.g. ``ndcg@10``) of every list: ``gains`` is ``[..., query, rank]``; returns ``[..., query]``."""
    fam, k = parse_column(col)
    if fam not in FAMILIES:
        raise ValueError(
            f"{col}: the vectorised metrics compute {', '.join(FAMILIES)} at a cutoff; use "
            "rerankeval.evaluate.metrics.evaluate for it"
        )
    top = gains[..., :k]
    rel = top >= REL_LEVEL
    if fam == "ndcg":
        return _ndcg(top, judged.ideal(k))
    if fam == "recall":
        found = rel.sum(axis=-1)
        return np.divide(found, judged.nrel, out=np.zeros(found.shape), where=judged.nrel > 0)
    if fam == "precision":
        return rel.sum(axis=-1) / k
    if fam == "success":
        return rel.any(axis=-1).astype(np.float64)
    first = np.argmax(rel, axis=-1)  # mrr: the first relevant rank, 0 when none
    return np.where(rel.any(axis=-1), 1.0 / (first + 1.0), 0.0)


def _ndcg(top: np.ndarray, ideal: np.ndarray) -> np.ndarray:
    disc = discounts(top.shape[-1])
    dcg = np.zeros(top.shape[:-1])
    pos = np.where(top > 0, top, 0).astype(np.float64)
    for r, d in enumerate(disc):  # rank by rank, as trec_eval sums (the order decides the last bit)
        dcg = dcg + pos[..., r] / d
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)
