"""Which questions stage 01 evaluates with, and the file of drafted questions.

A dataset folder holds the user's questions (``queries.jsonl`` + ``qrels/<split>.tsv``: **human**), or only the
questions the questions stage drafted from the corpus (``queries.draft.jsonl`` + ``qrels/draft.tsv``:
**generated**, see :mod:`rerankeval.questions.draft`), or no questions yet (**none**: the chain drafts them
after stage 01). Human questions always win: drafts never mix into a human set silently.

``queries.draft.jsonl`` has one ``{"_id", "text", "metadata"}`` object per line; ``metadata.status`` is
``draft`` (not reviewed), ``accepted`` or ``rejected`` (kept so that it is never proposed again, never
evaluated).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_jsonl, dataset_lock
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import beir
from rerankeval.corpus.beir import InputError

HUMAN, GENERATED, NONE = "human", "generated", "none"
DRAFT, ACCEPTED, REJECTED = "draft", "accepted", "rejected"
STATUSES = (DRAFT, ACCEPTED, REJECTED)


@dataclass(frozen=True)
class QuerySource:
    """Where the evaluated questions come from: ``kind`` and its two files (None for :data:`NONE`)."""

    kind: str
    queries: Path | None = None
    qrels: Path | None = None

    def files(self) -> list[Path]:
        return [p for p in (self.queries, self.qrels) if p is not None]


def query_source(dp: DatasetPaths, split: str = "test") -> QuerySource:
    """Human questions when the user has any (both files then required), else the drafts, else none."""
    if dp.source_queries.exists() or dp.source_qrels(split).exists():
        return QuerySource(HUMAN, dp.source_queries, dp.source_qrels(split))
    if dp.source_draft_queries.is_file():
        return QuerySource(GENERATED, dp.source_draft_queries, dp.source_draft_qrels)
    return QuerySource(NONE)


@dataclass
class Draft:
    """One drafted question as stored in ``queries.draft.jsonl``."""

    qid: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return str(self.metadata.get("status") or DRAFT)

    @property
    def unit(self) -> str:
        return str(self.metadata.get("source_unit") or "")

    @property
    def unit_sha256(self) -> str:
        """The sha256 of the source unit's text its grade rests on: recorded by the last review decision
        (``reviewed_sha256``), else at drafting (``unit_sha256``); "" for a draft from before hashes were kept."""
        return str(self.metadata.get("reviewed_sha256") or self.metadata.get("unit_sha256") or "")

    def to_json(self) -> dict[str, Any]:
        return {"_id": self.qid, "text": self.text, "metadata": self.metadata}


def read_drafts(path: Path) -> list[Draft]:
    """The drafts of ``path`` in file order ([] when it does not exist); a broken line is an :class:`InputError`
    naming the file, the line and the fix."""
    if not path.is_file():
        return []
    out: list[Draft] = []
    seen: set[str] = set()
    for lineno, obj in beir.read_jsonl_checked(path, ("_id", "text")):
        qid, meta = str(obj["_id"]), obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise InputError(
                f"{path}:{lineno}: 'metadata' must be a JSON object; fix the line or delete it (a "
                "re-run of `make questions` drafts a question for its unit again)"
            )
        if qid in seen or any(c.isspace() for c in qid):
            raise InputError(
                f"{path}:{lineno}: query id {qid!r} is repeated or contains white space; give the "
                "line a unique one-word _id, or delete it"
            )
        meta = dict(meta or {})
        if str(meta.get("status") or DRAFT) not in STATUSES:
            raise InputError(f"{path}:{lineno}: status {meta.get('status')!r} is not one of {', '.join(STATUSES)}")
        seen.add(qid)
        out.append(Draft(qid, str(obj["text"]), meta))
    return out


def write_drafts(path: Path, drafts: Iterable[Draft]) -> None:
    """All drafts, atomically (a reader never sees half a file). A read-modify-write of the file holds the
    dataset folder's lock (:func:`rerankeval.core.ioutil.dataset_lock`) around its read and this write."""
    atomic_write_jsonl(path, [d.to_json() for d in drafts])


