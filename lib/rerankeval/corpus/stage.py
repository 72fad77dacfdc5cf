"""Stage 01 (corpus): the dataset folder checked, its documents extracted (:mod:`.extract`), its questions and
judgments validated against them; ``run`` computes, ``write`` writes the corpus contract (:mod:`.contract`).

Through the package's face::

    result = corpus.run(dp, corpus.Params.of(globals()), settings)   # checks, extracts, validates; writes nothing
    corpus.write(dp, result)                                         # chunks, queries, qrels, tables, stats.json

Everything that can be checked cheaply is checked before the first page is extracted: required files, colliding
file names, the results folder's owner, the queries and the judgments. A run whose inputs (file contents and
parameters) are unchanged reads the saved report back (``result.reused``: ``write`` then writes nothing); when only
the questions changed (new drafts, an edited queries.jsonl) the saved chunks are kept: nothing is re-extracted.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import (
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    read_jsonl,
    sha256_file,
    sha256_json,
)
from rerankeval.core.paths import DEFAULT_DATASET, DatasetPaths, check_results_owner, record_source
from rerankeval.core.runs import write_qrels
from rerankeval.core.settings import Settings
from rerankeval.corpus import beir, queryset
from rerankeval.corpus.beir import InputError
from rerankeval.corpus.extract import STAGE_VERSION, Docs, check_inputs, extract_docs, outside_links, pdf_sources
from rerankeval.corpus.pdf import page_id

UNITS = {"pdf": "page", "beir": "document"}  # the relevance unit of each dataset kind
SKIPPED_COLUMNS = ["file", "reason"]
WARNING_COLUMNS = ["kind", "query-id", "corpus-id", "detail"]


@dataclass(frozen=True)
class Params:
    """Stage 01's parameters, the one home of their defaults: notebook 01's parameters cell has the same names and
    defaults (a test checks) and builds them in one line, ``Params.of(globals())``."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    split: str = "test"  # which qrels/<split>.tsv to evaluate
    chunk_size: int = 800  # characters per chunk (chunks never cross a page)
    chunk_overlap: int = 200  # characters shared by consecutive chunks of a page
    x_tolerance: float = 1.5  # pdfplumber gap (points) that separates two words

    @classmethod
    def of(cls, values: Params | Mapping[str, Any]) -> Params:
        """From a mapping (e.g. the notebook's ``globals()`` or stats.json's ``params``): the names of the fields
        are taken, the rest ignored."""
        if isinstance(values, cls):
            return values
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(values).items() if k in names})

    def record(self) -> dict[str, Any]:
        """What the chunks and stats.json depend on (the dataset is the folder itself, hashed by its files)."""
        return {
            "split": self.split,
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "x_tolerance": self.x_tolerance,
        }


@dataclass
class Result:
    """What stage 01 found: the figures (``stats``, stats.json), the skipped files and the judgment warnings; the
    rows :func:`write` saves (none when ``reused``: the saved corpus was built from the same inputs)."""

    stats: dict[str, Any]
    skipped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SKIPPED_COLUMNS))
    warnings: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=WARNING_COLUMNS))
    reused: bool = False
    docs: Docs | None = None
    queries: list[dict[str, Any]] = field(default_factory=list)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)


