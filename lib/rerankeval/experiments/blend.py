"""The rerank blend chosen by the sweep (issue 22.3): ``alpha`` and ``pool_k`` of stage 04's replayed rerank.

Stage 04 reorders each query's top ``pool_k`` by ``alpha * minmax(LLM score) + (1 - alpha) * minmax(fused score)``
(:mod:`rerankeval.rerank.core`). Its recorded yes/no scores (:func:`rerankeval.experiments.replay.recorded_llm`) are
replayed here for every ``alpha`` of the grid's ``alpha`` axis and every pool the LLM scored wholly, on the run stage
04 reranked (the sweep's default point, stage 03's ``hybrid``), with no LLM call. The blend is chosen honestly, as
the fusion setting is (:mod:`.splits`): on the train queries stage 04 scored, when it scored some, and reported once
on the evaluated queries; otherwise by k-fold over the evaluated queries it scored (out-of-fold). The comparison is
the chosen blend against the fused run on the same queries (bootstrap CIs, paired randomisation test).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rerankeval.core.runs import Qrels
from rerankeval.evaluate import stats
from rerankeval.experiments import fastmetrics as fm
from rerankeval.experiments import fastscore, splits
from rerankeval.experiments import fastsweep as fs

FUSED, BLEND = "fused", "reranked"


@dataclass
class Blend:
    """The blend sweep's values, what was chosen and how, and the report on queries that did not choose it."""

    protocol: str  # "train/test", "k-fold", or "" when skipped
    note: str  # how it was chosen, or why nothing was
    table: pd.DataFrame  # split, pool_k, alpha, n_queries, reranked, fused (means on the choosing queries)
    chosen: dict[str, tuple[int, float]] = field(default_factory=dict)  # "train" or fold -> (pool_k, alpha)
    per_query: pd.DataFrame = field(default_factory=pd.DataFrame)  # variant (fused/reranked), qid, metric, value
    ci: pd.DataFrame = field(default_factory=pd.DataFrame)
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)  # reranked vs fused on the objective
    folds: dict[str, int] = field(default_factory=dict)  # qid -> fold (k-fold only)


