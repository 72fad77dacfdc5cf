"""Issue 34 item 4: when an LLM judge's grades exist, 05's first screen carries the human+LLM numbers with
prediction-powered intervals resting on a random sample of human grades, or says why not (the bounds stand)."""

from __future__ import annotations

import json
import math

import pytest

from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import holes, judging_queue
from rerankeval.report import judged

QIDS = [f"q{i}" for i in range(6)]
# two runs over the same 5 units per query; the dataset's own qrels judge only u0 of each query (grade 1)
RUNS = {
    "a": {q: {f"u{j}": 5.0 - j for j in range(5)} for q in QIDS},
    "b": {q: {f"u{j}": float(j) for j in range(5)} for q in QIDS},
}
ORIGINAL = {q: {"u0": 1} for q in QIDS}
TRUTH = {q: {"u0": 1, "u1": 1, "u2": 0, "u3": 0, "u4": 1} for q in QIDS}  # what a person would say
LLM_UMBRELA = {q: {u: (3 if g else 0) for u, g in rel.items() if u != "u0"} for q, rel in TRUTH.items()}


def _human(n: int, skip_first: bool = False) -> dict:
    """The dataset's qrels plus a person's grades of the first ``n`` units of the sample order."""
    order = judging_queue.sample_order(RUNS, ORIGINAL, QIDS, 5)
    out = {q: dict(rel) for q, rel in ORIGINAL.items()}
    for i, (q, u) in enumerate(order[:n]):
        if skip_first and i == 0:
            continue
        out[q][u] = TRUTH[q][u]
    return out


def test_the_sample_is_the_graded_prefix_of_a_fixed_random_order():
    order = judging_queue.sample_order(RUNS, ORIGINAL, QIDS, 5)
    assert len(order) == 4 * len(QIDS) and all(u != "u0" for _, u in order)  # the holes, each once
    assert order == judging_queue.sample_order(RUNS, ORIGINAL, QIDS, 5)  # fixed: grading does not reshuffle it
    assert len(judging_queue.sampled_grades(order, _human(12))) == 12
    assert judging_queue.sampled_grades(order, _human(12, skip_first=True)) == {}  # a gap ends the sample


def test_too_few_human_grades_are_refused_and_the_bounds_stand():
    rec = holes.prediction_powered(RUNS, ORIGINAL, _human(5), LLM_UMBRELA, QIDS, 5)
    assert rec["n_human"] == 5 and "variants" not in rec
    assert "10" in rec["refused"] and "bounds" in rec["fallback"]


def test_a_right_judge_and_enough_human_grades_give_the_metric_of_the_true_grades():
    # nDCG@5 of the true grades in closed form: a ranks u0..u4 (grades 1 1 0 0 1), b the reverse (1 0 0 1 1)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    truth = {
        "a": (1 + 1 / math.log2(3) + 1 / math.log2(6)) / ideal,
        "b": (1 + 1 / math.log2(5) + 1 / math.log2(6)) / ideal,
    }
    rec = holes.prediction_powered(RUNS, ORIGINAL, _human(12), LLM_UMBRELA, QIDS, 5)
    assert rec["n_human"] == 12
    for v in RUNS:
        got = rec["variants"][v]
        assert got["estimate"] == pytest.approx(truth[v], abs=1e-9)  # a right judge: no correction needed
        assert got["ci_low"] <= got["estimate"] <= got["ci_high"]


def test_05s_record_and_the_index_show_the_prediction_powered_numbers(tmp_path):
    (tmp_path / "ds").mkdir()
    dp = resolve_dataset(str(tmp_path / "ds"), load_settings())
    rec = holes.analyse(RUNS, _human(12), QIDS, "a", k=5, n_sim=0, llm=LLM_UMBRELA, original=ORIGINAL, human=_human(12))
    assert rec["ppi"]["n_human"] == 12 and set(rec["ppi"]["variants"]) == {"a", "b"}
    holes.write(dp, rec)
    view = judged.holes_block(dp)
    assert view["ppi"]["n_human"] == 12 and [r["variant"] for r in view["ppi"]["rows"]] == ["a", "b"]
    no_llm = holes.analyse(RUNS, _human(12), QIDS, "a", k=5, n_sim=0)
    assert "ppi" not in no_llm  # no LLM grades: nothing to rectify
    assert json.loads(json.dumps(rec))  # JSON-able
