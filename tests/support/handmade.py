"""Stage outputs written by hand, the pieces the tests' small datasets share: an empty dataset folder, stage 01's
chunks (one per page, or one per document), the questions with their judgments, and stage 03's runs over the pages.
What a dataset holds stays with its test; these only write it in the layout each stage leaves."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.core.paths import DatasetPaths, resolve_dataset
from rerankeval.core.settings import load_settings


def dataset_at(folder: Path, *, qrels: bool = False) -> DatasetPaths:
    """A new, empty dataset folder (with ``qrels``, its ``qrels/`` folder too), found as stage 01 finds it, with the
    environment's settings."""
    (folder / "qrels" if qrels else folder).mkdir(parents=True)
    return resolve_dataset(str(folder), load_settings())


def dataset_in(tmp_path: Path, monkeypatch, name: str = "ds", *, root: bool = False) -> DatasetPaths:
    """:func:`dataset_at` ``tmp_path/src/<name>``, its results under ``tmp_path/results`` (``RERANKEVAL_RESULTS``);
    with ``root``, its results folder made (where a test writes 05's outputs itself)."""
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    dp = dataset_at(tmp_path / "src" / name)
    if root:
        dp.root.mkdir(parents=True)
    return dp


def write_chunks(
    dp: DatasetPaths, chunks: Iterable[tuple[str, str, int, str]], *, source: str | Callable[[str], str] = "m.pdf"
) -> None:
    """Stage 01's chunks: a row per ``(chunk_id, unit_id, page, text)``, each at the start of its page and untitled,
    from the file ``source`` (or ``source(unit_id)``)."""
    atomic_write_jsonl(
        dp.chunks,
        [
            {
                "chunk_id": c,
                "unit_id": u,
                "source": source(u) if callable(source) else source,
                "page": p,
                "start": 0,
                "title": "",
                "text": t,
            }
            for c, u, p, t in chunks
        ],
    )


def write_pages(dp: DatasetPaths, units: Sequence[str], texts: Sequence[str], *, source: str = "m.pdf") -> None:
    """One chunk per page (``<unit>#c0``, holding its page's text), the pages numbered from 1 in order."""
    write_chunks(
        dp, [(f"{u}#c0", u, i + 1, t) for i, (u, t) in enumerate(zip(units, texts, strict=True))], source=source
    )


def write_questions(dp: DatasetPaths, questions: Iterable[str] | Mapping[str, str]) -> None:
    """The evaluated questions (no slices): a mapping of qid to text, or qids, each asked as ``question <qid>``."""
    asked = questions if isinstance(questions, Mapping) else {q: f"question {q}" for q in questions}
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": t, "slices": {}} for q, t in asked.items()])


def write_documents(dp: DatasetPaths, units: Sequence[str], questions, qrels: runs.Qrels) -> None:
    """A corpus of documents as stage 01 leaves it (chunk = unit, ``text of <unit>``, one page each, numbered from 1),
    the questions (as :func:`write_questions` takes them) and their judgments ``qrels``."""
    write_chunks(dp, [(u, u, i + 1, f"text of {u}") for i, u in enumerate(units)])
    write_questions(dp, questions)
    runs.write_qrels(qrels, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "document"})


def write_rotated_runs(
    dp: DatasetPaths, qids: Sequence[str], units: Sequence[str], variants: Iterable[str], depth: int | None = None
) -> None:
    """Stage 03's runs (chunk and unit level) over the pages of :func:`write_pages`, the same for each of
    ``variants``: the i-th query ranks the pages rotated by i, ``depth`` of them (all by default), each by its chunk,
    scored 1/rank."""
    n = len(units)
    chunk_run = {q: {f"{units[(i + j) % n]}#c0": 1.0 / (j + 1) for j in range(depth or n)} for i, q in enumerate(qids)}
    unit_of = {f"{u}#c0": u for u in units}
    for v in variants:
        runs.write_trec(chunk_run, dp.chunk_run_file(v), v)
        runs.write_trec(runs.to_units(chunk_run, unit_of), dp.run_file(v), v)