def blend_values(
    engine, point, qids: Sequence[str], qrels: Qrels, col: str, pool_ks: Sequence[int], alphas: Sequence[float]
) -> pd.DataFrame:
    """``pool_k, alpha, qid, reranked, fused``: ``col`` of the replayed rerank of ``point``'s top ``pool_k`` at each
    ``alpha`` and of the fused run, on the queries whose whole pool stage 04 scored (``engine.llm``)."""
    qids = fastscore.evaluable(qids, qrels)
    cut = fm.parse_column(col)[1]
    if engine.llm is None or not qids or not pool_ks or not alphas:
        return pd.DataFrame(columns=["pool_k", "alpha", "qid", BLEND, FUSED])
    dense, lex = engine.unit_legs(point)
    block = fs.build_block([{q: dense.get(q, {}) for q in qids}, {q: lex.get(q, {}) for q in qids}], qids, qrels)
    scores = fs.fused_scores(block, [point])
    order = fs.top(scores, max(cut, *pool_ks))
    judged = fm.Judgments([qrels[q] for q in qids])
    fused = fm.metric(fs.ranked_gains(block, order), col, judged)[0]
    llm = fastscore.llm_matrix(block, engine.llm.scores)
    rows = []
    for pk in pool_ks:
        gains, covered = fastscore.replay_gains(block, scores, order, llm, list(alphas), pk)
        keep = np.flatnonzero(covered[0])
        values = fm.metric(gains[:, 0], col, judged)
        for ai, alpha in enumerate(alphas):
            rows.append(
                pd.DataFrame(
                    {
                        "pool_k": pk,
                        "alpha": float(alpha),
                        "qid": [qids[i] for i in keep],
                        BLEND: values[ai, keep],
                        FUSED: fused[keep],
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def replayable(values: pd.DataFrame, pool_ks: Sequence[int]) -> tuple[list[int], str]:
    """The pools every scored query can replay (the LLM scored each such query's whole pool), and a note on the
    pools left out (stage 04 scored fewer candidates than they hold)."""
    covered = {pk: set(values[values.pool_k == pk].qid) for pk in pool_ks}
    ref = covered[min(pool_ks)] if pool_ks else set()
    keep = [pk for pk in sorted(pool_ks) if ref and covered[pk] == ref]
    out = [
        f"pool_k {pk} ({len(covered[pk])} of {len(ref)} queries wholly scored)"
        for pk in sorted(pool_ks)
        if pk not in keep
    ]
    return keep, ("; left out, as stage 04 scored fewer candidates per query: " + ", ".join(out)) if out else ""


def choose(values: pd.DataFrame, qids: set[str], order: Sequence[tuple[int, float]]) -> tuple[int, float]:
    """The (pool_k, alpha) with the best mean reranked value over ``qids``; ties to the earlier of ``order``
    (smaller pools first, then the grid's alpha order)."""
    sub = values[values.qid.isin(qids)]
    if sub.empty:
        raise ValueError("nothing to choose the blend from: no replayed query among the choosing queries")
    means = sub.groupby(["pool_k", "alpha"])[BLEND].mean()
    rank = {c: i for i, c in enumerate(order)}
    return min(
        ((int(pk), float(a)) for pk, a in means.index),
        key=lambda c: (-round(float(means[c]), 12), rank.get(c, len(rank))),
    )


def _summary(values: pd.DataFrame, qids: set[str], split: str) -> pd.DataFrame:
    sub = values[values.qid.isin(qids)]
    g = sub.groupby(["pool_k", "alpha"], sort=False)
    out = g[[BLEND, FUSED]].mean().reset_index()
    out.insert(0, "split", split)
    out.insert(3, "n_queries", g.qid.nunique().to_numpy())
    return out


def _long(values: pd.DataFrame, col: str, pick: dict[str, tuple[int, float]]) -> pd.DataFrame:
    """Per-query ``fused`` and ``reranked`` (each query answered by the blend chosen without it)."""
    rows = []
    for q, (pk, alpha) in pick.items():
        r = values[(values.qid == q) & (values.pool_k == pk) & (values.alpha == alpha)].iloc[0]
        rows += [(FUSED, q, col, float(r[FUSED])), (BLEND, q, col, float(r[BLEND]))]
    return pd.DataFrame(rows, columns=["variant", "qid", "metric", "value"])


def tune(
    values: pd.DataFrame,
    train: set[str],
    evaluated: set[str],
    col: str,
    pool_ks: Sequence[int],
    alphas: Sequence[float],
    *,
    folds: int = 5,
    seed: int = 0,
    n_boot: int = stats.N_BOOT,
) -> Blend:
    """Choose the blend on ``train``'s replayed queries (else by ``folds``-fold over ``evaluated``'s) and report it
    once against the fused run (see the module docstring)."""
    pools, left_out = replayable(values, pool_ks)
    values = values[values.pool_k.isin(pools)]
    scored = set(values.qid)
    choosing, reported = scored & set(train), scored & set(evaluated)
    order = [(pk, float(a)) for pk in pools for a in alphas]
    fold_of: dict[str, int] = {}
    if choosing and reported:
        best = choose(values, choosing, order)
        pick, chosen = {q: best for q in reported}, {"train": best}
        table = pd.concat([_summary(values, choosing, "train"), _summary(values, reported, "test")], ignore_index=True)
        how = (
            f"chosen on the {len(choosing)} train queries stage 04 scored, reported once on the {len(reported)} "
            "evaluated queries it scored"
        )
        protocol = "train/test"
    elif len(reported) >= splits.MIN_QUERIES:
        k = min(folds, len(reported))
        fold_of = splits.folds(sorted(reported), k, seed)
        chosen, pick = {}, {}
        for f in range(k):
            held = {q for q, i in fold_of.items() if i == f}
            chosen[f"fold {f}"] = best = choose(values, reported - held, order)
            pick.update({q: best for q in held})
        table = _summary(values, reported, "all (k-fold)")
        how = (
            f"no train query was scored by stage 04, so chosen by {k}-fold cross-validation over the "
            f"{len(reported)} evaluated queries it scored (each fold answered by the blend chosen on the others)"
        )
        protocol = "k-fold"
    else:
        why = (
            f"no blend chosen: stage 04 scored the whole pool of {len(reported)} evaluated queries (at least "
            f"{splits.MIN_QUERIES} are needed) and of {len(choosing)} train queries; run 04-rerank first"
        )
        return Blend("", why + left_out, _summary(values, scored, "scored"))
    per_query = _long(values, col, pick)
    ci = stats.bootstrap_table(per_query, n_boot=n_boot, seed=seed)
    cmp = stats.compare(per_query, col, pairs=[(BLEND, FUSED)], n_boot=n_boot, n_resamples=n_boot, seed=seed)
    return Blend(protocol, how + left_out, table, chosen, per_query, ci, cmp, fold_of)


def headline(b: Blend) -> dict[str, float]:
    """Means and CIs of fused and reranked on the reported queries, the difference and its paired p."""
    if not b.protocol:
        return {}
    ci = b.ci.set_index("variant")
    row = b.comparison.iloc[0]
    return {
        **{f"{v} {c}": float(ci.loc[v, c]) for v in (FUSED, BLEND) for c in ("mean", "ci_low", "ci_high")},
        "diff": float(row["diff"]),
        "diff_ci_low": float(row.diff_ci_low),
        "diff_ci_high": float(row.diff_ci_high),
        "p": float(row.p),
        "n": int(row.n),
    }


def sentence(b: Blend, col: str) -> str:
    """The blend's choice and its report in one sentence (or why there is none)."""
    if not b.protocol:
        return f"Rerank blend: {b.note}."
    h, chosen = headline(b), "; ".join(f"{k}: pool_k {pk}, alpha {a:g}" for k, (pk, a) in b.chosen.items())
    verdict = (
        "better than" if h["diff_ci_low"] > 0 else "worse than" if h["diff_ci_high"] < 0 else "not distinguishable from"
    )
    return (
        f"Rerank blend (alpha x pool_k, replayed from stage 04's LLM scores, no LLM call): {b.note}; chosen "
        f"{chosen}. On {h['n']} reported queries {col} reranked {h['reranked mean']:.4f} "
        f"[{h['reranked ci_low']:.4f}, {h['reranked ci_high']:.4f}] vs fused {h['fused mean']:.4f} "
        f"[{h['fused ci_low']:.4f}, {h['fused ci_high']:.4f}], difference {h['diff']:+.4f} (paired randomisation "
        f"p = {h['p']:.3g}): the chosen blend is {verdict} the fused run."
    )
