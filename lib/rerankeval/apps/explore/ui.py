"""The explorer's ipywidgets UI: a text box and a dropdown of queries, one status line (what it is doing: "loading
the encoder…", "searching vector (2 of 6 variants)…", then what happened or went wrong), and the side-by-side
view with grade buttons under each hit (0 to the top grade of the dataset's scale; ``?`` marks a unit nobody
judged), or "answers it" under each hit of free text. Part of :mod:`rerankeval.apps.explore` (call it as
``explore.widget``); it is handed the dataset's explorer rather than importing that module. With drafted questions
it adds the review row of :mod:`rerankeval.apps.explore.review_widget`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rerankeval.apps.explore.view import Exploration, Hit, widget_column_html, widget_head_html, widget_hit_html
from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import judgments
from rerankeval.report.fragments import status_html, verdict_html


def in_chain(settings: Settings) -> bool:
    """True inside a chain run (papermill; ``RERANKEVAL_STAGE``, ``Settings.stage``): no interactive UI there."""
    return bool(settings.stage)


def _markdown(text: str) -> Any:
    """``text`` as Markdown on the page (a plain string would show as a quoted Python repr)."""
    from IPython.display import Markdown

    return Markdown(text)


def widget(
    dp: DatasetPaths, k: int, open_explorer: Callable[[DatasetPaths], Any], add_question: Callable[..., str]
) -> Any:
    """The ipywidgets explorer over ``open_explorer(dp)`` (an :class:`~rerankeval.apps.explore.engine.Explorer`,
    whose settings say whether this is a chain run), adding free text as a question with ``add_question(dp, text,
    [unit])`` (``explore.add_question``); its :class:`ExplorerUI` is the box's ``ui`` attribute. Without ipywidgets
    (or inside a chain run) a Markdown message says how to call ``explore.show`` instead."""
    try:
        import ipywidgets as w
    except ImportError:
        return _markdown(
            "**ipywidgets is not installed**: call `explore.show(dp, query, k)` and "
            "`explore.judge(dp, qid, unit_id, grade)` instead, or `pip install -r requirements.txt` "
            "(it pins ipywidgets) for the interactive explorer."
        )
    ex = open_explorer(dp)
    if in_chain(ex.settings):
        return _markdown("Interactive explorer: open this notebook in JupyterLab (`make lab`).")
    ui = ExplorerUI(w, ex, dp, k, add_question)
    if dp.source_draft_queries.is_file():  # drafted questions: the review row (accept / edit / reject / promote)
        from rerankeval.apps.explore.review_widget import ReviewUI

        ui.review = ReviewUI(w, ui, dp)
        ui.box.children = (*ui.box.children[:-1], ui.review.box, ui.box.children[-1])
    ui.box.ui = ui
    return ui.box


@dataclass
class HitRow:
    """One hit in the widget's view: the hit, its HTML and the buttons under it (grades, or "answers it")."""

    hit: Hit
    html: Any
    buttons: list[Any]
    bar: Any  # the HBox of the buttons (a "Replace" button joins it after a conflict)
    box: Any


def _close(widgets: Iterable[Any]) -> None:
    """Close widgets and everything they hold (a redrawn view leaves no orphan widget in the kernel)."""
    for x in widgets:
        _close(getattr(x, "children", ()))
        x.close()


