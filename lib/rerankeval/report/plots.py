"""Figures of the analysis notebook (matplotlib/seaborn), saved as ``<notebook>-<name>.png``.

Each function returns a matplotlib Figure; :func:`save` writes it atomically. Nothing here reads files.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from rerankeval.core.ioutil import atomic_write_bytes
from rerankeval.evaluate.discrimination import Discrimination
from rerankeval.evaluate.metrics import label

CLASS_COLOURS = {
    "hit": "#55a868",
    "not retrieved by either leg": "#4d4d4d",
    "lost in fusion": "#c44e52",
    "cut by the pool size": "#dd8452",
    "below the cutoff": "#dd8452",
    "rerank fallback": "#8172b3",
    "lost in rerank": "#da8bc3",
    "not lifted by rerank": "#ccb974",
}


def _palette(variants: Sequence[str]) -> dict[str, tuple]:
    import seaborn as sns

    cols = sns.color_palette("deep", n_colors=max(3, len(variants)))
    return {v: cols[i] for i, v in enumerate(variants)}


def figure_path(figures_dir: str | Path, name: str, notebook: str = "05") -> Path:
    return Path(figures_dir) / f"{notebook}-{name}.png"


def _png(fig, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def save(fig, figures_dir: str | Path, name: str, notebook: str = "05", dpi: int = 110) -> Path:
    """Write ``fig`` as ``figures_dir/<notebook>-<name>.png`` atomically and return the path."""
    return atomic_write_bytes(figure_path(figures_dir, name, notebook), _png(fig, dpi))


def show(fig, figures_dir: str | Path, name: str, notebook: str = "05") -> None:
    """Save ``fig`` (see :func:`save`), display the same PNG inline (whatever the backend) and close it."""
    path = save(fig, figures_dir, name, notebook)
    plt.close(fig)
    try:
        from IPython.display import Image, display

        display(Image(data=path.read_bytes(), format="png"))
    except ImportError:  # pragma: no cover - IPython is always there in notebooks
        pass


def metric_bars(
    ci: pd.DataFrame, metrics: Sequence[str], variants: Sequence[str] | None = None, title: str = ""
) -> plt.Figure:
    """Grouped bars: mean per variant and metric with the bootstrap CI as error bars.

    ``ci`` has columns ``variant, metric, mean, ci_low, ci_high`` (stats.bootstrap_table).
    """
    variants = list(variants or dict.fromkeys(ci.variant))
    pal = _palette(variants)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(metrics) * max(1, len(variants)) / 3 + 3), 4.2))
    width = 0.8 / max(1, len(variants))
    x = np.arange(len(metrics))
    for i, v in enumerate(variants):
        sub = ci[ci.variant == v].set_index("metric").reindex(metrics)
        mean = sub["mean"].to_numpy(dtype=float)
        err = np.vstack([mean - sub.ci_low.to_numpy(dtype=float), sub.ci_high.to_numpy(dtype=float) - mean])
        ax.bar(
            x + (i - (len(variants) - 1) / 2) * width,
            mean,
            width,
            yerr=err,
            capsize=2,
            label=v,
            color=pal[v],
            edgecolor="white",
            linewidth=0.5,
        )
    ax.set_xticks(x, [label(m) for m in metrics])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean over queries (95% bootstrap CI)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=min(len(variants), 3), fontsize=8, loc="upper left", frameon=False)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def rank_heatmap(first_ranks: pd.DataFrame, max_rank: int = 100, title: str = "") -> plt.Figure:
    """Queries x variants: rank of the first relevant unit (log colour scale; grey = none in the run)."""
    import seaborn as sns
    from matplotlib.colors import LogNorm

    df = first_ranks.copy()
    df = df.assign(_k=df.fillna(max_rank * 10).mean(axis=1)).sort_values("_k").drop(columns="_k")
    n = len(df)
    height = min(14.0, max(2.5, 0.22 * n + 1.5))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * df.shape[1] + 2.5), height))
    ax.set_facecolor("#d9d9d9")
    clipped = df.clip(upper=max_rank)
    sns.heatmap(
        clipped,
        ax=ax,
        cmap="viridis_r",
        norm=LogNorm(vmin=1, vmax=max(2, max_rank)),
        mask=df.isna(),
        annot=df if n <= 40 else False,
        fmt=".0f",
        annot_kws={"fontsize": 7},
        cbar_kws={"label": "rank of first relevant unit (log)"},
        yticklabels=n <= 60,
    )
    ax.set_xlabel("variant")
    ax.set_ylabel("query" + ("" if n <= 60 else f" ({n}, sorted by mean rank)"))
    if n <= 60:
        ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title or "Rank of the first relevant unit (grey: none retrieved)")
    fig.tight_layout()
    return fig


def rank_shift_plot(
    shift: pd.DataFrame, src: str, dst: str, pool_k: int | None = None, k: int | None = None
) -> plt.Figure:
    """Each relevant unit of the fused list: fused rank (x) -> reranked rank (y).

    Below the diagonal = promoted; units the reranked list lacks are drawn at the top.
    """
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    if shift.empty:
        ax.text(
            0.5,
            0.5,
            f"no relevant units in both {src} and {dst}",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return fig
    top = max(2.0, float(np.nanmax(shift[["src_rank", "dst_rank"]].to_numpy(dtype=float))))
    miss_y = top * 1.6
    y = shift.dst_rank.fillna(miss_y).to_numpy(dtype=float)
    rng = np.random.default_rng(0)
    jit = np.exp(rng.uniform(-0.06, 0.06, size=len(shift)))
    colours = np.where(
        shift.dst_rank.isna(),
        "#c44e52",
        np.where(y < shift.src_rank, "#55a868", np.where(y > shift.src_rank, "#dd8452", "#4c72b0")),
    )
    ax.scatter(shift.src_rank * jit, y * jit[::-1], c=colours, s=22, alpha=0.75, edgecolor="none")
    ax.plot([1, top], [1, top], color="#999", lw=0.8, ls="--")
    for ref, name in ((k, f"k = {k}"), (pool_k, f"pool = {pool_k}")):
        if ref:
            ax.axvline(ref + 0.5, color="#bbb", lw=0.7)
            ax.axhline(ref + 0.5, color="#bbb", lw=0.7)
            ax.text(ref + 0.5, 1, name, fontsize=7, color="#777", rotation=90, va="bottom", ha="right")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"rank in {src}")
    ax.set_ylabel(f"rank in {dst} (top: not in list)")
    up, down = int((y < shift.src_rank).sum()), int((y > shift.src_rank).sum())
    ax.set_title(
        f"Relevant units: {up} promoted, {down} demoted, {len(shift) - up - down} unchanged", fontsize=10
    )
    ax.grid(alpha=0.2, which="both")
    fig.tight_layout()
    return fig


def funnel_bars(funnel: pd.DataFrame, title: str = "") -> plt.Figure:
    """Stacked horizontal bars: per cutoff k, the share of queries in each funnel class."""
    fig, ax = plt.subplots(figsize=(8.0, max(2.2, 0.45 * len(funnel) + 1.4)))
    if funnel.empty:
        ax.text(
            0.5,
            0.5,
            "no funnel: the fused variant is missing",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return fig
    share = funnel.div(funnel.sum(axis=1), axis=0)
    left = np.zeros(len(share))
    ylabels = [f"@{k}" for k in share.index]
    for cls in share.columns:
        vals = share[cls].to_numpy(dtype=float)
        ax.barh(ylabels, vals, left=left, color=CLASS_COLOURS.get(cls, "#999"), label=cls, edgecolor="white")
        for i, (lv, vv, cnt) in enumerate(zip(left, vals, funnel[cls].to_numpy(), strict=True)):
            if vv >= 0.06:
                ax.text(lv + vv / 2, i, str(int(cnt)), ha="center", va="center", fontsize=7, color="white")
        left += vals
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of queries")
    ax.legend(ncol=3, fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title(title or "Where relevant units were lost, per cutoff")
    fig.tight_layout()
    return fig


def quality_cost(
    summary: pd.DataFrame, metric: str, cost_cols: Sequence[str] = ("seconds_per_query", "tokens_per_query")
) -> plt.Figure:
    """Quality (``metric`` with CI) against seconds and LLM tokens per query, one point per variant.

    ``summary`` has one row per variant with ``variant, <metric>, <metric>_ci_low, <metric>_ci_high`` and the
    cost columns. A variant without tokens used no LLM (drawn at 0); one without recorded seconds is left
    out of that panel (named in its title).
    """
    variants = list(summary.variant)
    pal = _palette(variants)
    fig, axes = plt.subplots(1, len(cost_cols), figsize=(5.0 * len(cost_cols), 3.9), squeeze=False)
    for ax, col in zip(axes[0], cost_cols, strict=True):
        unknown = []
        for _, r in summary.iterrows():
            x = r.get(col, math.nan)
            x = math.nan if x is None else float(x)
            if math.isnan(x):
                if "token" in col:
                    x = 0.0
                else:
                    unknown.append(r.variant)
                    continue
            yv = float(r[metric])
            lo, hi = float(r.get(f"{metric}_ci_low", yv)), float(r.get(f"{metric}_ci_high", yv))
            ax.errorbar([x], [yv], yerr=[[yv - lo], [hi - yv]], fmt="o", color=pal[r.variant], capsize=3)
            ax.annotate(r.variant, (x, yv), textcoords="offset points", xytext=(5, 4), fontsize=8)
        xlabel = {
            "seconds_per_query": "seconds per query (retrieval + LLM)",
            "tokens_per_query": "LLM tokens per query (0 = no LLM)",
        }.get(col, col.replace("_", " "))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label(metric))
        ax.grid(alpha=0.3)
        if unknown:
            ax.set_title("not recorded: " + ", ".join(unknown), fontsize=8, color="#777")
    fig.suptitle(f"{label(metric)} against cost", fontsize=11)
    fig.tight_layout()
    return fig


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)
    ax.set_axis_off()


def discrimination(d: Discrimination) -> plt.Figure:
    """The reranker model's scores, relevant against non-relevant candidates (left: each class's histogram as a
    share of the class, shared bins), and its ROC AUC per query (right: sorted, chance at 0.5, the macro AUC and
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
        for flag, name, colour in ((True, "relevant", "#55a868"), (False, non, "#c44e52")):
            x = s.score[s.relevant == flag].to_numpy(dtype=float)
            if len(x):
                left.hist(x, bins=edges, weights=np.full(len(x), 1 / len(x)), histtype="step", lw=1.8,
                          color=colour, label=f"{name} ({len(x)})")
        left.set_xlabel(f"score given by {model or 'the model'}")
        left.set_ylabel("share of the class's candidates")
        left.legend(fontsize=8, frameon=False)
        left.grid(alpha=0.3)
    aucs = np.sort(per_query.auc.dropna().to_numpy(dtype=float)) if len(per_query) else np.array([])
    if not aucs.size:
        _no_data(right, note or "no query with both relevant and non-relevant candidates")
    else:
        right.scatter(np.arange(1, aucs.size + 1), aucs, s=14, color="#4c72b0", label="one query")
        right.axhline(0.5, color="#777", ls="--", lw=1, label="chance (0.5)")
        if math.isfinite(auc):
            right.axhline(auc, color="#dd8452", lw=1.5, label=f"mean AUC {auc:.3f}")
        if all(math.isfinite(c) for c in ci):
            right.axhspan(ci[0], ci[1], color="#dd8452", alpha=0.2, label="95% CI of the mean")
        right.set_ylim(-0.03, 1.03)
        right.set_xlabel("query (sorted by AUC)")
        right.set_ylabel("ROC AUC (relevant vs non-relevant)")
        right.legend(fontsize=7, frameon=False, loc="best")
        right.grid(alpha=0.3)
    fig.suptitle(f"Can {model or 'the reranker model'} tell relevant from non-relevant candidates?", fontsize=11)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- sweeps (notebook 06)
def _col_label(col: str) -> str:
    """A metric's label (``nDCG@10``), or the column name in words (``pool ceiling``)."""
    try:
        return label(col)
    except ValueError:
        return col.replace("_", " ")


def sweep_lines(slices: dict[str, pd.DataFrame], metrics: Sequence[str], title: str = "") -> plt.Figure:
    """One panel per swept axis: ``metrics`` (e.g. nDCG@10, MRR@10) against the axis's values, every other
    axis at its default. ``slices``: axis -> rows (:func:`rerankeval.experiments.sweep.one_at_a_time`)."""
    axes_used = {a: d for a, d in slices.items() if len(d) > 1}
    n = max(1, len(axes_used))
    cols = min(3, n)
    fig, axs = plt.subplots((n + cols - 1) // cols, cols, figsize=(4.6 * cols, 3.3 * ((n + cols - 1) // cols)),
                            squeeze=False)
    for ax, (axis, d) in zip(axs.flat, axes_used.items(), strict=False):
        x = [str(v) for v in d[axis]]
        for m in metrics:
            ax.plot(x, d[m].to_numpy(dtype=float), marker="o", label=_col_label(m))
        ax.set_xlabel(axis.replace("_", " "))
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axs.flat)[len(axes_used):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def sweep_heatmap(view: pd.DataFrame, metric: str, x: str, y: str, title: str = "") -> plt.Figure:
    """``metric`` over two axes (``view`` filtered to the other axes' defaults), the best cell outlined."""
    import seaborn as sns

    grid = view.pivot_table(index=y, columns=x, values=metric, aggfunc="mean", sort=False)
    if pd.api.types.is_numeric_dtype(view[x]):
        grid = grid.sort_index(axis=1)
    if pd.api.types.is_numeric_dtype(view[y]):
        grid = grid.sort_index(axis=0)
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * max(3, grid.shape[1]), 1.2 + 0.45 * max(2, grid.shape[0])))
    sns.heatmap(grid, annot=True, fmt=".3f", cmap="viridis", ax=ax, cbar_kws={"label": label(metric)},
                annot_kws={"fontsize": 7})
    if grid.notna().any().any():
        r, c = np.unravel_index(np.nanargmax(grid.to_numpy(dtype=float)), grid.shape)
        ax.add_patch(plt.Rectangle((c, r), 1, 1, fill=False, edgecolor="red", lw=2))
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def sweep_pareto(view: pd.DataFrame, metric: str, front: Sequence[bool], marked: dict[str, str],
                 cost_cols: Sequence[str] = ("seconds_per_query", "llm_tokens_per_query")) -> plt.Figure:
    """Quality against each cost, one dot per sweep point, the frontier (``front``) joined and ``marked``
    points (name -> label, e.g. default, chosen) annotated. A cost that is 0 for every point (LLM tokens, when
    no point reranks) gets no panel."""
    cost_cols = [c for c in cost_cols if view[c].fillna(0).abs().sum() > 0] or list(cost_cols[:1])
    fig, axes = plt.subplots(1, len(cost_cols), figsize=(5.2 * len(cost_cols), 3.9), squeeze=False)
    on = view[list(front)]
    for ax, col in zip(axes[0], cost_cols, strict=True):
        scale = 1000.0 if col == "seconds_per_query" else 1.0
        ax.scatter(view[col] * scale, view[metric], s=12, color="#999", alpha=0.6, label="sweep point")
        f = on.sort_values(col)
        ax.step(f[col] * scale, f[metric], where="post", color="#c44e52", lw=1.5, label="frontier")
        ax.scatter(f[col] * scale, f[metric], s=22, color="#c44e52")
        for name, text in marked.items():
            r = view[view.point == name]
            if len(r):
                ax.scatter(r[col] * scale, r[metric], s=60, marker="*", color="#4c72b0", zorder=3)
                ax.annotate(text, (float(r[col].iloc[0]) * scale, float(r[metric].iloc[0])), fontsize=8,
                            textcoords="offset points", xytext=(5, 4))
        ax.set_xlabel({"seconds_per_query": "milliseconds per query (legs + fusion)",
                       "llm_tokens_per_query": "LLM tokens per query"}.get(col, col))
        ax.set_ylabel(label(metric))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{label(metric)} against cost, every sweep point", fontsize=11)
    fig.tight_layout()
    return fig
