"""Reviewing drafted questions: accept, edit or reject each one (the explorer's ``explore.review``).

A review changes the draft's line in ``queries.draft.jsonl`` (its ``metadata.status``; an edit keeps the drafted
text as ``metadata.original_text``, and the sha256 of the source page's text it was made on as
``metadata.reviewed_sha256``) under the dataset folder's one lock (:func:`rerankeval.core.ioutil.dataset_lock`, the
lock drafting, judging and promoting take too), so two writers at once lose nothing. An accepted or edited wording
that repeats a human question or another accepted draft is refused (:class:`DuplicateQuestion`).
Accepted and unreviewed drafts are evaluated; a rejected one never is, and its unit is never asked about again.
Other units that also answer a draft are graded with ``explore.judge``, into the same judgments file as every
grade recorded while exploring. The next ``make report`` re-reads the questions (stage 01 keeps its chunks).

:func:`promote` moves the accepted (and edited) drafts into the human files: ``queries.jsonl`` (appended, ids kept,
``metadata.source = "drafted, reviewed"``) and ``qrels/<split>.tsv`` (the draft's qrels lines, a grade recorded
while exploring winning over the drafted one; a grade whose page changed since it was made is left out), and
marks them ``metadata.promoted`` in ``queries.draft.jsonl``. A draft left without a relevant grade, or repeating a
human question or another draft, is held back with the reason.
Human questions win over drafts (:func:`rerankeval.corpus.queryset.query_source`): once promoted, the dataset has
human questions and the drafts not reviewed yet are no longer evaluated.
"""

from __future__ import annotations

import datetime as _dt
import json
import re

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import dataset_lock
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import beir, queryset
from rerankeval.corpus.contract import load_chunks
from rerankeval.corpus.textnorm import norm_text
from rerankeval.corpus.unithash import is_stale, read_grade_lines, unit_hashes, unit_texts

ACTIONS = ("accept", "edit", "reject")
PROMOTED_SOURCE = "drafted, reviewed"  # metadata.source of a promoted question in queries.jsonl


class DraftGone(ReRankEvalError, KeyError):
    """The draft under review is no longer in ``queries.draft.jsonl`` (removed or renamed since it was shown)."""


class DuplicateQuestion(ReRankEvalError, ValueError):
    """An accepted or edited draft would repeat a human question or another accepted draft."""


def _key(text: str) -> str:
    """A question as compared for duplicates: its words in order, case, accents' forms and punctuation aside."""
    return " ".join(re.findall(r"\w+", norm_text(text)))


def _duplicate_of(dp: DatasetPaths, drafts: list[queryset.Draft], me: queryset.Draft, text: str) -> str:
    """Where ``text`` (draft ``me``'s wording) is already a question: a human one, or another accepted draft."""
    key = _key(text)
    human = beir.read_queries(dp.source_queries) if dp.source_queries.is_file() else {}
    same = [q for q, v in human.items() if q != me.qid and _key(v["text"]) == key]
    if same:
        return f"human question {same[0]} of {dp.source_queries.name}"
    same = [d.qid for d in drafts if d.qid != me.qid and d.status == queryset.ACCEPTED and _key(d.text) == key]
    return f"accepted draft {same[0]}" if same else ""


def _hashes(dp: DatasetPaths, units: set[str]) -> dict[str, str]:
    """unit -> the sha256 of its text in stage 01's chunks now, for ``units`` ({} before 01 ran; nothing read when
    ``units`` is empty)."""
    try:
        return unit_hashes(load_chunks(dp), only=units) if units else {}
    except ReRankEvalError:
        return {}


def review(dp: DatasetPaths, qid: str, action: str, text: str | None = None) -> queryset.Draft:
    """Accept, edit (``text``: the question as it should read; it is then accepted) or reject draft ``qid``. The
    decision records the sha256 of the source page's text it was made on (``metadata.reviewed_sha256``). An
    accepted or edited wording that repeats a human question or another accepted draft raises
    :class:`DuplicateQuestion` (nothing written)."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    new_text = " ".join(str(text or "").split())
    if action == "edit" and not new_text:
        raise ValueError("edit needs the question's new text: review(dp, qid, 'edit', text='...')")
    path = dp.source_draft_queries
    with dataset_lock(dp.source):
        drafts = queryset.read_drafts(path)
        found = next((d for d in drafts if d.qid == qid), None)
        if found is None:
            raise DraftGone(
                f"draft {qid!r} is not in {path} (removed since it was shown?); list what is left with "
                "explore.drafts(dp)"
            )
        wording = new_text if action == "edit" else found.text
        dup = _duplicate_of(dp, drafts, found, wording) if action != "reject" else ""
        if dup:
            raise DuplicateQuestion(
                f"draft {qid} would read {wording!r}, the same question as {dup}: nothing was "
                "recorded. Edit it into a different question, or reject it"
            )
        meta = found.metadata
        if action == "edit" and new_text != found.text:
            meta.setdefault("original_text", found.text)
            found.text = new_text
        meta["status"] = queryset.REJECTED if action == "reject" else queryset.ACCEPTED
        meta["reviewed_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        meta["reviewed_sha256"] = _hashes(dp, {found.unit}).get(found.unit) or meta.get("reviewed_sha256") or ""
        queryset.write_drafts(path, drafts)
    return found


def table(dp: DatasetPaths) -> pd.DataFrame:
    """Every draft: id, question, status, the unit it came from and the span that answers it."""
    rows = [
        {"id": d.qid, "question": d.text, "status": d.status, "unit": d.unit, "quote": d.metadata.get("quote", "")}
        for d in queryset.read_drafts(dp.source_draft_queries)
    ]
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


def _grades(
    dp: DatasetPaths, drafts: list[queryset.Draft], split: str
) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """qid -> unit -> grade for ``drafts``: the drafted qrels, then the grades recorded while exploring (they
    win); and unit -> how many were set aside because the unit's text changed since they were made."""
    mine = {d.qid: d for d in drafts}
    rows = [
        (j.qid, j.did, j.grade, mine[j.qid].unit_sha256 if j.did == mine[j.qid].unit else "")
        for j in (beir.read_judgments(dp.source_draft_qrels) if dp.source_draft_qrels.is_file() else [])
        if j.qid in mine
    ]
    rows += [(q, u, g, h) for q, u, g, _, h in read_grade_lines(dp.judgments(split)) if q in mine]
    now = _hashes(dp, {u for _, u, _, h in rows if h})
    out: dict[str, dict[str, int]] = {}
    stale: dict[str, int] = {}
    for q, u, g, h in rows:
        if is_stale(h, now.get(u)):
            stale[u] = stale.get(u, 0) + 1
            continue
        out.setdefault(q, {})[u] = g
    return out, stale


