"""Figures of how far a generated set or a second judge can be trusted: two system rankings side by side."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd


def system_scatter(table: pd.DataFrame, x: str, y: str, metric: str, title: str = "") -> plt.Figure:
    """One dot per system (``table``: ``point``, ``x``, ``y``): its ``metric`` on one set against the other, with
    the diagonal. Systems on a line that is not the diagonal still rank alike (Kendall's tau looks at order)."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    if table.empty:
        ax.text(0.5, 0.5, "no system scored on both sets", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    ax.scatter(table[x], table[y], s=18, alpha=0.7, color="#1f77b4")
    lo = float(min(table[x].min(), table[y].min()))
    hi = float(max(table[x].max(), table[y].max()))
    ax.plot([lo, hi], [lo, hi], color="#999999", lw=1, ls="--", label="same score")
    ax.set_xlabel(f"{metric} on the {x} set")
    ax.set_ylabel(f"{metric} on the {y} set")
    ax.set_title(title or f"{len(table)} systems: {x} vs {y}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
