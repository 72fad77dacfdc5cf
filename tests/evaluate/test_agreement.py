"""Agreement of an LLM judge with human grades (Cohen's kappa, binary and linearly weighted) and of two system
rankings (Kendall's tau-b): closed-form cases, and cross-checks against sklearn and scipy."""

from __future__ import annotations

import math
import random

import pytest
from scipy.stats import kendalltau
from sklearn.metrics import cohen_kappa_score

from rerankeval.evaluate import agreement


def test_kappa_in_closed_form():
    # observed agreement 3/4; margins a: 2 of 4 relevant, b: 1 of 4 -> chance .5*.25 + .5*.75 = .5 -> kappa .5
    k, m = agreement.cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0], (0, 1))
    assert k == pytest.approx(0.5)
    assert m.tolist() == [[2, 0], [1, 1]]  # rows: the first rater, columns: the second
    assert agreement.cohen_kappa([0, 1, 2], [0, 1, 2], (0, 1, 2))[0] == pytest.approx(1.0)
    assert agreement.cohen_kappa([0, 1], [1, 0], (0, 1))[0] == pytest.approx(-1.0)
    assert math.isnan(agreement.cohen_kappa([1, 1], [1, 1], (0, 1))[0])  # chance agreement is total
    # linear weights on 0-3: one pair off by 3 of 2 pairs -> observed disagreement .5, expected .5 -> 0
    assert agreement.cohen_kappa([0, 3], [3, 3], (0, 1, 2, 3), weights="linear")[0] == pytest.approx(0.0)


@pytest.mark.parametrize("seed", range(5))
def test_kappa_matches_sklearn(seed):
    rng = random.Random(seed)
    a = [rng.randrange(4) for _ in range(60)]
    b = [min(3, max(0, x + rng.choice((-1, 0, 0, 1, 2)))) for x in a]
    for weights in (None, "linear"):
        got = agreement.cohen_kappa(a, b, (0, 1, 2, 3), weights=weights)[0]
        assert got == pytest.approx(cohen_kappa_score(a, b, labels=[0, 1, 2, 3], weights=weights), abs=1e-12)
    ab, bb = [int(x > 0) for x in a], [int(x > 0) for x in b]
    assert agreement.cohen_kappa(ab, bb, (0, 1))[0] == pytest.approx(cohen_kappa_score(ab, bb), abs=1e-12)


def test_agreement_on_the_overlap_with_a_low_kappa_warning():
    human = {"q1": {"a": 2, "b": 0, "c": 1, "d": 0}, "q2": {"e": 0}}
    llm = {"q1": {"a": 3, "b": 2, "c": 0, "d": 0, "x": 3}, "q2": {"e": 2}, "q3": {"f": 3}}  # LLM relevant: 2 and 3
    got = agreement.agreement(human, llm, source="llm-m.tsv")
    assert got["n_pairs"] == 5  # x and f were graded by the LLM only
    # binary: human 1 0 1 0 0, llm 1 1 0 0 1 -> observed 2/5; chance (2/5)(3/5) + (3/5)(2/5) = 12/25 -> -.1538
    assert got["kappa_binary"] == pytest.approx((0.4 - 0.48) / (1 - 0.48), abs=1e-4)
    assert got["confusion_binary"]["counts"] == [[1, 2], [1, 1]]
    assert "little better than chance" in got["warning"] and "kappa" in got["warning"]
    assert got["confusion_graded"]["labels"] == [0, 1, 2, 3]
    assert sum(map(sum, got["confusion_graded"]["counts"])) == 5


def test_one_class_human_grades_say_that_kappa_cannot_measure_it():
    human = {"q1": {"a": 1, "b": 2, "c": 2}}
    got = agreement.agreement(human, {"q1": {"a": 0, "b": 3, "c": 2}})
    assert got["kappa_binary"] == 0.0 and not got["warning"]
    assert "cannot measure" in got["note"] and "2 of the 3 relevant" in got["note"]
    assert agreement.agreement(human, {})["note"].startswith("no pair")


