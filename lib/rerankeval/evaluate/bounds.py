"""Exact bounds of a retrieval metric over every completion of a query's unjudged units (issue 34), one query at
a time; :mod:`rerankeval.evaluate.incomplete` builds the numbers of a report on them.

A *completion* grades every unjudged unit of the pool (the union of the given runs' top k) on the dataset's scale
0..top; units outside the pool stay not relevant. For nDCG the ideal DCG is recomputed for each completion over all
judged units of the query plus the completed ones (trec_eval's ideal), so grading an unjudged unit can *lower* a
run's score: the zero-fill value is not always the worst case.

Why the bounds are exact (:func:`query_bounds`). For a fixed multiset of completion grades the ideal DCG (and
recall's denominator) is fixed, and the numerator is linear in the gains, so by the rearrangement inequality its
maximum puts the highest grades on the units with the largest weight (a unit's discount in run A minus its discount
in run B; one run: its discount) and its minimum the reverse. Enumerating the multisets (``C(m + top, top)`` for
``m`` units) is therefore exact. A unit neither run ranks in its top k (weight 0) only moves the denominator, so
its grades sit at an extreme (all 0 or all top). Two runs share one completion, so a unit both rank gets one grade
in both (its weight is the difference of its discounts). Beyond :data:`MAX_MULTISETS` multisets a sound, looser
bound is used (numerator and denominator bounded separately) and flagged ``exact=False``. Success and MRR depend on
the first relevant rank only; their bounds are exact by trying "no new relevant unit" and "exactly this unit
relevant" for each pool unit (an optimum never needs two). ``tests/evaluate/test_incomplete.py`` checks every
family against all completions enumerated by brute force.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rerankeval.core.runs import ranked
from rerankeval.evaluate import metrics

MAX_MULTISETS = 60_000  # grade multisets enumerated per query; beyond it the sound, looser bound is used
LINEAR = ("ndcg", "precision", "recall")  # numerator linear in the gains, denominator a function of the multiset
FIRST_RELEVANT = ("success", "mrr")  # a function of the first relevant rank only


def family(metric: str) -> tuple[str, int]:
    """``"ndcg@10"`` -> ``("ndcg", 10)`` for the cut-off metrics the bounds cover; anything else is refused."""
    fam, k = metrics.parse_column(metric)
    if k is None or fam not in LINEAR + FIRST_RELEVANT:
        raise ValueError(
            f"bounds are defined for the cut-off metrics ({', '.join(LINEAR + FIRST_RELEVANT)}@k), "
            f"got {metric!r}; use e.g. ndcg@10"
        )
    return fam, k


def top_k(run_q: Mapping[str, float], k: int) -> list[str]:
    """The units of a query's run in rank order, cut at ``k``."""
    return [d for d, _ in ranked(run_q)[:k]]


def discounts(fam: str, k: int) -> np.ndarray:
    """Per rank 1..k, the weight a gain of 1 gets in the numerator."""
    if fam == "ndcg":
        return 1.0 / np.log2(np.arange(2, k + 2))
    return np.full(k, 1.0 / k if fam == "precision" else 1.0)


def gains(fam: str, grades: np.ndarray) -> np.ndarray:
    g = np.maximum(np.asarray(grades, dtype=float), 0.0)
    return g if fam == "ndcg" else (g >= metrics.REL_LEVEL).astype(float)


def denominators(fam: str, judged: np.ndarray, comp: np.ndarray, k: int) -> np.ndarray:
    """The denominator for each row of completion grades ``comp`` (rows x units), given the judged grades."""
    if fam == "precision":
        return np.ones(comp.shape[0])
    if fam == "recall":
        return (comp >= metrics.REL_LEVEL).sum(axis=1) + float((judged >= metrics.REL_LEVEL).sum())
    head = -np.sort(-np.maximum(judged, 0.0))[:k]  # only the judged top k can enter the ideal
    both = np.hstack([np.broadcast_to(head, (comp.shape[0], head.size)), comp])
    best = -np.sort(-np.maximum(both, 0.0), axis=1)[:, :k]
    return best @ discounts("ndcg", k)[: best.shape[1]]


@dataclass
class QueryPool:
    """One query as the bounds see it: its judged grades, the unjudged units of the pool and, per run, the part of
    the numerator its judged units give (``fixed``) and the weight each pool unit gets in it (``weight``)."""

    qid: str
    judged: np.ndarray
    units: list[str]
    fixed: dict[str, float]
    weight: dict[str, np.ndarray]
    ranks: dict[str, dict[str, int]]  # run -> unit -> rank within the top k (judged and unjudged)
    first: dict[str, int | None]  # run -> rank of its first judged relevant unit in the top k


def query_pool(tops: Mapping[str, Sequence[str]], judged: Mapping[str, int], qid: str, metric: str) -> QueryPool:
    """The :class:`QueryPool` of one query from each run's top k (``tops``) and the query's judgments."""
    fam, k = family(metric)
    disc = discounts(fam, k)
    units = list(dict.fromkeys(u for t in tops.values() for u in t[:k] if u not in judged))
    index = {u: i for i, u in enumerate(units)}
    fixed, weight, ranks, first = {}, {}, {}, {}
    for v, t in tops.items():
        w = np.zeros(len(units))
        fixed[v] = 0.0
        ranks[v] = {u: r for r, u in enumerate(t[:k], start=1)}
        first[v] = next((r for u, r in ranks[v].items() if judged.get(u, 0) >= metrics.REL_LEVEL), None)
        for r, u in enumerate(t[:k], start=1):
            if u in index:
                w[index[u]] = disc[r - 1]
            else:
                fixed[v] += float(gains(fam, np.array([judged[u]]))[0]) * disc[r - 1]
        weight[v] = w
    return QueryPool(qid, np.array(list(judged.values()), dtype=float), units, fixed, weight, ranks, first)


