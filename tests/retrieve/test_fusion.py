"""Fusion: closed-form scores of every method, the tie policy, weights, degenerate legs, and agreement
with ranx (RRF, CombSUM, CombMNZ) and qdrant-client (RRF, DBSF)."""

from __future__ import annotations

import random

import pytest

from rerankeval.core.runs import from_ranking
from rerankeval.index.qdrant.rrf import qdrant_k
from rerankeval.retrieve import fusion
from rerankeval.retrieve.fusion import FUSION_METHODS, dbsf_norm, fuse, minmax_norm, rrf, zscore_norm


def test_closed_form_two_legs():
    legs = [from_ranking({"q": ["a", "b", "c"]}), from_ranking({"q": ["c", "a", "d"]})]
    out = rrf(legs)["q"]
    assert list(out) == ["a", "c", "b", "d"]
    assert out["a"] == pytest.approx(1 / 61 + 1 / 62, abs=1e-15)
    assert out["c"] == pytest.approx(1 / 63 + 1 / 61, abs=1e-15)
    assert out["b"] == pytest.approx(1 / 62, abs=1e-15)
    assert out["d"] == pytest.approx(1 / 63, abs=1e-15)


def test_ranks_come_from_scores_not_from_the_scores_values():
    # leg scores on different scales: only the ranks matter
    legs = [{"q": {"x": 100.0, "y": 3.0}}, {"q": {"y": 0.9, "x": 0.1}}]
    out = rrf(legs, k=1)["q"]
    assert out == {"x": 1 / 2 + 1 / 3, "y": 1 / 3 + 1 / 2}


def test_tie_policy_score_then_best_single_leg_rank_then_id():
    # k = 0 keeps the arithmetic exact: p = 1/2+1/2+1/2 = 1.5 (best rank 2); q = 1/1 + 1/2 = 1.5 (best rank 1)
    legs = [
        from_ranking({"q": ["q", "p"]}),
        from_ranking({"q": ["x", "p"]}),
        from_ranking({"q": ["y", "p"]}),
        from_ranking({"q": ["z", "q"]}),
    ]
    out = rrf(legs, k=0)["q"]
    assert out["p"] == out["q"] == 1.5
    assert list(out)[:2] == ["q", "p"]  # q's best single-leg rank (1) beats p's (2), whatever the ids
    assert list(out)[2:] == ["x", "y", "z"]  # 1.0 each, best rank 1 each: id order
    # symmetric swap: same fused score, same best rank -> id
    out2 = rrf([from_ranking({"q": ["b", "a"]}), from_ranking({"q": ["a", "b"]})])["q"]
    assert list(out2) == ["a", "b"] and out2["a"] == out2["b"]


def test_weights_depth_and_missing_queries():
    legs = [from_ranking({"q1": ["a", "b"], "q2": ["c"]}), from_ranking({"q1": ["b", "a"]})]
    out = rrf(legs, weights=[2.0, 1.0], depth=1)
    assert list(out["q1"]) == ["a"] and out["q1"]["a"] == pytest.approx(2 / 61 + 1 / 62)
    assert out["q2"] == {"c": pytest.approx(2 / 61)}  # q2 only in the first leg
    with pytest.raises(ValueError):
        rrf(legs, weights=[1.0])


def _random_runs(seed, n_runs=2):
    rng = random.Random(seed)
    pool = [f"d{i}" for i in range(40)]
    runs = []
    for _ in range(n_runs):
        run = {}
        for q in ["q1", "q2", "q3"]:
            docs = rng.sample(pool, rng.randint(1, 25))
            run[q] = {d: rng.random() for d in docs}
        runs.append(run)
    return runs


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_ranx_rrf(seed):
    from ranx import Run as RanxRun
    from ranx import fuse

    runs = _random_runs(seed, n_runs=2 + seed % 2)
    ours = rrf(runs, k=60)
    # ranx ranks a run by its dict order, so hand it each run sorted by score; norm=None: no min-max first
    ranx_runs = [RanxRun({q: dict(sorted(d.items(), key=lambda kv: -kv[1])) for q, d in r.items()}) for r in runs]
    theirs = fuse(ranx_runs, norm=None, method="rrf", params={"k": 60}).to_dict()
    for q in ours:
        assert set(ours[q]) == set(theirs[q])
        for d, s in ours[q].items():
            assert s == pytest.approx(theirs[q][d], abs=1e-12)


