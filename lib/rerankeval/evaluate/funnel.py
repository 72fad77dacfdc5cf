"""Failure attribution: where along legs -> fusion -> rerank pool -> reranker did a query's gold units go?

For each query the *best rank of a relevant unit* (grade >= 1) is taken in each stage's unit-level run:
the legs (``vector``, ``bm25``), the fused list (``hybrid``) and the reranked list (``hybrid_rerank``).
A query whose final list (the reranked one, else the fused one) has a relevant unit in its top ``k`` is a
hit; every miss gets the first cause that explains it, in pipeline order:

1. ``not retrieved by either leg``: no leg retrieved any relevant unit (at full run depth);
2. ``lost in fusion``: a leg had a relevant unit within the pool (top ``pool_k``; top ``k`` when there is
   no reranker), the fused list does not;
3. ``cut by the pool size``: relevant units only below the pool in the legs and the fused list (a larger
   pool could have let the reranker see them); without a reranker, ``below the cutoff``;
4. ``rerank fallback``: in the pool, but the ledger says the reranker fell back for this query;
5. ``lost in rerank``: in the fused top ``k``, pushed out by the reranker;
6. ``not lifted by rerank``: in the pool below ``k``; the reranker did not bring it up.

Missing variants are skipped gracefully: no legs -> classes 1-2 are not used; no reranker -> 4-6 are not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from rerankeval.core.names import HYBRID, HYBRID_RERANK, LEGS
from rerankeval.core.runs import Qrels, Run, ranked

HIT = "hit"
NOT_RETRIEVED = "not retrieved by either leg"
LOST_FUSION = "lost in fusion"
CUT_POOL = "cut by the pool size"
BELOW_CUTOFF = "below the cutoff"
FALLBACK = "rerank fallback"
LOST_RERANK = "lost in rerank"
NOT_LIFTED = "not lifted by rerank"
CLASSES = (HIT, NOT_RETRIEVED, LOST_FUSION, CUT_POOL, BELOW_CUTOFF, FALLBACK, LOST_RERANK, NOT_LIFTED)

FUSED, RERANKED = HYBRID, HYBRID_RERANK


def best_gold_rank(run: Run, qrels: Qrels, rel: int = 1) -> dict[str, int | None]:
    """Per query of ``run``: the 1-based rank of the best-ranked relevant unit, or None."""
    out: dict[str, int | None] = {}
    for q, docs in run.items():
        gold = {d for d, g in qrels.get(q, {}).items() if g >= rel}
        out[q] = next((i for i, (d, _) in enumerate(ranked(docs), start=1) if d in gold), None)
    return out


def first_relevant_ranks(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str]) -> pd.DataFrame:
    """``qid x variant``: rank of the first relevant unit (NaN when none retrieved)."""
    data = {}
    for v, run in runs.items():
        r = best_gold_rank({q: run.get(q, {}) for q in qids}, qrels)
        data[v] = [r[q] if r[q] is not None else math.nan for q in qids]
    return pd.DataFrame(data, index=pd.Index(list(qids), name="qid"))


# --------------------------------------------------------------------------- attribution
def classify(
    k: int,
    pool_k: int,
    legs: Mapping[str, int | None] | None,
    fused: int | None,
    reranked: int | None,
    has_reranker: bool,
    fallback: bool = False,
) -> str:
    """The funnel class of one query from its best gold ranks (None = not retrieved; see module doc)."""
    final = reranked if has_reranker else fused
    if final is not None and final <= k:
        return HIT
    leg_ranks = [r for r in (legs or {}).values() if r is not None]
    if legs and not leg_ranks:
        return NOT_RETRIEVED
    depth = pool_k if has_reranker else k
    if fused is None or fused > depth:
        if not legs and fused is None:
            return NOT_RETRIEVED
        if leg_ranks and min(leg_ranks) <= depth:
            return LOST_FUSION
        return CUT_POOL if has_reranker else BELOW_CUTOFF
    # the fused list has a relevant unit within the pool, the reranked list not in its top k
    if fallback:
        return FALLBACK
    return LOST_RERANK if fused <= k else NOT_LIFTED


def attribute(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    *,
    k: int,
    pool_k: int,  # the stage's own (04's recorded pool): no default of its own here
    fallback_qids: Iterable[str] = (),
    legs: Sequence[str] = LEGS,
    fused: str = FUSED,
    reranked: str = RERANKED,
) -> pd.DataFrame:
    """Per query: best gold rank per stage and the funnel class at cutoff ``k``.

    Columns ``qid, rank_<leg>..., rank_<fused>, rank_<reranked>, class`` (ranks NaN when not retrieved;
    stage columns only for variants present). Needs the fused variant; returns an empty frame without it.
    """
    if fused not in runs:
        return pd.DataFrame(columns=["qid", "class"])
    if pool_k < k and reranked in runs:
        raise ValueError(f"pool_k ({pool_k}) must be >= k ({k})")
    legs_here = [leg for leg in legs if leg in runs]
    has_rr = reranked in runs
    fb = set(fallback_qids)
    stages = legs_here + [fused] + ([reranked] if has_rr else [])
    best = {v: best_gold_rank({q: runs[v].get(q, {}) for q in qids}, qrels) for v in stages}
    rows = []
    for q in qids:
        leg_r = {leg: best[leg][q] for leg in legs_here}
        cls = classify(k, pool_k, leg_r, best[fused][q], best[reranked][q] if has_rr else None, has_rr, q in fb)
        row = {"qid": q}
        row.update({f"rank_{v}": (best[v][q] if best[v][q] is not None else math.nan) for v in stages})
        row["class"] = cls
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update(k=k, pool_k=pool_k, stages=stages, has_reranker=has_rr)
    return out


def funnel_counts(attribution: pd.DataFrame) -> pd.Series:
    """Queries per funnel class, in :data:`CLASSES` order (classes with no query left out)."""
    c = attribution["class"].value_counts()
    return pd.Series({k: int(c[k]) for k in CLASSES if k in c}, name="queries", dtype=int)


def funnel_by_cutoff(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    ks: Iterable[int],
    pool_k: int,
    fallback_qids: Iterable[str] = (),
    **kw,
) -> pd.DataFrame:
    """``k x class`` query counts for every cutoff ``k <= pool_k`` (all ks when there is no reranker)."""
    has_rr = kw.get("reranked", RERANKED) in runs
    rows = {}
    for k in sorted(set(ks)):
        if has_rr and k > pool_k:
            continue
        att = attribute(runs, qrels, qids, k=k, pool_k=pool_k, fallback_qids=fallback_qids, **kw)
        if att.empty:
            continue
        rows[k] = funnel_counts(att)
    df = pd.DataFrame(rows).T.fillna(0).astype(int)
    df.index.name = "k"
    return df[[c for c in CLASSES if c in df.columns]]


def rank_shift(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    src: str = FUSED,
    dst: str = RERANKED,
    depth: int | None = None,
) -> pd.DataFrame:
    """Every relevant unit in ``src``'s top ``depth``: ``qid, unit, grade, src_rank, dst_rank``.

    ``dst_rank`` is NaN when ``dst`` does not list the unit.
    """
    if src not in runs or dst not in runs:
        return pd.DataFrame(columns=["qid", "unit", "grade", "src_rank", "dst_rank"])
    rows = []
    for q in qids:
        gold = {d: g for d, g in qrels.get(q, {}).items() if g >= 1}
        s = {d: i for i, (d, _) in enumerate(ranked(runs[src].get(q, {})), start=1)}
        t = {d: i for i, (d, _) in enumerate(ranked(runs[dst].get(q, {})), start=1)}
        for d, g in gold.items():
            if d in s and (depth is None or s[d] <= depth):
                rows.append((q, d, g, s[d], t.get(d, math.nan)))
    return pd.DataFrame(rows, columns=["qid", "unit", "grade", "src_rank", "dst_rank"])