def draft_queries(path: Path) -> dict[str, dict[str, Any]]:
    """The evaluated drafts (every status but ``rejected``) as :func:`rerankeval.corpus.beir.read_queries` gives
    queries: ``qid -> {"text", "slice"}``."""
    return {d.qid: {"text": d.text, "slice": None} for d in read_drafts(path) if d.status != REJECTED}


def read_source_queries(src: QuerySource) -> dict[str, dict[str, Any]]:
    """The questions of ``src`` (none for :data:`NONE`)."""
    if src.kind == HUMAN and src.queries is not None:
        return beir.read_queries(src.queries)
    if src.kind == GENERATED and src.queries is not None:
        return draft_queries(src.queries)
    return {}


def describe(drafts: list[Draft]) -> dict[str, Any]:
    """Counts by review status and the models that drafted them (what the report's banner says)."""
    by = {s: sum(1 for d in drafts if d.status == s) for s in STATUSES}
    models = sorted({str(d.metadata.get("model")) for d in drafts if d.metadata.get("model")})
    return {"drafts": len(drafts), **by, "models": models}


def validate_judgments(
    queries: dict[str, dict[str, Any]],
    raw_qrels: dict[str, dict[str, int]],
    units: set[str],
    no_text: dict[str, str] | None = None,
):
    """The judgments of known queries and units, the evaluated query rows, and warning rows. ``no_text``
    (page id -> why it has no text) names the judged pages no variant can retrieve: kept, with a warning."""
    no_text = no_text or {}
    warnings: list[dict[str, str]] = []
    qrels: dict[str, dict[str, int]] = {}
    for qid, rels in sorted(raw_qrels.items()):
        if qid not in queries:
            warnings.append(
                {
                    "kind": "qrels query not in queries.jsonl",
                    "query-id": qid,
                    "corpus-id": "",
                    "detail": f"{len(rels)} judgment(s) dropped",
                }
            )
            continue
        for uid, grade in sorted(rels.items()):
            if uid not in units:
                warnings.append(
                    {
                        "kind": "qrels names an unknown unit",
                        "query-id": qid,
                        "corpus-id": uid,
                        "detail": "dropped: no such page/document in the corpus (skipped file or typo?)",
                    }
                )
                continue
            if uid in no_text:
                warnings.append(
                    {
                        "kind": "qrels names a page without text",
                        "query-id": qid,
                        "corpus-id": uid,
                        "detail": f"kept (grade {grade}), but no variant can retrieve it: {no_text[uid]}",
                    }
                )
            qrels.setdefault(qid, {})[uid] = grade
    unjudged = sorted(set(queries) - set(qrels))
    if unjudged:
        shown = ", ".join(unjudged[:10]) + (" ..." if len(unjudged) > 10 else "")
        warnings.append(
            {
                "kind": "queries without judgments",
                "query-id": shown,
                "corpus-id": "",
                "detail": f"{len(unjudged)} query(ies) not evaluated (no qrels in this split)",
            }
        )
    for qid, rels in sorted(qrels.items()):
        if not any(g > 0 for g in rels.values()):
            warnings.append(
                {
                    "kind": "query with no relevant unit",
                    "query-id": qid,
                    "corpus-id": "",
                    "detail": "every judgment has grade 0: metrics are 0 for this query",
                }
            )
    query_rows = []
    for qid in sorted(qrels):
        n_rel = sum(1 for g in qrels[qid].values() if g > 0)
        slices = {"answers": "multi" if n_rel > 1 else "single"}
        if queries[qid]["slice"]:
            slices["type"] = queries[qid]["slice"]
        query_rows.append({"_id": qid, "text": queries[qid]["text"], "slices": slices})
    return qrels, query_rows, warnings


# --------------------------------------------------------------------------- appending to the human files
_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)$")
DEFAULT_PREFIX = "q-"


class IdClash(ReRankEvalError, ValueError):
    """A question id to append is already used by the human files (queries.jsonl or the qrels)."""


