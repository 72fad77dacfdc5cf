"""Issue 23 item 3: the explorer's ipywidgets UI (``explore.widget``) driven in-process: a picked query is shown, a
grade button records into the judgments file, a conflict is refused, free text is added as a question; and the
fallback is Markdown, not a quoted string. The same widget in a real JupyterLab server: ``tests/apps/test_lab.py``."""

from __future__ import annotations

import json

import pytest

from explore_data import UNITS, _dataset
from rerankeval.apps import explore
from rerankeval.apps.explore.engine import Explorer
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import judgments


@pytest.fixture
def ui(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    dp = _dataset(tmp_path)
    return dp, explore.widget(dp, k=3).ui


def _buttons(ui, unit):
    """The grade buttons under every shown hit of ``unit`` (one row per column that shows it)."""
    return [row.buttons for row in ui.rows[unit]]


def test_a_picked_query_shows_grade_buttons_under_each_hit_and_marks_the_unjudged(ui):
    """Issue 35 item 11: one row of grade buttons (0..top of the scale) under each hit, unjudged hits marked, a
    grade shown at once in every column that holds the unit; a conflict with the qrels is said, nothing written."""
    dp, ui = ui
    ui.pick.value = "q3"  # a query with no judgments yet
    assert not hasattr(ui, "unit")  # no separate unit dropdown below the view
    rows = [r for rs in ui.rows.values() for r in rs]
    assert len(rows) == 9 and all([b.description for b in r.buttons] == ["0", "1", "2"] for r in rows)
    assert all('class="g na"' in r.html.value and ">?</td>" in r.html.value for r in rows)  # every hit unjudged
    assert "? marks the 5 shown unit(s) nobody judged yet" in ui.head.value
    _buttons(ui, UNITS[3])[0][2].click()
    assert "recorded: q3 / m.pdf#p4 = 2" in ui.status.value
    assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[3], 2, 2)]
    assert len(ui.rows[UNITS[3]]) == 2  # shown by bm25 and hybrid: both updated, without re-running the query
    for row in ui.rows[UNITS[3]]:
        assert 'class="g na"' not in row.html.value and [b.button_style for b in row.buttons] == ["", "", "success"]
    assert "? marks the 4 shown unit(s)" in ui.head.value
    ui.pick.value = "q1"
    assert [b.button_style for b in _buttons(ui, UNITS[0])[0]] == ["", "", "success"]  # judged 2 in the qrels
    _buttons(ui, UNITS[0])[0][0].click()  # refused: the dataset's own qrels are never overridden
    assert "rre-status err" in ui.status.value and "already judged 2" in ui.status.value
    assert "replace=True" not in ui.status.value and all(len(r.bar.children) == 3 for r in ui.rows[UNITS[0]])
    assert len(judgments.read_judgments(dp.judgments("test"))) == 1


def test_a_conflict_with_an_earlier_grade_offers_a_replace_button_not_a_function_call(ui):
    dp, ui = ui
    ui.pick.value = "q3"
    _buttons(ui, UNITS[3])[0][2].click()
    _buttons(ui, UNITS[3])[1][1].click()  # another grade for the same unit: not recorded, Replace offered
    assert "rre-status err" in ui.status.value and "judge(" not in ui.status.value
    assert "replace=True" not in ui.status.value and "Press \u201cReplace with 1\u201d" in ui.status.value
    assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[3], 2, 2)]
    replace = ui.rows[UNITS[3]][0].bar.children[-1]
    assert replace.description == "Replace with 1"
    replace.click()
    assert "replaced: q3 / m.pdf#p4 = 1" in ui.status.value
    assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[3], 1, 2)]
    assert all(len(r.bar.children) == 3 and r.buttons[1].button_style == "success" for r in ui.rows[UNITS[3]])


def test_a_lock_error_in_the_grade_and_add_handlers_is_shown_in_the_status_line(ui, monkeypatch):
    """LockError is a RuntimeError (a ReRankEvalError), not a ValueError: it must reach the status line, not escape."""
    from rerankeval.core.ioutil import LockError

    dp, ui = ui
    ui.pick.value = "q3"

    def locked(*a, **kw):
        raise LockError(f"{dp.source} cannot be locked for writing: make it writable")

    monkeypatch.setattr(judgments, "record", locked)
    _buttons(ui, UNITS[3])[0][2].click()
    assert "rre-status err" in ui.status.value and "cannot be locked" in ui.status.value
    ui.add_question = locked
    _free_text(ui, monkeypatch)
    ui.rows[UNITS[3]][0].buttons[0].click()
    assert "rre-status err" in ui.status.value and "cannot be locked" in ui.status.value


def test_the_search_button_shows_the_typed_query(ui):
    _, ui = ui
    ui.text.value = "q2"
    assert ui.state["x"].qid == "q2"
    ui.state.clear()
    ui.search.click()  # the same text again: the button searches it
    assert ui.state["x"].qid == "q2"


