"""What notebook 05 shows of an analysis (:class:`rerankeval.evaluate.analyse.Analysis`): its tables as pandas
frames and its sentences as text, so the notebook only displays them.

Nothing here computes a number the analysis has not: these are selections, labels and sentences. Labels of
columns (``report.render.labelled``), figures (``report.plots``) and HTML (the templates, ``report.fragments``)
stay in report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from rerankeval.core.names import HYBRID, LEGS
from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate import discrimination, funnel, manifest, metrics, stats, verdict

if TYPE_CHECKING:
    from rerankeval.evaluate.analyse import Analysis

MANIFEST_KEYS = ("dataset", "chunking", "bm25", "embedding_model", "qdrant", "rrf", "llm", "git", "created_utc")


def _lines(lines: list[str]) -> str:
    return "\n".join(lines)


# --------------------------------------------------------------------------- clean display values
DASH = "\u2013"  # what a table shows for a missing value (never NaN or None)


def cell(value: Any, digits: int = 3) -> Any:
    """One table value for people: missing -> "\u2013", a bool -> yes/no, a float rounded (``digits`` decimals,
    small values with 2 significant digits, large ones with thousands separators), a mapping -> ``k: v; k: v``,
    a list -> ``a, b``; anything else unchanged."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return DASH
    if isinstance(value, str) and value in ("nan", "NaN"):  # a missing number written as text (e.g. "nan" in JSON)
        return DASH
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {cell(v, digits)}" for k, v in value.items()) or DASH
    if isinstance(value, (list, tuple, set)):
        return ", ".join(str(cell(v, digits)) for v in value) or DASH
    if isinstance(value, float):
        return _number(value, digits)
    return value


def _number(v: float, digits: int) -> str:
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}" if abs(v) >= 10_000 else str(int(v))
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 0.01:
        return f"{v:.2g}"
    return f"{v:.{digits}f}"


