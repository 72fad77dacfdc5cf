"""Issue 23 item 3: the explorer's ipywidgets UI (``explore.widget``) driven in-process: a picked query is shown, a
grade button records into the judgments file, a conflict is refused, free text is added as a question; and the
fallback is Markdown, not a quoted string. The same widget in a real JupyterLab server: ``tests/test_lab.py``."""

from __future__ import annotations

import json

import pytest

from rerankeval.apps import explore
from rerankeval.evaluate import judgments
from test_explore import UNITS, _dataset


@pytest.fixture
def ui(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    dp = _dataset(tmp_path)
    return dp, explore.widget(dp, k=3).ui


def test_a_picked_query_is_shown_and_a_grade_button_records_its_grade(ui):
    dp, ui = ui
    assert [b.description for b in ui.grades] == ["grade 0", "grade 1", "grade 2"]  # the dataset's 0-2 scale
    ui.pick.value = "q3"  # a query with no judgments yet
    assert not ui.grades[0].disabled and ui.add.disabled and set(ui.unit.options) == set(UNITS)
    ui.unit.value = UNITS[3]
    ui.grades[2].click()
    assert "recorded: q3 / m.pdf#p4 = 2" in ui.status.value
    assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[3], 2, 2)]
    ui.pick.value = "q1"
    ui.unit.value = UNITS[0]  # judged 2 in the qrels: refused, shown, nothing written
    ui.grades[0].click()
    assert "refused" in ui.status.value and len(judgments.read_judgments(dp.judgments("test"))) == 1


def test_the_search_button_shows_the_typed_query(ui):
    _, ui = ui
    ui.text.value = "q2"
    assert ui.state["x"].qid == "q2"
    ui.state.clear()
    ui.search.click()  # the same text again: the button searches it
    assert ui.state["x"].qid == "q2"


def test_free_text_is_added_as_a_question_from_the_widget(ui, monkeypatch):
    dp, ui = ui
    from rerankeval.apps.explore_view import Column, Exploration, Hit

    shown = Exploration(dp.name, "where does delta log", None, True, 3, [Column("bm25", [Hit(1, UNITS[3], 1.0, None,
                        "", "")])], {}, None, frozenset(), 0.0)
    monkeypatch.setattr(ui.ex, "show", lambda q, k: shown)  # free text needs indexes; the UI's part is tested here
    ui.text.value = "where does delta log"
    assert all(b.disabled for b in ui.grades) and not ui.add.disabled
    ui.unit.value = UNITS[3]
    ui.add.click()
    assert "q-001 added to" in ui.status.value and ui.add.disabled
    line = json.loads(dp.source_queries.read_text(encoding="utf-8").splitlines()[-1])
    assert (line["_id"], line["text"]) == ("q-001", "where does delta log")
    assert dp.source_qrels("test").read_text(encoding="utf-8").endswith(f"q-001\t{UNITS[3]}\t2\n")


def test_without_ipywidgets_the_widget_says_how_to_call_the_explorer_in_markdown(tmp_path, monkeypatch):
    import builtins

    from IPython.display import Markdown

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **kw: (_ for _ in ()).throw(ImportError(name))
                        if name == "ipywidgets" else real(name, *a, **kw))
    got = explore.widget(_dataset(tmp_path))
    assert isinstance(got, Markdown) and "`explore.show(dp, query, k)`" in got.data
    assert got._repr_markdown_().startswith("**ipywidgets is not installed**")


def test_inside_a_chain_run_the_widget_is_a_markdown_pointer_to_make_lab(tmp_path, monkeypatch):
    from IPython.display import Markdown

    monkeypatch.setenv("RERANKEVAL_STAGE", "00-explore")
    got = explore.widget(_dataset(tmp_path))
    assert isinstance(got, Markdown) and "make lab" in got.data


def test_the_grade_buttons_follow_a_0_to_3_scale_and_a_grade_off_it_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    from rerankeval.core import runs

    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    dp = _dataset(tmp_path)
    runs.write_qrels({"q1": {UNITS[0]: 3, UNITS[2]: 0}, "q2": {UNITS[1]: 1}}, dp.qrels)  # qrels that use 0-3
    ui = explore.widget(dp, k=3).ui
    assert [b.description for b in ui.grades] == ["grade 0", "grade 1", "grade 2", "grade 3"]
    ui.pick.value = "q3"
    ui.unit.value = UNITS[1]
    ui.grades[3].click()
    assert "recorded: q3 / m.pdf#p2 = 3" in ui.status.value
    with pytest.raises(ValueError, match="grade 4 is outside the scale: grades are 0-3"):
        explore.judge(dp, "q3", UNITS[2], 4)


def test_next_to_judge_picks_the_queue_s_first_unit_and_a_grade_refreshes_the_status(ui):
    dp, ui = ui
    ui.next.click()
    first = explore.next_to_judge(dp, 1).units.iloc[0]
    assert ui.state["x"].qid == first.qid and ui.unit.value == first.unit_id
    assert "undecided \u2014 at most 7 judgments could decide it" in ui.judging.value and "0 done" in ui.judging.value
    assert f"next: {first.qid} / {first.unit_id}" in ui.judging.value
    ui.grades[0].click()
    assert "recorded:" in ui.status.value
    assert "at most 6 judgments could decide it" in ui.judging.value and "1 done" in ui.judging.value
    assert "status computed in" in ui.judging.value
