"""The judging queue (Minimal Test Collections: Carterette, Allan & Sitaraman, SIGIR 2006): which unjudged unit to
grade next so that the open comparisons of :mod:`rerankeval.evaluate.incomplete` get decided, how many judgments
that is expected to take, and the uniform random sample of the holes that prediction-powered inference needs from the
human grades (:mod:`rerankeval.evaluate.ppi`).

A unit's weight is ``top x |discount in A - discount in B| / ideal DCG with one more top-graded unit / n queries``
summed over the open comparisons it moves: about how far one judgment can move the mean difference, in metric units.
:class:`Judging` keeps the comparisons up to date while units are graded (a grade rebuilds only its query's pool and
bounds); :func:`expected_judgments` walks the queue with grades drawn from the judged units' grades.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rerankeval.core.runs import Qrels, Run
from rerankeval.evaluate.bounds import (
    FIRST_RELEVANT,
    QueryPool,
    denominators,
    family,
    gains,
    query_bounds,
    query_pool,
    top_k,
)
from rerankeval.evaluate.judgments import grade_scale


def moves(p: QueryPool, u: str, a: str, b: str, metric: str) -> bool:
    """Whether the grade of ``u`` changes the difference itself (not only its scale)."""
    if family(metric)[0] in FIRST_RELEVANT:
        return p.ranks[a].get(u) != p.ranks[b].get(u)
    i = p.units.index(u)
    return abs(p.weight[a][i] - p.weight[b][i]) > 1e-15


class Judging:
    """Comparisons kept up to date while units are judged: a grade rebuilds only its query's pool and bounds."""

    def __init__(
        self,
        runs: Mapping[str, Run],
        qrels: Qrels,
        qids: Sequence[str],
        metric: str,
        pairs: Sequence[tuple[str, str]],
        top: int | None = None,
    ):
        _, self.k = family(metric)
        self.metric, self.pairs = metric, [tuple(p) for p in pairs]
        self.top = grade_scale(qrels) if top is None else int(top)
        names = list(dict.fromkeys(v for p in self.pairs for v in p))
        self.tops = {q: {v: top_k(runs[v].get(q, {}), self.k) for v in names} for q in qids}
        self.qrels = {q: dict(qrels.get(q, {})) for q in qids}
        self.pools: dict[str, QueryPool] = {}
        self.per: dict[tuple[str, str], dict[str, tuple[float, float]]] = {p: {} for p in self.pairs}
        self._w: dict[str, dict[str, dict[tuple[str, str], float]]] = {}  # query -> unit -> pair -> weight
        self.done = 0
        for q in qids:
            self._refresh(q)

    def _refresh(self, q: str) -> None:
        self.pools[q] = p = query_pool(self.tops[q], self.qrels[q], q, self.metric)
        fam = family(self.metric)[0]
        scale = float(gains(fam, np.array([self.top]))[0]) / max(1, len(self.tops))
        den = denominators(fam, p.judged, np.full((1, 1), float(self.top)), self.k)[0]  # the ideal with one unit more
        self._w[q] = {}
        for a, b in self.pairs:
            self.per[(a, b)][q] = query_bounds(p, self.metric, self.top, a, b)[:2]
            for i, u in enumerate(p.units):
                if u in p.ranks[a] or u in p.ranks[b]:
                    w = float(scale * abs(p.weight[a][i] - p.weight[b][i]) / max(den, 1e-12))
                    self._w[q].setdefault(u, {})[(a, b)] = w

    def grade(self, q: str, u: str, g: int) -> None:
        """Record grade ``g`` for unit ``u`` of query ``q`` and update that query's bounds."""
        self.qrels[q][u] = int(g)
        self.done += 1
        self._refresh(q)

    def interval(self, pair: tuple[str, str]) -> tuple[float, float]:
        per = self.per[pair].values()
        return (float(np.mean([lo for lo, _ in per])), float(np.mean([hi for _, hi in per]))) if per else (0.0, 0.0)

    def is_open(self, pair: tuple[str, str]) -> bool:
        lo, hi = self.interval(pair)
        return not (lo > 0 or hi < 0) and lo < hi

    def weights(self) -> dict[tuple[str, str], dict[tuple[str, str], float]]:
        """(query, unit) -> {open pair: weight}: top x |discount in a - in b| / ideal / n (see the module)."""
        open_pairs = {p for p in self.pairs if self.is_open(p)}
        out: dict[tuple[str, str], dict[tuple[str, str], float]] = {}
        for q, by_unit in self._w.items():
            for u, by_pair in by_unit.items():
                got = {pair: w for pair, w in by_pair.items() if pair in open_pairs}
                if got:
                    out[(q, u)] = got
        return out

    def queue(self, passive: bool = False) -> list[tuple[str, str, float, dict[tuple[str, str], float]]]:
        """The unjudged units that move an open comparison, heaviest first: ``(qid, unit, weight, by pair)``; ties
        by the width of the query's interval, then query and pool order. ``passive``: also the units in the top k
        that move no difference, only a query's scale (weight 0, last)."""
        items, key = self._items(passive)
        return sorted(items, key=key)

    def _items(self, passive: bool) -> tuple[list, Callable]:
        open_pairs = [p for p in self.pairs if self.is_open(p)]
        width = {q: sum(self.per[p][q][1] - self.per[p][q][0] for p in open_pairs) for q in self.pools}
        order = {(q, u): i for i, (q, u) in enumerate((q, u) for q, p in self.pools.items() for u in p.units)}
        items = [(q, u, sum(by.values()), by) for (q, u), by in self.weights().items()]
        items = [t for t in items if passive or t[2] > 1e-15]
        return items, lambda t: (-round(t[2], 12), -width[t[0]], order[(t[0], t[1])])


