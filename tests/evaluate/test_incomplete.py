"""Issue 34: numbers you can trust with holes in the judgments (``rerankeval.evaluate.incomplete``, ``.bounds``,
``.ppi``).

Hand-built runs and qrels whose bounds and condensed values are known in closed form (a comparison decided with
holes, one that is not, a run with no unjudged units, identical runs); the bounds checked against every completion
enumerated by an independent brute force; condensed nDCG and bpref checked against pytrec_eval; the queue, the
simulated effort and prediction-powered inference.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from rerankeval.core.runs import from_ranking
from rerankeval.evaluate import bounds, ppi
from rerankeval.evaluate import incomplete as inc
from rerankeval.evaluate import judging_queue as jq

L3 = 1 / math.log2(3)  # the discount of rank 2


def _runs(**lists):
    return {v: from_ranking({q: docs for q, docs in by_q.items()}) for v, by_q in lists.items()}


# --------------------------------------------------------------------------- an independent brute force
def _brute(fam: str, k: int, ranking: list[str], grades: dict[str, int]) -> float:
    """The metric of one ranked list under complete ``grades`` (missing = 0), straight from trec_eval's definitions."""
    top = ranking[:k]
    rel = [grades.get(u, 0) >= 1 for u in top]
    if fam == "ndcg":
        dcg = sum(grades.get(u, 0) / math.log2(r + 2) for r, u in enumerate(top))
        ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
        idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
        return dcg / idcg if idcg else 0.0
    if fam == "precision":
        return sum(rel) / k
    if fam == "recall":
        n = sum(g >= 1 for g in grades.values())
        return sum(rel) / n if n else 0.0
    first = next((r + 1 for r, x in enumerate(rel) if x), None)
    return 0.0 if first is None else (1.0 / first if fam == "mrr" else 1.0)


def _every_completion(lists: dict[str, list[str]], judged: dict[str, int], k: int, top: int):
    holes = list(dict.fromkeys(u for t in lists.values() for u in t[:k] if u not in judged))
    for combo in itertools.product(range(top + 1), repeat=len(holes)):
        yield {**judged, **dict(zip(holes, combo, strict=True))}


def test_the_bounds_of_one_run_are_known_in_closed_form_and_zero_fill_is_not_always_the_worst():
    # A ranks the judged non-relevant b first, the judged 2 second and an unjudged x third; B brings an unjudged y
    runs = _runs(A={"q": ["b", "a", "x"]}, B={"q": ["a", "y", "b"]})
    pools = inc.Pools.build(runs, {"q": {"a": 2, "b": 0}}, ["q"], "ndcg@3")
    got = pools.bounds("A").iloc[0]
    assert got.zero_fill == pytest.approx(2 * L3 / 2)
    # worst: x not relevant, y (which A does not rank) at the top grade raises the ideal: below the zero-fill value
    assert got.worst == pytest.approx(2 * L3 / (2 + 2 * L3)) and got.worst < got.zero_fill
    # best: x at the top grade, y not relevant (the ideal recomputed with x)
    assert got.best == pytest.approx((2 * L3 + 2 / 2) / (2 + 2 * L3)) and got.exact


def test_a_comparison_decided_with_holes():
    # A: a(2) x(?) b(0); B: b(0) c(0) y(?): A's judged 2 at rank 1 beats anything y can do at rank 3
    runs = _runs(A={"q": ["a", "x", "b"]}, B={"q": ["b", "c", "y"]})
    c = inc.compare(inc.Pools.build(runs, {"q": {"a": 2, "b": 0, "c": 0}}, ["q"], "ndcg@3"), "A", "B")
    assert c.worst == pytest.approx((2 - 2 / 2) / (2 + 2 * L3))  # x = 0, y = 2: the ideal holds two 2s
    assert c.best == pytest.approx(1.0)  # x = 2, y = 0
    assert c.status == "decided" and c.better == "A" and c.n_unjudged == 2
    assert "decided \u2014 A is better whatever the 2 unjudged units turn out to be" in c.sentence


