"""Retrieval metrics computed by ir_measures, checked by a second evaluator, on one common query set.

Conventions (trec_eval's, ``docs/CONVENTIONS.md#metrics``; each is pinned by a closed-form case in
``tests/evaluate/test_metrics.py``):

- a unit is *relevant* when its qrels grade is >= 1 (:data:`REL_LEVEL`); grade 0 means judged non-relevant;
- nDCG uses the grade as a linear gain, a log2 discount and the ideal DCG of **all judged units of the
  query** (not of the retrieved list): a run that finds 1 of 3 gold units never scores 1.0;
- ``recall@k`` is the share of a query's relevant units in the top k; ``success@k`` (hit rate) is 1 when
  at least one is; ``mrr@k`` is the reciprocal rank of the first relevant unit within k (0 beyond);
  ``precision@k`` always divides by k; ``map`` is trec_eval's (uninterpolated) average precision over the
  full run depth;
- a run is ranked by its dict order; before evaluation scores are made strictly decreasing in that order
  (:func:`rerankeval.core.runs.strictly_decreasing`), so no evaluator reorders ties by document id;
- a run file is a *unit-level* run: chunks were mapped to their relevance unit and deduplicated before
  any cutoff, the first (best-ranked) chunk of a unit wins (:func:`rerankeval.core.runs.to_units`).

Column names say what they measure: ``success@5``, ``mrr@10``, ``ndcg@10``, ``recall@5``,
``precision@5``, ``map``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from rerankeval.core.runs import Qrels, Run, strict_order

REL_LEVEL = 1
DEFAULT_KS = (1, 3, 5, 10, 20, 100)
FAMILIES = ("success", "mrr", "ndcg", "recall", "precision")

DEDUPE_POLICY = (
    "chunks are mapped to their relevance unit and deduplicated before any cutoff; the first "
    "(best-ranked) chunk of a unit wins (rerankeval.core.runs.to_units)"
)
TIE_POLICY = (
    "ranked by the order the variant produced: run files hold strictly decreasing scores "
    "(rerankeval.core.runs.write_trec), so no evaluator breaks ties by document id"
)

_COL = re.compile(r"^(success|mrr|ndcg|recall|precision)@(\d+)$")


# --------------------------------------------------------------------------- metric names
def metric_columns(ks: Iterable[int] = DEFAULT_KS, families: Sequence[str] = FAMILIES) -> list[str]:
    """Column names for every family and cutoff, then ``map``: ``success@1, ..., precision@100, map``."""
    cut = sorted({int(k) for k in ks})
    if not cut or cut[0] < 1:
        raise ValueError(f"cutoffs must be positive integers, got {list(ks)}")
    return [f"{f}@{k}" for f in families for k in cut] + ["map"]


def parse_column(col: str) -> tuple[str, int | None]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``, ``"map"`` -> ``("map", None)``."""
    if col == "map":
        return "map", None
    m = _COL.match(col)
    if not m:
        raise ValueError(f"unknown metric column {col!r}; expected e.g. ndcg@10, recall@5 or map")
    return m.group(1), int(m.group(2))


def ir_measure(col: str):
    """The ir_measures measure behind a column name (relevance level :data:`REL_LEVEL`)."""
    from ir_measures import AP, RR, P, R, Success, nDCG

    fam, k = parse_column(col)
    if fam == "map":
        return AP(rel=REL_LEVEL)
    return {
        "success": Success(rel=REL_LEVEL, cutoff=k),
        "mrr": RR(rel=REL_LEVEL, cutoff=k),
        "ndcg": nDCG(cutoff=k),
        "recall": R(cutoff=k),
        "precision": P(rel=REL_LEVEL, cutoff=k),
    }[fam]


def ranx_metric(col: str) -> str:
    """ranx's name for a column (ranx ``ndcg`` is trec_eval's linear-gain nDCG; ``hit_rate`` is Success)."""
    fam, k = parse_column(col)
    if fam == "map":
        return "map"
    name = {"success": "hit_rate", "mrr": "mrr", "ndcg": "ndcg", "recall": "recall", "precision": "precision"}
    return f"{name[fam]}@{k}"


