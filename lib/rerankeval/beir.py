"""Readers for the BEIR data contract (corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv).

Every reader checks its input and raises :class:`InputError` naming the file, the line and how to fix
it, instead of failing later with a KeyError deep in a stage.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """A user file is malformed; the message names the file and line and says how to fix it."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path}:{lineno}: not valid UTF-8 (byte {exc.start} of the line); "
                    f"re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
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


def read_corpus(path: Path) -> dict[str, dict[str, str]]:
    """doc id -> {"title", "text"}; duplicate ids are an error."""
    docs: dict[str, dict[str, str]] = {}
    for lineno, obj in read_jsonl_checked(path, ("_id",)):
        did = str(obj["_id"])
        if any(c.isspace() for c in did):
            raise InputError(f"{path}:{lineno}: document id {did!r} contains white space; ids must be one word")
        if did in docs:
            raise InputError(f"{path}:{lineno}: duplicate document id {did!r}; ids must be unique")
        docs[did] = {"title": str(obj.get("title") or ""), "text": str(obj.get("text") or "")}
    return docs


def read_queries(path: Path) -> dict[str, dict[str, Any]]:
    """query id -> {"text", "slice"}; the slice tag comes from ``slice`` or ``metadata.slice`` if present."""
    if not path.is_file():
        raise InputError(f"{path} is missing: add a queries.jsonl with one {{\"_id\", \"text\"}} object per line")
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


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels: ``query-id<TAB>corpus-id<TAB>score`` with an optional header; integer grades."""
    if not path.is_file():
        raise InputError(
            f"{path} is missing: add qrels/<split>.tsv with lines 'query-id<TAB>corpus-id<TAB>score'"
        )
    out: dict[str, dict[str, int]] = {}
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        parts = line.rstrip("\r\n").split("\t")
        if lineno == 1 and parts[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue
        if len(parts) != 3:
            raise InputError(
                f"{path}:{lineno}: expected 3 tab-separated columns (query-id, corpus-id, score), "
                f"got {len(parts)}: {line.strip()[:80]!r}"
            )
        qid, did, grade = (p.strip() for p in parts)
        try:
            g = int(grade)
        except ValueError:
            raise InputError(
                f"{path}:{lineno}: relevance grade {grade!r} is not an integer; use 0, 1, 2, ..."
            ) from None
        out.setdefault(qid, {})[did] = g
    return out
