"""Every figure renders from small inputs and is saved under a name saying which notebook made it."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from PIL import Image  # noqa: E402

from rerankeval.report import agreement_plots as AP  # noqa: E402
from rerankeval.report import plots as P  # noqa: E402
from rerankeval.report import sweep_plots as SP  # noqa: E402


def _ci():
    rows = []
    for v, base in (("bm25", 0.5), ("hybrid", 0.6), ("hybrid_rerank", 0.7)):
        for m in ("ndcg@10", "mrr@10", "recall@20"):
            rows.append((v, m, 10, base, base - 0.1, base + 0.1))
    return pd.DataFrame(rows, columns=["variant", "metric", "n", "mean", "ci_low", "ci_high"])


def _check(fig, tmp_path, name):
    path = P.save(fig, tmp_path, name)
    plt.close(fig)
    assert path.name == f"05-{name}.png"
    with Image.open(path) as im:
        assert im.size[0] > 200 and im.size[1] > 100
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert len(colours) > 10  # not a blank canvas


def test_metric_bars(tmp_path):
    _check(P.metric_bars(_ci(), ["ndcg@10", "mrr@10", "recall@20"], title="t"), tmp_path, "metric-bars")


def test_rank_heatmap(tmp_path):
    fr = pd.DataFrame(
        {"bm25": [1, 5, math.nan, 40], "hybrid": [2, 1, 100, math.nan]},
        index=pd.Index(["q1", "q2", "q<3>", "q4"], name="qid"),
    )
    _check(P.rank_heatmap(fr, max_rank=100), tmp_path, "rank-heatmap")
    big = pd.DataFrame({"a": range(1, 101), "b": range(100, 0, -1)}, index=[f"q{i}" for i in range(100)])
    _check(P.rank_heatmap(big), tmp_path, "rank-heatmap-big")


def test_rank_shift(tmp_path):
    shift = pd.DataFrame(
        {
            "qid": ["q1", "q2", "q3"],
            "unit": ["a", "b", "c"],
            "grade": [1, 2, 1],
            "src_rank": [5, 1, 12],
            "dst_rank": [1, 3, math.nan],
        }
    )
    _check(P.rank_shift_plot(shift, "hybrid", "hybrid_rerank", pool_k=20, k=10), tmp_path, "rank-shift")
    empty = P.rank_shift_plot(shift.iloc[:0], "hybrid", "hybrid_rerank")
    plt.close(empty)


def test_funnel_and_quality_cost(tmp_path):
    funnel = pd.DataFrame(
        {"hit": [3, 6], "lost in fusion": [2, 1], "not lifted by rerank": [3, 1]},
        index=pd.Index([1, 10], name="k"),
    )
    _check(P.funnel_bars(funnel), tmp_path, "funnel")
    plt.close(P.funnel_bars(funnel.iloc[:0]))
    summary = pd.DataFrame(
        {
            "variant": ["bm25", "hybrid_rerank"],
            "ndcg@10": [0.5, 0.7],
            "ndcg@10_ci_low": [0.4, 0.6],
            "ndcg@10_ci_high": [0.6, 0.8],
            "seconds_per_query": [math.nan, 12.0],
            "tokens_per_query": [math.nan, 1500.0],
        }
    )
    _check(P.quality_cost(summary, "ndcg@10"), tmp_path, "quality-cost")


def _scored_pools():
    """Candidate rows and qrels, 12 queries of 8: the first 3 relevant and scored 0.3 higher, plus uniform noise."""
    import numpy as np

    rng = np.random.default_rng(0)
    rows = [
        {"qid": f"q{q}", "docid": f"d{i}", "llm_score": float(rng.uniform() + (i < 3) * 0.3)}
        for q in range(12)
        for i in range(8)
    ]
    qrels = {f"q{q}": {f"d{i}": int(i < 3) for i in range(8)} for q in range(12)}
    return rows, qrels


def test_discrimination(tmp_path):
    """The reranker model's scores by class and its AUC per query; undefined pools draw their reason."""
    from rerankeval.evaluate import discrimination as D

    rows, qrels = _scored_pools()
    d = D.measure(pd.DataFrame(rows), qrels, model="m", n_boot=200)
    assert d.status in (D.INFORMATIVE, D.UNINFORMATIVE) and math.isfinite(d.ci_low)
    _check(AP.discrimination(d), tmp_path, "discrimination")
    for cands in (pd.DataFrame(rows).assign(llm_score=math.nan), pd.DataFrame(rows).assign(llm_score=0.3)):
        undefined = D.measure(cands, qrels, model="m", n_boot=50)
        assert undefined.status == D.UNDEFINED
        plt.close(AP.discrimination(undefined))
    plt.close(AP.discrimination(D.Discrimination(reason="nothing")))  # from a summary: no frames


