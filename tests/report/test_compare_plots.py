"""The forest plot and the per-query difference chart, on comparisons whose answers are known."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from comparison_rows import comparison  # noqa: E402
from rerankeval.report import compare_plots as C  # noqa: E402
from rerankeval.report import plots as P  # noqa: E402


def _row(a, b, diff, lo, hi, wins, ties, losses, p_holm):
    """``a - b`` over 10 queries, the means around 0.5, with no spread columns."""
    return comparison(a, b, diff, p_holm, wins, ties, losses, n=10, ci=(lo, hi), means=(0.5 + diff, 0.5), spread=False)


def _comparisons():
    return pd.DataFrame(
        [
            _row("hybrid", "bm25", 0.10, 0.04, 0.16, 7, 2, 1, 0.01),  # significant
            _row("bm25", "vector", -0.02, -0.08, 0.04, 3, 3, 4, 0.6),  # stored as bm25 - vector: vector = +0.02
            _row("hybrid_rerank", "bm25", -0.05, -0.12, 0.02, 2, 3, 5, 0.2),
        ]
    )


def test_forest_points_bars_marks_and_counts():
    fig = C.forest(_comparisons(), "ndcg@10", "bm25", ["bm25", "vector", "hybrid", "hybrid_rerank"])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["vector", "hybrid *", "hybrid_rerank"]  # the baseline is not a row; * = Holm-significant
    points = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [round(float(p.get_xdata()[0]), 3) for p in points] == [0.02, 0.10, -0.05]  # vector's row re-oriented
    filled = [matplotlib.colors.to_hex(p.get_markerfacecolor()) != "#ffffff" for p in points]
    assert filled == [False, True, False]
    segs = [c.get_segments()[0] for c in ax.collections]
    assert [(round(s[0][0], 3), round(s[1][0], 3)) for s in segs] == [(-0.04, 0.08), (0.04, 0.16), (-0.12, 0.02)]
    texts = {t.get_text() for t in ax.texts}
    assert {"4 / 3 / 3", "7 / 2 / 1", "2 / 3 / 5"} <= texts  # vector's wins are the stored row's losses
    assert [matplotlib.colors.to_hex(p.get_color()) for p in points] == [
        P.variant_colour(v) for v in ("vector", "hybrid", "hybrid_rerank")
    ]
    assert any(line.get_xdata()[0] == 0 for line in ax.get_lines() if line.get_linestyle() == "--")
    plt.close(fig)


def test_a_variant_has_the_same_colour_in_the_forest_and_the_bars():
    fig = C.forest(_comparisons(), "ndcg@10", "bm25", ["bm25", "hybrid"])
    forest_colour = matplotlib.colors.to_hex(
        [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "o"][0].get_color()
    )
    ci = pd.DataFrame(
        [("vector", "ndcg@10", 10, 0.5, 0.4, 0.6), ("hybrid", "ndcg@10", 10, 0.6, 0.5, 0.7)],
        columns=["variant", "metric", "n", "mean", "ci_low", "ci_high"],
    )
    bars = P.metric_bars(ci, ["ndcg@10"])
    hybrid_bar = [b for b in bars.axes[0].patches if round(b.get_height(), 2) == 0.6][0]
    assert matplotlib.colors.to_hex(hybrid_bar.get_facecolor()) == forest_colour == P.variant_colour("hybrid")
    plt.close(fig)
    plt.close(bars)


def _per_query():
    a = {"q1": 0.5, "q2": 0.2, "q3": 0.9, "q4": 0.4, "q5": 0.0}
    b = {"q1": 0.3, "q2": 0.2, "q3": 1.0, "q4": 0.0, "q5": 0.1}
    rows = [("hybrid", q, "ndcg@10", v) for q, v in a.items()] + [("bm25", q, "ndcg@10", v) for q, v in b.items()]
    rows += [("bm25", "q6", "ndcg@10", 0.5)]  # hybrid did not answer q6: left out, never a loss
    return pd.DataFrame(rows, columns=["variant", "qid", "metric", "value"])


def test_delta_per_query_bars_sorted_coloured_and_counted():
    d = C.per_query_diff(_per_query(), "hybrid", "bm25", "ndcg@10")
    assert list(d.index) == ["q4", "q1", "q2", "q3", "q5"]
    np.testing.assert_allclose(d.to_numpy(), [0.4, 0.2, 0.0, -0.1, -0.1])
    fig = C.delta_per_query(_per_query(), "hybrid", "bm25", "ndcg@10")
    ax = fig.axes[0]
    heights = [round(b.get_height(), 3) for b in ax.patches]
    assert heights == [0.4, 0.2, 0.0, -0.1, -0.1]
    colours = [matplotlib.colors.to_hex(b.get_facecolor()) for b in ax.patches]
    assert colours == [P.BETTER] * 2 + [P.TIED] + [P.WORSE] * 2
    assert "2 queries better, 1 tied, 2 worse" in ax.get_title()
    plt.close(fig)
    plt.close(C.delta_per_query(_per_query(), "hybrid", "nothing", "ndcg@10"))  # a message, no error


def test_delta_pairs_are_the_comparisons_that_matter():
    assert C.delta_pairs(["bm25", "vector", "hybrid", "hybrid_rerank"], "vector", "hybrid_rerank") == [
        ("hybrid", "vector"),
        ("hybrid_rerank", "hybrid"),
    ]
    assert C.delta_pairs(["bm25", "hybrid", "cross_encoder"], "bm25", "hybrid_rerank") == [
        ("hybrid", "bm25"),
        ("cross_encoder", "hybrid"),
    ]
    assert C.delta_pairs(["bm25", "vector"], "vector", "hybrid_rerank") == []
    assert C.delta_pairs(["hybrid", "hybrid_rerank"], "hybrid", "hybrid_rerank") == [("hybrid_rerank", "hybrid")]


def test_delta_bars_mean_better_and_worse_in_colours_no_variant_has():
    """Green and red were hybrid's and qdrant_hybrid's colours: a bar looked like a variant."""
    fig = C.delta_per_query(_per_query(), "hybrid", "bm25", "ndcg@10")
    used = {matplotlib.colors.to_hex(b.get_facecolor()) for b in fig.axes[0].patches}
    assert used == {P.BETTER, P.TIED, P.WORSE}
    assert not used & set(P.VARIANT_COLOURS.values())
    plt.close(fig)