def test_good_agreement_has_no_warning():
    human = {"q": {f"u{i}": i % 2 for i in range(10)}}
    got = agreement.agreement(human, {"q": {f"u{i}": 3 * (i % 2) for i in range(10)}})
    assert got["kappa_binary"] == 1.0 and got["warning"] == "" and "binary 1.00" in got["note"]


def test_kendall_tau_on_hand_built_rankings():
    a = {"s1": 0.9, "s2": 0.8, "s3": 0.7, "s4": 0.6}
    assert agreement.kendall_tau(a, a)["tau"] == pytest.approx(1.0)
    rev = {s: -v for s, v in a.items()}
    assert agreement.kendall_tau(a, rev)["tau"] == pytest.approx(-1.0)
    swap = {**a, "s3": 0.85}  # one of the six pairs discordant: (5 - 1) / 6
    got = agreement.kendall_tau(a, swap)
    assert got["tau"] == pytest.approx(4 / 6, abs=1e-4) and got["n_systems"] == 4 and got["n_pairs"] == 6
    tied = {**a, "s2": 0.9}  # tau-b with a tie, as scipy computes it
    want = kendalltau([a[s] for s in sorted(a)], [tied[s] for s in sorted(a)], variant="b").statistic
    assert agreement.kendall_tau(a, tied)["tau"] == pytest.approx(want, abs=1e-4)
    assert agreement.kendall_tau(a, {"s1": 1.0, "zz": 2.0})["tau"] is None  # one system in common


def test_llm_grades_fill_holes_only_capped_at_the_human_scale():
    merged, added = agreement.merge_llm({"q": {"a": 1}}, {"q": {"a": 3, "b": 3, "c": 0}, "r": {"d": 1}}, top=2)
    assert merged == {"q": {"a": 1, "b": 2, "c": 0}, "r": {"d": 0}} and added == 3  # an LLM 1 is not relevant


def test_the_llm_file_is_read_and_checked(tmp_path):
    p = tmp_path / "llm-m.tsv"
    p.write_text("query-id\tcorpus-id\tscore\nq1\ta\t3\nq1\tb\t0\n")
    assert agreement.read_llm_qrels(p) == {"q1": {"a": 3, "b": 0}}
    p.write_text("query-id\tcorpus-id\tscore\nq1\ta\t7\n")
    with pytest.raises(ValueError, match="outside 0-3"):
        agreement.read_llm_qrels(p)


# -- issue 32 defect 5: the judge's grades follow its scale (UMBRELA: 0 and 1 are not relevant) --------------------
@pytest.mark.parametrize("top", [1, 2, 3])
def test_an_llm_grade_of_1_related_but_no_answer_is_merged_as_not_relevant(top):
    llm = {"q": {"g0": 0, "g1": 1, "g2": 2, "g3": 3}}
    merged, added = agreement.merge_llm({"q": {"h": top}}, llm, top=top)
    assert added == 4 and merged["q"]["h"] == top
    assert merged["q"]["g0"] == merged["q"]["g1"] == 0  # not relevant on the judge's scale, so not in the qrels
    assert merged["q"]["g3"] == top and 1 <= merged["q"]["g2"] <= top  # 3 is the human scale's best grade
    assert merged["q"]["g2"] < top or top == 1


def test_kappa_binary_reads_an_llm_1_as_not_relevant():
    human = {"q": {"a": 0, "b": 0, "c": 1, "d": 2}}
    llm = {"q": {"a": 1, "b": 0, "c": 2, "d": 3}}  # the judge's 1 ("related, does not answer") for a human 0
    got = agreement.agreement(human, llm)
    assert got["kappa_binary"] == 1.0 and got["confusion_binary"]["counts"] == [[2, 0], [0, 2]]
    assert got["llm_relevant_of_human_relevant"] == 2
