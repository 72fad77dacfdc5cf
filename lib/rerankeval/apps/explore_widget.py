"""The explorer's ipywidgets UI: a text box and a dropdown of queries, the side-by-side view, and a grade button
for a shown unit of a judged query. Part of :mod:`rerankeval.apps.explore` (call it as ``explore.widget``);
it is handed the dataset's explorer rather than importing that module."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import judgments
from rerankeval.report.htmlsafe import esc


def in_chain() -> bool:
    """True inside a chain run (papermill): no interactive UI is drawn there."""
    from rerankeval.core.progress import STAGE_ENV

    return bool(os.environ.get(STAGE_ENV, "").strip())


def widget(dp: DatasetPaths, k: int, open_explorer: Callable[[DatasetPaths], Any]) -> Any:
    """The ipywidgets explorer over ``open_explorer(dp)`` (an :class:`~rerankeval.apps.explore.Explorer`).
    Without ipywidgets (or inside a chain run) it says how to call ``explore.show`` instead."""
    try:
        import ipywidgets as w
    except ImportError:
        return ("ipywidgets is not installed: call explore.show(dp, query, k) and explore.judge(dp, qid, unit_id, "
                "grade) instead (or pip install ipywidgets for the interactive explorer).")
    if in_chain():
        return "Interactive explorer: open this notebook in JupyterLab (make lab)."
    return _ExplorerUI(w, open_explorer(dp), dp, k).box


class _ExplorerUI:
    """The widgets of :func:`widget` and what they do; :attr:`box` is what the notebook displays."""

    def __init__(self, w: Any, ex: Any, dp: DatasetPaths, k: int) -> None:
        self.ex = ex
        picks = [(f"{q}: {ex.table[q][:70]}", q) for q in dict.fromkeys(ex.examples(5) + list(ex.table))]
        text = w.Text(placeholder="type a question, or a query id, and press Enter", layout=w.Layout(width="60%"),
                      continuous_update=False)
        pick = w.Dropdown(options=[("(pick a query)", "")] + picks, layout=w.Layout(width="60%"))
        self.depth = w.BoundedIntText(value=k, min=1, max=100, description="k")
        self.out, self.status = w.Output(), w.HTML()
        scale = list(range(judgments.grade_scale(corpus.load_qrels(dp)) + 1))  # the dataset's grades, 0 to its top
        self.unit = w.Dropdown(description="unit", options=[])
        self.grade = w.Dropdown(description="grade", options=scale)
        self.record = w.Button(description="Record grade", disabled=True)
        self.state: dict[str, Any] = {}
        text.observe(lambda ch: ch["new"].strip() and self.run(ch["new"]), names="value")
        pick.observe(lambda ch: ch["new"] and self.run(ch["new"]), names="value")
        self.record.on_click(self.on_record)
        self.box = w.VBox([text, pick, self.depth, self.out, w.HBox([self.unit, self.grade, self.record]),
                           self.status])

    def run(self, query: str) -> None:
        """Show ``query``; offer its units for grading when it is a judged query."""
        self.out.clear_output()
        with self.out:
            try:
                x = self.state["x"] = self.ex.show(query, self.depth.value)
            except (ValueError, FileNotFoundError) as exc:
                print(exc)
                return
            from IPython.display import display

            display(x)
        self.unit.options = list(dict.fromkeys(h.unit_id for c in x.columns for h in c.hits))
        self.record.disabled = x.qid is None
        self.status.value = "" if x.qid else "free text: add the query to queries.jsonl to judge its units"

    def on_record(self, _: Any) -> None:
        """Record the chosen grade (a conflict is shown, nothing overwritten) and show the query again."""
        x, unit, grade = self.state["x"], self.unit.value, self.grade.value
        try:
            done = esc(f"{self.ex.judge(x.qid, unit, int(grade))}: {x.qid} / {unit} = {grade} "
                       "(merged into the qrels by the next make report)")
        except ValueError as exc:  # JudgmentConflict included: shown, nothing overwritten
            done = f'<span style="color:#a33">{esc(exc)}</span>'
        self.run(x.qid)
        self.status.value = done