def _bars(ax):
    return [p for p in ax.patches if p.get_height() > 0]


def _boxes_overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_metric_bars_colour_is_the_variant_and_the_legend_covers_no_bar():
    tall = _ci().assign(mean=lambda d: d["mean"] + 0.3, ci_low=lambda d: d.ci_low + 0.3)  # bars up to 1.0 (Success@k)
    tall = tall.assign(ci_high=tall["mean"])
    fig = P.metric_bars(tall, ["ndcg@10", "mrr@10", "recall@20"])
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    bars = _bars(ax)
    assert len(bars) == 9  # three variants x three metrics
    assert not any(_boxes_overlap(legend, b.get_window_extent()) for b in bars)
    by_colour = {}
    for b in bars:
        by_colour.setdefault(matplotlib.colors.to_hex(b.get_facecolor()), []).append(round(b.get_height(), 3))
    assert by_colour == {
        P.variant_colour("bm25"): [0.8] * 3,
        P.variant_colour("hybrid"): [0.9] * 3,
        P.variant_colour("hybrid_rerank"): [1.0] * 3,
    }  # colour = variant, not metric
    plt.close(fig)


def test_variant_colours_are_stable_and_distinct():
    from rerankeval.core import names

    assert P._palette(["hybrid", "bm25"])["bm25"] == P._palette(["bm25"])["bm25"]  # not by position
    assert len({P.variant_colour(v) for v in names.REPORT_ORDER}) == len(names.REPORT_ORDER)
    assert P.variant_colour("my_run") == P.variant_colour("my_run")  # an external run: hashed, stable


def test_variant_bars_of_a_table_of_means():
    means = pd.DataFrame({"ndcg@10": [0.4, 0.6], "recall@100": [0.8, 0.9]}, index=["bm25", "hybrid"])
    fig = P.variant_bars(means, title="t")
    bars = _bars(fig.axes[0])
    assert sorted(round(b.get_height(), 2) for b in bars) == [0.4, 0.6, 0.8, 0.9]
    assert {matplotlib.colors.to_hex(b.get_facecolor()) for b in bars} == {
        P.variant_colour("bm25"),
        P.variant_colour("hybrid"),
    }
    plt.close(fig)


def test_rank_heatmap_rank_one_is_green_and_unretrieved_has_its_own_class():
    fr = pd.DataFrame({"bm25": [1.0, math.nan], "hybrid": [3.0, 150.0]}, index=["q1", "q2"])
    fig = P.rank_heatmap(fr, max_rank=100)
    ax = fig.axes[0]
    mesh = ax.collections[0]
    fig.canvas.draw()
    colours = [matplotlib.colors.to_hex(c) for c in mesh.get_facecolors()]  # row-major: q1 bm25, q1 hybrid, ...
    assert colours == [P.RANK_COLOURS[0], P.RANK_COLOURS[1], P.UNRETRIEVED_COLOUR, P.UNRETRIEVED_COLOUR]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "rank 1" and labels[-1] == "not in the top 100"
    assert len(fig.axes) == 1  # no colour bar
    plt.close(fig)
    assert P.rank_bins(10) == [(1, 1), (2, 3), (4, 5), (6, 10)]


