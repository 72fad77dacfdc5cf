"""Issue 34 item 2: what to judge next in the explorer (``explore.next_to_judge``, ``apps.explore.queue``), read
from the saved runs and the judgments without re-running the chain; its bad inputs (more units than are unjudged, a
grade for a unit no run retrieved, identical runs, the judgments file changed on disk while the explorer is open)."""

from __future__ import annotations

import pytest

from explore_data import UNITS, _dataset
from rerankeval.apps import explore
from rerankeval.core import runs
from rerankeval.evaluate import judgments


def test_the_queue_gives_units_with_query_snippet_and_why_and_a_status_per_comparison(tmp_path):
    dp = _dataset(tmp_path)  # bm25 and hybrid are the same run; hybrid_rerank is hybrid reversed
    got = explore.next_to_judge(dp, 2)
    assert list(got.units.columns) == ["qid", "query", "unit_id", "weight", "why", "where", "snippet"]
    assert len(got.units) == 2 and got.units.weight.is_monotonic_decreasing and (got.units.weight > 0).all()
    first = got.units.iloc[0]
    assert first.query == {"q1": "alpha configuration", "q2": "how do beta upgrades run"}[first.qid]
    assert first.snippet and first["where"].startswith("m.pdf")
    assert "moves hybrid_rerank vs bm25 by up to" in first.why and "nDCG@10" in first.why
    # q1 has 3 unjudged units (p2, p4, p5), q2 has 4; q3 has no relevant unit: not evaluated
    assert got.status == [
        "hybrid vs bm25: identical \u2014 the same top 10 for every query, nothing to compare (a degenerate "
        "comparison); 0 done",
        next(
            s
            for s in got.status
            if s.startswith("hybrid_rerank vs bm25: undecided \u2014 at most 7 judgments could decide it (")
        ),
        next(s for s in got.status if s.startswith("hybrid_rerank vs hybrid: undecided \u2014 at most 7 ")),
    ]
    assert got.status[1].endswith("; 0 done")


def test_asking_for_more_units_than_are_unjudged_says_so_and_returns_all(tmp_path):
    dp = _dataset(tmp_path)
    got = explore.next_to_judge(dp, 50)
    # q2's p4 sits at rank 3 in both hybrid and its reversal: it moves no comparison, so 6 of the 7 are queued
    assert len(got.units) == 6 and ("q2", UNITS[3]) not in set(zip(got.units.qid, got.units.unit_id, strict=True))
    assert got.notes == ["asked for 50 units, but only 6 unjudged units can move an open comparison: all 6 are shown"]
    with pytest.raises(ValueError, match="mode must be one of queue, sample"):
        explore.next_to_judge(dp, 1, mode="best")


def test_a_grade_moves_the_status_and_is_counted_as_done(tmp_path):
    dp = _dataset(tmp_path)
    ex = explore.explorer(dp)
    top = ex.next_to_judge(1).units.iloc[0]
    assert ex.judge(top.qid, top.unit_id, 0) == "recorded"
    after = ex.next_to_judge(1)
    assert after.status[1].endswith("; 1 done") and "at most 6 judgments" in after.status[1]
    assert (after.units.qid.iloc[0], after.units.unit_id.iloc[0]) != (top.qid, top.unit_id)


def test_a_grade_for_a_unit_no_run_retrieved_is_kept_with_a_clear_note(tmp_path):
    dp = _dataset(tmp_path)
    for v in ("bm25", "hybrid", "hybrid_rerank"):  # every run cut to its top 2: q3's p5 is retrieved by none
        saved = runs.read_trec(dp.run_file(v))
        runs.write_trec({q: dict(list(d.items())[:2]) for q, d in saved.items()}, dp.run_file(v), v)
    said = explore.judge(dp, "q3", UNITS[4], 1)
    assert said.startswith("recorded (note: no saved run retrieved m.pdf#p5 for q3; the grade is kept")
    assert "moves no comparison" in said
    assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[4], 1, 2)]
    assert explore.explorer(dp).judge("q2", UNITS[3], 0).startswith("recorded (note: no saved run retrieved")


def test_the_judgments_file_changed_on_disk_while_open_is_re_read_and_said(tmp_path):
    dp = _dataset(tmp_path)
    ex = explore.explorer(dp)
    assert ex.show("q1", k=5).columns[1].hits[1].grade is None
    judgments.record(dp, "q1", UNITS[1], 2)  # another explorer (or an edit) writes the file behind this one's back
    assert ex.show("q1", k=5).columns[1].hits[1].grade == 2  # seen at once, not the stale copy
    got = ex.next_to_judge(3)
    assert any("changed on disk since the explorer read it" in n and "1 grades in it now" in n for n in got.notes)
    assert got.status[1].endswith("; 1 done") and not ex.next_to_judge(1).notes  # said once


def test_the_sample_mode_walks_a_fixed_random_order_of_the_holes(tmp_path):
    dp = _dataset(tmp_path)
    first = explore.next_to_judge(dp, 3, mode="sample")
    assert len(first.units) == 3 and (first.units.weight == 0).all()
    assert first.units.why.str.startswith("random sample item ").all()
    assert first.status[-1] == (
        "random sample: 0 of its first 1 units graded; prediction-powered intervals need at least 10"
    )
    top = first.units.iloc[0]
    explore.judge(dp, top.qid, top.unit_id, 0)
    again = explore.next_to_judge(dp, 2, mode="sample")
    assert list(again.units.unit_id) == list(first.units.unit_id[1:3])  # the same order, the graded one gone
    assert again.status[-1].startswith("random sample: 1 of its first 2 units graded")
