"""Bootstrap, randomisation test, Holm, win/tie/loss and MDD on constructed data."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rerankeval.evaluate import stats as S


def test_holm_known_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005*4=.02, 0.01*3=.03, 0.03*2=.06, 0.04*1=.04 -> monotone .06
    assert np.allclose(S.holm(p), [0.03, 0.06, 0.06, 0.02])
    assert np.allclose(S.holm([0.5, 0.9]), [1.0, 1.0])  # capped at 1
    assert S.holm([]).size == 0
    assert np.allclose(S.holm([0.2]), [0.2])


def test_randomization_exact_small_n():
    a, b = [1.0] * 5, [0.0] * 5
    # all 5 differences positive and equal: only the all-plus and all-minus flips are as extreme
    assert S.randomization_test(a, b) == pytest.approx(2 / 32)
    assert S.randomization_test([0.3, 0.2], [0.3, 0.2]) == 1.0  # no difference at all
    # zeros do not count as flips: 3 equal non-zero differences -> 2/8
    assert S.randomization_test([1, 1, 1, 0.5, 0.5], [0, 0, 0, 0.5, 0.5]) == pytest.approx(2 / 8)


def test_randomization_monte_carlo():
    rng = np.random.default_rng(0)
    a = rng.uniform(size=60)
    strong = S.randomization_test(a + 0.3, a, n_resamples=2000, seed=1)
    assert strong == pytest.approx(1 / 2001)
    null = S.randomization_test(a, rng.permutation(a), n_resamples=2000, seed=1)
    assert null > 0.05
    x, y = a, np.roll(a, 1)  # seeded: the same p twice
    assert S.randomization_test(x, y, 1000, seed=5) == S.randomization_test(x, y, 1000, seed=5)


def test_paired_t_matches_scipy():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=20), rng.normal(size=20)
    assert S.paired_t_test(a, b) == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert S.paired_t_test([1, 2], [1, 2]) == 1.0


def test_bootstrap_ci():
    assert S.bootstrap_ci([0.5] * 10) == (0.5, 0.5, 0.5)
    vals = np.random.default_rng(1).uniform(size=30)
    m, lo, hi = S.bootstrap_ci(vals, n_boot=4000, seed=3)
    assert lo < m < hi and m == pytest.approx(vals.mean())
    assert (m, lo, hi) == S.bootstrap_ci(vals, n_boot=4000, seed=3)  # seeded
    # roughly mean +- 1.96 * sd / sqrt(n)
    half = 1.96 * vals.std(ddof=1) / math.sqrt(30)
    assert hi - lo == pytest.approx(2 * half, rel=0.2)
    _, lo2, hi2 = S.bootstrap_ci(np.tile(vals, 4), n_boot=4000, seed=3)
    assert hi2 - lo2 < (hi - lo) * 0.7  # narrower with more queries
    assert all(math.isnan(x) for x in S.bootstrap_ci([]))


def _long(data: dict[str, list[float]], metric="ndcg@10"):
    rows = [(v, f"q{i}", metric, x) for v, xs in data.items() for i, x in enumerate(xs)]
    return pd.DataFrame(rows, columns=["variant", "qid", "metric", "value"])


def test_bootstrap_table_shares_draws():
    df = _long({"a": [0.1, 0.5, 0.9, 0.3], "b": [0.1, 0.5, 0.9, 0.3]})
    t = S.bootstrap_table(df, n_boot=500, seed=0)
    assert t.loc[0, ["mean", "ci_low", "ci_high"]].tolist() == t.loc[1, ["mean", "ci_low", "ci_high"]].tolist()
    assert set(t.n) == {4}


def test_win_tie_loss_and_mdd():
    assert S.win_tie_loss([1, 0.5, 0.2, 0.3], [0.5, 0.5, 0.4, 0.3]) == (1, 2, 1)
    sd, n = 0.2, 50
    expected = (sps.t.ppf(0.975, n - 1) + sps.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    assert S.minimum_detectable_difference(sd, n) == pytest.approx(expected)
    assert S.minimum_detectable_difference(sd, 200) < S.minimum_detectable_difference(sd, 50)
    assert math.isnan(S.minimum_detectable_difference(sd, 1))


def test_compare_orientation_and_holm():
    rng = np.random.default_rng(4)
    base = rng.uniform(0.2, 0.6, size=40)
    df = _long({"x": base, "y": base + 0.2, "z": base + rng.normal(0, 0.01, size=40)})
    c = S.compare(df, "ndcg@10", n_resamples=2000, n_boot=500, seed=0)
    assert list(zip(c.a, c.b, strict=True)) == [("x", "y"), ("x", "z"), ("y", "z")]
    xy = c.iloc[0]
    assert xy["diff"] == pytest.approx(-0.2) and xy.losses == 40 and xy.wins == 0 and bool(xy.significant)
    assert xy.diff_ci_low <= -0.2 <= xy.diff_ci_high + 1e-12
    assert np.allclose(c.p_holm, S.holm(c.p))
    assert (c.p_holm >= c.p).all()
    assert "0.2" in S.mdd_sentence(xy) or "0.20" in S.mdd_sentence(xy)
    t = S.compare(df, "ndcg@10", pairs=[("y", "x")], test="t", n_boot=200)
    assert t.iloc[0]["diff"] == pytest.approx(0.2) and t.iloc[0].p_holm == t.iloc[0].p
    with pytest.raises(ValueError):
        S.compare(df, "ndcg@10", test="wilcoxon")


def test_compare_on_the_queries_both_variants_answered():
    """A variant not run on q3..q5 (scored 0 there) is compared on q1, q2 only, with the rest counted."""
    per_query = pd.DataFrame(
        {
            "variant": ["a"] * 5 + ["b"] * 5,
            "qid": [f"q{i}" for i in range(1, 6)] * 2,
            "metric": "ndcg@10",
            "value": [0.5] * 5 + [1.0, 1.0, 0.0, 0.0, 0.0],
        }
    )
    everything = S.compare(per_query, "ndcg@10", n_boot=100, n_resamples=100).iloc[0]
    assert everything.n == 5 and everything["diff"] == pytest.approx(0.1) and everything.n_left_out == 0
    common = S.compare(
        per_query,
        "ndcg@10",
        n_boot=100,
        n_resamples=100,
        answered={"a": {f"q{i}" for i in range(1, 6)}, "b": {"q1", "q2"}},
    ).iloc[0]
    assert common.n == 2 and common["diff"] == pytest.approx(-0.5) and common.n_left_out == 3
    assert (common.wins, common.ties, common.losses) == (0, 0, 2)
