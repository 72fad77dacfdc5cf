"""The verdict: plain-language sentences generated from the numbers (winner, what reranking did, how well the
reranker's model separates relevant from non-relevant candidates, pool ceiling). Prose only; the notebook and
the report page render it (escaped).

A verdict is made only from comparable numbers: a variant that did not answer some of the evaluated queries
(e.g. notebook 04 with ``max_queries``) is never ranked against the others on means that count those
queries as 0. Its comparisons use the queries both variants answered (``n_left_out`` in the comparisons
table), and the verdict names how many queries it lacks.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK
from rerankeval.evaluate import discrimination as discrimination_mod
from rerankeval.evaluate.metrics import label, parse_column

FUSED, RERANKED = HYBRID, HYBRID_RERANK
HEADLINE = "ndcg@10"
NO_METRICS = "No metrics yet: the analysis notebook has not written metrics.csv."


def key_metrics(table: pd.DataFrame, headline: str = HEADLINE, pool_k: int | None = None) -> list[str]:
    """The headline columns present in ``table``: nDCG, MRR, Success and Recall at the headline cutoff, the
    pool ceiling (Recall@pool_k) and MAP."""
    k = parse_column(headline)[1] or 10
    want = [headline, f"mrr@{k}", f"success@{k}", f"recall@{k}"] + ([f"recall@{pool_k}"] if pool_k else []) + ["map"]
    return [c for c in dict.fromkeys(want) if c in table.columns]


def fmt(x: Any, digits: int = 3) -> str:
    """A number with ``digits`` decimals, ``n/a`` for NaN or non-numbers."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if math.isnan(v) else f"{v:.{digits}f}"


def pair_row(comparisons: pd.DataFrame | None, metric: str, a: str, b: str) -> dict[str, Any] | None:
    """The comparison of a vs b on metric, oriented so that diff = a - b."""
    if comparisons is None or comparisons.empty:
        return None
    c = comparisons[comparisons.metric == metric]
    hit = c[(c.a == a) & (c.b == b)]
    if len(hit):
        return dict(hit.iloc[0])
    hit = c[(c.a == b) & (c.b == a)]
    if len(hit):
        r = dict(hit.iloc[0])
        r.update(
            a=a,
            b=b,
            mean_a=r["mean_b"],
            mean_b=r["mean_a"],
            diff=-r["diff"],
            wins=r["losses"],
            losses=r["wins"],
            diff_ci_low=-r["diff_ci_high"],
            diff_ci_high=-r["diff_ci_low"],
        )
        return r
    return None


def _sig(r: Mapping[str, Any], family: int | None) -> str:
    fam = f" over {family} pairs" if family else ""
    p_holm = float(r.get("p_holm", math.nan))
    if math.isnan(p_holm):
        return "significance not tested"
    word = "significant" if p_holm < 0.05 else "not significant"
    return f"{word} after Holm correction{fam}: p = {r['p']:.3g}, p_holm = {p_holm:.3g}"


def _left_out(r: Mapping[str, Any] | None) -> int:
    try:
        return int(r.get("n_left_out", 0) or 0) if r else 0
    except (TypeError, ValueError):
        return 0


LEGS = ("vector", "bm25")  # the single retrievers: the better one is the default baseline


class UnknownBaseline(ReRankEvalError, ValueError):
    """``baseline=`` names a variant that was not evaluated; the message lists those that were."""


def check_baseline(baseline: str, evaluated: Sequence[str]) -> None:
    """Raise :class:`UnknownBaseline` when ``baseline`` (non-empty) is not one of ``evaluated``, with the close
    names ("did you mean hybrid?"), the evaluated ones and how to set it. Never a silent fall-back to the default."""
    if not baseline or baseline in evaluated:
        return
    close = difflib.get_close_matches(baseline, list(evaluated), n=2, cutoff=0.6)
    meant = f"did you mean {' or '.join(close)}? " if close else ""
    raise UnknownBaseline(
        f"baseline={baseline!r} names no evaluated variant; {meant}the variants evaluated are "
        f"{', '.join(evaluated) or 'none'}. Set baseline to one of them (notebook 05's parameter, e.g. "
        f'P="baseline={(close or list(evaluated) or [LEGS[0]])[0]}"), or leave it empty for the better single '
        "retriever (vector or bm25)"
    )