class ExplorerUI:
    """The widgets of :func:`widget` and what they do; :attr:`box` is what the notebook displays. A text box (Enter
    or the Search button), a query picker, the status line, the view (:attr:`rows`: unit -> its :class:`HitRow`
    in every column) and the comparisons' status with "Next to judge"."""

    def __init__(self, w: Any, ex: Any, dp: DatasetPaths, k: int, add_question: Callable[..., str]) -> None:
        self.w, self.ex, self.dp, self.add_question = w, ex, dp, add_question
        picks = [(f"{q}: {ex.table[q][:70]}", q) for q in dict.fromkeys(ex.examples(5) + list(ex.table))]
        self.text = w.Text(
            placeholder="type a question, or a query id, and press Enter",
            layout=w.Layout(width="60%"),
            continuous_update=False,
        )
        self.search = w.Button(description="Search", button_style="primary")
        self.pick = w.Dropdown(options=[("(pick a query)", "")] + picks, layout=w.Layout(width="60%"))
        self.depth = w.BoundedIntText(value=k, min=1, max=100, description="k")
        self.status = w.HTML()  # the one progress indicator and message line
        self.view = w.VBox()
        self.view.add_class("rre-x")  # the view's parts use the rules of .rre-x (explore_widget.html.j2)
        self.top = judgments.grade_scale(corpus.load_qrels(dp))  # the dataset's scale, 0 to its top grade
        # shared by every hit's widgets: a view of 6 variants x 10 hits creates a few hundred, each otherwise with
        # a layout and a style of its own (most of the time it takes to draw)
        from ipywidgets.widgets.widget_string import HTMLStyle

        self.looks = {
            "grade": w.Layout(width="2.6em"),
            "auto": w.Layout(width="auto"),
            "box": w.Layout(),
            "style": w.ButtonStyle(),
            "text": HTMLStyle(),
        }
        self.state: dict[str, Any] = {}
        self.rows: dict[str, list[HitRow]] = {}
        self.titles: list[tuple[Any, Any]] = []  # (column, its title's HTML widget)
        self.head: Any = None  # the view's head (HTML widget)
        self.review: Any = None  # the drafts' review row (review_widget.ReviewUI), when there are drafts
        self.text.observe(lambda ch: ch["new"].strip() and self.run(ch["new"]), names="value")
        self.search.on_click(lambda _: self.text.value.strip() and self.run(self.text.value))
        self.pick.observe(lambda ch: ch["new"] and self.run(ch["new"]), names="value")
        self.next = w.Button(
            description="Next to judge",
            tooltip="show the unjudged unit that moves an undecided "
            "comparison most (explore.next_to_judge), with why it matters",
        )
        self.judging = w.HTML()  # the comparisons' status, refreshed after each grade
        self.next.on_click(self.on_next)
        self.box = w.VBox(
            [
                w.HBox([self.text, self.search, self.next]),
                w.HBox([self.pick, self.depth]),
                self.status,
                self.view,
                self.judging,
            ]
        )
        self.say(
            "type a question or a query id (Enter), or pick a query; then grade units with the buttons under "
            f"each hit (0-{self.top})"
        )

    def say(self, text: object, error: bool = False) -> None:
        """Put ``text`` on the status line (red when ``error``): progress, what was recorded, what went wrong."""
        self.status.value = status_html(text, error=error)

    def run(self, query: str) -> None:
        """Show ``query`` with a grade row under each hit (a query id) or "answers it" (free text); the status line
        says at once what is being done, then what a live search is doing, then how long it took."""
        self.say(f"searching {' '.join(str(query).split())[:80]}\u2026")
        try:
            x = self.ex.show(query, self.depth.value, say=self.say)
        except (ReRankEvalError, ValueError, FileNotFoundError) as exc:
            self.say(exc, error=True)
            return
        self.state["x"] = x
        self.draw(x)
        self.say(f"{x.qid or 'free text'}: top {x.k} of {len(x.columns)} variants in {x.seconds:.2f} s")

    def draw(self, x: Exploration) -> None:
        """Replace the view by ``x``'s columns, each hit with its buttons (the old widgets are closed)."""
        w, old = self.w, self.view.children
        self.rows, self.titles = {}, []
        cols = []
        for c in x.columns:
            self.titles.append((c, w.HTML(widget_column_html(c, x))))
            hits = [self._row(h, x).box for h in ([] if c.unavailable else c.hits)]
            cols.append(
                w.VBox(
                    [self.titles[-1][1], *hits],
                    layout=w.Layout(flex="1 1 300px", min_width="280px", margin="0 12px 0 0"),
                )
            )
        self.head = w.HTML(widget_head_html(x, self.top))
        self.view.children = [self.head, w.HBox(cols, layout=w.Layout(flex_flow="row wrap"))]
        _close(old)

    def _row(self, h: Hit, x: Exploration) -> HitRow:
        w, look = self.w, self.looks
        if x.qid is None:
            buttons = [
                w.Button(
                    description="answers it",
                    layout=look["auto"],
                    style=look["style"],
                    tooltip=f"add this free text as a question with {h.unit_id} relevant "
                    f"(grade {self.top}) to queries.jsonl",
                )
            ]
            buttons[0].on_click(lambda _, u=h.unit_id: self.on_add(u))
        else:
            buttons = [
                w.Button(
                    description=str(g),
                    tooltip=f"grade {g} for {h.unit_id} (scale 0-{self.top})",
                    layout=look["grade"],
                    style=look["style"],
                )
                for g in range(self.top + 1)
            ]
            for g, b in enumerate(buttons):
                b.on_click(lambda _, u=h.unit_id, g=g: self.on_grade(u, g))
        bar = w.HBox(buttons, layout=look["box"])
        html = w.HTML(widget_hit_html(h, x), layout=look["box"], style=look["text"])
        row = HitRow(h, html, buttons, bar, w.VBox([html, bar], layout=look["box"]))
        self._mark(row)
        self.rows.setdefault(h.unit_id, []).append(row)
        return row

    @staticmethod
    def _mark(row: HitRow) -> None:
        """The button of the hit's current grade stands out (none for an unjudged hit)."""
        for g, b in enumerate(row.buttons):
            b.button_style = "success" if row.hit.grade == g and len(row.buttons) > 1 else ""

    def on_grade(self, unit: str, grade: int, replace: bool = False) -> None:
        """Record ``grade`` for ``unit`` of the shown query; a conflict with an earlier grade of the judgments file
        offers "Replace" beside that hit's buttons (one with the dataset's qrels is said, nothing overwritten)."""
        x = self.state["x"]
        try:
            said = self.ex.judge(x.qid, unit, grade, replace=replace)
        except judgments.JudgmentConflict as exc:
            self._conflict(x, unit, grade, exc)
            return
        except (ReRankEvalError, ValueError, FileNotFoundError) as exc:  # a lock, a unit gone, a grade off scale
            self.say(exc, error=True)
            return
        x.gold[unit] = grade
        for row in self.rows.get(unit, []):
            row.hit.grade = grade
            row.html.value = widget_hit_html(row.hit, x)
            row.bar.children = row.buttons
            self._mark(row)
        self.head.value = widget_head_html(x, self.top)
        for c, title in self.titles:
            title.value = widget_column_html(c, x)
        self.say(f"{said}: {x.qid} / {unit} = {grade} (merged into the qrels by the next make report)")
        self.show_judging()

    def _conflict(self, x: Exploration, unit: str, grade: int, exc: Exception) -> None:
        if unit in self.ex.original_qrels.get(x.qid, {}):  # the dataset's own qrels: the message says the fix
            self.say(exc, error=True)
            return
        old = self.ex.qrels.get(x.qid, {}).get(unit)
        replace = self.w.Button(
            description=f"Replace with {grade}",
            button_style="warning",
            tooltip=f"record {grade} instead of {old} for {unit}",
        )
        replace.on_click(lambda _: self.on_grade(unit, grade, replace=True))
        for row in self.rows.get(unit, []):
            row.bar.children = [*row.buttons, replace]
        self.say(
            f"{x.qid} / {unit} was already graded {old} in {self.dp.judgments(judgments.split_of(self.dp))}; "
            f"the new grade {grade} is not recorded. Press \u201cReplace with {grade}\u201d beside its grade "
            "buttons to record it instead.",
            error=True,
        )

    def show_judging(self, n: int = 0) -> Any:
        """Refresh the comparisons' status from the saved runs and the judgments (``n`` > 0: with the next ``n``
        units and why each matters); the :class:`~rerankeval.apps.explore.queue.NextUnits`, or None on an error."""
        try:
            got = self.ex.next_to_judge(max(n, 1))
        except (ReRankEvalError, ValueError, FileNotFoundError) as exc:
            self.judging.value = status_html(exc, error=True)
            return None
        why = [f"next: {r.qid} / {r.unit_id} \u2014 {r.why}" for r in got.units.head(n).itertuples()]
        self.judging.value = verdict_html([*got.lines(), *why, f"(status computed in {got.seconds:.2f} s)"])
        return got

    def on_next(self, _: Any) -> None:
        """Show the query of the unit the queue puts first and say where that unit is in the view."""
        self.say("finding the unit that moves an undecided comparison most\u2026")
        got = self.show_judging(1)
        if got is None or not len(got.units):
            self.say(
                "nothing to judge next: see the comparisons' status below"
                if got is not None
                else "the judging queue failed: see the message below",
                error=got is None,
            )
            return
        qid, unit = got.units.qid.iloc[0], got.units.unit_id.iloc[0]
        self.run(qid)
        where = [f"{c.variant} #{h.rank}" for c in self.state["x"].columns for h in c.hits if h.unit_id == unit]
        if where:
            self.say(f"next to judge: {qid} / {unit} ({', '.join(where)}): grade it with the buttons under it")
        else:
            self.say(f"next to judge: {qid} / {unit}, below the shown depth k: raise k to see it", error=True)

    def on_add(self, unit: str) -> None:
        """Append the shown free text to queries.jsonl with ``unit`` at the top grade."""
        x = self.state["x"]
        try:
            self.say(self.add_question(self.dp, x.query, [unit]))
        except (ReRankEvalError, ValueError, FileNotFoundError) as exc:  # a lock, an id clash, an unknown unit
            self.say(exc, error=True)
            return
        for row in (r for rows in self.rows.values() for r in rows):
            for b in row.buttons:
                b.disabled = True
