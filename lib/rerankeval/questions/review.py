"""Reviewing drafted questions: accept, edit or reject each one (the explorer's ``explore.review``).

A review changes the draft's line in ``queries.draft.jsonl`` (its ``metadata.status``; an edit keeps the drafted
text as ``metadata.original_text``), under an exclusive lock, so two reviewers recording at once lose nothing.
Accepted and unreviewed drafts are evaluated; a rejected one never is, and its unit is never asked about again.
Other units that also answer a draft are graded with ``explore.judge``, into the same judgments file as every
grade recorded while exploring. The next ``make report`` re-reads the questions (stage 01 keeps its chunks).

:func:`promote` moves the accepted (and edited) drafts into the human files: ``queries.jsonl`` (appended, ids kept,
``metadata.source = "drafted, reviewed"``) and ``qrels/<split>.tsv`` (the draft's qrels lines, a grade recorded
while exploring winning over the drafted one), and marks them ``metadata.promoted`` in ``queries.draft.jsonl``.
Human questions win over drafts (:func:`rerankeval.corpus.queryset.query_source`): once promoted, the dataset has
human questions and the drafts not reviewed yet are no longer evaluated.
"""

from __future__ import annotations

import datetime as _dt
import json

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import locked
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import beir, queryset
from rerankeval.corpus.contract import load_chunks

ACTIONS = ("accept", "edit", "reject")
PROMOTED_SOURCE = "drafted, reviewed"  # metadata.source of a promoted question in queries.jsonl


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


def _split(dp: DatasetPaths) -> str:
    """The qrels split stage 01 used (``stats.json``), ``test`` before 01 ran."""
    try:
        return str(json.loads(dp.corpus_stats.read_text(encoding="utf-8")).get("split") or "test")
    except (OSError, ValueError):
        return "test"


def _grades(dp: DatasetPaths, qids: set[str], split: str) -> dict[str, dict[str, int]]:
    """qid -> unit -> grade for ``qids``: the drafted qrels, then the grades recorded while exploring (they win)."""
    out: dict[str, dict[str, int]] = {}
    for path in (dp.source_draft_qrels, dp.judgments(split)):
        for j in beir.read_judgments(path) if path.is_file() else []:
            if j.qid in qids:
                out.setdefault(j.qid, {})[j.did] = j.grade
    return out


def promote(dp: DatasetPaths, split: str | None = None) -> str:
    """Move every accepted (or edited) draft not promoted yet into ``queries.jsonl`` and ``qrels/<split>.tsv``
    (appended: the lines already there never change), mark it promoted in ``queries.draft.jsonl``, and say what
    was done. Idempotent: a second call adds nothing. An id already used by a different human question raises
    :class:`rerankeval.corpus.queryset.IdClash` and writes nothing. After a promotion the dataset has human
    questions, which win over drafts: the drafts not reviewed yet stop being evaluated (the message says how many).
    """
    split = split or _split(dp)
    path = dp.source_draft_queries
    with locked(path):
        drafts = queryset.read_drafts(path)
        todo = [d for d in drafts if d.status == queryset.ACCEPTED and not d.metadata.get("promoted")]
        human = beir.read_queries(dp.source_queries) if dp.source_queries.is_file() else {}
        done = [d for d in todo if human.get(d.qid, {}).get("text") == d.text]  # appended before a crash
        new = [d for d in todo if d not in done]
        grades = _grades(dp, {d.qid for d in new}, split)
        rows = [{"_id": d.qid, "text": d.text, "metadata": {**{k: v for k, v in d.metadata.items() if k != "status"},
                                                            "source": PROMOTED_SOURCE}} for d in new]
        if rows:
            queryset.append_human(dp, rows, grades, split)
        when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        for d in todo:
            d.metadata.update(promoted=True, promoted_at=when)
        if todo:
            queryset.write_drafts(path, drafts)
    pending = sum(d.status == queryset.DRAFT for d in drafts)
    if not new:
        return f"nothing to promote: no accepted draft in {path.name} that is not in queries.jsonl already"
    n_grades = sum(len(g) for g in grades.values())
    return (f"promoted {len(new)} question(s) ({', '.join(d.qid for d in new)}) to {dp.source_queries} and "
            f"{n_grades} grade(s) to {dp.source_qrels(split)}. The dataset now has human questions, which win over "
            f"drafts: the next make report evaluates queries.jsonl only, and the {pending} draft(s) not reviewed "
            "yet are no longer evaluated (review and promote them to include them).")
