"""The explorer widget's review row for drafted questions (issue 21): pick a draft (not reviewed ones first), see
the page it was written from beside every variant's top hits (the explorer's own view), then Accept, Edit (the
text box; saving accepts the new wording) or Reject it, grade other units that answer it with the explorer's grade
buttons, and promote the accepted drafts into ``queries.jsonl``. It calls the plain functions of
:mod:`rerankeval.questions.review`, so a decision goes through the same lock and files as ``explore.review``."""

from __future__ import annotations

from typing import Any

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import queryset
from rerankeval.evaluate import judgments
from rerankeval.questions import review
from rerankeval.report.fragments import status_html

ORDER = {queryset.DRAFT: 0, queryset.ACCEPTED: 1, queryset.REJECTED: 2}
NO_DRAFTS = "no drafted questions (make questions DATASET=...)"


class ReviewUI:
    """The review row of :class:`~rerankeval.apps.explore.ui.ExplorerUI` (``ui``): :attr:`box` is added to
    the explorer's box; its messages go to the explorer's status line."""

    def __init__(self, w: Any, ui: Any, dp: DatasetPaths) -> None:
        self.ui, self.dp = ui, dp
        self.pick = w.Dropdown(description="draft", options=[], layout=w.Layout(width="60%"))
        self.text = w.Text(
            description="edit", placeholder="the question as it should read", layout=w.Layout(width="60%")
        )
        self.buttons = {
            a: w.Button(description=d, tooltip=t, disabled=True)
            for a, d, t in (
                ("accept", "Accept", "the draft is a good question as it reads"),
                ("edit", "Save edit", "accept the question as written in the edit box (the drafted text is kept)"),
                ("reject", "Reject", "never evaluated, never proposed again"),
            )
        }
        self.promote = w.Button(
            description="Promote accepted", tooltip="move the accepted drafts into queries.jsonl and the human qrels"
        )
        self.source = w.Textarea(description="source", disabled=True, layout=w.Layout(width="90%", height="8em"))
        self.pick.observe(lambda ch: ch["new"] and self.show(ch["new"]), names="value")
        for action, b in self.buttons.items():
            b.on_click(lambda _, a=action: self.decide(a))
        self.promote.on_click(self.on_promote)
        self.box = w.VBox([w.HBox([self.pick, *self.buttons.values(), self.promote]), self.text, self.source])
        self.refresh()

    def refresh(self) -> None:
        """List the drafts again (not reviewed first, each with its status) and say the review progress."""
        drafts = sorted(queryset.read_drafts(self.dp.source_draft_queries), key=lambda d: ORDER.get(d.status, 3))
        keep = self.pick.value
        self.pick.options = [("(pick a draft)", "")] + [(f"[{d.status}] {d.qid}: {d.text[:70]}", d.qid) for d in drafts]
        self.pick.value = keep if keep in {d.qid for d in drafts} else ""
        self.box.layout.display = None if drafts else "none"
        self.say(self.progress() if drafts else NO_DRAFTS)

    def progress(self) -> str:
        judged = len(judgments.read_judgments(self.dp.judgments(judgments.split_of(self.dp))))
        return review.progress(self.dp, judged=judged)

    def say(self, text: object, error: bool = False) -> None:
        self.ui.status.value = status_html(text, error=error)

    def show(self, qid: str) -> None:
        """The draft's source page in the text area, its wording in the edit box, every variant's hits above."""
        try:
            unit, passage = review.source_passage(self.dp, qid)
        except review.DraftGone as exc:
            self.say(exc, error=True)
            self.refresh()
            return
        draft = next(d for d in queryset.read_drafts(self.dp.source_draft_queries) if d.qid == qid)
        self.source.value, self.text.value = f"{unit}: {passage}", draft.text
        for b in self.buttons.values():
            b.disabled = False
        self.ui.run(qid)  # the explorer's view; its grade buttons then grade units for this draft
        self.say(self.progress())

    def decide(self, action: str) -> None:
        """Record accept / edit / reject for the picked draft (a draft removed meanwhile is said, nothing lost)."""
        qid = self.pick.value
        try:
            d = review.review(self.dp, qid, action, self.text.value if action == "edit" else None)
        except (ReRankEvalError, ValueError) as exc:  # gone, a duplicate, a folder that cannot be locked
            self.say(exc, error=True)
            return
        self.refresh()
        self.say(f"{qid}: {d.status} ({d.text!r}); {self.progress()}")

    def on_promote(self, _: Any) -> None:
        """Move the accepted drafts into the human files and show what was written."""
        try:
            said = review.promote(self.dp, judgments.split_of(self.dp))
        except (ReRankEvalError, ValueError) as exc:  # an id clash, a folder that cannot be locked: nothing written
            self.say(exc, error=True)
            return
        self.refresh()
        self.say(said)