def test_qdrant_k_reproduces_the_paper_constant_with_qdrant_client_fusion():
    from qdrant_client.http import models
    from qdrant_client.hybrid.fusion import reciprocal_rank_fusion

    legs = [from_ranking({"q": ["a", "b", "c"]}), from_ranking({"q": ["c", "a", "d"]})]
    responses = [
        [models.ScoredPoint(id=i, version=0, score=1.0 / (r + 1)) for r, i in enumerate(ids)]
        for ids in (["a", "b", "c"], ["c", "a", "d"])
    ]
    assert qdrant_k(60) == 61
    from rerankeval.index.qdrant import rrf as qdrant_rrf  # the index layer owns the convention (its one home)

    assert fusion.RRF_K == qdrant_rrf.RRF_K == 60  # fusion's default k is the index layer's constant
    fused = reciprocal_rank_fusion(responses, limit=10, ranking_constant_k=qdrant_k(60))
    ours = rrf(legs, k=60)["q"]
    assert {p.id: p.score for p in fused} == pytest.approx(ours, abs=1e-12)
    default = reciprocal_rank_fusion(responses, limit=10)  # Qdrant's default k=2 is not the paper's
    assert {p.id: p.score for p in default}["a"] == pytest.approx(1 / 2 + 1 / 3)


# --------------------------------------------------------------------------- fuse(): every method
# Two legs on different scales. Leg A: a=3, b=2, c=1; leg B: c=10, d=0.
LEGS = [{"q": {"a": 3.0, "b": 2.0, "c": 1.0}}, {"q": {"c": 10.0, "d": 0.0}}]
SD_A = (2 / 3) ** 0.5  # population sd of (3, 2, 1)
DBSF_B = [(10 - (5 - 3 * 50**0.5)) / (6 * 50**0.5), (0 - (5 - 3 * 50**0.5)) / (6 * 50**0.5)]  # sample sd of B


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        # min-max: A -> a 1, b .5, c 0; B -> c 1, d 0. a and c tie at 1.0 with best rank 1 each: id order
        ("combsum_minmax", [("a", 1.0), ("c", 1.0), ("b", 0.5), ("d", 0.0)]),
        ("combmnz_minmax", [("c", 2.0), ("a", 1.0), ("b", 0.5), ("d", 0.0)]),  # c retrieved by both legs: x2
        # z-score (population sd): A -> a 1/SD_A, b 0, c -1/SD_A; B (mean 5, sd 5) -> c 1, d -1
        ("combsum_zscore", [("a", 1 / SD_A), ("b", 0.0), ("c", 1 - 1 / SD_A), ("d", -1.0)]),
        ("combmnz_zscore", [("a", 1 / SD_A), ("b", 0.0), ("c", 2 * (1 - 1 / SD_A)), ("d", -1.0)]),
        # DBSF: A has mean 2, sample sd 1 -> (s + 1) / 6; B has mean 5, sample sd sqrt(50)
        ("dbsf", [("c", 2 / 6 + DBSF_B[0]), ("a", 4 / 6), ("b", 3 / 6), ("d", DBSF_B[1])]),
        ("rrf", [("c", 1 / 63 + 1 / 61), ("a", 1 / 61), ("b", 1 / 62), ("d", 1 / 62)]),  # b, d: rank 2 each, id
    ],
)
def test_fuse_closed_form(method, expected):
    out = fuse(LEGS, method)["q"]
    assert list(out) == [d for d, _ in expected]
    for d, s in expected:
        assert out[d] == pytest.approx(s, abs=1e-12)


def test_fuse_rrf_is_rrf_and_methods_are_listed():
    runs = _random_runs(7, n_runs=3)
    assert fuse(runs) == rrf(runs) and fuse(runs, "rrf", k=5, weights=[1, 2, 3], depth=4) == rrf(
        runs, k=5, weights=[1, 2, 3], depth=4
    )
    assert FUSION_METHODS == ("rrf", "combsum_minmax", "combsum_zscore", "combmnz_minmax", "combmnz_zscore", "dbsf")
    with pytest.raises(ValueError, match="unknown fusion method 'borda'; choose from rrf, combsum_minmax"):
        fuse(runs, "borda")


def test_weights_multiply_the_normalised_score_and_ties_use_the_best_rank():
    # min-max x (2, 1): a 2, b 1, c 0*2 + 1*1 = 1, d 0. b and c tie at 1.0: c has rank 1 in B, b rank 2 in A
    out = fuse(LEGS, "combsum_minmax", weights=[2, 1])["q"]
    assert out == {"a": 2.0, "c": 1.0, "b": 1.0, "d": 0.0} and list(out) == ["a", "c", "b", "d"]
    mnz = fuse(LEGS, "combmnz_minmax", weights=[1, 3])["q"]
    assert mnz == {"c": (0 + 3 * 1) * 2, "d": 0.0, "a": 1.0, "b": 0.5} and list(mnz) == ["c", "a", "b", "d"]
    assert list(fuse(LEGS, "dbsf", depth=2)["q"]) == ["c", "a"]
    with pytest.raises(ValueError, match="1 weights for 2 runs"):
        fuse(LEGS, "dbsf", weights=[1])


