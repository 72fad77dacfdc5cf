"""Figures of how far a generated set, a second judge or the reranker's model can be trusted: two system
rankings side by side (:func:`system_scatter`), the model's scores by relevance (:func:`discrimination`)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rerankeval.evaluate.discrimination import Discrimination
from rerankeval.report.plots import BETTER, WORSE


def system_scatter(
    table: pd.DataFrame, x: str, y: str, metric: str, title: str = "", *, xlabel: str = "", ylabel: str = ""
) -> plt.Figure:
    """One dot per system (``table``: ``point``, ``x``, ``y``): its ``metric`` on one set against the other, with
    the diagonal. Systems on a line that is not the diagonal still rank alike (Kendall's tau looks at order).
    ``xlabel`` / ``ylabel`` replace "<metric> on the <x> set" (e.g. one question set under two qrels)."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    if table.empty:
        ax.text(0.5, 0.5, "no system scored on both sets", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    ax.scatter(table[x], table[y], s=18, alpha=0.7, color="#1f77b4")
    lo = float(min(table[x].min(), table[y].min()))
    hi = float(max(table[x].max(), table[y].max()))
    ax.plot([lo, hi], [lo, hi], color="#999999", lw=1, ls="--", label="same score")
    ax.set_xlabel(xlabel or f"{metric} on the {x} set")
    ax.set_ylabel(ylabel or f"{metric} on the {y} set")
    ax.set_title(title or f"{len(table)} systems: {x} vs {y}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)
    ax.set_axis_off()


def discrimination(d: Discrimination) -> plt.Figure:
    """The reranker model's scores, relevant against non-relevant candidates (left: each class's histogram as a
    share of the class, shared bins; relevant in the better colour, the others in the worse one, never a variant's),
    and its ROC AUC per query (right: sorted, chance at 0.5, the macro AUC and
    its CI as a band); a note saying why where there is nothing to draw (:mod:`rerankeval.evaluate.discrimination`)."""
    scores, per_query, auc, ci, model, note = d.scores, d.per_query, d.auc, (d.ci_low, d.ci_high), d.model, d.reason
    scores = scores if scores is not None else pd.DataFrame(columns=["score", "relevant"])
    per_query = per_query if per_query is not None else pd.DataFrame(columns=["auc"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 3.8))
    s = scores.dropna(subset=["score"]) if len(scores) else scores
    if not len(s):
        _no_data(left, note or "no judged candidate with a score")
    else:
        edges = np.histogram_bin_edges(s.score.to_numpy(dtype=float), bins=min(20, max(5, len(s) // 10)))
        non = "non-relevant or unjudged" if d.negatives == "unjudged" else "non-relevant"
        for flag, name, colour in ((True, "relevant", BETTER), (False, non, WORSE)):
            x = s.score[s.relevant == flag].to_numpy(dtype=float)
            if len(x):
                left.hist(
                    x,
                    bins=edges,
                    weights=np.full(len(x), 1 / len(x)),
                    histtype="step",
                    lw=1.8,
                    color=colour,
                    label=f"{name} ({len(x)})",
                )
        left.set_xlabel(f"score given by {model or 'the model'}")
        left.set_ylabel("share of the class's candidates")
        left.legend(fontsize=8, frameon=False)
        left.grid(alpha=0.3)
    aucs = np.sort(per_query.auc.dropna().to_numpy(dtype=float)) if len(per_query) else np.array([])
    if not aucs.size:
        _no_data(right, note or "no query with both relevant and non-relevant candidates")
    else:
        right.scatter(np.arange(1, aucs.size + 1), aucs, s=14, color="#555555", label="one query")
        right.axhline(0.5, color="#777", ls="--", lw=1, label="chance (0.5)")
        if math.isfinite(auc):
            right.axhline(auc, color="#222222", lw=1.5, label=f"mean AUC {auc:.3f}")
        if all(math.isfinite(c) for c in ci):
            right.axhspan(ci[0], ci[1], color="#222222", alpha=0.12, label="95% CI of the mean")
        right.set_ylim(-0.03, 1.03)
        right.set_xlabel("query (sorted by AUC)")
        right.set_ylabel("ROC AUC (relevant vs non-relevant)")
        right.legend(fontsize=7, frameon=False, loc="best")
        right.grid(alpha=0.3)
    fig.suptitle(f"Can {model or 'the reranker model'} tell relevant from non-relevant candidates?", fontsize=11)
    fig.tight_layout()
    return fig