def label(col: str) -> str:
    """A human label: ``ndcg@10`` -> ``nDCG@10``."""
    fam, k = parse_column(col)
    nice = {
        "success": "Success",
        "mrr": "MRR",
        "ndcg": "nDCG",
        "recall": "Recall",
        "precision": "P",
        "map": "MAP",
    }[fam]
    return nice if k is None else f"{nice}@{k}"


# --------------------------------------------------------------------------- query set
def relevant_queries(qrels: Qrels) -> set[str]:
    """Queries with at least one relevant unit (grade >= :data:`REL_LEVEL`)."""
    return {q for q, docs in qrels.items() if any(g >= REL_LEVEL for g in docs.values())}


@dataclass
class QuerySet:
    """The queries every variant is evaluated on, and why others were left out."""

    qids: list[str]
    policy: str  # "common" or "zero"
    n_judged: int  # queries with at least one relevant unit
    no_relevant: list[str]  # in qrels, but no unit graded >= REL_LEVEL: not evaluable
    not_in_queries: list[str]  # judged but absent from queries.jsonl
    missing_by_variant: dict[str, list[str]]  # judged queries a variant's run lacks
    empty: list[str] = field(default_factory=list)  # runs answering no query here: scored 0, never a crash

    @property
    def n(self) -> int:
        return len(self.qids)

    @property
    def limited_by(self) -> list[str]:
        return [v for v, miss in self.missing_by_variant.items() if miss]

    def describe(self) -> str:
        parts = [f"{self.n} queries evaluated (of {self.n_judged} with at least one relevant unit)"]
        if self.policy == "common":
            if self.limited_by:
                lim = ", ".join(f"{v} lacks {len(self.missing_by_variant[v])}" for v in self.limited_by)
                parts.append(f"common set of queries every run answered; limited by: {lim}")
            else:
                parts.append("every run answered every judged query")
        else:
            lim = ", ".join(f"{v}: {len(m)}" for v, m in self.missing_by_variant.items() if m)
            parts.append("a query missing from a run scores 0 for that run" + (f" ({lim})" if lim else ""))
        if self.empty:
            parts.append(f"WARNING: {', '.join(self.empty)} returned nothing for any of these queries and score 0")
        if self.no_relevant:
            parts.append(f"{len(self.no_relevant)} judged queries have no relevant unit and are left out")
        if self.not_in_queries:
            parts.append(f"{len(self.not_in_queries)} judged queries are not in queries.jsonl and are left out")
        return "; ".join(parts) + "."


def query_set(
    runs: Mapping[str, Run],
    qrels: Qrels,
    queries: Iterable[str] | None = None,
    policy: str = "common",
) -> QuerySet:
    """Queries to evaluate: judged (>= 1 relevant unit), in ``queries`` if given, and

    - ``policy="common"``: present in every run (the variants lacking some are named in the result);
    - ``policy="zero"``: all of them; a run lacking a query scores 0 on it (trec_eval ``-c``).

    A run that answers none of them (a degenerate, empty run) never empties the common set: it is listed in
    ``empty`` and scores 0 on every query under either policy.
    """
    if policy not in ("common", "zero"):
        raise ValueError(f"policy must be 'common' or 'zero', got {policy!r}")
    rel = relevant_queries(qrels)
    no_rel = sorted(set(qrels) - rel)
    not_in_q: list[str] = []
    if queries is not None:
        qs = set(queries)
        not_in_q = sorted(rel - qs)
        rel &= qs
    missing = {v: sorted(rel - {q for q, d in r.items() if d}) for v, r in runs.items()}
    empty = [v for v, miss in missing.items() if rel and len(miss) == len(rel)]
    keep = set(rel)
    if policy == "common":
        for v, r in runs.items():
            if v not in empty:
                keep &= {q for q, d in r.items() if d}
    return QuerySet(sorted(keep), policy, len(rel) + len(not_in_q), no_rel, not_in_q, missing, empty)