def test_a_comparison_that_is_not_decided_names_the_units_that_could_reverse_it():
    runs = _runs(A={"q": ["a", "x", "b"]}, B={"q": ["y", "a", "b"]})
    c = inc.compare(inc.Pools.build(runs, {"q": {"a": 2, "b": 0}}, ["q"], "ndcg@3"), "A", "B")
    assert c.zero_fill == pytest.approx((2 - 2 * L3) / 2)
    assert c.worst == pytest.approx((2 - 2 - 2 * L3) / (2 + 2 * L3))  # y = 2 at B's rank 1, x = 0
    assert c.best == pytest.approx((2 + 2 * L3 - 2 * L3) / (2 + 2 * L3))  # x = 2, y = 0
    assert c.status == "undecided" and c.better is None and c.n_moving == 2
    assert "undecided \u2014 2 unjudged units could reverse it; judge them first (at most 2 judgments" in c.sentence


def test_a_run_with_no_unjudged_units_collapses_to_its_value():
    runs = _runs(A={"q": ["a", "b"]}, B={"q": ["b", "a"]})
    pools = inc.Pools.build(runs, {"q": {"a": 1, "b": 0}}, ["q"], "ndcg@2")
    one = pools.bounds("A").iloc[0]
    assert one.worst == one.best == one.zero_fill == 1.0
    c = inc.compare(pools, "A", "B")
    assert c.worst == c.best == c.zero_fill == pytest.approx(1 - L3) and c.status == "decided"
    assert c.n_unjudged == 0 and "no unjudged unit in their top k" in c.sentence


def test_identical_runs_are_a_degenerate_comparison_said_so():
    runs = _runs(A={"q": ["a", "x"]}, B={"q": ["a", "x"]})
    c = inc.compare(inc.Pools.build(runs, {"q": {"a": 1}}, ["q"], "ndcg@2"), "A", "B")
    assert c.status == "identical" and c.worst == c.best == 0.0
    assert "nothing to compare (a degenerate comparison)" in c.sentence
    with pytest.raises(ValueError, match="not with itself"):
        inc.compare(inc.Pools.build(runs, {"q": {"a": 1}}, ["q"], "ndcg@2"), "A", "A")


@pytest.mark.parametrize("metric", ["ndcg@4", "precision@4", "recall@4", "success@4", "mrr@4"])
def test_the_bounds_are_the_true_extremes_over_every_completion(metric):
    fam, k = metric.split("@")[0], 4
    rng = random.Random(34)
    universe = [f"d{i}" for i in range(8)]
    for _ in range(25):
        lists = {v: rng.sample(universe, 5) for v in ("A", "B")}
        judged = {u: rng.randint(0, 2) for u in rng.sample(universe, rng.randint(0, 5))}
        pools = inc.Pools.build(_runs(**{v: {"q": t} for v, t in lists.items()}), {"q": judged}, ["q"], metric, top=2)
        p = pools.queries["q"]
        for a, b in (("A", None), ("B", None), ("A", "B")):
            values = [
                _brute(fam, k, lists[a], g) - (_brute(fam, k, lists[b], g) if b else 0.0)
                for g in _every_completion(lists, judged, k, 2)
            ]
            lo, hi, exact = bounds.query_bounds(p, metric, 2, a, b)
            assert exact and lo == pytest.approx(min(values)) and hi == pytest.approx(max(values)), (lists, judged)
            zero = _brute(fam, k, lists[a], judged) - (_brute(fam, k, lists[b], judged) if b else 0.0)
            assert bounds.zero_fill(p, metric, a, b) == pytest.approx(zero)


def test_the_looser_bound_used_beyond_the_enumeration_limit_is_still_sound(monkeypatch):
    rng = random.Random(7)
    universe = [f"d{i}" for i in range(8)]
    monkeypatch.setattr(bounds, "MAX_MULTISETS", 1)
    for _ in range(25):
        lists = {v: rng.sample(universe, 5) for v in ("A", "B")}
        judged = {u: rng.randint(0, 2) for u in rng.sample(universe, rng.randint(1, 5))}
        p = inc.Pools.build(
            _runs(**{v: {"q": t} for v, t in lists.items()}), {"q": judged}, ["q"], "ndcg@4", top=2
        ).queries["q"]
        values = [
            _brute("ndcg", 4, lists["A"], g) - _brute("ndcg", 4, lists["B"], g)
            for g in _every_completion(lists, judged, 4, 2)
        ]
        lo, hi, exact = bounds.query_bounds(p, "ndcg@4", 2, "A", "B")
        assert lo <= min(values) + 1e-12 and hi >= max(values) - 1e-12
        assert not exact or lo == hi