def judgments_to_decide(
    judging: Judging,
    pair: tuple[str, str],
    oracle: Callable[[str, str], int],
    order: str | Sequence[tuple[str, str]] = "queue",
    seed: int = 0,
    limit: int | None = None,
) -> int | None:
    """Judgments asked (answered by ``oracle(qid, unit)``) until ``pair`` is decided; None when it never is.

    ``order``: ``"queue"`` (the adaptive queue for ``pair``: re-weighted after each grade), ``"random"`` (the pair's
    unjudged units shuffled with ``seed``) or an explicit list of (query, unit) (e.g. today's pool order).
    ``judging`` is changed (it ends holding the grades given)."""
    if order == "queue":
        steps = _walk_queue(judging, pair, oracle, limit)
    else:
        if order == "random":
            fixed = [
                (q, u)
                for q, p in judging.pools.items()
                for u in p.units
                if u in p.ranks[pair[0]] or u in p.ranks[pair[1]]
            ]
            random.Random(seed).shuffle(fixed)
        else:
            fixed = list(order)
        steps = 0
        for q, u in fixed:
            if not judging.is_open(pair) or (limit is not None and steps >= limit):
                break
            if q in judging.qrels and u not in judging.qrels[q]:
                judging.grade(q, u, oracle(q, u))
                steps += 1
    lo, hi = judging.interval(pair)
    return steps if (lo > 0 or hi < 0) else None


def _walk_queue(judging: Judging, pair: tuple[str, str], oracle: Callable[[str, str], int], limit: int | None) -> int:
    """Grade the queue's first unit for ``pair`` until it is decided: a heap, a query's entries renewed when one of
    its units is graded (only that query's weights and interval change)."""
    order = {(q, u): i for i, (q, u) in enumerate((q, u) for q, p in judging.pools.items() for u in p.units)}
    version = dict.fromkeys(judging.pools, 0)
    heap: list[tuple] = []

    def push(q: str) -> None:
        lo, hi = judging.per[pair][q]
        for u, by in judging._w[q].items():
            heapq.heappush(heap, (-round(by.get(pair, 0.0), 12), lo - hi, order[(q, u)], q, u, version[q]))

    for q in judging.pools:
        push(q)
    steps = 0
    while heap and judging.is_open(pair) and (limit is None or steps < limit):
        *_, q, u, ver = heapq.heappop(heap)
        if ver != version[q] or u in judging.qrels[q]:
            continue
        judging.grade(q, u, oracle(q, u))
        steps += 1
        version[q] += 1
        push(q)
    return steps


def grade_prior(judging: Judging) -> dict[int, float]:
    """The share of each grade among the judged units in the top k of the compared runs (the simulation's prior)."""
    seen = [
        g
        for q, tops in judging.tops.items()
        for t in tops.values()
        for u in t
        if (g := judging.qrels[q].get(u)) is not None
    ]
    if not seen:
        return {0: 0.5, judging.top: 0.5}
    vals, counts = np.unique(np.clip(seen, 0, judging.top), return_counts=True)
    return {int(v): float(c / counts.sum()) for v, c in zip(vals, counts, strict=True)}


def expected_judgments(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    pair: tuple[str, str],
    metric: str,
    top: int | None = None,
    n_sim: int = 10,
    seed: int = 0,
) -> float:
    """Judgments the queue is expected to need to decide ``pair``: the mean over ``n_sim`` simulations whose
    hidden grades are drawn from :func:`grade_prior`; a simulation that never decides counts every unit."""
    rng = np.random.default_rng(seed)
    base = Judging(runs, qrels, qids, metric, [pair], top)
    prior = grade_prior(base)
    pool = [(q, u) for q, p in base.pools.items() for u in p.units]
    counts = []
    for _ in range(n_sim):
        hidden = dict(zip(pool, rng.choice(list(prior), size=len(pool), p=list(prior.values())), strict=True))
        j = Judging(runs, qrels, qids, metric, [pair], top)
        got = judgments_to_decide(j, pair, lambda q, u, h=hidden: int(h.get((q, u), 0)))
        counts.append(len(pool) if got is None else got)
    return float(np.mean(counts)) if counts else 0.0


def sample_order(
    runs: Mapping[str, Run], original: Qrels, qids: Sequence[str], k: int, seed: int = 0
) -> list[tuple[str, str]]:
    """The holes of the dataset's own qrels (``original``) in every run's top ``k``, in a seeded random order, fixed
    (grading does not reshuffle it): a prefix of it is a uniform random sample of the holes, what prediction-powered
    inference needs from the human grades (``explore.next_to_judge(dp, n, mode="sample")`` walks it)."""
    pool = sorted(
        {(q, u) for q in qids for r in runs.values() for u in top_k(r.get(q, {}), k) if u not in original.get(q, {})}
    )
    random.Random(seed).shuffle(pool)
    return pool


def sampled_grades(order: Sequence[tuple[str, str]], human: Qrels) -> dict[tuple[str, str], int]:
    """The human grades of the longest prefix of ``order`` that is graded throughout: a uniform random sample
    (stopping at the first ungraded unit keeps it one; a grade further on is not part of the sample)."""
    out: dict[tuple[str, str], int] = {}
    for q, u in order:
        if u not in human.get(q, {}):
            break
        out[(q, u)] = int(human[q][u])
    return out