def tidy(df: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """``df`` for display: every column holding a missing value, a bool or a dict/list shown through :func:`cell`
    (so no NaN, None, True/False or ``{...}`` repr reaches a page); all-number columns stay numbers, and a float
    column of whole numbers (counts) becomes integers (``38``, not ``38.0000``); one mixing counts with fractions
    (a key-value table's ``value``, means that come out whole) shows each through :func:`cell` (``38`` beside
    ``0.847``)."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
        if numeric and not col.isna().any():
            whole = col == col.round()
            if pd.api.types.is_float_dtype(col) and len(col) and whole.all() and col.abs().max() > 1:
                out[c] = col.astype("int64")
            elif pd.api.types.is_float_dtype(col) and (whole & (col.abs() > 1)).any() and not whole.all():
                out[c] = col.astype(object).map(lambda x: cell(x, digits))
            continue
        out[c] = col.astype(object).map(lambda x: cell(x, digits))
    return out


def kv_table(values: Mapping[str, Any], column: str = "value", digits: int = 3) -> pd.DataFrame:
    """A small two-column table of ``values``: a nested mapping becomes one row per item (``section: item``),
    every value shown through :func:`cell` (no dict repr, NaN or True/False)."""
    rows: list[tuple[str, Any]] = []
    for k, v in values.items():
        name = str(k).replace("_", " ")
        if isinstance(v, Mapping) and v:
            rows += [(f"{name}: {str(i).replace('_', ' ')}", cell(x, digits)) for i, x in v.items()]
        else:
            rows.append((name, cell(v, digits)))
    return pd.DataFrame([r[1] for r in rows], index=pd.Index([r[0] for r in rows], name="item"), columns=[column])


# --------------------------------------------------------------------------- inputs and the run contract
def inputs_header(a: Analysis) -> str:
    """The dataset, its judged queries, relevance unit and pool, the dedupe and tie policies, the variants."""
    return _lines(
        [
            f"Dataset {a.dp.name}: {len(a.queries)} queries, {len(a.qrels)} with judgements; relevance unit = "
            f"{a.summary.relevance_unit}; pool_k = {a.pool_k}.",
            f"Dedupe policy: {metrics.DEDUPE_POLICY}.\nOrder: {metrics.TIE_POLICY}.\nVariants: {', '.join(a.runs)}",
        ]
    )


def checks_table(a: Analysis) -> pd.DataFrame:
    """The run contract, one row per chain variant (queries, lines, duplicates, ties, rank column order)."""
    return pd.DataFrame(
        [
            {
                "variant": c.variant,
                "queries": c.n_queries,
                "lines": c.n_lines,
                "duplicate units": c.n_duplicate,
                "non-decreasing scores": c.n_ties,
                "rank column out of order": c.n_rank_mismatch,
            }
            for c in a.checks
        ]
    ).set_index("variant")


def input_notes(a: Analysis) -> list[str]:
    """One line per run from another system, per unit-vs-chunk run check, per warning (in that order)."""
    mapping = [unit_mapping_note(v, bad) for v, bad in a.unit_mapping.items()]
    return [*a.summary.external, *mapping, *(f"WARNING: {w}" for w in a.warnings)]


def unit_mapping_note(variant: str, bad: int) -> str:
    """What the unit-vs-chunk run check found for one variant, in words: what a difference means and what to do."""
    if not bad:
        return (
            f"{variant}: its page ranking is its chunk ranking mapped to pages (a page takes the rank of its "
            "best chunk), as expected."
        )
    head = (
        f"{variant}: in {bad} queries its page ranking (runs/{variant}.trec, the one every metric uses) is not "
        f"its chunk ranking (runs/chunks/{variant}.trec) mapped to pages."
    )
    if variant in LEGS:
        return (
            head + " For a single retriever the two files should agree, so they come from different runs or one "
            "was edited: re-run 03-retrieve (python -m rerankeval.apps.chain --only 03 --force) to write both again."
        )
    return (
        head + " For a fused variant this is by design: it fuses the legs' page rankings, while its chunk run "
        "(used for snippets and the LLM's passages) fuses their chunk rankings. Nothing to fix."
    )


def evaluation_note(a: Analysis) -> str:
    """The query set, the metrics and their relevance rule, and the second evaluators' agreement."""
    return _lines(
        [
            a.query_set.describe(),
            f"{len(a.columns)} metrics x {len(a.runs)} variants x {a.query_set.n} queries: relevant = grade >= "
            f"{metrics.REL_LEVEL}; nDCG gain = grade, ideal DCG from all judged units of the query.",
            f"Metrics verified against {a.summary.verified_against}: {len(a.conformance)} variant x metric checks, "
            f"max |difference| = {a.summary.max_abs_diff}.",
        ]
    )


# --------------------------------------------------------------------------- metrics and costs
def metric_table(a: Analysis) -> pd.DataFrame:
    """Every metric column per variant (variant as the index)."""
    return a.table.set_index("variant")[[c for c in a.columns if c in a.table]]


def key_table(a: Analysis) -> pd.DataFrame:
    """The headline metrics per variant as ``mean [ci_low, ci_high]`` strings."""
    t = a.table
    show = {
        metrics.label(m) + (" (pool ceiling)" if m == f"recall@{a.pool_k}" else ""): [
            f"{r[m]:.3f} [{r[m + '_ci_low']:.3f}, {r[m + '_ci_high']:.3f}]" for _, r in t.iterrows()
        ]
        for m in verdict.key_metrics(t, a.headline, a.pool_k)
    }
    return pd.DataFrame(show, index=pd.Index(t.variant, name="variant"))


def cost_table(a: Analysis) -> pd.DataFrame:
    """The cost columns per variant that have any value (a variant without the cost shows "\u2013")."""
    return tidy(a.costs.set_index("variant").dropna(axis=1, how="all"))


def written_note(a: Analysis, written: dict) -> str:
    """What :func:`rerankeval.evaluate.analyse.write` wrote (and that there are no LLM figures without a ledger)."""
    missing = ["No rerank ledger: no fallback, token or LLM latency figures."] if a.ledger is None else []
    return _lines([*missing, f"Wrote {', '.join(str(p) for p in written.values())}."])


def bar_metrics(a: Analysis) -> list[str]:
    """The metrics of the bar chart: success, MRR, the headline, recall at k and at the pool, MAP."""
    k = a.params.final_k
    wanted = [f"success@{k}", f"mrr@{k}", a.headline, f"recall@{k}", f"recall@{a.pool_k}", "map"]
    return [m for m in dict.fromkeys(wanted) if m in a.columns]


def bar_title(a: Analysis) -> str:
    return f"{a.dp.name}: {a.query_set.n} queries"


# --------------------------------------------------------------------------- comparisons
def headline_comparisons(a: Analysis) -> pd.DataFrame:
    """The paired comparisons on the headline metric, indexed by the pair."""
    c = a.comparisons
    return tidy(c[c.metric == a.headline].drop(columns=["metric"]).set_index(["a", "b"]), digits=4)


def comparison_note(a: Analysis) -> str:
    """The minimum detectable difference of the diff view's pair (when compared), and the test used."""
    pair, _ = a.diff_view()
    c = a.comparisons
    row = c[(c.metric == a.headline) & c.a.isin(pair) & c.b.isin(pair)]
    mdd = [stats.mdd_sentence(row.iloc[0])] if len(pair) == 2 and len(row) else []
    return _lines(
        [
            *mdd,
            f"Test: {a.params.test}; Holm family = all pairs within a metric; better/tied/worse count "
            "the queries where a is above, equal to or below b.",
        ]
    )


# --------------------------------------------------------------------------- the reranker's discrimination
def discrimination_note(a: Analysis) -> str:
    """How well the reranker's model separates relevant from non-relevant candidates (its ROC AUC), what the AUC
    was computed over, and the rank shift the rerank caused; or why there is nothing to measure."""
    d = a.discrimination
    if d is None:
        return "No rerank candidates file (rerank/candidates.csv): run 04-rerank to measure the reranker's model."
    return _lines(
        [s for s in (discrimination.sentence(d), discrimination.coverage(d), discrimination.shift_sentence(d)) if s]
    )


def discrimination_table(a: Analysis) -> pd.DataFrame:
    """Per query: relevant and non-relevant candidates and the AUC (NaN: one class only), worst first."""
    d = a.discrimination
    if d is None or d.per_query is None:
        return pd.DataFrame(columns=discrimination.PER_QUERY_COLUMNS).set_index("qid")
    return d.per_query.sort_values("auc", kind="stable", na_position="last").set_index("qid")


# --------------------------------------------------------------------------- the funnel
def funnel_note(a: Analysis) -> str:
    """The funnel's cutoff, pool and stages, and the ledger's fallback queries (or why there is no funnel)."""
    if a.attribution.empty:
        return f"No funnel: the fused variant ({HYBRID}) has no run file."
    return (
        f"Funnel at k = {a.params.final_k}, pool = {a.pool_k} ({' -> '.join(a.attribution.attrs['stages'])}); "
        f"fallback queries from the ledger: {len(a.fallback_qids)}."
    )


def funnel_tables(a: Analysis) -> list[pd.DataFrame]:
    """Queries per funnel class (with their share), then the missed queries with their text (when any)."""
    if a.attribution.empty:
        return []
    counts = funnel.funnel_counts(a.attribution).to_frame().rename_axis("funnel class")
    out = [counts.assign(share=lambda d: (d.queries / d.queries.sum()).round(3))]
    misses = a.attribution[a.attribution["class"] != "hit"].assign(query=lambda d: d.qid.map(a.queries))
    ranks = {c: f"first relevant rank: {c.removeprefix('rank_')}" for c in misses.columns if c.startswith("rank_")}
    misses = tidy(misses.set_index("qid").rename(columns=ranks | {"class": "funnel class"}))
    return [*out, misses] if len(misses) else out


def ceiling_table(a: Analysis) -> pd.DataFrame:
    """The headline, Recall@k and the pool ceiling (Recall@pool_k) per variant, labelled; one Recall column when
    ``pool_k`` equals the cutoff (it is then both)."""
    k, pool = a.params.final_k, f"recall@{a.pool_k}"
    cols = [c for c in dict.fromkeys((a.headline, f"recall@{k}", pool)) if c in a.table]
    names = {c: metrics.label(c) for c in cols}
    if pool in names:
        names[pool] += f" (= pool ceiling, pool_k = {a.pool_k})" if pool == f"recall@{k}" else " (pool ceiling)"
    return a.table.set_index("variant")[cols].rename(columns=names)


def slice_table(a: Analysis) -> pd.DataFrame:
    """The headline metric per query slice (rows: slice, value, n) and variant (columns)."""
    return tidy(
        a.by_slice.pivot_table(
            index=["slice", "value", "n"], columns="variant", values=a.headline, sort=False
        ).rename_axis(columns=f"{metrics.label(a.headline)} by variant")
    )


# --------------------------------------------------------------------------- the manifest
def rounded(obj: Any, digits: int = 4) -> Any:
    """``obj`` with every float rounded to ``digits`` significant digits, at any depth (for display; the files
    keep full precision)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else obj
    if isinstance(obj, Mapping):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v, digits) for v in obj]
    return obj


def manifest_excerpt(dp: DatasetPaths) -> str:
    """The manifest's data, parameters, models, endpoints and code versions, as indented JSON (secrets redacted,
    numbers to 4 significant digits; manifest.json keeps them whole)."""
    man = manifest.read_manifest(dp)
    return json.dumps(rounded({k: man.get(k) for k in MANIFEST_KEYS}), indent=2, default=str)