def baseline_of(metrics: pd.DataFrame, headline: str = HEADLINE, baseline: str = "") -> str | None:
    """The variant the others are compared with: ``baseline`` (raising :class:`UnknownBaseline` when it was not
    evaluated), else the better single leg (vector or BM25, by the headline metric), else None."""
    m = metrics.set_index("variant") if "variant" in metrics else metrics
    if baseline:
        check_baseline(baseline, [str(v) for v in m.index])
        return baseline
    legs = [v for v in LEGS if v in m.index and headline in m]
    return max(legs, key=lambda v: float(m.at[v, headline])) if legs else None


def baseline_reason(metrics: pd.DataFrame, headline: str = HEADLINE, baseline: str = "") -> str:
    """Why the baseline is the baseline, for the page: ``the better single retriever`` when the default rule chose
    it (or the user named that same leg), else ``chosen: baseline=<name>``; "" without a baseline."""
    base = baseline_of(metrics, headline, baseline)
    if base is None:
        return ""
    if base == baseline_of(metrics, headline, ""):
        m = metrics.set_index("variant") if "variant" in metrics else metrics
        legs = [v for v in LEGS if v in m.index and headline in m]
        if len(legs) == 2 and shown_zero(float(m.at[legs[0], headline]) - float(m.at[legs[1], headline])):
            return f"the single retrievers tie on {label(headline)}, so {base} is taken"
        return "the better single retriever"
    return f"chosen: baseline={base}"


def versus(comparisons: pd.DataFrame | None, metric: str, variant: str, baseline: str) -> dict[str, Any] | None:
    """``variant`` minus ``baseline`` on ``metric``: the difference, its CI, wins/ties/losses, the Holm mark."""
    r = pair_row(comparisons, metric, variant, baseline)
    if r is None:
        return None
    p_holm = float(r.get("p_holm", math.nan))
    mark = "*" if distinguishable(r) else ""  # never on a tie, a zero at the shown precision or identical runs
    return {
        "diff": float(r["diff"]),
        "low": float(r["diff_ci_low"]),
        "high": float(r["diff_ci_high"]),
        "wins": int(r["wins"]),
        "ties": int(r["ties"]),
        "losses": int(r["losses"]),
        "p": float(r["p"]),
        "p_holm": p_holm,
        "mark": mark,
    }


def _baseline_line(
    m: pd.DataFrame,
    comparisons,
    headline: str,
    fused: str,
    baseline: str | None,
    fam,
    why: str = "the better single retriever",
) -> str | None:
    """One plain sentence: does fusion beat the baseline (``why``: how it was chosen), by how much, how sure."""
    if baseline is None or fused not in m.index or fused == baseline:
        return None
    r = versus(comparisons, headline, fused, baseline)
    hl, a, b = label(headline), float(m.at[fused, headline]), float(m.at[baseline, headline])
    head = f"Against the baseline, {baseline} ({why}), hybrid retrieval ({fused}) scores {fmt(a)} {hl} against {fmt(b)}"
    if r is None:
        return head + f" ({a - b:+.3f}; not tested)."
    if same_everywhere(pair_row(comparisons, headline, fused, baseline)):
        return (
            f"{head}: the same score on every one of the {r['wins'] + r['ties'] + r['losses']} queries, a "
            f"degenerate comparison ({SAME_CAUSES})."
        )
    sure = (
        "a difference that survives Holm correction"
        if r["mark"]
        else "a tie at the shown precision"
        if shown_zero(r["diff"])
        else "a difference that could be chance after Holm correction"
    )
    fam_words = f" over {fam} pairs" if fam else ""
    return (
        f"{head}: {r['diff']:+.3f} (95% CI {r['low']:+.3f} to {r['high']:+.3f}); {r['wins']} queries better, "
        f"{r['losses']} worse, {r['ties']} tied; {sure}{fam_words} (p = {r['p']:.2g}, p_holm = "
        f"{r['p_holm']:.2g})."
    )