def _multisets(m: int, levels: Sequence[int]) -> np.ndarray | None:
    """Every multiset of ``m`` grades from ``levels``, each row sorted high to low; None when there are too many."""
    if math.comb(m + len(levels) - 1, len(levels) - 1) > MAX_MULTISETS:
        return None
    return _multisets_of(m, tuple(sorted(levels, reverse=True)))


@functools.lru_cache(maxsize=256)
def _multisets_of(m: int, desc: tuple[int, ...]) -> np.ndarray:
    combos = list(itertools.combinations_with_replacement(desc, m))
    rows = np.array(combos, dtype=float).reshape(len(combos), m)
    rows.flags.writeable = False  # shared between calls
    return rows


def _linear(p: QueryPool, fam: str, k: int, top: int, a: str, b: str | None) -> tuple[float, float, bool]:
    """Exact [min, max] of (numerator of a - numerator of b) / denominator over every completion (see module)."""
    w = p.weight[a] - (p.weight[b] if b else 0.0)
    fixed = p.fixed[a] - (p.fixed[b] if b else 0.0)
    active = np.flatnonzero(np.abs(w) > 1e-15)
    n_passive = len(w) - active.size
    levels = list(range(top + 1)) if fam == "ndcg" else [0, metrics.REL_LEVEL]
    sets = _multisets(active.size, levels)
    if sets is None:
        return (*_loose(p, fam, k, top, fixed, w), False)
    ws = np.sort(w[active])[::-1]
    g = gains(fam, sets)
    num_hi, num_lo = fixed + g @ ws, fixed + g @ ws[::-1]
    lo, hi = math.inf, -math.inf
    for z in {0, levels[-1]} if n_passive else {0}:
        den = denominators(fam, p.judged, np.hstack([sets, np.full((len(sets), n_passive), float(z))]), k)
        safe = np.where(den > 0, den, 1.0)
        lo = min(lo, float(np.min(np.where(den > 0, num_lo / safe, 0.0))))
        hi = max(hi, float(np.max(np.where(den > 0, num_hi / safe, 0.0))))
    return lo, hi, True


def _loose(p: QueryPool, fam: str, k: int, top: int, fixed: float, w: np.ndarray) -> tuple[float, float]:
    """A sound bound when enumerating is too costly: numerator and denominator bounded separately."""
    g = float(gains(fam, np.array([top]))[0])
    num_lo, num_hi = fixed + g * float(np.minimum(w, 0).sum()), fixed + g * float(np.maximum(w, 0).sum())
    none, full = (denominators(fam, p.judged, np.full((1, len(w)), float(v)), k)[0] for v in (0, top))
    if none <= 0:  # nothing judged relevant yet: only the metric's own range is sure
        span = 1.0 if fam != "precision" else float(np.abs(w).sum()) + abs(fixed)
        return (-span if num_lo < 0 else 0.0), (span if num_hi > 0 else 0.0)
    cands = [num_lo / none, num_lo / full, num_hi / none, num_hi / full]
    return min(cands), max(cands)


def _first_relevant(p: QueryPool, fam: str, k: int, a: str, b: str | None) -> tuple[float, float]:
    """Exact [min, max] of h(first relevant rank of a) - h(... of b): no new relevant unit, or exactly one."""

    def h(rank: int | None) -> float:
        return 0.0 if rank is None or rank > k else (1.0 / rank if fam == "mrr" else 1.0)

    def first(v: str, u: str | None) -> int | None:
        got = [r for r in (p.first[v], p.ranks[v].get(u) if u else None) if r is not None]
        return min(got) if got else None

    vals = [h(first(a, u)) - (h(first(b, u)) if b else 0.0) for u in [None, *p.units]]
    return min(vals), max(vals)


def query_bounds(p: QueryPool, metric: str, top: int, a: str, b: str | None = None) -> tuple[float, float, bool]:
    """``(worst, best, exact)`` of run ``a``'s metric (minus run ``b``'s when given) on one query, over every
    completion of ``p``'s unjudged units on the scale 0..``top``."""
    fam, k = family(metric)
    if fam in FIRST_RELEVANT:
        return (*_first_relevant(p, fam, k, a, b), True)
    return _linear(p, fam, k, top, a, b)


def zero_fill(p: QueryPool, metric: str, a: str, b: str | None = None) -> float:
    """The metric (difference) with every unjudged unit not relevant, from the same formulas as the bounds."""
    fam, k = family(metric)
    if fam in FIRST_RELEVANT:
        h = {"mrr": lambda r: 1.0 / r, "success": lambda r: 1.0}[fam]
        val = [h(p.first[v]) if p.first[v] else 0.0 for v in (a, b) if v]
        return val[0] - (val[1] if b else 0.0)
    den = denominators(fam, p.judged, np.zeros((1, len(p.units))), k)[0]
    return 0.0 if den <= 0 else (p.fixed[a] - (p.fixed[b] if b else 0.0)) / den