def run(dp: DatasetPaths, params: Params, settings: Settings | None, *, force: bool = False) -> Result:
    """Check, extract, chunk and validate the dataset at ``dp.source``; writes nothing (:func:`write`).

    ``settings`` give the extraction's progress mode, the one setting stage 01 reads (None: the mode of
    :mod:`rerankeval.core.progress`'s default, for a caller that keeps the chunks and so extracts nothing);
    ``force`` extracts again even when the saved corpus was built from the same inputs.
    """
    kind = check_inputs(dp, params.split)
    src = queryset.query_source(dp, params.split)
    sources = pdf_sources(dp.source) if kind == "pdf" else {}
    check_results_owner(dp)
    docs_hash = _docs_hash(dp, kind, sources, params.record())
    in_hash = _input_hash(docs_hash, src)
    if not force and (old := _reusable(dp, in_hash)) is not None:
        return old
    queries = queryset.read_source_queries(src)
    raw_qrels, qrels_warnings = _read_judgments(src.qrels, kind) if src.kind != queryset.NONE else ({}, [])
    docs = None if force else _saved_docs(dp, docs_hash)
    if docs is None:
        docs = extract_docs(
            dp,
            kind,
            sources,
            chunk_size=params.chunk_size,
            chunk_overlap=params.chunk_overlap,
            x_tolerance=params.x_tolerance,
            settings=settings,
        )
    no_text = {p["unit_id"]: p["note"] for p in docs.pages if p["chars"] == 0}
    qrels, query_rows, warnings = queryset.validate_judgments(queries, raw_qrels, docs.units, no_text)
    if not query_rows and src.kind != queryset.NONE:
        raise InputError(
            f"no query in {src.queries} has a judgment in {src.qrels} that names a known "
            f"{UNITS[kind]}; check the ids (PDF pages are '<file>#p<page>')"
        )
    warnings = _name_warnings(dp.source, sources) + qrels_warnings + warnings
    stats = {
        "dataset": dp.name,
        "kind": kind,
        "unit": UNITS[kind],
        "split": params.split,
        "params": params.record(),
        "input_hash": in_hash,
        "docs_hash": docs_hash,
        "queries_source": src.kind,
        **_counts(kind, sources, docs, query_rows, qrels),
        "warnings": len(warnings),
    }
    if src.kind == queryset.GENERATED and src.queries is not None:
        stats["generated"] = queryset.describe(queryset.read_drafts(src.queries))
    return Result(
        stats,
        pd.DataFrame(docs.skipped, columns=SKIPPED_COLUMNS),
        pd.DataFrame(warnings, columns=WARNING_COLUMNS),
        False,
        docs,
        query_rows,
        qrels,
    )


def write(dp: DatasetPaths, result: Result) -> list[Path]:
    """Write ``dp.corpus_dir`` from ``result`` and record ``dp.source`` as the owner of ``dp.root``; the files
    written (none for a reused result). Sets ``result.stats["corpus_hash"]``."""
    record_source(dp)
    if result.reused or result.docs is None:
        return []
    # stats.json is the stage's commit marker: remove it first, write it last, so a run killed in between
    # never leaves an old marker beside a new chunk table
    dp.corpus_stats.unlink(missing_ok=True)
    docs = result.docs
    written = [dp.queries, dp.qrels, dp.skipped_csv, dp.warnings_csv]
    if not docs.saved:
        atomic_write_jsonl(dp.chunks, docs.chunks)
        written.insert(0, dp.chunks)
    atomic_write_jsonl(dp.queries, result.queries)
    write_qrels(result.qrels, dp.qrels)
    atomic_write_text(dp.skipped_csv, result.skipped.to_csv(index=False))
    atomic_write_text(dp.warnings_csv, result.warnings.to_csv(index=False))
    if docs.pages and not docs.saved:
        atomic_write_text(dp.pages_csv, pd.DataFrame(docs.pages).to_csv(index=False))
        written.append(dp.pages_csv)
    result.stats["corpus_hash"] = sha256_file(dp.chunks)
    atomic_write_json(dp.corpus_stats, result.stats)
    return [*written, dp.corpus_stats]


def _docs_hash(dp: DatasetPaths, kind: str, sources: dict[str, Path], params: dict[str, Any]) -> str:
    """What the chunks depend on: the documents' contents, the parameters and the extraction code."""
    corpus = beir.find_corpus(dp.source)
    files = {corpus.name: corpus} if kind == "beir" and corpus else dict(sources)
    digest = {name: sha256_file(p) for name, p in files.items()}
    outside = [p.relative_to(dp.source).as_posix() for p in outside_links(dp.source)] if kind == "pdf" else []
    return sha256_json(
        {
            "files": digest,
            "params": params,
            "kind": kind,
            "version": STAGE_VERSION,
            **({"outside_links": outside} if outside else {}),
        }
    )


def _input_hash(docs_hash: str, src: queryset.QuerySource) -> str:
    """What the whole stage depends on: the documents and the question files evaluated with."""
    files = {p.name: (sha256_file(p) if p.is_file() else None) for p in src.files()}
    return sha256_json({"docs": docs_hash, "queries": src.kind, "files": files})


