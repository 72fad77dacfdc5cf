"""The vectorised sweep (experiments.fastsweep / fastscore / fastmetrics) against the per-point path: identical fused
scores and order (ties included), identical per-query metrics, identical replayed reranks; metrics against ranx."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from rerankeval.core.runs import Run
from rerankeval.evaluate import metrics
from rerankeval.experiments import fastmetrics as fm
from rerankeval.experiments import fastscore
from rerankeval.experiments import fastsweep as fs
from rerankeval.experiments import grid as gridmod
from rerankeval.experiments.replay import RecordedLLM, replay
from rerankeval.retrieve.fusion import FUSION_METHODS, fuse
from sweep_data import LEX, QRELS, QUERIES, UNIT_OF, FakeSource

COLS = ["ndcg@3", "mrr@3", "recall@2", "recall@3", "success@2", "precision@3"]


def _both(eng, points, qids, qrels, cols):
    slow = gridmod.score_points(eng, points, qids, qrels, cols, vectorised=False)
    fast = gridmod.score_points(eng, points, qids, qrels, cols)
    return slow, fast


def _same_runs(eng, points, qids, depth=None):
    """Each point's vectorised run (scores and order) equals fuse()'s on the engine's legs."""
    for p in points:
        dense, lex = eng.unit_legs(p)
        legs = [{q: dense.get(q, {}) for q in qids}, {q: lex.get(q, {}) for q in qids}]
        block = fs.build_block(legs, qids, {})
        scores = fs.fused_scores(block, [p])
        got = fs.to_run(block, scores[0], fs.top(scores, depth)[0])
        want = fuse(legs, p.method, k=p.rrf_k, weights=p.weights, depth=depth)
        assert {q: list(d.items()) for q, d in got.items()} == {q: list(d.items()) for q, d in want.items()}, p.name


def test_every_method_fuses_and_scores_as_the_per_point_path():
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    grid = gridmod.Grid(
        method=list(FUSION_METHODS),
        rrf_k=[0, 1, 60],
        weights=[[1, 1], [1, 0.5], [0.25, 1]],
        leg_k=[1, 2, 3, 5],
        pool_k=[2, 3],
    )
    points = grid.points(gridmod.Point(leg_k=5))
    assert {p.method for p in points} == set(FUSION_METHODS)
    _same_runs(eng, points, list(QUERIES))
    _same_runs(eng, points, list(QUERIES), depth=2)
    (slow, slow_secs), (fast, fast_secs) = _both(eng, points, list(QUERIES), QRELS, gridmod.columns(3, [2, 3]))
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert set(fast_secs) == set(slow_secs)


def _random_case(rng: random.Random):
    """Chunk-level legs with many ties (scores from a few values), several chunks per unit, graded qrels."""
    queries = {f"q{i}": "text" for i in range(rng.randint(1, 6))}
    units = [f"u{i}" for i in range(rng.randint(2, 9))]
    unit_of = {f"c{j}": rng.choice(units) for j in range(rng.randint(3, 14))}
    chunks = list(unit_of)

    def leg(levels: list[float]) -> Run:
        run = {}
        for q in queries:
            picked = rng.sample(chunks, rng.randint(0, len(chunks)))
            run[q] = dict(sorted(((c, rng.choice(levels)) for c in picked), key=lambda kv: -kv[1]))
        return run

    dense, lex = leg([0.9, 0.5, 0.5, 0.1]), leg([7.0, 3.0, 3.0, 3.0, 1.0])
    qrels = {q: {u: rng.choice([0, 1, 1, 2]) for u in rng.sample(units, rng.randint(0, len(units)))} for q in queries}
    return queries, unit_of, dense, lex, qrels


class RandomSource(FakeSource):
    def __init__(self, unit_of, dense, lex) -> None:
        super().__init__()
        self.unit_of, self.dense, self.lex = unit_of, dense, lex

    def dense_leg(self, queries, k):
        return {q: dict(list(self.dense[q].items())[:k]) for q in queries}

    def bm25_leg(self, queries, k):
        return {q: dict(list(self.lex[q].items())[:k]) for q in queries}


