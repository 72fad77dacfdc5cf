"""The explorer's ipywidgets UI: a text box and a dropdown of queries, the side-by-side view, and a grade button
for a shown unit of a judged query. Part of :mod:`rerankeval.apps.explore` (call it as ``explore.widget``);
it is handed the dataset's explorer rather than importing that module. With drafted questions it adds the review
row of :mod:`rerankeval.apps.explore_review_widget`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import judgments
from rerankeval.report.fragments import status_html, verdict_html


def in_chain(settings: Settings | None = None) -> bool:
    """True inside a chain run (papermill; ``RERANKEVAL_STAGE``, ``Settings.stage``): no interactive UI there."""
    return bool((settings or load_settings()).stage)


def _markdown(text: str) -> Any:
    """``text`` as Markdown on the page (a plain string would show as a quoted Python repr)."""
    from IPython.display import Markdown

    return Markdown(text)


def widget(dp: DatasetPaths, k: int, open_explorer: Callable[[DatasetPaths], Any],
           add_question: Callable[..., str]) -> Any:
    """The ipywidgets explorer over ``open_explorer(dp)`` (an :class:`~rerankeval.apps.explore.Explorer`), adding
    free text as a question with ``add_question(dp, text, [unit])`` (``explore.add_question``); its
    :class:`ExplorerUI` is the box's ``ui`` attribute. Without ipywidgets (or inside a chain run) a Markdown
    message says how to call ``explore.show`` instead."""
    try:
        import ipywidgets as w
    except ImportError:
        return _markdown("**ipywidgets is not installed**: call `explore.show(dp, query, k)` and "
                         "`explore.judge(dp, qid, unit_id, grade)` instead, or `pip install -r requirements.txt` "
                         "(it pins ipywidgets) for the interactive explorer.")
    if in_chain():
        return _markdown("Interactive explorer: open this notebook in JupyterLab (`make lab`).")
    ui = ExplorerUI(w, open_explorer(dp), dp, k, add_question)
    if dp.source_draft_queries.is_file():  # drafted questions: the review row (accept / edit / reject / promote)
        from rerankeval.apps.explore_review_widget import ReviewUI

        ui.review = ReviewUI(w, ui, dp)
        ui.box.children = (*ui.box.children[:-1], ui.review.box, ui.box.children[-1])
    ui.box.ui = ui
    return ui.box


class ExplorerUI:
    """The widgets of :func:`widget` and what they do; :attr:`box` is what the notebook displays. A text box (Enter
    or the Search button), a query picker, the view, a unit picker with one button per grade of the dataset's
    scale (a judged query), and "Add as a question" (free text: the picked unit relevant, at the top grade)."""

    def __init__(self, w: Any, ex: Any, dp: DatasetPaths, k: int, add_question: Callable[..., str]) -> None:
        self.ex, self.dp, self.add_question = ex, dp, add_question
        picks = [(f"{q}: {ex.table[q][:70]}", q) for q in dict.fromkeys(ex.examples(5) + list(ex.table))]
        self.text = w.Text(placeholder="type a question, or a query id, and press Enter",
                           layout=w.Layout(width="60%"), continuous_update=False)
        self.search = w.Button(description="Search", button_style="primary")
        self.pick = w.Dropdown(options=[("(pick a query)", "")] + picks, layout=w.Layout(width="60%"))
        self.depth = w.BoundedIntText(value=k, min=1, max=100, description="k")
        self.out, self.status = w.Output(), w.HTML()
        top = judgments.grade_scale(corpus.load_qrels(dp))  # the dataset's scale, 0 to its top grade
        self.unit = w.Dropdown(description="unit", options=[], layout=w.Layout(width="40%"))
        self.grades = [w.Button(description=f"grade {g}", tooltip=f"record grade {g} (scale 0-{top})",
                                disabled=True, layout=w.Layout(width="auto")) for g in range(top + 1)]
        self.add = w.Button(description="Add as a question", disabled=True,
                            tooltip="append this free text to queries.jsonl with the picked unit as relevant")
        self.state: dict[str, Any] = {}
        self.review: Any = None  # the drafts' review row (explore_review_widget.ReviewUI), when there are drafts
        self.text.observe(lambda ch: ch["new"].strip() and self.run(ch["new"]), names="value")
        self.search.on_click(lambda _: self.text.value.strip() and self.run(self.text.value))
        self.pick.observe(lambda ch: ch["new"] and self.run(ch["new"]), names="value")
        for g, b in enumerate(self.grades):
            b.on_click(lambda _, g=g: self.on_grade(g))
        self.add.on_click(self.on_add)
        self.next = w.Button(description="Next to judge", tooltip="show the unjudged unit that moves an undecided "
                             "comparison most (explore.next_to_judge), with why it matters")
        self.judging = w.HTML()  # the comparisons' status, refreshed after each grade
        self.next.on_click(self.on_next)
        self.box = w.VBox([w.HBox([self.text, self.search, self.next]), self.pick, self.depth, self.out,
                           w.HBox([self.unit, *self.grades, self.add]), self.status, self.judging])

    def run(self, query: str) -> None:
        """Show ``query``; offer its units for grading (a judged query) or for a new question (free text)."""
        self.out.clear_output()
        with self.out:
            try:
                x = self.state["x"] = self.ex.show(query, self.depth.value)
            except (ValueError, FileNotFoundError) as exc:
                self.out.append_stdout(f"{exc}\n")  # shown where the view would be
                return
            from IPython.display import display

            display(x)
        self.unit.options = list(dict.fromkeys(h.unit_id for c in x.columns for h in c.hits))
        for b in self.grades:
            b.disabled = x.qid is None
        self.add.disabled = x.qid is not None
        self.status.value = ("" if x.qid else "free text: pick the unit that answers it and press Add as a question "
                             "(appended to queries.jsonl; the next make report evaluates it)")

    def on_grade(self, grade: int) -> None:
        """Record ``grade`` for the picked unit (a conflict is shown, nothing overwritten); show the query again."""
        x, unit = self.state["x"], self.unit.value
        try:
            done = status_html(f"{self.ex.judge(x.qid, unit, grade)}: {x.qid} / {unit} = {grade} "
                               "(merged into the qrels by the next make report)")
        except ValueError as exc:  # JudgmentConflict included: shown, nothing overwritten
            done = status_html(exc, error=True)
        self.run(x.qid)
        self.status.value = done
        self.show_judging()

    def show_judging(self, n: int = 0) -> Any:
        """Refresh the comparisons' status from the saved runs and the judgments (``n`` > 0: with the next ``n``
        units and why each matters); the :class:`~rerankeval.apps.explore_queue.NextUnits`, or None on an error."""
        try:
            got = self.ex.next_to_judge(max(n, 1))
        except (ValueError, FileNotFoundError) as exc:
            self.judging.value = status_html(exc, error=True)
            return None
        why = [f"next: {r.qid} / {r.unit_id} \u2014 {r.why}" for r in got.units.head(n).itertuples()]
        self.judging.value = verdict_html([*got.lines(), *why, f"(status computed in {got.seconds:.2f} s)"])
        return got

    def on_next(self, _: Any) -> None:
        """Show the query of the unit the queue puts first and pick that unit for grading."""
        got = self.show_judging(1)
        if got is None or not len(got.units):
            return
        qid, unit = got.units.qid.iloc[0], got.units.unit_id.iloc[0]
        self.run(qid)
        if unit in self.unit.options:
            self.unit.value = unit
        else:
            self.status.value = status_html(f"{unit} is below the shown depth k: raise k to see it", error=True)

    def on_add(self, _: Any) -> None:
        """Append the shown free text to queries.jsonl with the picked unit at the top grade."""
        x, unit = self.state["x"], self.unit.value
        try:
            self.status.value = status_html(self.add_question(self.dp, x.query, [unit]))
            self.add.disabled = True
        except ValueError as exc:
            self.status.value = status_html(exc, error=True)
