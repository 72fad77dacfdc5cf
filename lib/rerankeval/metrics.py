"""Retrieval metrics computed by ir_measures, checked by a second evaluator, on one common query set.

Conventions (trec_eval's, see the field notes):

- a unit is *relevant* when its qrels grade is >= 1 (:data:`REL_LEVEL`); grade 0 means judged non-relevant;
- nDCG uses the grade as a linear gain, a log2 discount and the ideal DCG of **all judged units of the
  query** (not of the retrieved list): a run that finds 1 of 3 gold units never scores 1.0;
- ``recall@k`` is the share of a query's relevant units in the top k; ``success@k`` (hit rate) is 1 when
  at least one is; ``mrr@k`` is the reciprocal rank of the first relevant unit within k (0 beyond);
  ``precision@k`` always divides by k; ``map`` is trec_eval's (uninterpolated) average precision over the
  full run depth;
- a run is ranked by its dict order; before evaluation scores are made strictly decreasing in that order
  (:func:`rerankeval.runs.strictly_decreasing`), so no evaluator reorders ties by document id;
- a run file is a *unit-level* run: chunks were mapped to their relevance unit and deduplicated before
  any cutoff, the first (best-ranked) chunk of a unit wins (:func:`rerankeval.runs.to_units`).

Column names say what they measure: ``success@5``, ``mrr@10``, ``ndcg@10``, ``recall@5``,
``precision@5``, ``map``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .runs import Qrels, Run, iter_trec, ranked, strictly_decreasing

REL_LEVEL = 1
DEFAULT_KS = (1, 3, 5, 10, 20, 100)
FAMILIES = ("success", "mrr", "ndcg", "recall", "precision")
VARIANT_ORDER = ("bm25", "vector", "hybrid", "qdrant_hybrid", "cross_encoder", "hybrid_rerank")
TOLERANCE = 1e-9

DEDUPE_POLICY = (
    "chunks are mapped to their relevance unit and deduplicated before any cutoff; the first "
    "(best-ranked) chunk of a unit wins (rerankeval.runs.to_units)"
)
TIE_POLICY = (
    "ranked by the order the variant produced: run files hold strictly decreasing scores "
    "(rerankeval.runs.write_trec), so no evaluator breaks ties by document id"
)

_COL = re.compile(r"^(success|mrr|ndcg|recall|precision)@(\d+)$")


class ConformanceError(AssertionError):
    """Two evaluators disagree on a metric by more than the tolerance."""


class RunContractError(ValueError):
    """A run file breaks the run contract (duplicate units or tied / increasing scores)."""


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


# --------------------------------------------------------------------------- run files
@dataclass
class RunCheck:
    """What reading one TREC run file found."""

    variant: str
    path: str
    n_queries: int = 0
    n_lines: int = 0
    n_duplicate: int = 0  # a unit listed twice for one query (first occurrence kept)
    n_ties: int = 0  # a score equal to or above the previous one in file order
    n_rank_mismatch: int = 0  # rank column disagrees with the line order
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.n_duplicate or self.n_ties)

    def problems(self) -> list[str]:
        out = []
        if self.n_duplicate:
            out.append(f"{self.n_duplicate} duplicate unit(s) within a query")
        if self.n_ties:
            out.append(f"{self.n_ties} score(s) not strictly below the previous line")
        if self.n_rank_mismatch:
            out.append(f"{self.n_rank_mismatch} rank column value(s) out of line order")
        return out


def read_run_checked(path: str | os.PathLike[str], variant: str | None = None) -> tuple[Run, RunCheck]:
    """Read a TREC run in file order and check it against the run contract.

    Returns the run (per query, units in file order, first occurrence of a unit wins) and a
    :class:`RunCheck` counting duplicates and scores that are not strictly decreasing.
    """
    path = Path(path)
    chk = RunCheck(variant=variant or path.stem, path=str(path))
    raw: dict[str, list[tuple[str, float, int]]] = {}
    for _, q, doc, rank, s in iter_trec(path):
        raw.setdefault(q, []).append((doc, s, rank))
        chk.n_lines += 1
    run: Run = {}
    for q, items in raw.items():
        seen: dict[str, float] = {}
        prev = math.inf
        for i, (doc, s, rank) in enumerate(items, start=1):
            if s >= prev:
                chk.n_ties += 1
                if len(chk.examples) < 5:
                    chk.examples.append(f"query {q}: {doc} scores {s!r} after {prev!r}")
            if rank != i:
                chk.n_rank_mismatch += 1
            prev = s
            if doc in seen:
                chk.n_duplicate += 1
                if len(chk.examples) < 5:
                    chk.examples.append(f"query {q}: unit {doc} listed twice")
                continue
            seen[doc] = s
        run[q] = seen
    chk.n_queries = len(run)
    return run, chk


def discover_runs(runs_dir: str | os.PathLike[str], variants: Sequence[str] | None = None) -> dict[str, Path]:
    """``variant -> run file`` for every ``*.trec`` directly in ``runs_dir`` (unit-level runs).

    Known variants come in pipeline order (:data:`VARIANT_ORDER`), others alphabetically after them.
    ``variants`` restricts (and orders) the result; a requested variant without a file raises.
    """
    runs_dir = Path(runs_dir)
    found = {p.stem: p for p in sorted(runs_dir.glob("*.trec"))} if runs_dir.is_dir() else {}
    if variants:
        missing = [v for v in variants if v not in found]
        if missing:
            raise FileNotFoundError(
                f"no run file for variant(s) {missing} in {runs_dir} (found: {sorted(found)})"
            )
        return {v: found[v] for v in variants}
    return {v: found[v] for v in order_variants(found)}


def order_variants(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    known = [v for v in VARIANT_ORDER if v in names]
    return known + sorted(v for v in names if v not in VARIANT_ORDER)


def strict_order(run: Run) -> Run:
    """The same rankings with strictly decreasing scores in dict order (stable for ties)."""
    return {q: dict(strictly_decreasing(ranked(docs))) for q, docs in run.items()}


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
        if self.no_relevant:
            parts.append(f"{len(self.no_relevant)} judged queries have no relevant unit and are left out")
        if self.not_in_queries:
            parts.append(
                f"{len(self.not_in_queries)} judged queries are not in queries.jsonl and are left out"
            )
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
    keep = set(rel)
    if policy == "common":
        for r in runs.values():
            keep &= {q for q, d in r.items() if d}
    return QuerySet(sorted(keep), policy, len(rel) + len(not_in_q), no_rel, not_in_q, missing)


# --------------------------------------------------------------------------- evaluation
def evaluate(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qs: QuerySet,
    columns: Sequence[str],
) -> pd.DataFrame:
    """Per-query metrics with ir_measures, long format: ``variant, qid, metric, value``.

    Only the queries in ``qs`` are evaluated; each run is put in strict order first (:func:`strict_order`).
    Under the ``zero`` policy a query a run lacks gets 0 for every metric.
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
                elif qs.policy == "zero":
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


