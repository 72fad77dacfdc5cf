"""Issue 21 item 3: drafted questions reviewed in the explorer widget (``explore.widget``), driven in-process: the
not-reviewed drafts come first, picking one shows its source page and every variant's hits, Accept / Save edit /
Reject record through questions.review (the human files untouched), a unit graded for a draft lands in the
judgments file, Promote moves the accepted ones into queries.jsonl, and a draft removed meanwhile is said."""

from __future__ import annotations

import hashlib
import json

import pytest

from explore_data import UNITS, _dataset
from rerankeval.apps import explore
from rerankeval.corpus import queryset
from rerankeval.evaluate import judgments


def _with_drafts(tmp_path):
    """explore_data's dataset, its three evaluated queries being drafts (a folder of PDFs with no human questions)."""
    dp = _dataset(tmp_path)
    rows = [
        ("q1", "alpha configuration", queryset.ACCEPTED, UNITS[0]),
        ("q2", "how do beta upgrades run", queryset.DRAFT, UNITS[1]),
        ("q3", "what rotates weekly", queryset.DRAFT, UNITS[2]),
    ]
    queryset.write_drafts(
        dp.source_draft_queries,
        [queryset.Draft(q, t, {"source_unit": u, "model": "fake", "status": s}) for q, t, s, u in rows],
    )
    dp.source_draft_qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{u}\t2\n" for q, _, _, u in rows), encoding="utf-8"
    )
    return dp


@pytest.fixture
def ui(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    dp = _with_drafts(tmp_path)
    return dp, explore.widget(dp, k=3).ui


def _status(dp, qid):
    return {d.qid: d for d in queryset.read_drafts(dp.source_draft_queries)}[qid]


def test_drafts_not_reviewed_come_first_and_a_pick_shows_its_source_and_the_hits(ui):
    dp, ui = ui
    r = ui.review
    assert r is not None and r.box in ui.box.children
    assert [v for _, v in r.pick.options] == ["", "q2", "q3", "q1"]  # drafts first, the accepted one last
    assert "reviewed 1 of 3 drafts (1 accepted, 0 rejected); 0 units judged" in ui.status.value
    r.pick.value = "q3"
    assert r.source.value.startswith(f"{UNITS[2]}: ") and r.text.value == "what rotates weekly"
    assert ui.state["x"].qid == "q3" and ui.rows  # the explorer's view of the draft, grade buttons under each hit
    assert all([b.description for b in row.buttons] == ["0", "1", "2"] for rs in ui.rows.values() for row in rs)


def test_accept_edit_and_reject_are_recorded_and_the_human_files_are_untouched(ui):
    dp, ui = ui
    r = ui.review
    human = [p for p in (dp.source_queries, dp.source_qrels("test")) if p.is_file()]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in human}
    r.pick.value = "q2"
    r.text.value = "how are beta upgrades run"
    r.buttons["edit"].click()
    assert _status(dp, "q2").status == queryset.ACCEPTED and _status(dp, "q2").text == "how are beta upgrades run"
    assert _status(dp, "q2").metadata["original_text"] == "how do beta upgrades run"
    r.pick.value = "q3"
    r.buttons["reject"].click()
    assert _status(dp, "q3").status == queryset.REJECTED
    assert "reviewed 3 of 3 drafts (2 accepted, 1 rejected)" in ui.status.value
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in human} == before


def test_a_unit_graded_for_a_draft_goes_to_the_judgments_file(ui):
    dp, ui = ui
    ui.review.pick.value = "q3"
    ui.rows[UNITS[4]][0].buttons[1].click()  # grade 1, under the unit's hit
    assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[4], 1, 2)]


def test_promote_moves_the_accepted_drafts_into_queries_jsonl(ui):
    dp, ui = ui
    ui.review.promote.click()
    lines = [json.loads(x) for x in dp.source_queries.read_text(encoding="utf-8").splitlines()]
    assert [x["_id"] for x in lines] == ["q1"] and "q1" in ui.status.value


def test_a_draft_removed_since_it_was_listed_is_said_and_nothing_is_lost(ui):
    dp, ui = ui
    r = ui.review
    r.pick.value = "q2"
    kept = [d for d in queryset.read_drafts(dp.source_draft_queries) if d.qid != "q2"]
    queryset.write_drafts(dp.source_draft_queries, kept)  # another reviewer removed q2
    r.buttons["accept"].click()
    assert "not in" in ui.status.value and "q2" in ui.status.value
    assert [d.qid for d in queryset.read_drafts(dp.source_draft_queries)] == ["q1", "q3"]


def test_without_drafts_the_widget_has_no_review_row(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    ui = explore.widget(_dataset(tmp_path), k=3).ui
    assert ui.review is None


def test_an_edit_repeating_another_question_is_said_and_nothing_recorded(ui):
    dp, ui = ui
    r = ui.review
    before = dp.source_draft_queries.read_bytes()
    r.pick.value = "q2"
    r.text.value = "Alpha configuration?"  # the accepted draft q1's wording
    r.buttons["edit"].click()
    assert "same question as accepted draft q1" in ui.status.value and "nothing was recorded" in ui.status.value
    assert dp.source_draft_queries.read_bytes() == before


def test_a_folder_whose_lock_does_not_exclude_is_said_in_the_status_and_nothing_written(ui, monkeypatch):
    import fcntl

    dp, ui = ui
    r = ui.review
    before = dp.source_draft_queries.read_bytes()
    monkeypatch.setattr(fcntl, "flock", lambda *a, **k: None)  # a filesystem whose flock does nothing
    r.pick.value = "q2"
    r.buttons["reject"].click()
    assert "file locks do not exclude" in ui.status.value and str(dp.source) in ui.status.value
    r.promote.click()
    assert "file locks do not exclude" in ui.status.value
    assert dp.source_draft_queries.read_bytes() == before