# --------------------------------------------------------------------------- evaluation
def evaluate(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qs: QuerySet,
    columns: Sequence[str],
) -> pd.DataFrame:
    """Per-query metrics with ir_measures, long format: ``variant, qid, metric, value``.

    Only the queries in ``qs`` are evaluated; each run is put in strict order first (:func:`strict_order`).
    Under the ``zero`` policy (and for a run in ``qs.empty``) a query a run lacks gets 0 for every metric.
    """
    import ir_measures

    keep = set(qs.qids)
    sub_qrels = {q: dict(d) for q, d in qrels.items() if q in keep}
    measures = {ir_measure(c): c for c in columns}
    rows: list[tuple[str, str, str, float]] = []
    for v, run in runs.items():
        sub_run = strict_order({q: d for q, d in run.items() if q in keep and d})
        got: dict[tuple[str, str], float] = {}
        if sub_run:
            for m in ir_measures.iter_calc(list(measures), sub_qrels, sub_run):
                got[(m.query_id, measures[m.measure])] = float(m.value)
        for q in qs.qids:
            for c in columns:
                if q in sub_run:
                    if (q, c) not in got:
                        raise RuntimeError(f"ir_measures returned no {c} for query {q!r} of {v}")
                    rows.append((v, q, c, got[(q, c)]))
                elif qs.policy == "zero" or v in qs.empty:
                    rows.append((v, q, c, 0.0))
                else:
                    raise RuntimeError(f"query {q!r} is in the common set but missing from {v}")
    df = pd.DataFrame(rows, columns=["variant", "qid", "metric", "value"])
    return df


def wide(per_query: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Long per-query metrics -> ``qid x variant`` for one metric (or ``(qid) x (variant, metric)``)."""
    if metric is not None:
        sub = per_query[per_query.metric == metric]
        out = sub.pivot(index="qid", columns="variant", values="value")
        return out[[v for v in dict.fromkeys(sub.variant)]]
    return per_query.pivot_table(index="qid", columns=["variant", "metric"], values="value")


# --------------------------------------------------------------------------- tables
def summary_table(ci: pd.DataFrame, extra: pd.DataFrame | None = None) -> pd.DataFrame:
    """metrics.csv: one row per variant; ``n_queries``, then ``<metric>, <metric>_ci_low, <metric>_ci_high``
    for every metric, then the columns of ``extra`` (one row per variant, e.g. the ledger summary)."""
    variants = list(dict.fromkeys(ci.variant))
    mets = list(dict.fromkeys(ci.metric))
    rows = []
    for v in variants:
        sub = ci[ci.variant == v].set_index("metric")
        row: dict[str, object] = {"variant": v, "n_queries": int(sub["n"].iloc[0]) if len(sub) else 0}
        for m in mets:
            row[m] = float(sub.at[m, "mean"])
            row[f"{m}_ci_low"] = float(sub.at[m, "ci_low"])
            row[f"{m}_ci_high"] = float(sub.at[m, "ci_high"])
        rows.append(row)
    out = pd.DataFrame(rows)
    if extra is not None and len(extra):
        out = out.merge(extra.drop(columns=["n_queries"], errors="ignore"), on="variant", how="left")
    return out


def slice_table(
    per_query: pd.DataFrame, slices: Mapping[str, Mapping[str, str]], metric_cols: Sequence[str]
) -> pd.DataFrame:
    """Mean of each metric per slice value and variant: ``slice, value, n, variant, <metrics>...``.

    ``slices`` maps a query id to its slices (queries.jsonl ``slices``); a query without a slice is
    left out of that slice's rows. Empty when no query has slices.
    """
    names = sorted({k for s in slices.values() for k in s})
    sub = per_query[per_query.metric.isin(metric_cols)]
    table = sub.pivot_table(index=["variant", "qid"], columns="metric", values="value", sort=False)
    table = table[[c for c in metric_cols if c in table.columns]].reset_index()
    rows = []
    for name in names:
        val = table.qid.map(lambda q, n=name: slices.get(q, {}).get(n))
        order = {v: i for i, v in enumerate(dict.fromkeys(per_query.variant))}
        groups = table.assign(_value=val).dropna(subset=["_value"]).groupby(["_value", "variant"])
        for (value, v), g in sorted(groups, key=lambda kv: (str(kv[0][0]), order[kv[0][1]])):
            row = {"slice": name, "value": str(value), "n": len(g), "variant": v}
            row.update({c: float(g[c].mean()) for c in metric_cols if c in g})
            rows.append(row)
    return pd.DataFrame(rows)
