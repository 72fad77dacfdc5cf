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
        r.update(a=a, b=b, mean_a=r["mean_b"], mean_b=r["mean_a"], diff=-r["diff"], wins=r["losses"],
                 losses=r["wins"], diff_ci_low=-r["diff_ci_high"], diff_ci_high=-r["diff_ci_low"])
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
        f"P=\"baseline={(close or list(evaluated) or [LEGS[0]])[0]}\"), or leave it empty for the better single "
        "retriever (vector or bm25)")


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
        return "the better single retriever"
    return f"chosen: baseline={base}"


def versus(comparisons: pd.DataFrame | None, metric: str, variant: str, baseline: str) -> dict[str, Any] | None:
    """``variant`` minus ``baseline`` on ``metric``: the difference, its CI, wins/ties/losses, the Holm mark."""
    r = pair_row(comparisons, metric, variant, baseline)
    if r is None:
        return None
    p_holm = float(r.get("p_holm", math.nan))
    mark = "" if math.isnan(p_holm) else ("*" if p_holm < 0.05 else "")
    return {"diff": float(r["diff"]), "low": float(r["diff_ci_low"]), "high": float(r["diff_ci_high"]),
            "wins": int(r["wins"]), "ties": int(r["ties"]), "losses": int(r["losses"]), "p": float(r["p"]),
            "p_holm": p_holm, "mark": mark}


def _baseline_line(m: pd.DataFrame, comparisons, headline: str, fused: str, baseline: str | None, fam,
                   why: str = "the better single retriever") -> str | None:
    """One plain sentence: does fusion beat the baseline (``why``: how it was chosen), by how much, how sure."""
    if baseline is None or fused not in m.index or fused == baseline:
        return None
    r = versus(comparisons, headline, fused, baseline)
    hl, a, b = label(headline), float(m.at[fused, headline]), float(m.at[baseline, headline])
    head = (f"Against the baseline, {baseline} ({why}), hybrid retrieval ({fused}) scores "
            f"{fmt(a)} {hl} against {fmt(b)}")
    if r is None:
        return head + f" ({a - b:+.3f}; not tested)."
    sure = ("a difference that survives Holm correction" if r["mark"] else
            "a difference that could be chance after Holm correction")
    fam_words = f" over {fam} pairs" if fam else ""
    return (f"{head}: {r['diff']:+.3f} (95% CI {r['low']:+.3f} to {r['high']:+.3f}); {r['wins']} queries better, "
            f"{r['losses']} worse, {r['ties']} tied; {sure}{fam_words} (p = {r['p']:.2g}, p_holm = "
            f"{r['p_holm']:.2g}).")


def _winner_line(m: pd.DataFrame, comparisons, headline: str, missing: Mapping[str, int], fam, n) -> str:
    hl = label(headline)
    full = [v for v in m.index if not missing.get(v)] or list(m.index)
    ranked_v = m.loc[full, headline].sort_values(ascending=False)
    best = ranked_v.index[0]
    ci = (f"95% CI {fmt(m.at[best, headline + '_ci_low'])}\u2013{fmt(m.at[best, headline + '_ci_high'])}"
          if headline + "_ci_low" in m else "")
    if len(ranked_v) == 1:
        who = f"{best} is the only variant that answered every query" if len(m.index) > 1 else ""
        who = who or f"Only {best} was evaluated"
        return f"{who}: {hl} = {fmt(ranked_v.iloc[0])} ({ci}, n = {n} queries)."
    second = ranked_v.index[1]
    r = pair_row(comparisons, headline, best, second)
    diff = ranked_v.iloc[0] - ranked_v.iloc[1]
    tail = _sig(r, fam) if r else "significance not tested"
    mdd = (f"; differences below about {fmt(r['mdd'])} are hard to detect with n = {n}"
           if r and not math.isnan(float(r.get("mdd", math.nan))) else "")
    return (f"{best} wins on {hl} with {fmt(ranked_v.iloc[0])} ({ci}), {diff:+.3f} over the runner-up "
            f"{second} ({fmt(ranked_v.iloc[1])}); {tail}{mdd}.")


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
    left = _left_out(r)
    d = float(r["diff"]) if left else m.at[reranked, headline] - m.at[fused, headline]
    wtl = (f" ({int(r['wins'])} queries better, {int(r['losses'])} worse, {int(r['ties'])} tied; {_sig(r, fam)})"
           if r else "")
    scope = (f" on the {int(r['n'])} queries both answered ({left} queries one of them did not answer are "
             "left out, not scored 0)" if left else "")
    verb = "raised" if d > 0 else ("lowered" if d < 0 else "did not change")
    amount = f" by {abs(d):.3f}" if d != 0 else ""
    return f"Reranking ({fused} \u2192 {reranked}) {verb} {hl}{amount}{scope}{wtl}{_cost_words(m, reranked)}."


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
    return (f"Pool ceiling: a perfect reranker of the {base} top {pool_k} would find "
            f"{100 * float(m.at[base, rec]):.1f}% of the relevant units (Recall@{pool_k}){got}.")


def _coverage_line(missing: Mapping[str, int], n: int | None) -> str | None:
    partial = {v: k for v, k in missing.items() if k}
    if not partial:
        return None
    who = ", ".join(f"{v} lacks {k}" + (f" of {n}" if n else "") for v, k in partial.items())
    return (f"Not every variant answered every query ({who}): those variants are left out of the ranking above "
            "and compared only on the queries both variants of a pair answered.")


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
    base = _baseline_line(m, comparisons, headline, fused, baseline_of(metrics, headline, baseline), fam,
                          baseline_reason(metrics, headline, baseline))
    lines = [
        *([base] if base else []),
        _winner_line(m, comparisons, headline, missing, fam, n),
        _rerank_line(m, comparisons, headline, fused, reranked, fam),
        *([auc] if auc else []),
        _ceiling_line(m, headline, pool_k, fused, reranked),
    ]
    cover = _coverage_line(missing, n)
    return lines + ([cover] if cover else [])
