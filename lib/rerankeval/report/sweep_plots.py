"""Figures of the sweep notebook (06): one axis at a time, two axes as a heat map, quality against cost.

Each function returns a matplotlib Figure (save/show with :mod:`rerankeval.report.plots`). Nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rerankeval.evaluate.metrics import label
from rerankeval.report.plots import place_labels

_METRIC_STYLES = [("#333333", "o", "-"), ("#888888", "s", "--"), ("#555555", "^", ":")]  # grey: colour = variant
NEGLIGIBLE_MS = 1.0  # a spread of seconds per query below this (in ms) is timing noise, not a cost axis
NEGLIGIBLE_SHARE = 0.25  # ... and so is one below this share of the median (timings of a busy machine vary so)


def _col_label(col: str) -> str:
    """A metric's label (``nDCG@10``), or the column name in words (``pool ceiling``)."""
    if col == "pool_ceiling":
        return "pool ceiling (Recall@pool_k)"
    try:
        return label(col)
    except ValueError:
        return col.replace("_", " ")


def sweep_lines(slices: dict[str, pd.DataFrame], metrics: Sequence[str], title: str = "") -> plt.Figure:
    """One panel per swept axis: ``metrics`` (e.g. nDCG@10, MRR@10) against the axis's values, every other
    axis at its default, metrics in greys and line styles (colour means a variant elsewhere), named on the y axis.
    ``slices``: axis -> rows (:func:`rerankeval.experiments.sweep.one_at_a_time`)."""
    axes_used = {a: d for a, d in slices.items() if len(d) > 1}
    n = max(1, len(axes_used))
    cols = min(3, n)
    fig, axs = plt.subplots(
        (n + cols - 1) // cols, cols, figsize=(4.6 * cols, 3.3 * ((n + cols - 1) // cols)), squeeze=False
    )
    ylabel = " / ".join(_col_label(m) for m in metrics)
    for ax, (axis, d) in zip(axs.flat, axes_used.items(), strict=False):
        x = [str(v) for v in d[axis]]
        for m, (colour, marker, ls) in zip(metrics, _METRIC_STYLES * len(metrics), strict=False):
            ax.plot(x, d[m].to_numpy(dtype=float), marker=marker, ls=ls, color=colour, label=_col_label(m))
        ax.set_xlabel(axis.replace("_", " "))
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(alpha=0.3)
        if len(metrics) > 1:
            ax.legend(fontsize=8)
    for ax in list(axs.flat)[len(axes_used) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def _short(v: float) -> str:
    """0.654 -> ".654" (three decimals, no leading zero: fits a heat-map cell)."""
    return "" if not np.isfinite(v) else f"{v:.3f}".replace("0.", ".", 1) if abs(v) < 1 else f"{v:.2f}"


def sweep_heatmap(view: pd.DataFrame, metric: str, x: str, y: str, title: str = "") -> plt.Figure:
    """``metric`` over two axes (``view`` filtered to the other axes' defaults), the best cell outlined; cells
    at least 0.9 x 0.5 inch, the values' font sized to the cell."""
    import seaborn as sns

    grid = view.pivot_table(index=y, columns=x, values=metric, aggfunc="mean", sort=False)
    if pd.api.types.is_numeric_dtype(view[x]):
        grid = grid.sort_index(axis=1)
    if pd.api.types.is_numeric_dtype(view[y]):
        grid = grid.sort_index(axis=0)
    cell_w, cell_h = 0.9, 0.5
    fig, ax = plt.subplots(figsize=(2.8 + cell_w * max(3, grid.shape[1]), 1.4 + cell_h * max(2, grid.shape[0])))
    fontsize = float(np.clip(cell_w * 72 / 5.0, 6, 10))  # four characters across the cell
    annot = grid.apply(lambda col: col.map(_short)).to_numpy()
    sns.heatmap(
        grid,
        annot=annot,
        fmt="",
        cmap="viridis",
        ax=ax,
        cbar_kws={"label": label(metric)},
        annot_kws={"fontsize": fontsize},
        linewidths=0.5,
        linecolor="white",
    )
    if grid.notna().any().any():
        r, c = np.unravel_index(np.nanargmax(grid.to_numpy(dtype=float)), grid.shape)
        ax.add_patch(plt.Rectangle((c, r), 1, 1, fill=False, edgecolor="red", lw=2))
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def negligible(view: pd.DataFrame, col: str) -> bool:
    """Whether the cost ``col`` barely differs between points: seconds within :data:`NEGLIGIBLE_MS` or within
    :data:`NEGLIGIBLE_SHARE` of their median, tokens within one token."""
    v = view[col].dropna().to_numpy(dtype=float)
    if not v.size:
        return True
    spread = float(v.max() - v.min())
    if col != "seconds_per_query":
        return spread < 1
    return spread * 1000 < NEGLIGIBLE_MS or spread < NEGLIGIBLE_SHARE * float(np.median(v))


MARK_COLOUR, FRONT_COLOUR = "#222222", "#555555"  # the marked settings and the frontier: no variant's colour


def marks(default: str, chosen: Mapping[str, str]) -> dict[str, str]:
    """The labels of the settings a sweep figure marks: ``default`` and each point ``chosen`` (split -> point,
    :attr:`rerankeval.experiments.splits.Tuning.chosen`) named with the folds or split that chose it
    ("chosen in folds 1, 3", "chosen on train"; "default, chosen in fold 2" when the default was chosen)."""
    by_point: dict[str, list[str]] = {}
    for split, point in chosen.items():
        by_point.setdefault(point, []).append(split)
    out = {default: "default"}
    for point, splits_ in by_point.items():
        folds = [x.removeprefix("fold ") for x in splits_ if x.startswith("fold ")]
        where = ([f"in fold{'s' if len(folds) > 1 else ''} {', '.join(folds)}"] if folds else []) + [
            f"on {x}" for x in splits_ if not x.startswith("fold ")
        ]
        text = "chosen " + " and ".join(where)
        out[point] = f"default, {text}" if point == default else text
    return out


def _mark(ax, points: pd.DataFrame, x: pd.Series, metric: str, marked: Mapping[str, str]) -> list:
    """A star per marked point (one legend entry when any is drawn); the ``(x, y, text)`` to label them with
    (:func:`rerankeval.report.plots.place_labels`, once the layout is final)."""
    pts = []
    for name, text in marked.items():
        hit = points.point == name
        if hit.any():
            pts.append((float(x[hit].iloc[0]), float(points.loc[hit, metric].iloc[0]), text))
    if pts:
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            s=70,
            marker="*",
            color=MARK_COLOUR,
            zorder=3,
            label="marked setting (labelled)",
        )
    return pts


