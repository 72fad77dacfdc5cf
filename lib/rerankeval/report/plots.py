"""Figures of the analysis notebook (matplotlib/seaborn), saved as ``<notebook>-<name>.png``.

Each function returns a matplotlib Figure; :func:`save` writes it atomically and :func:`show` displays it with
its caption (:mod:`rerankeval.report.captions`). Nothing here reads files. A variant has one colour in every
figure (:func:`variant_colour`); the sweep's figures are in :mod:`rerankeval.report.sweep_plots`, the paired
comparisons' (forest plot, per-query differences) in :mod:`rerankeval.report.compare_plots`.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rerankeval.core import names
from rerankeval.core.ioutil import atomic_write_bytes
from rerankeval.evaluate.metrics import label
from rerankeval.report.captions import caption_for

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Better and worse have their own colours, never a variant's (colour means a variant elsewhere): the two ends of
# ColorBrewer's PuOr, a diverging scheme safe for colour-blind readers; tied is grey.
BETTER = "#5e3c99"  # better / promoted
WORSE = "#e66101"  # worse / demoted
TIED = "#9e9e9e"  # unchanged

CLASS_COLOURS = {  # the funnel: a hit in the better colour, each loss a shade of the worse one (pipeline order)
    "hit": BETTER,
    "not retrieved by either leg": "#4d4d4d",
    "lost in fusion": "#7f3b08",
    "cut by the pool size": "#b35806",
    "below the cutoff": "#b35806",
    "rerank fallback": "#bababa",
    "lost in rerank": WORSE,
    "not lifted by rerank": "#fdb863",
}


def _ink(colour: str) -> str:
    """Black or white, whichever reads on ``colour`` (its relative luminance)."""
    import matplotlib.colors as mc

    r, g, b = mc.to_rgb(colour)
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "white"


VARIANT_COLOURS = {  # one colour per variant name, the same in every figure of every notebook
    names.BM25: "#4c72b0",
    names.VECTOR: "#dd8452",
    names.HYBRID: "#55a868",
    names.QDRANT_HYBRID: "#c44e52",
    names.HYBRID_REFORMULATE: "#8172b3",
    names.HYBRID_RERANK: "#937860",
    names.CROSS_ENCODER: "#da8bc3",
    names.HYBRID_RERANK_EXPAND: "#ccb974",
    names.HYBRID_TUNED: "#64b5cd",
    names.HYBRID_COMBSUM: "#2f6b3a",
    names.HYBRID_COMBMNZ: "#9ccf8f",
    names.HYBRID_DBSF: "#1b9e77",
    names.QDRANT_DBSF: "#7f2a2d",
}
_OTHER_COLOURS = ("#8c8c8c", "#b07aa1", "#ff9da7", "#9c755f", "#edc948", "#76b7b2", "#59a14f", "#e15759")
LLM_VARIANTS = (names.HYBRID_REFORMULATE, names.HYBRID_RERANK, names.HYBRID_RERANK_EXPAND)  # they spend tokens


def variant_colour(variant: str) -> str:
    """The variant's colour: fixed for the catalogue's names, a stable hash of the name for an external run."""
    return VARIANT_COLOURS.get(variant) or _OTHER_COLOURS[zlib.crc32(variant.encode()) % len(_OTHER_COLOURS)]


def _palette(variants: Sequence[str]) -> dict[str, str]:
    return {v: variant_colour(v) for v in variants}


def _pyplot() -> ModuleType:
    """``matplotlib.pyplot``, imported when a figure is drawn (showing a saved one needs none: :mod:`.figcache`)."""
    import matplotlib.pyplot as plt

    return plt


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
    """Save ``fig`` (see :func:`save`), display the same PNG inline (whatever the backend) with its caption
    (:func:`rerankeval.report.captions.caption_for`) as Markdown below it, and close it."""
    path = save(fig, figures_dir, name, notebook)
    _pyplot().close(fig)
    display_png(path)


def display_png(path: Path) -> None:
    """Display a saved figure inline with its caption (:func:`rerankeval.report.captions.caption_for`) as Markdown
    below it."""
    try:
        from IPython.display import Image, Markdown, display

        display(Image(data=path.read_bytes(), format="png"))
        caption = caption_for(path.stem)
        if caption:
            display(Markdown("*" + caption.replace("*", "\\*") + "*"))  # italic; a literal * escaped
    except ImportError:  # pragma: no cover - IPython is always there in notebooks
        pass


def metric_bars(
    ci: pd.DataFrame,
    metrics: Sequence[str],
    variants: Sequence[str] | None = None,
    title: str = "",
    ylabel: str = "mean over queries (95% bootstrap CI)",
) -> Figure:
    """Grouped bars: metrics on the x axis, one bar (coloured by variant) per variant, the CI as error bars; the
    legend outside the axes.

    ``ci`` has columns ``variant, metric, mean, ci_low, ci_high`` (stats.bootstrap_table).
    """
    plt = _pyplot()
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
            yerr=err if np.nanmax(np.abs(err), initial=0.0) > 0 else None,
            capsize=2,
            label=v,
            color=pal[v],
            edgecolor="white",
            linewidth=0.5,
        )
    ax.set_xticks(x, [label(m) for m in metrics])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(
        fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="variant", title_fontsize=8
    )  # outside the axes: never over a bar
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def variant_bars(means: pd.DataFrame, title: str = "") -> Figure:
    """:func:`metric_bars` of a ``variant x metric`` table of means (no CI: notebook 03's first look)."""
    long = means.rename_axis(index="variant", columns="metric").stack().rename("mean").reset_index()
    long = long.assign(ci_low=long["mean"], ci_high=long["mean"])
    return metric_bars(long, list(means.columns), list(means.index), title=title, ylabel="mean over queries")


RANK_COLOURS = ("#1a9850", "#66bd63", "#a6d96a", "#fee08b", "#fdae61", "#f46d43")  # rank 1 (good) ... deep
UNRETRIEVED_COLOUR = "#bdbdbd"


def rank_bins(max_rank: int) -> list[tuple[int, int]]:
    """The rank heat map's discrete classes: 1, 2-3, 4-5, 6-10, 11-20, 21-max_rank (those within max_rank)."""
    edges = [e for e in (1, 2, 4, 6, 11, 21) if e <= max_rank]
    return [(lo, hi - 1) for lo, hi in zip(edges, [*edges[1:], max_rank + 1], strict=True)]


def rank_heatmap(first_ranks: pd.DataFrame, max_rank: int = 100, title: str = "") -> Figure:
    """Queries x variants: rank of the first relevant unit in discrete classes (dark green = rank 1, the best;
    grey = no relevant unit in the top ``max_rank``), a legend entry per class."""
    plt = _pyplot()
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    df = first_ranks.copy()
    df = df.assign(_k=df.fillna(max_rank * 10).mean(axis=1)).sort_values("_k").drop(columns="_k")
    bins = rank_bins(max_rank)
    colours = [*RANK_COLOURS[: len(bins)], UNRETRIEVED_COLOUR]
    vals = df.to_numpy(dtype=float)
    code = np.full(vals.shape, len(bins), dtype=int)  # the last class: not retrieved within max_rank
    for c, (lo, hi) in enumerate(bins):
        code[(vals >= lo) & (vals <= hi)] = c
    n = len(df)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * df.shape[1] + 3.5), min(14.0, max(2.5, 0.22 * n + 1.5))))
    ax.pcolormesh(
        code,
        cmap=ListedColormap(colours),
        norm=BoundaryNorm(np.arange(len(colours) + 1) - 0.5, len(colours)),
        edgecolors="white",
        linewidth=0.3,
    )
    if n <= 40:
        for (r, c), v in np.ndenumerate(vals):
            if np.isfinite(v) and v <= max_rank:
                ax.text(c + 0.5, r + 0.5, f"{v:.0f}", ha="center", va="center", fontsize=7)
    ax.set_xlim(0, df.shape[1])
    ax.set_ylim(n, 0)
    ax.set_xticks(np.arange(df.shape[1]) + 0.5, [str(c) for c in df.columns], rotation=30, ha="right")
    ax.set_yticks(np.arange(n) + 0.5 if n <= 60 else [], [str(q) for q in df.index] if n <= 60 else [], fontsize=7)
    ax.set_xlabel("variant")
    ax.set_ylabel("query" + (" (sorted by mean rank)" if n <= 60 else f" ({n}, sorted by mean rank)"))
    words = [f"rank {lo}" if lo == hi else f"rank {lo}\u2013{hi}" for lo, hi in bins]
    handles = [
        Patch(color=col, label=w) for col, w in zip(colours, [*words, f"not in the top {max_rank}"], strict=True)
    ]
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
        fontsize=8,
        title="first relevant unit",
        title_fontsize=8,
    )
    ax.set_title(title or "Rank of the first relevant unit (green: found at the top)", fontsize=10)
    fig.tight_layout()
    return fig


