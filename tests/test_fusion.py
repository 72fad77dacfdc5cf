"""RRF: closed-form scores, the tie policy, weights, and agreement with ranx and qdrant-client."""

from __future__ import annotations

import random

import pytest

from rerankeval.fusion import qdrant_k, rrf
from rerankeval.runs import from_ranking


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
    ranx_runs = [RanxRun({q: dict(sorted(d.items(), key=lambda kv: -kv[1])) for q, d in r.items()})
                 for r in runs]
    theirs = fuse(ranx_runs, norm=None, method="rrf", params={"k": 60}).to_dict()
    for q in ours:
        assert set(ours[q]) == set(theirs[q])
        for d, s in ours[q].items():
            assert s == pytest.approx(theirs[q][d], abs=1e-12)


def test_qdrant_k_reproduces_the_paper_constant_with_qdrant_client_fusion():
    from qdrant_client.http import models
    from qdrant_client.hybrid.fusion import reciprocal_rank_fusion

    legs = [from_ranking({"q": ["a", "b", "c"]}), from_ranking({"q": ["c", "a", "d"]})]
    responses = [[models.ScoredPoint(id=i, version=0, score=1.0 / (r + 1)) for r, i in enumerate(ids)]
                 for ids in (["a", "b", "c"], ["c", "a", "d"])]
    assert qdrant_k(60) == 61
    fused = reciprocal_rank_fusion(responses, limit=10, ranking_constant_k=qdrant_k(60))
    ours = rrf(legs, k=60)["q"]
    assert {p.id: p.score for p in fused} == pytest.approx(ours, abs=1e-12)
    default = reciprocal_rank_fusion(responses, limit=10)  # Qdrant's default k=2 is not the paper's
    assert {p.id: p.score for p in default}["a"] == pytest.approx(1 / 2 + 1 / 3)
