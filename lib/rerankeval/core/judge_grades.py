"""The LLM judge's grades: their scale, and the file that holds one judge's grades. Shared by the writer
(:mod:`rerankeval.questions.assess`, notebook 09) and the readers (:mod:`rerankeval.evaluate.agreement`, 05).

**Scale.** UMBRELA's 0-3 (Upadhyay et al., "UMBRELA: UMbrela is the (Open-Source Reproduction of the) Bing RELevance
Assessor", 2024, arXiv:2406.06519, after Thomas et al.'s Bing prompt): 3 the passage holds the exact answer, 2 it
answers in part, 1 it is on a related topic but **does not answer**, 0 it has nothing to do with the query. As in
UMBRELA's binary use (and TREC's graded qrels, whose grade 1 "related" is not relevant for binary measures), 0 and 1
are **not relevant** (:data:`RELEVANT_FROM`). Our qrels count any grade >= 1 as relevant (docs/CONVENTIONS.md#metrics),
so an LLM grade becomes a qrels grade on the human scale with :func:`to_qrels_grade`: 0 and 1 become 0, 3 the human
scale's top grade, 2 one below it (at least 1).

**File.** ``<dataset>/qrels/llm-<name>-<hash>.tsv`` (:func:`grades_path`): ``name`` a readable, file-safe prefix of
the model id, ``hash`` the first 12 hex digits of the sha256 of the exact model id, so ``acme/judge-large`` and
``acme_judge-large``, or two long GGUF paths that differ only in their quantisation suffix, never share a file.
Beside it, ``llm-<name>-<hash>.json`` (:func:`record_path`) holds the exact model id (:func:`write_record`,
:func:`read_record`), so a reader knows whose grades they are. A file of the earlier naming (``llm-<name>.tsv``,
no record) is still read, with a note (:func:`legacy_note`): two judges may have written it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_json, sha256_text

SCALE = "umbrela-0-3"
GRADES = (0, 1, 2, 3)
RELEVANT_FROM = 2  # UMBRELA: 0 (unrelated) and 1 (related, does not answer) are not relevant
ONE_GRADE_SHARE = 0.95  # share of one grade at which the judge is said not to discriminate
PREFIX_CHARS = 48  # the readable part of the file name; the hash makes it unique
HASH_CHARS = 12


def is_relevant(grade: int) -> bool:
    """True for an LLM grade that counts as relevant on UMBRELA's scale (2 and 3)."""
    return int(grade) >= RELEVANT_FROM


def to_qrels_grade(grade: int, top: int) -> int:
    """An LLM grade (0-3) as a grade of the human scale 0..``top``: 0 and 1 are not relevant (0), 3 is ``top``,
    2 is one below it (at least 1)."""
    g, top = int(grade), max(1, int(top))
    if g < RELEVANT_FROM:
        return 0
    return top if g >= GRADES[-1] else max(1, top - 1)


def one_grade(grades: Iterable[int], share: float = ONE_GRADE_SHARE) -> str:
    """A warning when at least ``share`` of 20 or more grades are one grade: such a judge does not tell relevant
    from non-relevant, whatever its kappa on a one-class overlap says ("" otherwise)."""
    counts = Counter(int(g) for g in grades)
    n = sum(counts.values())
    if n < 20:
        return ""
    grade, top = counts.most_common(1)[0]
    if top / n < share:
        return ""
    what = "relevant" if is_relevant(grade) else "not relevant"
    return (
        f"WARNING: {top} of the {n} LLM grades ({top / n:.0%}) are {grade} ({what} on the judge's 0-3 scale): "
        "this judge hardly tells relevant from non-relevant units; do not use its grades (qrels_source=human), "
        "or try a larger JUDGE_MODEL."
    )


def file_safe(model: str, limit: int = PREFIX_CHARS) -> str:
    """A model name as a file name part: letters, digits, ``.``, ``_`` and ``-`` kept, any other run as ``_``."""
    return (re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip()).strip("._") or "model")[:limit].rstrip("._-") or "model"


def file_key(model: str) -> str:
    """``<readable prefix>-<sha256 of the exact model id, 12 hex>``: distinct model ids, distinct keys."""
    return f"{file_safe(model)}-{sha256_text(model)[:HASH_CHARS]}"


def grades_path(folder: Path, model: str) -> Path:
    """``<folder>/llm-<file_key(model)>.tsv`` (``folder``: the dataset's ``qrels`` folder)."""
    return folder / f"llm-{file_key(model)}.tsv"


def legacy_path(folder: Path, model: str) -> Path:
    """Where the earlier naming put ``model``'s grades (``llm-<name cut at 80 characters>.tsv``, shared by every
    model id with the same file-safe form)."""
    return folder / f"llm-{file_safe(model, 80)}.tsv"


def record_path(grades: Path) -> Path:
    """The record beside a grades file: ``llm-<key>.json``."""
    return grades.with_suffix(".json")


def write_record(grades: Path, model: str, endpoint: str = "") -> Path:
    """Write the record of ``grades``: the exact model id, its key, the scale (``endpoint``: already redacted)."""
    return atomic_write_json(
        record_path(grades),
        {"model": model, "key": file_key(model), "scale": SCALE, "relevant_from": RELEVANT_FROM, "endpoint": endpoint},
    )


def read_record(grades: Path) -> dict[str, Any] | None:
    """The record of ``grades``, or None when there is none (a file of the earlier naming) or it does not read."""
    try:
        rec = json.loads(record_path(grades).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("model"), str) else None


def judge_of(grades: Path) -> str | None:
    """The exact model id that wrote ``grades`` (None when the file has no record)."""
    rec = read_record(grades)
    return None if rec is None else rec["model"]


def check_record(grades: Path, model: str) -> None:
    """Raise ValueError when ``grades``' record names another model than ``model`` (a hash collision, or a file
    renamed by hand): two judges' grades are never written into one file."""
    owner = judge_of(grades)
    if owner is not None and owner != model:
        raise ValueError(
            f"{grades} holds the grades of the judge {owner!r}, not of {model!r}: two judges' grades "
            f"are never mixed. Rename or delete {grades.name} (and {record_path(grades).name}) and "
            "re-run 09-assess (its replies are cached)"
        )


def legacy_note(grades: Path) -> str:
    """What to say about a grades file without a record ("" when it has one)."""
    if read_record(grades) is not None:
        return ""
    return (
        f"{grades.name} has no record of the model that wrote it (the earlier naming, in which judges whose "
        "names differ only in punctuation, or past 80 characters, shared one file): 05 reads it, as one judge's "
        "grades, only when no grades file with a record exists. Delete it and re-run 09-assess (its replies "
        "are cached) to get llm-<model>-<hash>.tsv and its record"
    )
