"""The text of each relevance unit as the chunks hold it, and its content hash.

A grade, a drafted question and a review decision are made on a unit's text; they record its sha256
(:func:`unit_hashes`) so that a unit whose text changed since (a PDF replaced under the same name) is noticed and
its grades set aside instead of counting for a page that now says something else (issue 32, defect 1). A record
without a hash (written before hashes were kept) is read as "unknown": used as before.

The explorer's judgments file (``qrels/judgments-<split>.tsv``) is a BEIR qrels file with a fourth column, the
unit's sha256 when the grade was given (:func:`read_grade_lines`); a file of three columns reads as unknown hashes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from rerankeval.core.ioutil import sha256_text
from rerankeval.corpus.beir import InputError


def unit_texts(chunks: pd.DataFrame) -> dict[str, str]:
    """Each unit's text rebuilt from its chunks (overlapping spans of the normalised page text, by offset)."""
    out: dict[str, str] = {}
    for uid, group in chunks.sort_values(["unit_id", "start"], kind="stable").groupby("unit_id", sort=False):
        text = ""
        for start, part in zip(group.start, group.text, strict=True):
            start = int(start) if pd.notna(start) else len(text)
            text = text[:start] + str(part) if start <= len(text) else text + " " + str(part)
        out[str(uid)] = text
    return out


def unit_hashes(chunks: pd.DataFrame, only: Iterable[str] | None = None) -> dict[str, str]:
    """unit id -> sha256 of its text (:func:`unit_texts`), for the units of ``only`` (every unit when None)."""
    if only is not None:
        chunks = chunks[chunks.unit_id.isin(set(only))]
    return {u: sha256_text(t) for u, t in unit_texts(chunks).items()}


def is_stale(recorded: str | None, current: str | None) -> bool:
    """Whether a record made on a unit's text of hash ``recorded`` no longer fits the unit (hash ``current``).
    An unknown hash on either side (an old record, a unit no longer in the corpus) is not stale."""
    return bool(recorded) and bool(current) and recorded != current


def read_grade_lines(path: Path) -> list[tuple[str, str, int, int, str]]:
    """``(qid, unit_id, grade, line number, unit sha256)`` of each line of a judgments file (none when it does not
    exist); the sha256 is "" for a line without one (a file from before hashes were kept)."""
    if not path.is_file():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t")
        if not line.strip() or (lineno == 1 and parts[0] == "query-id"):
            continue
        try:
            sha = parts[3].strip() if len(parts) > 3 else ""
            out.append((parts[0].strip(), parts[1].strip(), int(parts[2]), lineno, sha))
        except (IndexError, ValueError):
            raise InputError(
                f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>integer grade[<TAB>unit "
                f"sha256]', got {line!r}; fix or delete that line"
            ) from None
    return out