def test_quality_cost_labels_do_not_overlap():
    n = 6  # five cheap variants within 0.004 of each other, one expensive one far away (the real layout)
    summary = pd.DataFrame(
        {
            "variant": [f"variant_{i}" for i in range(n)],
            "ndcg@10": [0.60 + 0.001 * i for i in range(n - 1)] + [0.9],
            "seconds_per_query": [0.0, 0.0, 0.0, 0.001, 0.001, 10.0],
            "tokens_per_query": [math.nan] * (n - 1) + [1500.0],
        }
    )
    fig = P.quality_cost(summary, "ndcg@10")
    fig.canvas.draw()
    for ax in fig.axes:
        boxes = [Text.get_window_extent(t) for t in ax.texts]  # the text alone, not its leader line
        assert len(boxes) == n
        assert not any(_boxes_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(fig)


def test_quality_cost_leaves_an_llm_variant_without_tokens_out():
    summary = pd.DataFrame(
        {
            "variant": ["bm25", "hybrid_reformulate"],
            "ndcg@10": [0.5, 0.6],
            "seconds_per_query": [0.01, 0.5],
            "tokens_per_query": [math.nan, math.nan],
        }
    )
    fig = P.quality_cost(summary, "ndcg@10")
    tokens = fig.axes[1]
    assert [t.get_text() for t in tokens.texts] == ["bm25"] and "hybrid_reformulate" in tokens.get_title()
    plt.close(fig)


def _sweep_view(seconds):
    return pd.DataFrame(
        {
            "point": ["p1", "p2", "p3"],
            "ndcg@10": [0.61, 0.65, 0.63],
            "seconds_per_query": seconds,
            "llm_tokens_per_query": [0.0, 0.0, 0.0],
        }
    )


def test_pareto_says_when_the_cost_spread_is_noise():
    fig = SP.sweep_pareto(_sweep_view([0.00230, 0.00231, 0.00233]), "ndcg@10", [False, True, False], {"p2": "chosen"})
    ax = fig.axes[0]
    assert "negligibly" in ax.get_title() and "2.30" in ax.get_title()
    assert ax.get_xlabel() == "sweep point (sorted by quality)"
    plt.close(fig)
    assert SP.negligible(_sweep_view([0.0088, 0.0104, 0.0095]), "seconds_per_query")  # 1.6 ms of 9.5: noise
    fig = SP.sweep_pareto(_sweep_view([0.002, 0.010, 0.030]), "ndcg@10", [True, True, False], {"p2": "chosen"})
    assert "milliseconds" in fig.axes[0].get_xlabel()
    plt.close(fig)


def test_pool_ceiling_has_a_y_label_and_metrics_are_not_coloured_as_variants():
    d = pd.DataFrame({"pool_k": [10, 20], "pool_ceiling": [0.6, 0.7], "ndcg@10": [0.5, 0.5]})
    fig = SP.sweep_lines({"pool_k": d}, ["pool_ceiling"])
    assert "pool ceiling" in fig.axes[0].get_ylabel()
    plt.close(fig)
    fig = SP.sweep_lines({"pool_k": d}, ["ndcg@10", "pool_ceiling"])
    line_colours = {matplotlib.colors.to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert not line_colours & set(P.VARIANT_COLOURS.values())
    plt.close(fig)


def test_heatmap_values_are_short_and_fit_their_cells():
    view = pd.DataFrame(
        {
            "rrf_k": [10, 60, 10, 60],
            "weights": ["1/1", "1/1", "1/0.5", "1/0.5"],
            "ndcg@10": [0.6543, 0.6512, 0.6621, 0.6499],
        }
    )
    fig = SP.sweep_heatmap(view, "ndcg@10", "rrf_k", "weights")
    ax = fig.axes[0]
    fig.canvas.draw()
    texts = [t for t in ax.texts if t.get_text()]
    assert sorted(t.get_text() for t in texts) == [".650", ".651", ".654", ".662"]
    width = ax.get_window_extent().width / 2  # two columns
    assert all(t.get_window_extent().width < 0.8 * width for t in texts)
    plt.close(fig)


def _far_from_every_variant(colour: str, at_least: float = 0.12) -> bool:
    """``colour`` differs from every variant colour (catalogue and hashed) by ``at_least`` in RGB (0-1) distance."""
    import numpy as np

    rgb = np.array(matplotlib.colors.to_rgb(colour))
    others = [*P.VARIANT_COLOURS.values(), *P._OTHER_COLOURS]
    return min(float(np.linalg.norm(rgb - np.array(matplotlib.colors.to_rgb(o)))) for o in others) >= at_least


def test_better_worse_and_funnel_colours_are_no_variant_colours():
    assert P.BETTER != P.WORSE and all(_far_from_every_variant(c) for c in (P.BETTER, P.WORSE))
    assert P.CLASS_COLOURS["hit"] == P.BETTER and P.CLASS_COLOURS["lost in rerank"] == P.WORSE
    assert all(_far_from_every_variant(c) for c in P.CLASS_COLOURS.values())
    assert P.BETTER not in [c for k, c in P.CLASS_COLOURS.items() if k != "hit"]  # better means a hit only


def test_funnel_bars_draw_hits_in_the_better_colour_and_counts_readable():
    funnel = pd.DataFrame(
        {"hit": [3, 6], "lost in fusion": [2, 1], "not lifted by rerank": [3, 1]}, index=pd.Index([1, 10], name="k")
    )
    fig = P.funnel_bars(funnel)
    ax = fig.axes[0]
    colours = {matplotlib.colors.to_hex(b.get_facecolor()) for b in ax.patches}
    assert P.BETTER in colours and not colours & set(P.VARIANT_COLOURS.values())
    inks = []
    for t in ax.texts:  # each count in the ink that reads on its bar: black on a light one
        x, y = t.get_position()
        bar = next(
            b
            for b in ax.patches
            if b.get_x() <= x <= b.get_x() + b.get_width() and b.get_y() <= y <= b.get_y() + b.get_height()
        )
        inks.append((matplotlib.colors.to_hex(bar.get_facecolor()), t.get_color()))
    assert (P.CLASS_COLOURS["not lifted by rerank"], "black") in inks and (P.BETTER, "white") in inks
    plt.close(fig)


def _shift(src, dst):
    return pd.DataFrame(
        {
            "qid": [f"q{i}" for i in range(len(src))],
            "unit": [f"u{i}" for i in range(len(src))],
            "grade": [1] * len(src),
            "src_rank": src,
            "dst_rank": dst,
        }
    )


def test_rank_shift_axes_are_linear_for_top_ranks_and_log_only_for_deep_ones():
    fig = P.rank_shift_plot(_shift([5, 1, 8, 3], [1, 3, math.nan, 3]), "hybrid", "hybrid_rerank", pool_k=10, k=10)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")
    assert ax.get_xlim()[0] < 1 < 10 <= ax.get_xlim()[1]
    colours = [matplotlib.colors.to_hex(c) for c in ax.collections[0].get_facecolors()]
    assert colours[:2] == [P.BETTER, P.WORSE] and colours[3] == P.TIED  # promoted, demoted, unchanged
    plt.close(fig)
    fig = P.rank_shift_plot(_shift([5, 90], [1, 40]), "hybrid", "hybrid_rerank", pool_k=100, k=10)
    assert fig.axes[0].get_xscale() == "log"
    plt.close(fig)


def test_quality_cost_no_label_sits_on_another_point():
    """A cheap variant's label used to run over its cheap neighbour's point at the same height."""
    summary = pd.DataFrame(
        {
            "variant": ["bm25", "hybrid_reformulate", "hybrid", "hybrid_rerank"],
            "ndcg@10": [0.60, 0.60, 0.62, 0.70],
            "seconds_per_query": [0.010, 0.2, 0.4, 12.0],
            "tokens_per_query": [math.nan, 30.0, math.nan, 1800.0],
        }
    )  # 30 tokens: beside bm25's 0
    fig = P.quality_cost(summary, "ndcg@10")
    fig.canvas.draw()
    for ax in fig.axes:
        anns = {a.get_text(): a for a in ax.texts}
        pts = {
            r.variant: (P._cost(r, c), r["ndcg@10"])
            for _, r in summary.iterrows()
            for c in ["tokens_per_query" if "tokens" in ax.get_xlabel() else "seconds_per_query"]
        }
        for name, ann in anns.items():
            assert tuple(ann.xy) == pytest.approx(pts[name])  # the label is its own point's
            box = Text.get_window_extent(ann)
            for other, xy in pts.items():
                px, py = ax.transData.transform(xy)
                assert not (box.x0 - 3 <= px <= box.x1 + 3 and box.y0 - 3 <= py <= box.y1 + 3), (name, other)
            near = min(pts, key=lambda v: _distance(box, ax.transData.transform(pts[v])))
            assert near == name or ann.arrow_patch is not None, name  # else a leader line says whose it is
    plt.close(fig)


def _distance(box, p) -> float:
    return math.hypot(max(box.x0 - p[0], 0, p[0] - box.x1), max(box.y0 - p[1], 0, p[1] - box.y1))


def test_pareto_legend_lists_only_what_is_drawn():
    view = _sweep_view([0.002, 0.010, 0.030]).assign(**{"ndcg@10": [0.70, 0.65, 0.63]})  # p1: best and cheapest
    fig = SP.sweep_pareto(view, "ndcg@10", [True, False, False], {"p1": "default"})
    ax = fig.axes[0]
    drawn = {a.get_label(): a for a in [*ax.lines, *ax.collections] if not a.get_label().startswith("_")}
    entries = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(entries) == sorted(drawn) and "frontier" not in entries  # one point: no line to show
    for name in entries:
        a = drawn[name]
        n = len(a.get_xdata()) if hasattr(a, "get_xdata") else len(a.get_offsets())
        assert n >= (2 if hasattr(a, "get_xdata") else 1), name
    plt.close(fig)
    fig = SP.sweep_pareto(view.assign(**{"ndcg@10": [0.60, 0.65, 0.70]}), "ndcg@10", [True, True, True], {})
    assert "frontier" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plt.close(fig)


def test_marked_settings_name_the_folds_that_chose_them():
    chosen = {"fold 0": "p2", "fold 1": "p3", "fold 2": "p2"}
    assert SP.marks("p1", chosen) == {"p1": "default", "p2": "chosen in folds 0, 2", "p3": "chosen in fold 1"}
    assert SP.marks("p1", {"train": "p1"}) == {"p1": "default, chosen on train"}
    view = _sweep_view([0.002, 0.010, 0.030])
    fig = SP.sweep_pareto(view, "ndcg@10", [True, True, False], SP.marks("p1", chosen))
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == ["chosen in fold 1", "chosen in folds 0, 2", "default"]
    plt.close(fig)


def test_discrimination_classes_are_drawn_in_better_and_worse_not_variant_colours():
    from rerankeval.evaluate import discrimination as D

    rows, qrels = _scored_pools()
    fig = AP.discrimination(D.measure(pd.DataFrame(rows), qrels, model="m", n_boot=50))
    edges = {matplotlib.colors.to_hex(p.get_edgecolor()) for p in fig.axes[0].patches}
    assert edges == {P.BETTER, P.WORSE}
    plt.close(fig)