def test_zero_fill_condensed_and_bpref_agree_with_pytrec_eval():
    import pytrec_eval

    rng = random.Random(3)
    universe = [f"d{i}" for i in range(30)]
    runs = {v: from_ranking({f"q{i}": rng.sample(universe, 20) for i in range(6)}) for v in ("A", "B")}
    qrels = {f"q{i}": {u: rng.randint(0, 2) for u in rng.sample(universe, 12)} for i in range(6)}
    for q in qrels:
        qrels[q][universe[0]] = 2  # every query has a relevant unit
    qids = sorted(qrels)
    table = inc.variant_table(runs, qrels, qids, "ndcg@10").set_index("variant")
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "bpref"}, judged_docs_only_flag=False)
    cond = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}, judged_docs_only_flag=True)
    for v, run in runs.items():
        full, judged_only = ev.evaluate(run), cond.evaluate(run)
        assert table.at[v, "zero_fill"] == pytest.approx(np.mean([full[q]["ndcg_cut_10"] for q in qids]))
        assert table.at[v, "bpref"] == pytest.approx(np.mean([full[q]["bpref"] for q in qids]))
        assert table.at[v, "condensed"] == pytest.approx(np.mean([judged_only[q]["ndcg_cut_10"] for q in qids]))
        assert table.at[v, "worst"] <= table.at[v, "zero_fill"] + 1e-12 <= table.at[v, "best"] + 2e-12


def _two_query_case():
    """q1: A and B differ by a unit at rank 1 (x1 only in A) and one at rank 3 (x3 only in B); q2: identical."""
    runs = _runs(A={"q1": ["x1", "a", "b"], "q2": ["c", "z"]}, B={"q1": ["a", "b", "x3"], "q2": ["c", "z"]})
    return runs, {"q1": {"a": 1, "b": 0}, "q2": {"c": 1}}


def test_the_queue_puts_the_unit_that_moves_the_open_difference_most_first():
    runs, qrels = _two_query_case()
    j = jq.Judging(runs, qrels, ["q1", "q2"], "ndcg@3", [("A", "B")], top=2)
    assert j.is_open(("A", "B"))
    q = j.queue()
    assert [(qq, u) for qq, u, _, _ in q] == [("q1", "x1"), ("q1", "x3")]  # z moves nothing: not in the queue
    ideal = 2 + 1 * L3  # the ideal with one more unit at the top grade
    assert q[0][2] == pytest.approx(2 * (1 - 0) / ideal / 2) and q[1][2] == pytest.approx(2 * 0.5 / ideal / 2)
    assert q[0][3] == {("A", "B"): q[0][2]}


def test_the_queue_decides_with_fewer_judgments_than_a_worse_order():
    runs, qrels = _two_query_case()
    hidden = {("q1", "x1"): 2, ("q1", "x3"): 0}

    def oracle(q, u):
        return hidden.get((q, u), 0)

    queue = jq.judgments_to_decide(jq.Judging(runs, qrels, ["q1", "q2"], "ndcg@3", [("A", "B")], 2), ("A", "B"), oracle)
    worse = jq.judgments_to_decide(
        jq.Judging(runs, qrels, ["q1", "q2"], "ndcg@3", [("A", "B")], 2),
        ("A", "B"),
        oracle,
        order=[("q1", "x3"), ("q1", "x1")],
    )
    assert queue == 1 and worse == 2  # x1 = 2 alone decides it for A
    exp = jq.expected_judgments(runs, qrels, ["q1", "q2"], ("A", "B"), "ndcg@3", top=2, n_sim=8)
    assert 1 <= exp <= 2