def _held_back(dp: DatasetPaths, new: list[queryset.Draft], grades: dict[str, dict[str, int]]) -> dict[str, str]:
    """qid -> why an accepted draft is not promoted: no relevant grade left (its qrels lines deleted, or set aside
    as stale), or the same question as a human one or another draft promoted with it."""
    why: dict[str, str] = {}
    seen: dict[str, str] = {}
    for d in new:
        if not any(g > 0 for g in grades.get(d.qid, {}).values()):
            why[d.qid] = (
                f"no relevant grade (its lines in {dp.source_draft_qrels} were deleted, or its page "
                f"changed since it was drafted): restore its line there (query id, source unit "
                f"{d.unit}, grade) if the page still answers it, or grade a unit that does with "
                f"explore.judge(dp, '{d.qid}', unit_id, grade), then promote again"
            )
            continue
        dup = _duplicate_of(dp, [], d, d.text) or (f"draft {seen[_key(d.text)]}" if _key(d.text) in seen else "")
        if dup:
            why[d.qid] = f"the same question as {dup}: edit it into a different question, or reject it"
            continue
        seen[_key(d.text)] = d.qid
    return why


def promote(dp: DatasetPaths, split: str | None = None) -> str:
    """Move every accepted (or edited) draft not promoted yet into ``queries.jsonl`` and ``qrels/<split>.tsv``
    (appended: the lines already there never change), mark it promoted in ``queries.draft.jsonl``, and say what
    was done. Idempotent: a second call adds nothing. An id already used by a different human question raises
    :class:`rerankeval.corpus.queryset.IdClash` and writes nothing. A grade whose page changed since it was made is
    left out; a draft left with no relevant grade, or repeating a human question or another draft, is held back
    (still accepted, not promoted) and the message says why. After a promotion the dataset has human questions,
    which win over drafts: the drafts not reviewed yet stop being evaluated (the message says how many).
    """
    split = split or _split(dp)
    path = dp.source_draft_queries
    with dataset_lock(dp.source):
        drafts = queryset.read_drafts(path)
        todo = [d for d in drafts if d.status == queryset.ACCEPTED and not d.metadata.get("promoted")]
        human = beir.read_queries(dp.source_queries) if dp.source_queries.is_file() else {}
        done = [d for d in todo if human.get(d.qid, {}).get("text") == d.text]  # appended before a crash
        grades, stale = _grades(dp, [d for d in todo if d not in done], split)
        held = _held_back(dp, [d for d in todo if d not in done], grades)
        new = [d for d in todo if d not in done and d.qid not in held]
        rows = [
            {
                "_id": d.qid,
                "text": d.text,
                "metadata": {**{k: v for k, v in d.metadata.items() if k != "status"}, "source": PROMOTED_SOURCE},
            }
            for d in new
        ]
        if rows:
            queryset.append_human(dp, rows, {d.qid: grades.get(d.qid, {}) for d in new}, split)
        when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        for d in done + new:
            d.metadata.update(promoted=True, promoted_at=when)
        if done or new:
            queryset.write_drafts(path, drafts)
    return _promoted(dp, split, new, grades, held, stale, sum(d.status == queryset.DRAFT for d in drafts))


def _promoted(
    dp: DatasetPaths,
    split: str,
    new: list[queryset.Draft],
    grades: dict[str, dict[str, int]],
    held: dict[str, str],
    stale: dict[str, int],
    pending: int,
) -> str:
    """What :func:`promote` did, in sentences."""
    notes = "".join(f" Not promoted: {q}: {why}." for q, why in held.items())
    notes += "".join(
        f" {n} grade(s) of {u} left out: the page's text changed since they were made (grade it again "
        "with explore.judge)."
        for u, n in sorted(stale.items())
    )
    if not new:
        return (
            f"nothing to promote: no accepted draft in {dp.source_draft_queries.name} that is not in "
            f"queries.jsonl already.{notes}"
        )
    n_grades = sum(len(grades.get(d.qid, {})) for d in new)
    return (
        f"promoted {len(new)} question(s) ({', '.join(d.qid for d in new)}) to {dp.source_queries} and "
        f"{n_grades} grade(s) to {dp.source_qrels(split)}. The dataset now has human questions, which win over "
        f"drafts: the next make report evaluates queries.jsonl only, and the {pending} draft(s) not reviewed "
        f"yet are no longer evaluated (review and promote them to include them).{notes}"
    )