def _quality_only(ax, view: pd.DataFrame, metric: str, col: str, marked: Mapping[str, str]) -> list:
    """The points' quality alone, sorted, when the cost ``col`` is the same for all of them (said in the panel)."""
    v = view.sort_values(metric, ascending=False, kind="stable").reset_index(drop=True)
    ax.scatter(v.index + 1, v[metric], s=12, color="#999", alpha=0.7, label="sweep point")
    pts = _mark(ax, v, pd.Series(v.index + 1, index=v.index, dtype=float), metric, marked)
    c = view[col].dropna().to_numpy(dtype=float)
    spread = (
        (
            f"{c.min() * 1000:.2f}\u2013{c.max() * 1000:.2f} ms per query"
            if col == "seconds_per_query"
            else f"{c.min():.0f}\u2013{c.max():.0f} tokens per query"
        )
        if c.size
        else "not recorded"
    )
    ax.set_title(
        f"cost differs negligibly between points ({spread}):\nquality only, points sorted", fontsize=8, color="#555"
    )
    ax.set_xlabel("sweep point (sorted by quality)")
    ax.legend(fontsize=8, loc="lower left")
    return pts


def _frontier(ax, view: pd.DataFrame, metric: str, col: str, on: Sequence[bool], scale: float) -> None:
    """The frontier's points and, when it has two or more, the step joining them (each in the legend only when
    drawn)."""
    f = view[list(on)].sort_values(col)
    if len(f) >= 2:
        ax.step(f[col] * scale, f[metric], where="post", color=FRONT_COLOUR, lw=1.2, ls="--", label="frontier")
    if len(f):
        ax.scatter(
            f[col] * scale,
            f[metric],
            s=24,
            color=FRONT_COLOUR,
            label="on the frontier" if len(f) >= 2 else "the frontier (one point: best and cheapest)",
        )


def sweep_pareto(
    view: pd.DataFrame,
    metric: str,
    front: Sequence[bool],
    marked: Mapping[str, str],
    cost_cols: Sequence[str] = ("seconds_per_query", "llm_tokens_per_query"),
) -> plt.Figure:
    """Quality against each cost, one dot per sweep point, the frontier joined and ``marked`` points (name ->
    label, :func:`marks`) starred and labelled. ``front`` is the frontier on seconds per query; another cost's is
    computed on that cost. A cost that is 0 for every point (LLM tokens, when no point reranks) gets no panel; a
    cost whose spread is negligible (:func:`negligible`) gets a quality-only panel that says so instead of an axis
    of timing noise. The legend lists only what is drawn."""
    from rerankeval.experiments.sweep import pareto_front

    cost_cols = [c for c in cost_cols if view[c].fillna(0).abs().sum() > 0] or list(cost_cols[:1])
    fig, axes = plt.subplots(1, len(cost_cols), figsize=(5.2 * len(cost_cols), 3.9), squeeze=False)
    labels = []
    for ax, col in zip(axes[0], cost_cols, strict=True):
        ax.set_ylabel(label(metric))
        ax.grid(alpha=0.3)
        if negligible(view, col):
            labels.append((ax, _quality_only(ax, view, metric, col, marked)))
            continue
        scale = 1000.0 if col == "seconds_per_query" else 1.0
        on = front if col == "seconds_per_query" else pareto_front(view[metric].tolist(), view[col].tolist())
        ax.scatter(view[col] * scale, view[metric], s=12, color="#999", alpha=0.6, label="sweep point")
        _frontier(ax, view, metric, col, on, scale)
        labels.append((ax, _mark(ax, view, view[col] * scale, metric, marked)))
        ax.set_xlabel(
            {
                "seconds_per_query": "milliseconds per query (legs + fusion)",
                "llm_tokens_per_query": "LLM tokens per query",
            }.get(col, col)
        )
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{label(metric)} against cost, every sweep point", fontsize=11)
    fig.tight_layout()
    for ax, pts in labels:
        place_labels(ax, pts)
    return fig