def means(per_query: pd.DataFrame) -> pd.DataFrame:
    """``variant x metric`` mean over queries, variants and metrics in first-seen order."""
    out = per_query.pivot_table(index="variant", columns="metric", values="value", aggfunc="mean", sort=False)
    return out.loc[list(dict.fromkeys(per_query.variant)), list(dict.fromkeys(per_query.metric))]


# --------------------------------------------------------------------------- second opinion
def _ranx_per_query(run_file: Path, qrels: Qrels, qids: list[str], columns: Sequence[str]) -> dict[str, dict]:
    import ranx

    rrun = ranx.Run.from_file(str(run_file), kind="trec")
    rd = rrun.to_dict()
    present = [q for q in qids if q in rd and rd[q]]
    if not present:
        return {}
    sub_qrels = ranx.Qrels({q: dict(qrels[q]) for q in present})
    sub_run = ranx.Run({q: dict(rd[q]) for q in present})
    metrics = [ranx_metric(c) for c in columns]
    ranx.evaluate(sub_qrels, sub_run, metrics, return_mean=True, save_results_in_run=True)
    # per-query scores keyed by query id (ranx's arrays follow its own sorted query order)
    return {c: {q: float(sub_run.scores[ranx_metric(c)][q]) for q in present} for c in columns}


def _read_plain_trec(path: Path) -> Run:
    """A deliberately naive TREC reader (dict overwrite on duplicates), independent of ours."""
    out: Run = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 6:
                out.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return out


def _pytrec_per_query(
    run_file: Path, qrels: Qrels, qids: list[str], columns: Sequence[str]
) -> dict[str, dict]:
    import pytrec_eval

    run = _read_plain_trec(run_file)
    present = [q for q in qids if q in run and run[q]]
    if not present:
        return {}
    sub_qrels = {q: dict(qrels[q]) for q in present}
    out: dict[str, dict] = {c: {} for c in columns}
    base: dict[str, str] = {}
    mrr_cuts: list[int] = []
    for c in columns:
        fam, k = parse_column(c)
        if fam == "map":
            base[c] = "map"
        elif fam == "success":
            base[c] = f"success_{k}"
        elif fam == "ndcg":
            base[c] = f"ndcg_cut_{k}"
        elif fam == "recall":
            base[c] = f"recall_{k}"
        elif fam == "precision":
            base[c] = f"P_{k}"
        else:
            mrr_cuts.append(k)
    if base:
        fams = {"map"} & set(base.values())
        cuts: dict[str, set[int]] = {}
        for c, name in base.items():
            if name != "map":
                fam, k = parse_column(c)
                tre = {"success": "success", "ndcg": "ndcg_cut", "recall": "recall", "precision": "P"}[fam]
                cuts.setdefault(tre, set()).add(k)
        req = set(fams) | {f"{m}.{','.join(map(str, sorted(ks)))}" for m, ks in cuts.items()}
        ev = pytrec_eval.RelevanceEvaluator(sub_qrels, req, relevance_level=REL_LEVEL)
        res = ev.evaluate({q: run[q] for q in present})
        for c, name in base.items():
            out[c] = {q: float(res[q][name]) for q in present}
    for k in mrr_cuts:
        # recip_rank has no cutoff in trec_eval: evaluate the run truncated to its top k by score
        trunc = {q: dict(sorted(run[q].items(), key=lambda kv: (-kv[1], kv[0]))[:k]) for q in present}
        ev = pytrec_eval.RelevanceEvaluator(sub_qrels, {"recip_rank"}, relevance_level=REL_LEVEL)
        res = ev.evaluate(trunc)
        out[f"mrr@{k}"] = {q: float(res[q]["recip_rank"]) if q in res else 0.0 for q in present}
    return out