LOG_RANKS_ABOVE = 30  # the rank-shift axes turn logarithmic only for ranks deeper than this


def rank_shift_plot(shift: pd.DataFrame, src: str, dst: str, pool_k: int | None = None, k: int | None = None) -> Figure:
    """Each relevant unit of the fused list: fused rank (x) -> reranked rank (y), in the better (promoted) and
    worse (demoted) colours (:data:`BETTER`, :data:`WORSE`), grey when unchanged.

    Below the diagonal = promoted; units the reranked list lacks are drawn at the top. The axes are linear with
    whole-number ticks up to rank :data:`LOG_RANKS_ABOVE` (ranks 1-10 spread evenly), logarithmic beyond it.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    if shift.empty:
        ax.text(
            0.5, 0.5, f"no relevant units in both {src} and {dst}", ha="center", va="center", transform=ax.transAxes
        )
        ax.set_axis_off()
        return fig
    top = max(2.0, float(np.nanmax(shift[["src_rank", "dst_rank"]].to_numpy(dtype=float))), k or 0, pool_k or 0)
    log = top > LOG_RANKS_ABOVE
    miss_y = top * 1.6 if log else top + max(1.0, round(0.15 * top))
    y = shift.dst_rank.fillna(miss_y).to_numpy(dtype=float)
    src_rank = shift.src_rank.to_numpy(dtype=float)
    rng = np.random.default_rng(0)
    u = rng.uniform(-0.06, 0.06, size=len(shift))  # jitter: tied points stay visible
    xj, yj = (src_rank * np.exp(u), y * np.exp(u[::-1])) if log else (src_rank + 2 * u, y + 2 * u[::-1])
    colours = np.where(
        shift.dst_rank.isna(),
        "#333333",  # not in the reranked list
        np.where(y < src_rank, BETTER, np.where(y > src_rank, WORSE, TIED)),
    )
    ax.scatter(xj, yj, c=colours, s=22, alpha=0.75, edgecolor="none")
    ax.plot([1, top], [1, top], color="#999", lw=0.8, ls="--")
    refs = ((k, f"k = pool = {k}"),) if k and k == pool_k else ((k, f"k = {k}"), (pool_k, f"pool = {pool_k}"))
    for ref, name in refs:
        if ref:
            ax.axvline(ref + 0.5, color="#bbb", lw=0.7)
            ax.axhline(ref + 0.5, color="#bbb", lw=0.7)
            ax.text(ref + 0.5, 1, name, fontsize=7, color="#777", rotation=90, va="bottom", ha="right")
    _rank_axes(ax, log, top, miss_y)
    ax.set_xlabel(f"rank in {src}")
    ax.set_ylabel(f"rank in {dst} (top: not in list)")
    up, down = int((y < src_rank).sum()), int((y > src_rank).sum())
    ax.set_title(f"Relevant units: {up} promoted, {down} demoted, {len(shift) - up - down} unchanged", fontsize=10)
    ax.grid(alpha=0.2, which="both")
    fig.tight_layout()
    return fig


def _rank_axes(ax, log: bool, top: float, miss_y: float) -> None:
    """Log axes for deep ranks; else linear ones from rank 1 (at the bottom left) with whole-number ticks."""
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
        return
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(0.5, top + 0.5)
    ax.set_ylim(0.5, miss_y + 0.5)
    ticks = [t for t in MaxNLocator(integer=True, min_n_ticks=2).tick_values(1, top) if 1 <= t <= top]
    ax.set_xticks(ticks)
    ax.set_yticks([*ticks, miss_y], [f"{t:.0f}" for t in ticks] + ["none"])  # "none": not in the reranked list


def funnel_bars(funnel: pd.DataFrame, title: str = "") -> Figure:
    """Stacked horizontal bars: per cutoff k, the share of queries in each funnel class (:data:`CLASS_COLOURS`: a
    hit in the better colour, the losses in shades of the worse one, none of them a variant's colour)."""
    plt = _pyplot()
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
        colour = CLASS_COLOURS.get(cls, "#999")
        ax.barh(ylabels, vals, left=left, color=colour, label=cls, edgecolor="white")
        for i, (lv, vv, cnt) in enumerate(zip(left, vals, funnel[cls].to_numpy(), strict=True)):
            if vv >= 0.06:
                ax.text(lv + vv / 2, i, str(int(cnt)), ha="center", va="center", fontsize=7, color=_ink(colour))
        left += vals
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of queries")
    ax.legend(ncol=3, fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title(title or "Where relevant units were lost, per cutoff")
    fig.tight_layout()
    return fig


def place_labels(ax, points: Sequence[tuple[float, float, str]], fontsize: float = 8.0) -> list:
    """Annotate each ``(x, y, text)`` (data coordinates) so that no two labels overlap and no label covers a
    point: a label sits beside its point (right of it, else left), moved up or down by whole lines until it is
    clear; a label gets a leader line to its point when it was moved or when another point is nearer to it than
    its own. Returns the annotations (each ``xy`` is its point)."""
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits before reading the transform
    renderer = ax.figure.canvas.get_renderer()
    px = ax.get_window_extent(renderer)
    to_px = ax.transData
    marks = [tuple(to_px.transform((x, y))) for x, y, _ in points]
    line = 1.3 * fontsize * ax.figure.dpi / 72
    gap, r = 7 * ax.figure.dpi / 72, 5 * ax.figure.dpi / 72  # label-to-point gap, a marker's half width (pixels)
    obstacles = [(mx - r, mx + r, my - r, my + r) for mx, my in marks]
    placed: list[tuple[float, float, float, float]] = []
    out = []
    for x, y, text in sorted(points, key=lambda p: (p[1], p[0])):
        fx, fy = to_px.transform((x, y))
        probe = ax.text(0, 0, text, fontsize=fontsize)
        w = probe.get_window_extent(renderer).width + 2
        probe.remove()
        box = _free_box(fx, fy, w, line, gap, px, placed + obstacles)
        placed.append(box)
        near = min(range(len(marks)), key=lambda i: _box_distance(box, marks[i]))
        moved = abs((box[2] + box[3]) / 2 - fy) > line / 2 or marks[near] != (fx, fy)
        arrow = {"arrowstyle": "-", "color": "#888", "lw": 0.6} if moved else None
        left = box[1] <= fx
        at = ax.transAxes.inverted().transform((box[1] if left else box[0], (box[2] + box[3]) / 2))
        out.append(
            ax.annotate(
                text,
                (x, y),
                xytext=tuple(at),
                textcoords="axes fraction",
                ha="right" if left else "left",
                va="center",
                fontsize=fontsize,
                arrowprops=arrow,
            )
        )
    return out


def _box_distance(box: tuple[float, float, float, float], p: tuple[float, float]) -> float:
    """The distance from point ``p`` to the rectangle ``box`` (x0, x1, y0, y1); 0 inside it."""
    dx = max(box[0] - p[0], 0.0, p[0] - box[1])
    dy = max(box[2] - p[1], 0.0, p[1] - box[3])
    return math.hypot(dx, dy)


def _free_box(
    fx: float, fy: float, w: float, h: float, gap: float, frame, taken: Sequence[tuple[float, float, float, float]]
) -> tuple[float, float, float, float]:
    """A ``w`` x ``h`` box (pixels) inside the axes ``frame`` beside the point (``fx``, ``fy``), right of it (left
    first near the right edge), stepped up and down by ``h`` until it overlaps nothing ``taken``."""
    sides = [fx + gap, fx - gap - w]
    if fx + gap + w > frame.x1 - 2:
        sides.reverse()
    first = None
    for step in range(80):
        ty = min(frame.y1 - h / 2, max(frame.y0 + h / 2, fy + (step + 1) // 2 * h * (1 if step % 2 else -1)))
        for x0 in sides:
            box = (x0, x0 + w, ty - h / 2, ty + h / 2)
            first = first or box
            inside = box[0] >= frame.x0 + 2 and box[1] <= frame.x1 - 2
            if inside and all(box[1] <= a or box[0] >= b or box[3] <= c or box[2] >= d for a, b, c, d in taken):
                return box
    return first  # type: ignore[return-value]


def _cost(r: pd.Series, col: str) -> float:
    """A variant's cost in ``col``; NaN tokens mean no LLM (0) except for a variant that calls one."""
    x = r.get(col, math.nan)
    x = math.nan if x is None else float(x)
    return 0.0 if math.isnan(x) and "token" in col and r.variant not in LLM_VARIANTS else x


def quality_cost(
    summary: pd.DataFrame, metric: str, cost_cols: Sequence[str] = ("seconds_per_query", "tokens_per_query")
) -> Figure:
    """Quality (``metric`` with CI) against seconds and LLM tokens per query, one point per variant, labelled
    without overlaps (:func:`place_labels`); seconds on a log axis when they span more than 30x.

    ``summary`` has one row per variant with ``variant, <metric>, <metric>_ci_low, <metric>_ci_high`` and the
    cost columns. A variant without tokens used no LLM (drawn at 0) unless it is an LLM variant; one without a
    recorded cost is left out of that panel (named in its title).
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(cost_cols), figsize=(5.4 * len(cost_cols), 4.2), squeeze=False)
    todo = []
    for ax, col in zip(axes[0], cost_cols, strict=True):
        xs = {r.variant: _cost(r, col) for _, r in summary.iterrows()}
        unknown = [v for v, x in xs.items() if math.isnan(x)]
        pts = []
        for _, r in summary[~summary.variant.isin(unknown)].iterrows():
            x, yv = xs[r.variant], float(r[metric])
            lo, hi = float(r.get(f"{metric}_ci_low", yv)), float(r.get(f"{metric}_ci_high", yv))
            ax.errorbar(
                [x], [yv], yerr=[[yv - lo], [hi - yv]], fmt="o", color=variant_colour(r.variant), capsize=3, alpha=0.85
            )
            pts.append((x, yv, r.variant))
        pos = [x for x, _, _ in pts if x > 0]
        if "second" in col and len(pos) == len(pts) and pos and max(pos) / min(pos) > 30:
            ax.set_xscale("log")
        ax.set_xlabel(
            {
                "seconds_per_query": "seconds per query (retrieval + LLM)",
                "tokens_per_query": "LLM tokens per query (0 = no LLM)",
            }.get(col, col.replace("_", " "))
        )
        ax.set_ylabel(label(metric))
        ax.grid(alpha=0.3)
        if unknown:
            ax.set_title("not recorded: " + ", ".join(unknown), fontsize=8, color="#777")
        todo.append((ax, pts))
    fig.suptitle(f"{label(metric)} against cost", fontsize=11)
    fig.tight_layout()
    for ax, pts in todo:
        place_labels(ax, pts)
    return fig