@pytest.mark.parametrize("seed", range(12))
def test_random_runs_with_ties_give_identical_results(seed):
    rng = random.Random(seed)
    queries, unit_of, dense, lex, qrels = _random_case(rng)
    eng = gridmod.Engine(RandomSource(unit_of, dense, lex), queries, max_leg_k=14)
    grid = gridmod.Grid(
        method=list(FUSION_METHODS),
        rrf_k=[0, 2, 60],
        weights=[[1, 1], [1, 0.3], [0.7, 1]],
        leg_k=[1, 3, 14],
        pool_k=[1, 4],
    )
    points = grid.points(gridmod.Point(leg_k=14))
    _same_runs(eng, points, list(queries))
    _same_runs(eng, points, list(queries), depth=3)
    scores = {
        q: {u: rng.choice([0.0, 0.2, 0.2, 1.0]) for u in set(unit_of.values()) if rng.random() < 0.8} for q in queries
    }
    eng.llm = RecordedLLM(scores, rng.choice([0.0, 0.3, 0.5, 1.0]), 1.0, 0.1)
    cols = list(dict.fromkeys(gridmod.columns(3, grid.pool_k) + COLS))
    (slow, _), (fast, _) = _both(eng, points, list(queries), qrels, cols)
    # the same rows and values (the per-point path's string columns are object or str depending on its frames)
    pd.testing.assert_frame_equal(fast, slow, check_exact=True, check_dtype=False)
    assert fast.empty or fast.value.dtype == np.float64


@pytest.mark.parametrize("seed", range(10))
def test_vectorised_replay_equals_replay_for_every_alpha(seed):
    rng = random.Random(100 + seed)
    queries, unit_of, dense, lex, qrels = _random_case(rng)
    eng = gridmod.Engine(RandomSource(unit_of, dense, lex), queries, max_leg_k=14)
    p = gridmod.Point(method=rng.choice(FUSION_METHODS), leg_k=14)
    qids = fastscore.evaluable(list(queries), qrels)
    if not qids:
        return
    d, x = eng.unit_legs(p)
    block = fs.build_block([{q: d.get(q, {}) for q in qids}, {q: x.get(q, {}) for q in qids}], qids, qrels)
    scores = fs.fused_scores(block, [p])
    order = fs.top(scores, 6)
    run = fs.to_run(block, scores[0], order[0])
    llm = {
        q: {u: rng.choice([0.0, 0.25, 0.25, 1.0]) for u in set(unit_of.values()) if rng.random() < 0.9} for q in queries
    }
    alphas = [0.0, 0.1, 0.5, 0.7, 1.0]
    for pool_k in (1, 3, 8):
        gains, covered = fastscore.replay_gains(block, scores, order, fastscore.llm_matrix(block, llm), alphas, pool_k)
        for ai, alpha in enumerate(alphas):
            want = replay(run, RecordedLLM(llm, alpha, 0.0, 0.0), pool_k)
            assert {q for q, c in zip(qids, covered[0], strict=True) if c} == set(want)
            for qi, q in enumerate(qids):
                if q in want:
                    grades = [qrels[q].get(u, 0) for u in want[q]]
                    assert list(gains[ai, 0, qi, : len(grades)]) == grades, (alpha, pool_k, q)


def _random_run(rng: np.random.Generator, n_q: int = 8, n_docs: int = 30):
    qrels, run = {}, {}
    for i in range(n_q):
        docs = [f"d{j}" for j in range(n_docs)]
        qrels[f"q{i}"] = {d: int(rng.choice([0, 1, 2])) for d in rng.choice(docs, 8, replace=False)}
        qrels[f"q{i}"][docs[i]] = 1  # at least one relevant unit
        picked = rng.choice(docs, int(rng.integers(1, n_docs)), replace=False)
        run[f"q{i}"] = {str(d): float(len(picked) - r) for r, d in enumerate(picked)}
    return run, qrels


def _gains(run: Run, qrels, qids, width: int) -> np.ndarray:
    out = np.zeros((len(qids), width), dtype=np.int64)
    for i, q in enumerate(qids):
        g = [qrels[q].get(d, 0) for d in run[q]][:width]
        out[i, : len(g)] = g
    return out


@pytest.mark.parametrize("seed", range(5))
def test_numpy_metrics_equal_ir_measures_exactly_and_ranx(seed):
    from ranx import Qrels as RanxQrels
    from ranx import Run as RanxRun
    from ranx import evaluate as ranx_evaluate

    run, qrels = _random_run(np.random.default_rng(seed))
    qids = sorted(run)
    cols = ["ndcg@1", "ndcg@5", "ndcg@10", "mrr@3", "mrr@10", "recall@5", "recall@20", "success@3", "precision@5"]
    judged = fm.Judgments([qrels[q] for q in qids])
    gains = _gains(run, qrels, qids, 20)
    qs = metrics.query_set({"r": run}, qrels, qids, policy="zero")
    want = metrics.evaluate({"r": run}, qrels, qs, cols).pivot(index="qid", columns="metric", values="value")
    rq = RanxQrels({q: {d: g for d, g in qrels[q].items() if g > 0} for q in qids})
    for c in cols:
        got = fm.metric(gains, c, judged)
        assert list(got) == list(want.loc[qids, c]), c  # bit for bit, as the sweep's table must stay identical
        ranx_vals = ranx_evaluate(rq, RanxRun(run), metrics.ranx_metric(c), return_mean=False)
        np.testing.assert_allclose(got, ranx_vals, rtol=1e-12, atol=1e-12, err_msg=c)