CHECKERS = {"ranx": _ranx_per_query, "pytrec_eval": _pytrec_per_query}


def checker_versions(checkers: Sequence[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    dist = {"ranx": "ranx", "pytrec_eval": "pytrec_eval-terrier"}
    out = []
    for c in checkers:
        try:
            out.append(f"{c} {version(dist[c])}")
        except PackageNotFoundError:
            out.append(c)
    return " and ".join(out)


def conformance_check(
    run_files: Mapping[str, str | os.PathLike[str]],
    qrels: Qrels,
    per_query: pd.DataFrame,
    qs: QuerySet,
    checkers: Sequence[str] = ("ranx",),
    tol: float = TOLERANCE,
    raise_on_diff: bool = True,
) -> pd.DataFrame:
    """Recompute every metric of every variant from its TREC file with other evaluators and compare.

    ``per_query`` is :func:`evaluate`'s output (ir_measures). Returns ``checker, variant, metric,
    n_queries, max_abs_diff``; raises :class:`ConformanceError` when any difference exceeds ``tol``
    (unless ``raise_on_diff`` is false).
    """
    columns = list(dict.fromkeys(per_query.metric))
    rows = []
    bad = []
    for checker in checkers:
        fn = CHECKERS[checker]
        for v, path in run_files.items():
            mine = per_query[per_query.variant == v].set_index(["qid", "metric"])["value"]
            theirs = fn(Path(path), qrels, qs.qids, columns)
            for c in columns:
                got = theirs.get(c, {})
                diffs = []
                for q in qs.qids:
                    ref = got.get(q, 0.0)  # a query the file lacks scores 0 (only under policy "zero")
                    if q not in got and qs.policy != "zero":
                        diffs.append(math.inf)
                        continue
                    diffs.append(abs(float(mine.loc[(q, c)]) - ref))
                worst = max(diffs) if diffs else 0.0
                rows.append((checker, v, c, len(diffs), worst))
                if worst > tol:
                    i = diffs.index(worst)
                    bad.append(f"{v} {c} ({checker}): query {qs.qids[i]} differs by {worst:.3g}")
    out = pd.DataFrame(rows, columns=["checker", "variant", "metric", "n_queries", "max_abs_diff"])
    if bad and raise_on_diff:
        raise ConformanceError(
            f"{len(bad)} metric(s) disagree between ir_measures and {', '.join(checkers)} "
            f"by more than {tol:g}: "
            + "; ".join(bad[:10])
            + ". Check the run files against the run contract (duplicates, ties) and the metric conventions."
        )
    return out


def assert_run_contract(checks: Iterable[RunCheck]) -> None:
    """Raise :class:`RunContractError` naming every run file with duplicate units or non-decreasing scores."""
    bad = [c for c in checks if not c.ok]
    if bad:
        lines = [
            f"{c.variant} ({c.path}): {', '.join(c.problems())}; e.g. {'; '.join(c.examples[:2])}"
            for c in bad
        ]
        raise RunContractError(
            "run file(s) break the run contract (unit-level, deduplicated, strictly decreasing scores; "
            "see rerankeval.runs.write_trec): " + " | ".join(lines)
        )


def unit_mapping_check(unit_run: Run, chunk_run: Run, unit_of: Mapping[str, str]) -> int:
    """Queries whose unit ranking is not a prefix of the chunk ranking mapped to units (first wins).

    0 means the unit-level run is exactly the chunk-level run deduplicated by unit (possibly truncated).
    Chunks not in the chunk table count as mismatches.
    """
    bad = 0
    for q, docs in unit_run.items():
        units: list[str] = []
        seen: set[str] = set()
        ok = True
        for chunk, _ in ranked(chunk_run.get(q, {})):
            u = unit_of.get(chunk)
            if u is None:
                ok = False
                break
            if u not in seen:
                seen.add(u)
                units.append(u)
        mine = list(docs)
        if not ok or units[: len(mine)] != mine:
            bad += 1
    return bad


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
