"""Figures of the paired comparisons (notebook 05): the forest plot of every variant against the baseline, and
the TREC-style per-query difference chart of one pair.

Orientation (which side of a comparison row is ``a``) is :func:`rerankeval.evaluate.verdict.versus`'s; a variant's
colour is :func:`rerankeval.report.plots.variant_colour`'s, better and worse have their own (``plots.BETTER``,
``plots.WORSE``). Nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rerankeval.core import names
from rerankeval.evaluate import verdict
from rerankeval.evaluate.metrics import label, wide
from rerankeval.report.plots import BETTER, TIED, WORSE, variant_colour


def forest(comparisons: pd.DataFrame, metric: str, baseline: str, variants: Sequence[str]) -> plt.Figure:
    """Each variant minus ``baseline`` on ``metric``: the paired difference (point, the variant's colour) and its
    95% CI (bar), a line at 0, a filled marker and ``*`` when significant after Holm correction, queries
    better/tied/worse at the right. A variant with no comparison row is listed as "not compared"."""
    others = [v for v in dict.fromkeys(variants) if v != baseline]
    rows = [(v, verdict.versus(comparisons, metric, v, baseline)) for v in others]
    fig, ax = plt.subplots(figsize=(8.0, max(2.0, 0.5 * len(rows) + 1.3)))
    if not rows:
        ax.text(
            0.5,
            0.5,
            f"no variant to compare with {baseline or 'the baseline'}",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return fig
    trans = ax.get_yaxis_transform()  # x in axes fraction, y in data
    for y, (v, r) in enumerate(rows):
        if r is None:
            ax.text(0.5, y, "not compared", transform=trans, ha="center", va="center", fontsize=8, color="#777")
            continue
        colour = variant_colour(v)
        ax.hlines(y, r["low"], r["high"], color=colour, lw=2.2)
        ax.plot(
            [r["diff"]],
            [y],
            "o",
            ms=8,
            color=colour,
            markerfacecolor=colour if r["mark"] else "white",
            markeredgewidth=2,
            label=v,
        )
        ax.text(1.02, y, f"{r['wins']} / {r['ties']} / {r['losses']}", transform=trans, va="center", fontsize=8)
    ax.text(1.02, -0.8, "better / tied / worse", transform=trans, va="center", fontsize=7, color="#555")
    ax.axvline(0, color="#555", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), [f"{v} *" if r and r["mark"] else v for v, r in rows])
    ax.set_ylim(len(rows) - 0.5, -1.2)
    ax.set_xlabel(f"{label(metric)} difference from {baseline} (95% CI)")
    ax.set_title(
        f"Each variant minus the baseline, {baseline}; filled and * = significant after Holm correction", fontsize=10
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def per_query_diff(per_query: pd.DataFrame, a: str, b: str, metric: str) -> pd.Series:
    """metric(a) - metric(b) per query, on the queries both were scored on, largest first (ties by qid)."""
    w = wide(per_query, metric)
    if a not in w.columns or b not in w.columns:
        return pd.Series(dtype=float, name="diff")
    d = (w[a] - w[b]).dropna().rename("diff")
    return d.sort_index().sort_values(ascending=False, kind="stable")


def delta_per_query(per_query: pd.DataFrame, a: str, b: str, metric: str) -> plt.Figure:
    """TREC-style per-topic chart: one bar per query of metric(a) - metric(b), sorted, in the better colour above
    0 and the worse one below (:data:`rerankeval.report.plots.BETTER`, ``WORSE``: never a variant's), the count
    of queries better / tied / worse in the title. ``per_query``: ``variant, qid, metric,
    value`` (``Analysis.per_query``)."""
    d = per_query_diff(per_query, a, b, metric)
    n = len(d)
    fig, ax = plt.subplots(figsize=(min(14.0, max(6.0, 0.16 * n + 2.0)), 3.6))
    if not n:
        ax.text(0.5, 0.5, f"no query scored for both {a} and {b}", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    vals = d.to_numpy(dtype=float)
    better, worse = int((vals > 0).sum()), int((vals < 0).sum())
    x = np.arange(n)
    ax.bar(x, vals, width=0.8, color=np.where(vals > 0, BETTER, np.where(vals < 0, WORSE, TIED)))
    ax.axhline(0, color="#555", lw=0.8)
    if n <= 80:
        ax.set_xticks(x, list(d.index), rotation=90, fontsize=6)
    else:
        ax.set_xticks([])
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_xlabel(f"query ({n}, sorted by the difference)")
    ax.set_ylabel(f"\u0394{label(metric)} ({a} \u2212 {b})")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"{a} vs {b}: {better} queries better, {n - better - worse} tied, {worse} worse", fontsize=10)
    fig.tight_layout()
    return fig


def delta_pairs(variants: Sequence[str], baseline: str, reranked: str = names.HYBRID_RERANK) -> list[tuple[str, str]]:
    """The comparisons that get a per-query chart: hybrid vs the baseline, then each reranker (``reranked``, the
    cross-encoder) vs hybrid; only pairs whose two variants were evaluated."""
    have = set(variants)
    pairs = [(names.HYBRID, baseline)]
    pairs += [(r, names.HYBRID) for r in dict.fromkeys((reranked, names.CROSS_ENCODER))]
    return [(x, y) for x, y in pairs if x in have and y in have and x != y]
