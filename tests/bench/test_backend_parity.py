"""bench/backend_parity.py's comparison of two backends' rankings: every difference gets a cause (a tie, float
order, a tie inside a fused list's leg) or is counted unexplained, on hand-built rankings; and bench/scale.py's
power-law fit on exact powers."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bp():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("backend_parity")
    finally:
        sys.path.remove(str(BENCH))


def test_equal_rankings_have_no_difference(bp):
    r = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    out = bp.compare(r, {"q": {"a": 3.0, "b": 2.0000001, "c": 1.0}})
    assert (out["equal"], out["differing"], out["equal_full_depth"], out["causes"]) == (1, 0, 1, {})
    assert out["max_rel_score_diff"] == pytest.approx(1e-7 / 2.0000001)


def test_a_swap_of_tied_or_nearly_tied_entries_is_explained(bp):
    tie = bp.explain({"a": 2.0, "b": 1.0, "c": 1.0}, {"a": 2.0, "c": 1.0, "b": 1.0}, None)
    assert [(d["rank"], d["cause"]) for d in tie] == [(2, "tie"), (3, "tie")]
    near = bp.explain({"b": 1.0000001, "c": 1.0}, {"c": 1.0000002, "b": 1.0000001}, None)
    assert {d["cause"] for d in near} == {"float order"}
    assert near[0]["client_scores"] == [1.0000001, 1.0] and near[0]["edge_scores"] == [1.0000001, 1.0000002]


def test_a_tie_at_the_cut_keeps_a_different_entry_in_each_list(bp):
    found = bp.explain({"a": 2.0, "x": 1.5}, {"a": 2.0, "y": 1.5}, None)
    assert found == [
        {
            "rank": 2,
            "client": "x",
            "edge": "y",
            "client_scores": [1.5, None],
            "edge_scores": [None, 1.5],
            "cause": "tie",
        }
    ]


def test_a_real_difference_stays_unexplained_unless_a_leg_explains_it(bp):
    client = {"q": {"a": 0.9, "b": 0.5}, "r": {"a": 0.9, "b": 0.5}}
    edge = {"q": {"b": 0.9, "a": 0.5}, "r": {"b": 0.9, "a": 0.5}}
    alone = bp.compare(client, edge)
    assert alone["causes"] == {"unexplained": 4} and alone["differing"] == 2
    legs = {"q": {"a"}, "r": {"z"}}  # "a" is tied inside a leg of q; r's tied entry is not involved
    fused = bp.compare(client, edge, legs_explain=legs)
    assert fused["causes"] == {"from the legs": 2, "unexplained": 2}
    assert bp.compare(client, edge, legs_explain={"q": True, "r": True})["causes"] == {"from the legs": 4}
    assert bp.compare(client, edge, k=1)["causes"] == {"unexplained": 2}  # only the first entry compared


def test_leg_ties_finds_tied_entries_and_tie_only_differences(bp):
    runs = {"dense_leg": {"chunks": {"q": {"a": 1.0, "b": 1.0, "c": 0.5}, "r": {"a": 1.0, "b": 0.9}}}}
    other = {"dense_leg": {"chunks": {"q": {"a": 1.0, "b": 1.0, "c": 0.5}, "r": {"b": 0.9, "a": 0.8}}}}
    out = bp.leg_ties({"runs": runs}, {"runs": other}, ("dense_leg",))
    assert out == {"q": {"a", "b"}, "r": set()}
    swapped = {"dense_leg": {"chunks": {"q": {"b": 1.0, "a": 1.0, "c": 0.5}, "r": {"a": 1.0, "b": 0.9}}}}
    assert bp.leg_ties({"runs": runs}, {"runs": swapped}, ("dense_leg",))["q"] is True


def test_the_scale_fit_recovers_an_exact_power_law():
    sys.path.insert(0, str(BENCH))
    try:
        scale = importlib.import_module("scale")
    finally:
        sys.path.remove(str(BENCH))
    ns = [5_000, 20_000, 100_000]
    ys = [3e-4 * n**1.1 for n in ns]
    assert scale.exponent(ns, ys) == pytest.approx(1.1)
    assert scale.extrapolate(ns, ys, (1_000_000,))["1000000"] == pytest.approx(3e-4 * 1e6**1.1)
    done = [{"n": 10_000, "stages": {}, "wall": 10.0}]
    assert scale.predict(done, 40_000, lambda r: r["wall"]) == pytest.approx(40.0)  # one size: linear