DIGITS = 3  # the precision every verdict number is shown at
SAME_CAUSES = "identical runs, a stage that failed and returned its input, or a metric at the end of its scale"
SIGNIFICANT = 0.05  # Holm-adjusted p below which a difference is called significant


def shown_zero(x: Any, digits: int = DIGITS) -> bool:
    """Whether ``x`` reads as zero at the shown precision (``+0.000``), or is not a number."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return True
    return math.isnan(v) or abs(v) < 0.5 * 10**-digits


def same_everywhere(r: Mapping[str, Any] | None) -> bool:
    """A degenerate comparison: the pair scores the same on every query compared (identical runs, or a stage that
    failed and returned its input)."""
    if not r:
        return False
    try:
        return int(r.get("wins", 0)) == 0 and int(r.get("losses", 0)) == 0 and int(r.get("n", 0) or 0) > 0
    except (TypeError, ValueError):
        return False


def distinguishable(r: Mapping[str, Any] | None) -> bool:
    """Whether a comparison row earns a "better": significant after Holm correction and not zero at the shown
    precision (never on a tie or a degenerate comparison)."""
    if not r or same_everywhere(r):
        return False
    p_holm = float(r.get("p_holm", math.nan))
    return not math.isnan(p_holm) and p_holm < SIGNIFICANT and not shown_zero(r.get("diff"))


def clear_winner(
    metrics: pd.DataFrame,
    comparisons: pd.DataFrame | None,
    headline: str = HEADLINE,
    missing: Mapping[str, int] | None = None,
) -> str | None:
    """The variant with the best ``headline`` when it is distinguishable (:func:`distinguishable`) from the
    runner-up, else None: the only variant the page may call a winner or set in bold."""
    if metrics is None or metrics.empty or headline not in metrics:
        return None
    m = metrics.set_index("variant")
    full = [v for v in m.index if not (missing or {}).get(v)] or list(m.index)
    ranked_v = m.loc[full, headline].dropna().sort_values(ascending=False, kind="stable")
    if len(ranked_v) < 2:
        return None
    best, second = ranked_v.index[0], ranked_v.index[1]
    return str(best) if distinguishable(pair_row(comparisons, headline, best, second)) else None


def _mdd_words(r: Mapping[str, Any] | None, n: int | None) -> str:
    """ "differences below about x are hard to detect", only when x does not read as zero."""
    mdd = float(r.get("mdd", math.nan)) if r else math.nan
    return "" if shown_zero(mdd) else f"; differences below about {fmt(mdd)} are hard to detect with n = {n}"


def _winner_line(m: pd.DataFrame, comparisons, headline: str, missing: Mapping[str, int], fam, n) -> str:
    hl = label(headline)
    full = [v for v in m.index if not missing.get(v)] or list(m.index)
    ranked_v = m.loc[full, headline].sort_values(ascending=False, kind="stable")
    best = ranked_v.index[0]
    ci = (
        f" (95% CI {fmt(m.at[best, headline + '_ci_low'])}\u2013{fmt(m.at[best, headline + '_ci_high'])})"
        if headline + "_ci_low" in m
        else ""
    )
    if len(ranked_v) == 1:
        who = f"{best} is the only variant that answered every query" if len(m.index) > 1 else ""
        who = who or f"Only {best} was evaluated"
        return f"{who}: {hl} = {fmt(ranked_v.iloc[0])}{ci} (n = {n} queries)."
    second = ranked_v.index[1]
    r = pair_row(comparisons, headline, best, second)
    diff = ranked_v.iloc[0] - ranked_v.iloc[1]
    if same_everywhere(r):
        return (
            f"No winner on {hl}: {best} and {second} score the same on every one of the {int(r['n'])} queries "
            f"({fmt(ranked_v.iloc[0])}), a degenerate comparison ({SAME_CAUSES})."
        )
    top = [v for v in ranked_v.index if shown_zero(ranked_v.iloc[0] - ranked_v[v])]
    if len(top) > 1:
        return (
            f"No winner on {hl}: {', '.join(top)} tie at {fmt(ranked_v.iloc[0])} at the shown precision"
            f"{ci.replace(')', f' for {best})')}{_mdd_words(r, n)}."
        )
    tail = _sig(r, fam) if r else "significance not tested"
    if distinguishable(r):
        return (
            f"{best} wins on {hl} with {fmt(ranked_v.iloc[0])}{ci}, {diff:+.3f} over the runner-up "
            f"{second} ({fmt(ranked_v.iloc[1])}); {tail}{_mdd_words(r, n)}."
        )
    return (
        f"No winner on {hl}: {best} has the highest mean, {fmt(ranked_v.iloc[0])}{ci}, {diff:+.3f} over "
        f"{second} ({fmt(ranked_v.iloc[1])}), but {tail}, so the two are not distinguishable"
        f"{_mdd_words(r, n)}."
    )


def ties_line(m: pd.DataFrame, comparisons, headline: str, baseline: str | None) -> str | None:
    """ "No variant is distinguishable from the baseline" when none of the others differs from it significantly
    (after Holm correction) by a difference that is not zero at the shown precision; else None."""
    others = [v for v in m.index if v != baseline]
    if baseline is None or baseline not in m.index or not others or comparisons is None or comparisons.empty:
        return None
    rows = {v: pair_row(comparisons, headline, v, baseline) for v in others}
    if any(distinguishable(r) for r in rows.values()) or all(r is None for r in rows.values()):
        return None
    same = [v for v, r in rows.items() if same_everywhere(r)]
    note = (
        (
            f" ({', '.join(same)} {'scores' if len(same) == 1 else 'score'} the same as {baseline} on every query: "
            f"{SAME_CAUSES})"
        )
        if same
        else ""
    )
    return (
        f"No variant is distinguishable from the baseline, {baseline}, on {label(headline)}: every difference "
        f"is a tie or could be chance after Holm correction{note}."
    )


def _cost_words(m: pd.DataFrame, reranked: str) -> str:
    cost = []
    if "fallback_rate" in m and not pd.isna(m.at[reranked, "fallback_rate"]):
        cost.append(f"fell back on {100 * float(m.at[reranked, 'fallback_rate']):.1f}% of queries")
    use = []
    if "tokens_per_query" in m and not pd.isna(m.at[reranked, "tokens_per_query"]):
        use.append(f"{float(m.at[reranked, 'tokens_per_query']):,.0f} tokens")
    if "llm_seconds_per_query" in m and not pd.isna(m.at[reranked, "llm_seconds_per_query"]):
        use.append(f"{float(m.at[reranked, 'llm_seconds_per_query']):.1f} s of LLM time")
    if use:
        cost.append("used " + " and ".join(use) + " per query")
    return ("; the reranker " + ", ".join(cost)) if cost else ""


def _rerank_line(m: pd.DataFrame, comparisons, headline: str, fused: str, reranked: str, fam) -> str:
    hl = label(headline)
    if not (fused in m.index and reranked in m.index):
        if fused in m.index:
            return f"No reranked run ({reranked}) yet, so the effect of reranking is not measured."
        return f"No fused run ({fused}) yet, so fusion and reranking are not measured."
    r = pair_row(comparisons, headline, reranked, fused)
    failed = _failed_stage(m, reranked)
    if failed or same_everywhere(r):
        why = failed or f"the same score on every query compared ({SAME_CAUSES})"
        return (
            f"Reranking ({fused} \u2192 {reranked}) is not measured: {why}, a degenerate comparison; "
            "its row is not evidence about reranking."
        )
    left = _left_out(r)
    d = float(r["diff"]) if left else m.at[reranked, headline] - m.at[fused, headline]
    wtl = (
        f" ({int(r['wins'])} queries better, {int(r['losses'])} worse, {int(r['ties'])} tied; {_sig(r, fam)})"
        if r
        else ""
    )
    scope = (
        f" on the {int(r['n'])} queries both answered ({left} queries one of them did not answer are "
        "left out, not scored 0)"
        if left
        else ""
    )
    verb = "did not change" if shown_zero(d) else ("raised" if d > 0 else "lowered")
    amount = "" if shown_zero(d) else f" by {abs(d):.3f}"
    return f"Reranking ({fused} \u2192 {reranked}) {verb} {hl}{amount}{scope}{wtl}{_cost_words(m, reranked)}."


def _failed_stage(m: pd.DataFrame, reranked: str) -> str:
    """ "the reranker fell back on every query" when its fallback rate is 1 (a failed stage), else ""."""
    rate = m.at[reranked, "fallback_rate"] if "fallback_rate" in m else math.nan
    try:
        failed = float(rate) >= 1.0
    except (TypeError, ValueError):
        failed = False
    return f"{reranked} fell back to the fused order on every query (a failed stage)" if failed else ""


def _ceiling_line(m: pd.DataFrame, headline: str, pool_k: int | None, fused: str, reranked: str) -> str:
    rec = f"recall@{pool_k}" if pool_k else None
    if not (rec and rec in m):
        return "Pool ceiling not computed (no Recall@pool_k column)."
    base = fused if fused in m.index else m[headline].idxmax()
    fam_k = parse_column(headline)[1] or 10
    got = ""
    rk = f"recall@{fam_k}"
    if reranked in m.index and rk in m:
        got = f"; {reranked}'s top {fam_k} holds {100 * float(m.at[reranked, rk]):.1f}% (Recall@{fam_k})"
    return (
        f"Pool ceiling: a perfect reranker of the {base} top {pool_k} would find "
        f"{100 * float(m.at[base, rec]):.1f}% of the relevant units (Recall@{pool_k}){got}."
    )


MATTERS = 0.05  # the smallest difference in an nDCG-like metric (0..1) worth detecting, for the power check
MIN_QUERIES = 20  # fewer questions than this cannot support a conclusion between variants, whatever the scores
NEXT_QUESTIONS = (
    "Next step: more or harder questions (in 08-questions, draft from more pages with "
    "paraphrase=true so the questions do not copy the page's words; or write your own), then review "
    "them in 00-explore."
)


def saturation_line(m: pd.DataFrame, headline: str) -> str | None:
    """A sentence when a key metric is at its maximum (1) or minimum (0) for every variant: the questions cannot
    separate the variants on it; with the next step. None otherwise."""
    k = parse_column(headline)[1] or 10
    cols = [c for c in dict.fromkeys([headline, f"mrr@{k}", f"success@{k}", f"recall@{k}"]) if c in m]
    at = {
        c: v
        for c in cols
        for v, name in ((1.0, "maximum"), (0.0, "minimum"))
        if m[c].notna().all() and all(shown_zero(x - v) for x in m[c])
    }
    if not at:
        return None
    words = ", ".join(f"{label(c)} at its {'maximum' if v == 1.0 else 'minimum'} ({fmt(v)})" for c, v in at.items())
    return (
        f"The questions cannot separate the variants: {words} for every variant ({len(m.index)} variants). "
        f"Scores at the end of the scale say nothing about which variant is better. {NEXT_QUESTIONS}"
    )


def power_line(m: pd.DataFrame, comparisons, headline: str, n: int | None, baseline: str | None) -> str | None:
    """A sentence when the questions are too few to detect the differences that matter: fewer than
    :data:`MIN_QUERIES`, or a minimum detectable difference (``mdd``, stats.compare's, 80% power) against the
    baseline above :data:`MATTERS`; with the next step. None otherwise."""
    rows = [pair_row(comparisons, headline, v, baseline) for v in m.index if baseline and v != baseline]
    mdds = [float(r["mdd"]) for r in rows if r and not shown_zero(r.get("mdd"))]
    hl = label(headline)
    if mdds and min(mdds) > MATTERS:
        return (
            f"Too few questions to detect the differences that matter: with n = {n}, only differences in {hl} "
            f"above about {fmt(min(mdds))} can be detected (80% power, 5% level), and a difference of "
            f"{MATTERS:.2f} is already large. {NEXT_QUESTIONS}"
        )
    if n is not None and 0 < n < MIN_QUERIES:
        return (
            f"Too few questions to conclude: n = {n}, and fewer than {MIN_QUERIES} questions cannot support a "
            f"difference between variants whatever the scores (a paired test on {n} queries has little power"
            f"{'; with 5 or fewer no sign-flip test can reach p < 0.05' if n <= 5 else ''}). {NEXT_QUESTIONS}"
        )
    return None


def _coverage_line(missing: Mapping[str, int], n: int | None) -> str | None:
    partial = {v: k for v, k in missing.items() if k}
    if not partial:
        return None
    who = ", ".join(f"{v} lacks {k}" + (f" of {n}" if n else "") for v, k in partial.items())
    return (
        f"Not every variant answered every query ({who}): those variants are left out of the ranking above "
        "and compared only on the queries both variants of a pair answered."
    )


def verdict_lines(
    metrics: pd.DataFrame,
    comparisons: pd.DataFrame | None = None,
    headline: str = HEADLINE,
    pool_k: int | None = None,
    fused: str = FUSED,
    reranked: str | None = None,
    missing: Mapping[str, int] | None = None,
    discrimination: Mapping[str, Any] | discrimination_mod.Discrimination | None = None,
    baseline: str = "",
) -> list[str]:
    """Plain-language sentences generated from the numbers: hybrid against the baseline (``baseline``, else the
    better single leg: :func:`baseline_of`), winner, what reranking did, the reranker model's
    discrimination (when measured: :func:`rerankeval.evaluate.discrimination.sentence`), pool ceiling, and
    (only when some variant did not answer every query) which variants lack queries.

    ``metrics`` is the metrics.csv table (one row per variant, columns ``<metric>``, ``<metric>_ci_low``,
    ``<metric>_ci_high`` and optionally the ledger columns); ``comparisons`` is stats.compare's output;
    ``missing`` maps a variant to the number of evaluated queries it did not answer. ``reranked`` defaults
    to ``hybrid_rerank``, else ``cross_encoder`` when only that one was run.
    """
    if metrics is None or metrics.empty or headline not in metrics:
        return [NO_METRICS]
    m = metrics.set_index("variant")
    missing = {v: int(k) for v, k in (missing or {}).items() if v in m.index}
    if reranked is None:
        reranked = next((v for v in (RERANKED, CROSS_ENCODER) if v in m.index), RERANKED)
    n = int(m["n_queries"].iloc[0]) if "n_queries" in m else None
    fam = None
    if comparisons is not None and not comparisons.empty:
        fam = int((comparisons.metric == headline).sum()) or None
    auc = discrimination_mod.sentence(discrimination)
    base = _baseline_line(
        m,
        comparisons,
        headline,
        fused,
        baseline_of(metrics, headline, baseline),
        fam,
        baseline_reason(metrics, headline, baseline),
    )
    base_name = baseline_of(metrics, headline, baseline)
    checks = [
        x
        for x in (
            saturation_line(m, headline),
            power_line(m, comparisons, headline, n, base_name),
            ties_line(m, comparisons, headline, base_name),
        )
        if x
    ]
    lines = [
        *([base] if base else []),
        _winner_line(m, comparisons, headline, missing, fam, n),
        *checks,
        _rerank_line(m, comparisons, headline, fused, reranked, fam),
        *([auc] if auc else []),
        _ceiling_line(m, headline, pool_k, fused, reranked),
    ]
    cover = _coverage_line(missing, n)
    return lines + ([cover] if cover else [])
