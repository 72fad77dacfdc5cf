"""Every figure renders from small inputs and is saved under a name saying which notebook made it."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from PIL import Image  # noqa: E402

from rerankeval.report import plots as P  # noqa: E402


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
    _check(P.discrimination(d), tmp_path, "discrimination")
    for cands in (pd.DataFrame(rows).assign(llm_score=math.nan), pd.DataFrame(rows).assign(llm_score=0.3)):
        undefined = D.measure(cands, qrels, model="m", n_boot=50)
        assert undefined.status == D.UNDEFINED
        plt.close(P.discrimination(undefined))
    plt.close(P.discrimination(D.Discrimination(reason="nothing")))  # from a summary: no frames