def test_ppi_mean_is_the_rectified_mean_and_refuses_with_too_few_human_grades():
    rng = np.random.default_rng(0)
    pred_all = rng.integers(0, 3, 200).astype(float)
    idx = rng.choice(200, 12, replace=False)
    human = np.clip(pred_all[idx] + rng.integers(-1, 2, 12), 0, 2)
    got = ppi.ppi_mean(pred_all, pred_all[idx], human)
    rect = human - pred_all[idx]
    assert got["estimate"] == pytest.approx(pred_all.mean() + rect.mean())
    half = 1.959963984540054 * math.sqrt(rect.var(ddof=1) / 12 + pred_all.var(ddof=1) / 200)
    assert got["ci_high"] - got["estimate"] == pytest.approx(half) and got["n_human"] == 12
    with pytest.raises(ppi.TooFewHumanGrades, match=r"at least 10 human grades .* got 9.*mode='sample'.*bounds"):
        ppi.ppi_mean(pred_all, pred_all[idx[:9]], human[:9])


def test_ppi_metric_with_a_right_llm_is_the_metric_of_the_completed_qrels():
    rng = random.Random(5)
    universe = [f"d{i}" for i in range(15)]
    run = from_ranking({f"q{i}": rng.sample(universe, 10) for i in range(4)})
    truth = {q: {u: rng.randint(0, 2) for u in universe} for q in run}
    human = {q: {u: g for u, g in truth[q].items() if rng.random() < 0.3} for q in run}
    holes = [(q, u) for q in run for u in list(run[q])[:5] if u not in human[q]]
    sample = {key: truth[key[0]][key[1]] for key in holes[:12]}
    got = ppi.ppi_metric(run, human, truth, sample, sorted(run), "ndcg@5")
    want = np.mean([_brute("ndcg", 5, list(run[q]), truth[q]) for q in sorted(run)])
    assert got["estimate"] == pytest.approx(want) and got["ci_low"] == pytest.approx(want)  # no rectification
    with pytest.raises(ppi.TooFewHumanGrades):
        ppi.ppi_metric(run, human, truth, dict(list(sample.items())[:3]), sorted(run), "ndcg@5")


def test_the_first_screen_is_json_and_names_every_comparison():
    import json

    runs = _runs(bm25={"q1": ["a", "x", "b"]}, hybrid={"q1": ["y", "a", "b"]}, hybrid_rerank={"q1": ["a", "x", "b"]})
    got = inc.first_screen(runs, {"q1": {"a": 2, "b": 0}}, ["q1"], baseline="bm25", k=3, n_sim=2)
    json.dumps(got)
    pairs = [(c["a"], c["b"], c["status"]) for c in got["comparisons"]]
    assert pairs == [
        ("hybrid", "bm25", "undecided"),
        ("hybrid_rerank", "bm25", "identical"),
        ("hybrid_rerank", "hybrid", "undecided"),
    ]
    assert got["queue"][0]["unit_id"] in {"x", "y"} and got["queue_size"] == 2
    assert {"zero_fill", "condensed", "bpref", "worst", "best"} <= set(got["variants"][0])


def test_the_first_screen_refuses_ppi_with_too_few_human_grades_and_falls_back_to_the_bounds():
    runs = _runs(bm25={"q1": ["a", "x", "b"]}, hybrid={"q1": ["y", "a", "b"]})
    llm = {"q1": {"x": 2, "y": 1}}
    got = inc.first_screen(
        runs, {"q1": {"a": 2, "b": 0}}, ["q1"], baseline="bm25", k=3, n_sim=0, llm=llm, human_sample={("q1", "x"): 2}
    )
    assert "got 1" in got["ppi"]["refused"] and got["ppi"]["fallback"].startswith("the [worst, best] bounds")


def test_review_weights_order_the_pool_by_the_queue():
    runs, qrels = _two_query_case()
    got = inc.review_weights(runs, qrels, ["q1", "q2"], baseline="B", k=3)
    assert list(got) == [("q1", "x1"), ("q1", "x3")] and got[("q1", "x1")][1] == "A vs B"
    assert got[("q1", "x1")][0] > got[("q1", "x3")][0] > 0
