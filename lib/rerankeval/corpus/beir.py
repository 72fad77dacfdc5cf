"""Readers for the BEIR data contract (corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv).

Every reader checks its input and raises :class:`InputError` naming the file, the line and how to fix
it, instead of failing later with a KeyError deep in a stage.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from rerankeval.core.errors import ReRankEvalError

TEXT_FIELDS = ("text", "contents")  # BEIR's name, then Pyserini's (used only when "text" is absent)
HEADER_IDS = ("query-id", "query_id", "qid")


class InputError(ReRankEvalError, ValueError):
    """A user file is malformed; the message names the file and line and says how to fix it."""


class Judgment(NamedTuple):
    """One qrels line as written: query id, corpus id, integer grade and its line number."""

    qid: str
    did: str
    grade: int
    line: int


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The decoded lines of a text file (``.gz`` decompressed); a UTF-8 byte-order mark is ignored."""
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if lineno == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"{path}:{lineno}: not valid UTF-8 (byte {exc.start} of the line); "
                        f"re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                    ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(
            f"{path}: the compressed file is truncated or corrupt after line {lineno} "
            f"({type(exc).__name__}: {exc}); download or compress it again (`gzip -t {path.name}` checks it)"
        ) from None


def read_jsonl_checked(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno}); each line must be one "
                f'JSON object such as {{"_id": "q1", "text": "..."}}'
            ) from None
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        for key in required:
            if key not in obj or obj[key] is None or str(obj[key]).strip() == "":
                raise InputError(f"{path}:{lineno}: missing {key!r}; every line needs {', '.join(required)}")
        yield lineno, obj


def find_corpus(folder: Path) -> Path | None:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _doc_text(path: Path, lineno: int, obj: dict[str, Any]) -> str:
    for key in TEXT_FIELDS:
        if key in obj:
            return str(obj[key] or "")
    found = ", ".join(repr(k) for k in obj)
    raise InputError(
        f"{path}:{lineno}: no text field: the document has {found}; accepted are 'text' (BEIR) or 'contents' "
        f"(Pyserini), plus an optional 'title'. Rename the field holding the text, e.g. "
        f"jq -c '{{_id, title, text: .body}}' corpus.jsonl"
    )


def read_corpus(path: Path) -> dict[str, dict[str, str]]:
    """doc id -> {"title", "text"}; duplicate ids, a missing text field and an all-empty corpus are errors."""
    docs: dict[str, dict[str, str]] = {}
    for lineno, obj in read_jsonl_checked(path, ("_id",)):
        did = str(obj["_id"])
        if any(c.isspace() for c in did):
            raise InputError(f"{path}:{lineno}: document id {did!r} contains white space; ids must be one word")
        if did in docs:
            raise InputError(f"{path}:{lineno}: duplicate document id {did!r}; ids must be unique")
        docs[did] = {"title": str(obj.get("title") or ""), "text": _doc_text(path, lineno, obj)}
    if docs and not any(d["title"].strip() or d["text"].strip() for d in docs.values()):
        raise InputError(
            f"{path}: all {len(docs)} documents are empty (no title, no text); put each document's text in "
            f"its 'text' field"
        )
    return docs


def read_queries(path: Path) -> dict[str, dict[str, Any]]:
    """query id -> {"text", "slice"}; the slice tag comes from ``slice`` or ``metadata.slice`` if present."""
    if not path.is_file():
        raise InputError(f'{path} is missing: add a queries.jsonl with one {{"_id", "text"}} object per line')
    out: dict[str, dict[str, Any]] = {}
    for lineno, obj in read_jsonl_checked(path, ("_id", "text")):
        qid = str(obj["_id"])
        if any(c.isspace() for c in qid):
            raise InputError(f"{path}:{lineno}: query id {qid!r} contains white space; ids must be one word")
        if qid in out:
            raise InputError(f"{path}:{lineno}: duplicate query id {qid!r}; every query needs its own _id")
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        tag = obj.get("slice", meta.get("slice"))
        out[qid] = {"text": str(obj["text"]), "slice": None if tag is None else str(tag)}
    return out


def read_judgments(path: Path) -> list[Judgment]:
    """The lines of a BEIR qrels file ``query-id<TAB>corpus-id<TAB>score`` (optional header, integer grades).

    Empty trailing columns (a trailing tab) are ignored; see :func:`merge_judgments` for repeated pairs.
    """
    if not path.is_file():
        raise InputError(f"{path} is missing: add qrels/<split>.tsv with lines 'query-id<TAB>corpus-id<TAB>score'")
    out: list[Judgment] = []
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        parts = line.rstrip("\r\n").split("\t")
        while len(parts) > 3 and not parts[-1].strip():
            parts.pop()
        if lineno == 1 and parts[0].strip().lower() in HEADER_IDS:
            continue
        if len(parts) != 3:
            raise InputError(
                f"{path}:{lineno}: expected 3 tab-separated columns (query-id, corpus-id, score), "
                f"got {len(parts)}: {line.strip()[:80]!r}"
            )
        qid, did, grade = (p.strip() for p in parts)
        try:
            out.append(Judgment(qid, did, int(grade), lineno))
        except ValueError:
            raise InputError(
                f"{path}:{lineno}: relevance grade {grade!r} is not an integer; use 0, 1, 2, ..."
            ) from None
    return out


def merge_judgments(
    judgments: list[Judgment], path: Path, unit: Callable[[str], str] = str
) -> tuple[dict[str, dict[str, int]], list[dict[str, str]]]:
    """query id -> {unit id: grade}, plus warning rows (``kind, query-id, corpus-id, detail``).

    ``unit`` maps a corpus id to the unit it judges. The same pair judged twice with different grades is
    an error naming both lines; twice with the same grade, a warning. A negative grade (Cranfield's -1)
    is judged non-relevant, as trec_eval does: it is kept as grade 0, with a warning.
    """
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[tuple[str, str], Judgment] = {}
    warnings: list[dict[str, str]] = []
    negative: list[Judgment] = []
    for j in judgments:
        uid = unit(j.did)
        grade = max(j.grade, 0)
        if j.grade < 0:
            negative.append(j)
        first = seen.setdefault((j.qid, uid), j)
        if first is not j:
            _repeated(first, j, uid, path, warnings)
        qrels.setdefault(j.qid, {})[uid] = grade
    if negative:
        lines = ", ".join(str(j.line) for j in negative[:10]) + (" ..." if len(negative) > 10 else "")
        warnings.append(
            {
                "kind": "negative grades read as 0",
                "query-id": "",
                "corpus-id": "",
                "detail": f"{len(negative)} judgment(s) graded below 0 (lines {lines} of {path.name}) "
                f"are judged non-relevant (grade 0), as trec_eval treats every grade <= 0",
            }
        )
    return qrels, warnings


def _repeated(first: Judgment, again: Judgment, uid: str, path: Path, warnings: list[dict[str, str]]) -> None:
    if first.grade != again.grade:
        raise InputError(
            f"{path}:{first.line} and {path}:{again.line} judge query {first.qid!r} / {uid!r} differently "
            f"(grades {first.grade} and {again.grade}); keep one of the two lines"
        )
    warnings.append(
        {
            "kind": "judgment repeated",
            "query-id": first.qid,
            "corpus-id": uid,
            "detail": f"lines {first.line} and {again.line} of {path.name} give the same grade; kept once",
        }
    )


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {corpus id: grade} of a BEIR qrels file (see :func:`read_judgments`, :func:`merge_judgments`)."""
    return merge_judgments(read_judgments(path), path)[0]