def test_closed_form_metrics_and_errors():
    judged = fm.Judgments([{"a": 2, "b": 1, "c": 0}])
    gains = np.array([[0, 1, 2]])  # c, b, a
    ideal = 2 + 1 / np.log2(3)
    assert fm.metric(gains, "ndcg@3", judged)[0] == pytest.approx((1 / np.log2(3) + 2 / 2) / ideal)
    assert fm.metric(gains, "mrr@3", judged)[0] == 0.5 and fm.metric(gains, "mrr@1", judged)[0] == 0.0
    assert fm.metric(gains, "recall@2", judged)[0] == 0.5 and fm.metric(gains, "precision@3", judged)[0] == 2 / 3
    assert not fm.supported(["ndcg@10", "map"]) and fm.supported(["ndcg@10", "success@1"])
    with pytest.raises(ValueError, match="use rerankeval.evaluate.metrics.evaluate"):
        fm.metric(gains, "map", judged)


def test_map_falls_back_to_the_per_point_path():
    eng = gridmod.Engine(FakeSource(), QUERIES, max_leg_k=5)
    points = gridmod.Grid(rrf_k=[1, 60], leg_k=[5]).points(gridmod.Point(leg_k=5))
    (slow, _), (fast, _) = _both(eng, points, list(QUERIES), QRELS, ["ndcg@3", "map"])
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert len(LEX) == len(QUERIES) and set(UNIT_OF.values()) == {"d1", "d2", "d3", "d4"}


def test_row_normalisations_are_fusion_s_own_bit_for_bit():
    from rerankeval.retrieve import fusion

    rng = np.random.default_rng(3)
    rows = [rng.random(n) * scale for n in (*range(1, 20), 127, 128, 129, 300, 300) for scale in (1.0, 37.5)]
    rows += [np.full(5, 0.25), np.array([2.0]), np.array([1.0, 1.0])]  # degenerate lists
    for fn in (fusion.minmax_norm, fusion.zscore_norm, fusion.dbsf_norm):
        got = fs.norm_rows(fn.__name__, rows)
        for r, g in zip(rows, got, strict=True):
            assert list(g) == fn(list(r)), (fn.__name__, len(r))
    with pytest.raises(ValueError, match="unknown normalisation"):
        fs.norm_rows("nope", [np.ones(3)])


def test_compiled_top_selection_is_the_stable_sort_s_prefix():
    rng = np.random.default_rng(4)
    scores = np.round(rng.random((3, 40, 60)), 1)  # many ties
    scores[:, :10, 25:] = -np.inf  # short rows (padding after their columns)
    full = np.argsort(-scores, axis=-1, kind="stable")
    for depth in (1, 10, 25, 60):
        got = fs.top(scores, depth)
        assert np.array_equal(got[:, 10:], full[:, 10:, :depth])
        assert np.array_equal(got[:, :10, : min(depth, 25)], full[:, :10, : min(depth, 25)])
    assert fs.columns([["b", "a", "c"], ["a", "d", "b"]]) == ["a", "b", "d", "c"]  # best rank, then id


def test_long_legs_give_identical_results():
    rng = random.Random(9)
    queries = {f"q{i}": "t" for i in range(4)}
    unit_of = {f"c{j}": f"u{j // 2}" for j in range(400)}
    chunks = list(unit_of)

    def leg() -> Run:
        return {
            q: dict(sorted(((c, rng.random()) for c in rng.sample(chunks, 300)), key=lambda kv: -kv[1]))
            for q in queries
        }

    dense, lex = leg(), leg()
    qrels = {q: {f"u{j}": rng.choice([1, 2]) for j in rng.sample(range(200), 30)} for q in queries}
    eng = gridmod.Engine(RandomSource(unit_of, dense, lex), queries, max_leg_k=300)
    points = gridmod.Grid(
        method=list(FUSION_METHODS), rrf_k=[1, 60], weights=[[1, 1], [1, 0.5]], leg_k=[50, 300], pool_k=[10, 50]
    ).points(gridmod.Point(leg_k=300))
    _same_runs(eng, points, list(queries), depth=50)
    (slow, _), (fast, _) = _both(eng, points, list(queries), qrels, gridmod.columns(10, [10, 50]))
    pd.testing.assert_frame_equal(fast, slow, check_exact=True, check_dtype=False)