def _read_judgments(path: Path | None, kind: str) -> tuple[dict[str, dict[str, int]], list[dict[str, str]]]:
    """The qrels keyed by unit id (white space in a PDF page id becomes ``_``, as in the page ids)."""
    unit = (lambda did: "_".join(did.split())) if kind == "pdf" else str
    return beir.merge_judgments(beir.read_judgments(path), path, unit=unit)


def _reusable(dp: DatasetPaths, in_hash: str) -> Result | None:
    """The saved report when the corpus stage's outputs are complete and were built from these inputs."""
    if not all(p.exists() for p in (dp.chunks, dp.queries, dp.qrels, dp.corpus_stats)):
        return None
    old = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
    if old.get("input_hash") != in_hash or old.get("corpus_hash") != sha256_file(dp.chunks):
        return None
    return Result(old, _read_csv(dp.skipped_csv), _read_csv(dp.warnings_csv), True)


def _saved_docs(dp: DatasetPaths, docs_hash: str) -> Docs | None:
    """The previous run's document side when it was built from the same documents and parameters."""
    if not (dp.corpus_stats.is_file() and dp.chunks.is_file()):
        return None
    old = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
    if old.get("docs_hash") != docs_hash or old.get("corpus_hash") != sha256_file(dp.chunks):
        return None
    chunks = read_jsonl(dp.chunks)
    pages = (
        [{**r, "page": int(r["page"]), "chars": int(r["chars"])} for r in _read_csv(dp.pages_csv).to_dict("records")]
        if dp.pages_csv.is_file()
        else []
    )
    units = {p["unit_id"] for p in pages} if old.get("kind") == "pdf" else {c["unit_id"] for c in chunks}
    return Docs(chunks, units, pages, _read_csv(dp.skipped_csv).to_dict("records"), saved=True)


def _read_csv(path: Path) -> pd.DataFrame:
    """A table of strings (file names and ids are never numbers, and ``NA`` or ``null`` is an id, not missing)."""
    return pd.read_csv(path, dtype=str, keep_default_na=False) if path.exists() else pd.DataFrame()


def _counts(
    kind: str, sources: dict[str, Path], docs: Docs, query_rows: list[dict[str, Any]], qrels: dict[str, dict[str, int]]
) -> dict[str, Any]:
    lengths = [len(c["text"]) for c in docs.chunks]
    grades = Counter(g for rel in qrels.values() for g in rel.values())
    slices: dict[str, Counter] = {}
    for q in query_rows:
        for k, v in q["slices"].items():
            slices.setdefault(k, Counter())[v] += 1
    return {
        "files": len(sources) if kind == "pdf" else 1,
        "files_skipped": len(docs.skipped),
        "pages": len(docs.pages) if kind == "pdf" else None,
        "pages_without_text": sum(1 for p in docs.pages if p["chars"] == 0) if kind == "pdf" else None,
        "units": len(docs.units),
        "chunks": len(docs.chunks),
        "chunk_chars": {
            "min": min(lengths),
            "median": float(pd.Series(lengths).median()),
            "mean": round(sum(lengths) / len(lengths), 1),
            "max": max(lengths),
        },
        "queries": len(query_rows),
        "queries_per_slice": {k: dict(sorted(v.items())) for k, v in sorted(slices.items())},
        "judgments": sum(len(r) for r in qrels.values()),
        "judgments_per_grade": {str(g): n for g, n in sorted(grades.items())},
    }


def _name_warnings(source: Path, sources: dict[str, Path]) -> list[dict[str, str]]:
    """One warning per PDF whose file name is not valid UTF-8 (indexed under its escaped name)."""
    return [
        {
            "kind": "file name is not valid UTF-8",
            "query-id": "",
            "corpus-id": name,
            "detail": f"indexed as '{page_id(name, 1)[:-1]}<page>' (each invalid byte written as \\xNN); use that id "
            f"in the qrels, or rename the file to UTF-8 (e.g. convmv -f latin1 -t utf-8 --notest)",
        }
        for name, path in sources.items()
        if name != path.relative_to(source).as_posix()
    ]
