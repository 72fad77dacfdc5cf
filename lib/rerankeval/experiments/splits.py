"""Honest tuning of a sweep: choose on queries, report on other queries (notebook 06-sweep).

- With a train split (``qrels/train.tsv`` in the dataset folder, e.g. SciFact's 809 queries): the setting
  is chosen on train and reported ONCE on the evaluated split (test), beside the default setting, each with
  its bootstrap CI and the paired test between them. The chooser receives the train qrels only.
- Without one: k-fold cross-validation over the evaluated queries (seeded folds, recorded). For each fold
  the setting is chosen on the other folds; the fold's queries are answered by that setting, and the
  resulting out-of-fold run is compared with the default on every query. No query is scored by a setting
  that was chosen on it.

:func:`choose` sees a per-query table and nothing else; :func:`train_test` and :func:`kfold` hand it only
the choosing queries' values (tests: ``tests/experiments/test_sweep.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, Run
from rerankeval.corpus import beir
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import metrics, stats
from rerankeval.experiments.grid import Engine, Point, score_points

DEFAULT, TUNED = "default", "tuned"
MIN_QUERIES = 2  # judged queries k-fold needs: one to choose on, another to report on


@dataclass
class Split:
    """Queries (qid -> text) and their qrels; only ``qrels[q]`` for ``q`` in ``queries`` is ever read."""

    name: str
    queries: dict[str, str]
    qrels: Qrels

    @property
    def qids(self) -> list[str]:
        return sorted(self.queries)


def train_split(dp: DatasetPaths) -> Split | None:
    """The dataset's train queries and qrels (``qrels/train.tsv``), or None when it has none, none of its
    queries has a relevant unit (outside the evaluated split), or the evaluated split is train itself.
    Judgments are keyed by relevance unit, as stage 01 keys them."""
    main = str(corpus.load_stats(dp).get("split", "test"))
    path = dp.source_qrels("train")
    if main == "train" or not path.is_file():
        return None
    kind = corpus.load_stats(dp).get("kind")
    unit = (lambda did: "_".join(did.split())) if kind == "pdf" else str
    qrels, _ = beir.merge_judgments(beir.read_judgments(path), path, unit=unit)
    texts = beir.read_queries(dp.source_queries)
    evaluated = set(corpus.load_queries(dp))
    keep = {
        q: texts[q]["text"]
        for q, d in qrels.items()
        if q in texts and q not in evaluated and any(g > 0 for g in d.values())
    }
    return Split("train", keep, {q: qrels[q] for q in keep}) if keep else None


def eval_split(dp: DatasetPaths) -> Split:
    """The evaluated split (what stage 01 extracted; ``test`` by default)."""
    name = str(corpus.load_stats(dp).get("split", "test"))
    return Split(name, corpus.load_queries(dp), corpus.load_qrels(dp))


def judged(split: Split) -> Split:
    """``split`` without the queries no metric can score (no relevant unit: every judgment graded 0)."""
    keep = {
        q: t
        for q, t in split.queries.items()
        if q in split.qrels and any(g >= metrics.REL_LEVEL for g in split.qrels[q].values())
    }
    return Split(split.name, keep, split.qrels)


def too_few(evaluated: Split, train: Split | None) -> str:
    """Why no setting can be chosen honestly on these (judged) splits, or "" when one can: k-fold needs
    :data:`MIN_QUERIES` judged queries, train/test one judged query in the evaluated split."""
    n, name = len(evaluated.qids), evaluated.name
    skipped = (
        "The sweep and its tuning were skipped: no setting was chosen and no hybrid_tuned run was written; "
        "the rest of the report is unaffected."
    )
    if train is not None and n == 0:
        return (
            f"the sweep needs at least 1 judged query in the evaluated split {name!r} to report the setting "
            f"chosen on train; it has 0 (a judged query has a relevant unit, grade >= {metrics.REL_LEVEL}): "
            f"add judgments to qrels/{name}.tsv and run 06 again. {skipped}"
        )
    if train is None and n < MIN_QUERIES:
        return (
            f"the sweep needs at least {MIN_QUERIES} judged queries (each with a relevant unit, grade >= "
            f"{metrics.REL_LEVEL}) to choose a setting on some and report it on others; this dataset has {n}: "
            f"add judgments for more queries to qrels/{name}.tsv (or a qrels/train.tsv to choose on) and run "
            f"06 again. {skipped}"
        )
    return ""


def folds(qids: Sequence[str], k: int, seed: int) -> dict[str, int]:
    """qid -> fold (0..k-1): a seeded permutation of the sorted qids dealt round-robin (sizes differ by <= 1)."""
    if k < 2 or k > len(qids):
        raise ValueError(f"k-fold needs 2 <= k <= {len(qids)} (the number of queries), got k = {k}")
    order = np.random.default_rng(seed).permutation(sorted(qids))
    return {str(q): i % k for i, q in enumerate(order)}


def choose(per_query: pd.DataFrame, objective: str, order: Sequence[str]) -> str:
    """The point with the best mean ``objective`` over the queries of ``per_query`` (long ``point, qid,
    metric, value``); ties go to the earlier point of ``order`` (the default comes first)."""
    sub = per_query[per_query.metric == objective]
    if sub.empty:
        raise ValueError(f"nothing to choose from: no {objective} values")
    means = sub.groupby("point").value.mean()
    rank = {p: i for i, p in enumerate(order)}
    return min(means.index, key=lambda p: (-round(float(means[p]), 12), rank.get(p, len(rank))))


@dataclass
class Tuning:
    """What was chosen, how, and the comparison with the default on queries that did not choose it."""

    protocol: str  # "train/test" or "k-fold"
    chosen: dict[str, str]  # fold (or "train") -> chosen point name
    run: Run  # the tuned run over the reported queries (out-of-fold with k-fold)
    per_query: pd.DataFrame  # long variant (default/tuned), qid, metric, value on the reported queries
    ci: pd.DataFrame  # stats.bootstrap_table of per_query
    comparison: pd.DataFrame  # stats.compare tuned vs default on the objective
    choosing_scores: pd.DataFrame = field(default_factory=pd.DataFrame)  # per fold/train: chosen and default means
    folds: dict[str, int] = field(default_factory=dict)
    seconds_per_query: float = float("nan")
    scored: list[tuple[str, pd.DataFrame, dict[str, float]]] = field(default_factory=list)  # split, per query, secs


def _report(per_query: pd.DataFrame, objective: str, n_boot: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    ci = stats.bootstrap_table(per_query, n_boot=n_boot, seed=seed)
    cmp = stats.compare(per_query, objective, pairs=[(TUNED, DEFAULT)], n_boot=n_boot, n_resamples=n_boot, seed=seed)
    return ci, cmp


def _means(pq: pd.DataFrame, objective: str, names: Sequence[str]) -> dict[str, float]:
    sub = pq[pq.metric == objective].groupby("point").value.mean()
    return {n: float(sub[n]) for n in names}


def train_test(
    engine: Engine,
    points: Sequence[Point],
    train: Split,
    test: Split,
    cols: Sequence[str],
    objective: str,
    *,
    n_boot: int = stats.N_BOOT,
    seed: int = 42,
) -> Tuning:
    """Choose on ``train`` (its qrels only), then score the chosen and the default point once on ``test``."""
    pq_train, secs_train = score_points(engine, points, train.qids, train.qrels, cols)
    order = [p.name for p in points]
    best = choose(pq_train, objective, order)
    default, chosen = points[0], next(p for p in points if p.name == best)
    run, secs = engine.run(chosen, test.qids)
    pq_test, secs_test = score_points(engine, list(dict.fromkeys([default, chosen])), test.qids, test.qrels, cols)
    per_query = _as_variants(pq_test, default.name, chosen.name)
    ci, cmp = _report(per_query, objective, n_boot, seed)
    m = _means(pq_train, objective, [best, default.name])
    scores = pd.DataFrame(
        [{"split": "train", "chosen": best, f"{objective} {TUNED}": m[best], f"{objective} {DEFAULT}": m[default.name]}]
    )
    return Tuning(
        "train/test",
        {"train": best},
        run,
        per_query,
        ci,
        cmp,
        scores,
        seconds_per_query=secs,
        scored=[(train.name, pq_train, secs_train), (test.name, pq_test, secs_test)],
    )


def _as_variants(pq: pd.DataFrame, default: str, chosen: str) -> pd.DataFrame:
    """Per-query values of the default and the chosen point as variants ``default`` and ``tuned``."""
    out = [pq[pq.point == default].assign(variant=DEFAULT), pq[pq.point == chosen].assign(variant=TUNED)]
    return _fused_only(pd.concat(out, ignore_index=True)[["variant", "qid", "metric", "value"]])


def _fused_only(pq: pd.DataFrame) -> pd.DataFrame:
    """Drop the replayed-rerank metrics (they cover only the queries stage 04 reranked)."""
    return pq[~pq.metric.str.contains(" ", regex=False)].reset_index(drop=True)


def kfold(
    engine: Engine,
    points: Sequence[Point],
    split: Split,
    cols: Sequence[str],
    objective: str,
    *,
    k: int = 5,
    seed: int = 0,
    n_boot: int = stats.N_BOOT,
) -> Tuning:
    """k-fold cross-validation over ``split``'s queries: the out-of-fold tuned run against the default."""
    fold_of = folds(split.qids, k, seed)
    pq, secs = score_points(engine, points, split.qids, split.qrels, cols)
    order = [p.name for p in points]
    default = points[0].name
    chosen, rows, oof, run = {}, [], [], {}
    for f in range(k):
        held = {q for q, i in fold_of.items() if i == f}
        best = choose(pq[~pq.qid.isin(held)], objective, order)
        chosen[f"fold {f}"] = best
        m = _means(pq[~pq.qid.isin(held)], objective, [best, default])
        rows.append(
            {
                "split": f"fold {f} (chosen on the other {k - 1})",
                "chosen": best,
                f"{objective} {TUNED}": m[best],
                f"{objective} {DEFAULT}": m[default],
            }
        )
        oof.append(pq[(pq.point == best) & pq.qid.isin(held)])
        fold_run, _ = engine.run(next(p for p in points if p.name == best), sorted(held))
        run.update(fold_run)
    per_query = pd.concat(
        [pq[pq.point == default].assign(variant=DEFAULT), pd.concat(oof).assign(variant=TUNED)], ignore_index=True
    )
    per_query = _fused_only(per_query[["variant", "qid", "metric", "value"]])
    ci, cmp = _report(per_query, objective, n_boot, seed)
    mean_secs = float(np.mean([secs[chosen[f"fold {f}"]] for f in range(k)]))
    scored = [(f"fold {f}", pq[pq.qid.map(fold_of) == f], secs) for f in range(k)]
    return Tuning(
        "k-fold",
        chosen,
        {q: run[q] for q in split.qids if q in run},
        per_query,
        ci,
        cmp,
        pd.DataFrame(rows),
        fold_of,
        mean_secs,
        scored,
    )


def fold_table(t: Tuning) -> pd.DataFrame:
    """``qid, fold`` of a k-fold tuning (written beside ``sweep.csv``)."""
    return pd.DataFrame(sorted(t.folds.items()), columns=["qid", "fold"])


def headline(t: Tuning, objective: str) -> Mapping[str, float]:
    """Mean and CI of default and tuned on the reported queries, with the paired test's p."""
    ci = t.ci[t.ci.metric == objective].set_index("variant")
    row = t.comparison.iloc[0]
    return {
        **{f"{v} {c}": float(ci.loc[v, c]) for v in (DEFAULT, TUNED) for c in ("mean", "ci_low", "ci_high")},
        "diff": float(row["diff"]),
        "diff_ci_low": float(row.diff_ci_low),
        "diff_ci_high": float(row.diff_ci_high),
        "p": float(row.p),
        "n": int(row.n),
    }
