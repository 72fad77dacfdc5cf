"""Reviewing drafted questions: accept, edit or reject each one (the explorer's ``explore.review``).

A review changes the draft's line in ``queries.draft.jsonl`` (its ``metadata.status``; an edit keeps the drafted
text as ``metadata.original_text``), under an exclusive lock, so two reviewers recording at once lose nothing.
Accepted and unreviewed drafts are evaluated; a rejected one never is, and its unit is never asked about again.
Other units that also answer a draft are graded with ``explore.judge``, into the same judgments file as every
grade recorded while exploring. The next ``make report`` re-reads the questions (stage 01 keeps its chunks).
"""

from __future__ import annotations

import datetime as _dt

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import locked
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import queryset
from rerankeval.corpus.contract import load_chunks

ACTIONS = ("accept", "edit", "reject")


class DraftGone(ReRankEvalError, KeyError):
    """The draft under review is no longer in ``queries.draft.jsonl`` (removed or renamed since it was shown)."""


def review(dp: DatasetPaths, qid: str, action: str, text: str | None = None) -> queryset.Draft:
    """Accept, edit (``text``: the question as it should read; it is then accepted) or reject draft ``qid``."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    new_text = " ".join(str(text or "").split())
    if action == "edit" and not new_text:
        raise ValueError("edit needs the question's new text: review(dp, qid, 'edit', text='...')")
    path = dp.source_draft_queries
    with locked(path):
        drafts = queryset.read_drafts(path)
        found = next((d for d in drafts if d.qid == qid), None)
        if found is None:
            raise DraftGone(f"draft {qid!r} is not in {path} (removed since it was shown?); list what is left with "
                            "explore.drafts(dp)")
        meta = found.metadata
        if action == "edit" and new_text != found.text:
            meta.setdefault("original_text", found.text)
            found.text = new_text
        meta["status"] = queryset.REJECTED if action == "reject" else queryset.ACCEPTED
        meta["reviewed_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        queryset.write_drafts(path, drafts)
    return found


def table(dp: DatasetPaths) -> pd.DataFrame:
    """Every draft: id, question, status, the unit it came from and the span that answers it."""
    rows = [{"id": d.qid, "question": d.text, "status": d.status, "unit": d.unit,
             "quote": d.metadata.get("quote", "")} for d in queryset.read_drafts(dp.source_draft_queries)]
    return pd.DataFrame(rows, columns=["id", "question", "status", "unit", "quote"])


def progress(dp: DatasetPaths, judged: int | None = None) -> str:
    """``reviewed 12 of 40 drafts (10 accepted, 2 rejected); 85 units judged while exploring``."""
    s = queryset.describe(queryset.read_drafts(dp.source_draft_queries))
    done = s["accepted"] + s["rejected"]
    tail = "" if judged is None else f"; {judged} units judged while exploring"
    return f"reviewed {done} of {s['drafts']} drafts ({s['accepted']} accepted, {s['rejected']} rejected){tail}"


def next_pending(dp: DatasetPaths) -> str | None:
    """The first draft not reviewed yet, or None."""
    return next((d.qid for d in queryset.read_drafts(dp.source_draft_queries) if d.status == queryset.DRAFT), None)


def source_passage(dp: DatasetPaths, qid: str) -> tuple[str, str]:
    """(unit id, its text) of the unit draft ``qid`` was written from."""
    from rerankeval.questions.units import unit_texts

    d = next((d for d in queryset.read_drafts(dp.source_draft_queries) if d.qid == qid), None)
    if d is None:
        raise DraftGone(f"draft {qid!r} is not in {dp.source_draft_queries}; see explore.drafts(dp)")
    chunks = load_chunks(dp)
    return d.unit, unit_texts(chunks[chunks.unit_id == d.unit]).get(d.unit, "")