def draft_ids(dp: DatasetPaths) -> set[str]:
    """The ids of ``queries.draft.jsonl`` (a new human question never takes one: its promotion would clash)."""
    return {d.qid for d in read_drafts(dp.source_draft_queries)}


def next_id(existing: Iterable[str], avoid: Iterable[str] = ()) -> str:
    """The next id in the style of ``existing``: ``dm-061`` after ``dm-001`` .. ``dm-060`` (the most common
    prefix, its widest number plus one, zero-padded as wide); ``q-001`` when no id is numbered. An id of
    ``existing`` or ``avoid`` (e.g. the drafts' ids) is skipped: the number goes on up to a free one."""
    existing = list(existing)
    taken = set(existing) | set(avoid)
    found = [m for m in map(_NUMBERED.match, existing) if m]
    prefix, width, num = DEFAULT_PREFIX, 3, 1
    if found:
        prefix = Counter(m["prefix"] for m in found).most_common(1)[0][0]
        mine = [m for m in found if m["prefix"] == prefix]
        width, num = max(len(m["num"]) for m in mine), max(int(m["num"]) for m in mine) + 1
    while f"{prefix}{num:0{width}d}" in taken:
        num += 1
    return f"{prefix}{num:0{width}d}"


def human_ids(dp: DatasetPaths, split: str = "test") -> set[str]:
    """Every query id the human files use: queries.jsonl's and those the qrels of ``split`` name."""
    ids = set(beir.read_queries(dp.source_queries)) if dp.source_queries.is_file() else set()
    qrels = dp.source_qrels(split)
    return ids | ({j.qid for j in beir.read_judgments(qrels)} if qrels.is_file() else set())


def _append(path: Path, lines: list[str], header: str = "") -> None:
    """Append ``lines`` to ``path`` (created with ``header``), never rewriting a byte already there; a last line
    without its newline gets one first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_bytes() if path.is_file() else b""
    lead = header if not old else ("" if old.endswith(b"\n") else "\n")
    with path.open("a", encoding="utf-8") as fh:
        fh.write(lead + "".join(line + "\n" for line in lines))


def append_human(
    dp: DatasetPaths, questions: list[dict[str, Any]], grades: Mapping[str, Mapping[str, int]], split: str = "test"
) -> list[str]:
    """Append ``questions`` (``{"_id", "text", "metadata"}``) to the dataset's ``queries.jsonl`` and their
    ``grades`` (qid -> unit -> grade) to ``qrels/<split>.tsv``, under one lock; the lines already there are never
    rewritten. An ``_id`` of None gets the next free id (:func:`next_id`, never a draft's id either), chosen under
    the lock, and its grades are ``grades[None]``. Raises :class:`IdClash` (nothing written) when an id is already
    used by either file. The lock is the dataset folder's (:func:`rerankeval.core.ioutil.dataset_lock`). The ids."""
    with dataset_lock(dp.source):
        used = human_ids(dp, split)
        clash = sorted({str(q["_id"]) for q in questions if q["_id"] is not None} & used)
        if clash:
            raise IdClash(
                f"question id(s) {', '.join(clash)} already in {dp.source_queries} or "
                f"{dp.source_qrels(split)}; nothing was written. Fix: rename the draft(s) in "
                f"{dp.source_draft_queries} (the _id and its qrels/draft.tsv lines), or remove the "
                "human question that uses the id"
            )
        lines, rows, ids = [], [], []
        for q in questions:
            qid = str(q["_id"]) if q["_id"] is not None else next_id(used | set(ids), avoid=draft_ids(dp))
            lines.append(json.dumps({**q, "_id": qid}, ensure_ascii=False))
            rows += [f"{qid}\t{u}\t{int(g)}" for u, g in grades.get(q["_id"], {}).items()]
            ids.append(qid)
        _append(dp.source_queries, lines)
        _append(dp.source_qrels(split), rows, header="query-id\tcorpus-id\tscore\n")
    return ids