def test_degenerate_legs_and_missing_queries():
    assert minmax_norm([4.0]) == [0.5] and minmax_norm([2.0, 2.0]) == [0.5, 0.5]
    assert zscore_norm([4.0]) == [0.0] and zscore_norm([2.0, 2.0]) == [0.0, 0.0]
    assert dbsf_norm([4.0]) == [0.5] and dbsf_norm([2.0, 2.0]) == [0.5, 0.5]
    # q2 only in leg A, q3 only in leg B with one document; an empty query is kept empty
    legs = [{"q2": {"x": 1.0, "y": 0.0}, "q4": {}}, {"q3": {"z": 7.0}}]
    for method in FUSION_METHODS[1:]:
        out = fuse(legs, method)
        assert list(out) == ["q2", "q4", "q3"] and out["q4"] == {}
        assert list(out["q2"]) == ["x", "y"]
    assert fuse(legs, "combsum_minmax")["q3"] == {"z": 0.5}
    assert fuse(legs, "combsum_zscore")["q3"] == {"z": 0.0}
    assert fuse(legs, "dbsf")["q3"] == {"z": 0.5}


def test_score_fusion_ignores_input_order_but_ranks_by_score():
    shuffled = [{"q": {"c": 1.0, "a": 3.0, "b": 2.0}}, {"q": {"d": 0.0, "c": 10.0}}]
    for method in FUSION_METHODS:
        assert list(fuse(shuffled, method)["q"].items()) == list(fuse(LEGS, method)["q"].items())


def _distinct_runs(seed, n_runs=2):
    """Runs over the same queries where every leg has >= 2 distinct scores per query (not degenerate)."""
    rng = random.Random(seed)
    pool = [f"d{i}" for i in range(40)]
    return [
        {q: {d: rng.uniform(-5, 20) for d in rng.sample(pool, rng.randint(2, 25))} for q in ["q1", "q2", "q3"]}
        for _ in range(n_runs)
    ]


@pytest.mark.parametrize(
    ("ours", "ranx_method", "ranx_norm"),
    [
        ("combsum_minmax", "sum", "min-max"),
        ("combmnz_minmax", "mnz", "min-max"),
        ("combsum_zscore", "sum", "zmuv"),
        ("combmnz_zscore", "mnz", "zmuv"),
    ],
)
@pytest.mark.parametrize("seed", range(3))
def test_agrees_with_ranx_score_fusion(ours, ranx_method, ranx_norm, seed):
    """ranx's CombSUM/CombMNZ give the same scores on non-degenerate legs (ranx maps a degenerate leg to 0,
    we to 0.5 for min-max; ranx leaves ties unordered)."""
    from ranx import Run as RanxRun
    from ranx import fuse as ranx_fuse

    runs = _distinct_runs(seed, n_runs=2 + seed % 2)
    ranx_runs = [RanxRun({q: dict(ranked_items(d)) for q, d in r.items()}) for r in runs]
    theirs = ranx_fuse(ranx_runs, norm=ranx_norm, method=ranx_method).to_dict()
    _assert_same_scores(fuse(runs, ours), theirs)


def test_weighted_combsum_agrees_with_ranx_wsum():
    from ranx import Run as RanxRun
    from ranx import fuse as ranx_fuse

    runs = _distinct_runs(11)
    theirs = ranx_fuse(
        [RanxRun(r) for r in runs], norm="min-max", method="wsum", params={"weights": [0.3, 1.7]}
    ).to_dict()
    _assert_same_scores(fuse(runs, "combsum_minmax", weights=[0.3, 1.7]), theirs)


@pytest.mark.parametrize("seed", range(3))
def test_dbsf_agrees_with_qdrant_client(seed):
    from qdrant_client.http import models
    from qdrant_client.hybrid.fusion import distribution_based_score_fusion

    runs = _random_runs(seed, n_runs=2 + seed % 2)  # includes one-document legs (0.5 in both)
    ours = fuse(runs, "dbsf")
    for q in ours:
        responses = [
            [models.ScoredPoint(id=int(d[1:]), version=0, score=s) for d, s in ranked_items(r[q])]
            for r in runs
            if r.get(q)
        ]
        fused = distribution_based_score_fusion(responses, limit=1000)
        assert {f"d{p.id}": p.score for p in fused} == pytest.approx(ours[q], abs=1e-12)


def ranked_items(scores):
    return sorted(scores.items(), key=lambda kv: -kv[1])


def _assert_same_scores(ours, theirs):
    for q in ours:
        assert set(ours[q]) == set(theirs[q])
        for d, s in ours[q].items():
            assert s == pytest.approx(theirs[q][d], abs=1e-9)
