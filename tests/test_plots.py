"""Every figure renders from small inputs and is saved under a name saying which notebook made it."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
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


def test_discrimination(tmp_path):
    """The reranker model's scores by class and its AUC per query; undefined pools draw their reason."""
    import numpy as np

    from rerankeval.evaluate import discrimination as D

    rng = np.random.default_rng(0)
    rows = [{"qid": f"q{q}", "docid": f"d{i}", "llm_score": float(rng.uniform() + (i < 3) * 0.3)}
            for q in range(12) for i in range(8)]
    qrels = {f"q{q}": {f"d{i}": int(i < 3) for i in range(8)} for q in range(12)}
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
    assert by_colour == {P.variant_colour("bm25"): [0.8] * 3, P.variant_colour("hybrid"): [0.9] * 3,
                         P.variant_colour("hybrid_rerank"): [1.0] * 3}  # colour = variant, not metric
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
    assert {matplotlib.colors.to_hex(b.get_facecolor()) for b in bars} == {P.variant_colour("bm25"),
                                                                          P.variant_colour("hybrid")}
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
    summary = pd.DataFrame({"variant": [f"variant_{i}" for i in range(n)],
                            "ndcg@10": [0.60 + 0.001 * i for i in range(n - 1)] + [0.9],
                            "seconds_per_query": [0.0, 0.0, 0.0, 0.001, 0.001, 10.0],
                            "tokens_per_query": [math.nan] * (n - 1) + [1500.0]})
    fig = P.quality_cost(summary, "ndcg@10")
    fig.canvas.draw()
    for ax in fig.axes:
        boxes = [Text.get_window_extent(t) for t in ax.texts]  # the text alone, not its leader line
        assert len(boxes) == n
        assert not any(_boxes_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)


def test_quality_cost_leaves_an_llm_variant_without_tokens_out():
    summary = pd.DataFrame({"variant": ["bm25", "hybrid_reformulate"], "ndcg@10": [0.5, 0.6],
                            "seconds_per_query": [0.01, 0.5], "tokens_per_query": [math.nan, math.nan]})
    fig = P.quality_cost(summary, "ndcg@10")
    tokens = fig.axes[1]
    assert [t.get_text() for t in tokens.texts] == ["bm25"] and "hybrid_reformulate" in tokens.get_title()
    plt.close(fig)


def _sweep_view(seconds):
    return pd.DataFrame({"point": ["p1", "p2", "p3"], "ndcg@10": [0.61, 0.65, 0.63],
                         "seconds_per_query": seconds, "llm_tokens_per_query": [0.0, 0.0, 0.0]})


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
    view = pd.DataFrame({"rrf_k": [10, 60, 10, 60], "weights": ["1/1", "1/1", "1/0.5", "1/0.5"],
                         "ndcg@10": [0.6543, 0.6512, 0.6621, 0.6499]})
    fig = SP.sweep_heatmap(view, "ndcg@10", "rrf_k", "weights")
    ax = fig.axes[0]
    fig.canvas.draw()
    texts = [t for t in ax.texts if t.get_text()]
    assert sorted(t.get_text() for t in texts) == [".650", ".651", ".654", ".662"]
    width = ax.get_window_extent().width / 2  # two columns
    assert all(t.get_window_extent().width < 0.8 * width for t in texts)
    plt.close(fig)