def _free_text(ui, monkeypatch, text="where does delta log"):
    from rerankeval.apps.explore.view import Column, Exploration, Hit

    shown = Exploration(
        ui.dp.name,
        text,
        None,
        True,
        3,
        [Column("bm25", [Hit(1, UNITS[3], 1.0, None, "", "")])],
        {},
        None,
        frozenset(),
        0.0,
    )
    monkeypatch.setattr(ui.ex, "show", lambda q, k, say=None: shown)  # free text needs indexes: the UI's part here
    ui.text.value = text
    return shown


def test_free_text_is_added_as_a_question_from_the_button_under_a_hit(ui, monkeypatch):
    dp, ui = ui
    _free_text(ui, monkeypatch)
    assert [b.description for b in ui.rows[UNITS[3]][0].buttons] == ["answers it"]
    assert "answers it" in ui.head.value and ">?</td>" not in ui.rows[UNITS[3]][0].html.value
    ui.rows[UNITS[3]][0].buttons[0].click()
    assert "q-001 added to" in ui.status.value and ui.rows[UNITS[3]][0].buttons[0].disabled
    line = json.loads(dp.source_queries.read_text(encoding="utf-8").splitlines()[-1])
    assert (line["_id"], line["text"]) == ("q-001", "where does delta log")
    assert dp.source_qrels("test").read_text(encoding="utf-8").endswith(f"q-001\t{UNITS[3]}\t2\n")


def _fake_live(ex):
    """A live search whose retriever returns the saved bm25 list of q1 (free text needs indexes otherwise)."""
    from rerankeval.apps.explore.search import LiveSearch
    from rerankeval.core import runs

    saved = runs.read_trec(ex.dp.run_file("bm25"))["q1"]

    class Retriever:
        embedder = None

        def search(self, v, queries, **kw):
            return type("R", (), {"run": {"free-text": saved}, "chunk_run": {"free-text": {}}})()

    live = LiveSearch.__new__(LiveSearch)
    live.dp, live.unit_of, live.say, live.llm_scores, live._ce = ex.dp, {}, lambda m: ex.say(m), {}, None
    live.retriever = Retriever()
    return live


def test_a_free_text_search_says_what_it_does_in_the_status_line_and_prints_nothing(ui, monkeypatch, capsys):
    """Issue 35 item 10: something visible at once, then each step in the one status line; no line in the cell."""
    _, ui = ui
    monkeypatch.setattr(ui.ex, "_live", _fake_live(ui.ex))
    seen = []
    ui.status.observe(lambda ch: seen.append(ch["new"]), names="value")
    ui.text.value = "where do delta logs go"
    assert "searching where do delta logs go\u2026" in seen[0]  # before any search work
    assert any("searching bm25 (2 of 2 variants)\u2026" in s for s in seen)
    assert "free text: top 3 of 3 variants in" in seen[-1]
    assert capsys.readouterr().out == ""


def test_a_plain_show_of_free_text_prints_no_progress_unless_asked(tmp_path, monkeypatch, capsys):
    dp = _dataset(tmp_path)
    ex = Explorer(dp, load_settings())
    monkeypatch.setattr(ex, "_live", _fake_live(ex))
    assert ex.show("where do delta logs go", 3).live and capsys.readouterr().out == ""
    steps = []
    ex.show("where do delta logs go", 3, say=steps.append)
    assert steps == ["searching hybrid (1 of 2 variants)\u2026", "searching bm25 (2 of 2 variants)\u2026"]
    assert ex.say.__name__ == "debug"  # set back after the call


def test_without_ipywidgets_the_widget_says_how_to_call_the_explorer_in_markdown(tmp_path, monkeypatch):
    import builtins

    from IPython.display import Markdown

    real = builtins.__import__
    monkeypatch.setattr(
        builtins,
        "__import__",
        lambda name, *a, **kw: (
            (_ for _ in ()).throw(ImportError(name)) if name == "ipywidgets" else real(name, *a, **kw)
        ),
    )
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
    ui.pick.value = "q3"
    assert [b.description for b in ui.rows[UNITS[1]][0].buttons] == ["0", "1", "2", "3"]
    ui.rows[UNITS[1]][0].buttons[3].click()
    assert "recorded: q3 / m.pdf#p2 = 3" in ui.status.value
    with pytest.raises(ValueError, match="grade 4 is outside the scale: grades are 0-3"):
        explore.judge(dp, "q3", UNITS[2], 4)


def test_next_to_judge_picks_the_queue_s_first_unit_and_a_grade_refreshes_the_status(ui):
    dp, ui = ui
    ui.next.click()
    first = explore.next_to_judge(dp, 1).units.iloc[0]
    assert ui.state["x"].qid == first.qid and "next to judge: " + first.qid in ui.status.value
    assert "undecided \u2014 at most 7 judgments could decide it" in ui.judging.value and "0 done" in ui.judging.value
    assert f"next: {first.qid} / {first.unit_id}" in ui.judging.value
    ui.rows[first.unit_id][0].buttons[0].click()
    assert "recorded:" in ui.status.value
    assert "at most 6 judgments could decide it" in ui.judging.value and "1 done" in ui.judging.value
    assert "status computed in" in ui.judging.value
