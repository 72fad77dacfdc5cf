"""Stage 01: turn a dataset folder (PDFs or BEIR) into the corpus contract of :mod:`rerankeval.corpus.contract`.

PDF datasets: pages extracted with pdfplumber, normalised, chunked within each page; the relevance
unit is the page (``<file>#p<page>``). BEIR datasets: one chunk per document; the unit is the document.
Chunk ids derive from source, page and character offset, so re-extraction never changes them. The
stage is skipped when its inputs (file contents and parameters) are unchanged.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl, atomic_write_text, sha256_file, sha256_json
from rerankeval.core.paths import DATASET_LAYOUT, DatasetPaths, record_source
from rerankeval.core.runs import write_qrels
from rerankeval.corpus import beir
from rerankeval.corpus.beir import InputError
from rerankeval.corpus.contract import read_table
from rerankeval.corpus.pdf import PdfSkipped, iter_pages, page_id, source_name
from rerankeval.corpus.textnorm import chunk_text

log = logging.getLogger(__name__)

STAGE_VERSION = 2  # bump when the extraction logic changes output for the same input
PARALLEL_MIN_BYTES = 1_000_000  # PDF bytes from which extraction runs in one process per core
UNITS = {"pdf": "page", "beir": "document"}  # the relevance unit of each dataset kind


class FileExtract(NamedTuple):
    """What one PDF yields: its page rows and chunks, or (``skipped``) why it was left out."""

    pages: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    skipped: str | None


@dataclass
class CorpusReport:
    stats: dict[str, Any]
    skipped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["file", "reason"]))
    warnings: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["kind", "query-id", "corpus-id", "detail"])
    )
    reused: bool = False


def check_inputs(dp: DatasetPaths, split: str = "test") -> str:
    """The dataset kind ("pdf" or "beir") once every required file is there, before anything is extracted.

    Raises :class:`InputError` listing every missing file and the expected layout.
    """
    if not dp.source.is_dir():
        raise InputError(f"dataset folder {dp.source} does not exist; give a folder of PDFs or a BEIR dataset")
    kind = "beir" if beir.find_corpus(dp.source) else "pdf" if _pdf_files(dp.source) else None
    missing = [] if kind else ["a corpus (put PDF files in it, or a BEIR corpus.jsonl[.gz])"]
    missing += [p.relative_to(dp.source).as_posix() for p in (dp.source_queries, dp.source_qrels(split))
                if not p.is_file()]
    if missing:
        raise InputError(
            f"{dp.source} is not a complete dataset; missing: {'; '.join(missing)}. Nothing was extracted. "
            f"Expected layout:\n{DATASET_LAYOUT}"
        )
    return kind


def _pdf_files(source: Path) -> list[Path]:
    return sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")


def pdf_sources(source: Path) -> dict[str, Path]:
    """Name (:func:`rerankeval.corpus.pdf.source_name`) -> file, for every PDF of the folder, in file order.

    Two files whose pages would get the same ids (``a b.pdf`` and ``a_b.pdf``: white space becomes
    ``_``) are an :class:`InputError` naming both, raised before anything is extracted.
    """
    out: dict[str, Path] = {}
    owner: dict[str, Path] = {}
    for path in _pdf_files(source):
        name = source_name(path.relative_to(source).as_posix())
        key = page_id(name, 1)
        if key in owner:
            raise InputError(
                f"two PDFs would share the page ids '{key[:-1]}<page>': {owner[key]} and {path} (white space in "
                f"file names becomes '_', bytes that are not UTF-8 become \\xNN); rename one of them"
            )
        owner[key] = path
        out[name] = path
    return out


def _input_hash(dp: DatasetPaths, kind: str, split: str, sources: dict[str, Path], params: dict[str, Any]) -> str:
    corpus = beir.find_corpus(dp.source)
    files = {corpus.name: corpus} if kind == "beir" and corpus else dict(sources)
    for p in (dp.source_queries, dp.source_qrels(split)):
        files[str(p.relative_to(dp.source))] = p
    digest = {name: (sha256_file(p) if p.is_file() else None) for name, p in files.items()}
    return sha256_json({"files": digest, "params": params, "kind": kind, "version": STAGE_VERSION})


def build_corpus(
    dp: DatasetPaths,
    *,
    split: str = "test",
    chunk_size: int = 800,
    chunk_overlap: int = 200,
    x_tolerance: float = 1.5,
    force: bool = False,
) -> CorpusReport:
    """Extract, chunk and validate the dataset at ``dp.source``; write ``dp.corpus_dir``.

    Everything that can be checked cheaply is checked before the first page is extracted: required
    files, colliding file names, the results folder's owner, the queries and the judgments.
    """
    kind = check_inputs(dp, split)
    sources = pdf_sources(dp.source) if kind == "pdf" else {}
    record_source(dp)
    params = {"split": split, "chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "x_tolerance": x_tolerance}
    in_hash = _input_hash(dp, kind, split, sources, params)
    if not force and (old := _reusable(dp, in_hash)) is not None:
        return old

    queries = beir.read_queries(dp.source_queries)
    raw_qrels, qrels_warnings = _read_judgments(dp.source_qrels(split), kind)
    skipped: list[dict[str, str]] = []
    page_rows: list[dict[str, Any]] = []
    if kind == "pdf":
        chunks, units = _pdf_chunks(sources, chunk_size, chunk_overlap, x_tolerance, skipped, page_rows)
    else:
        chunks, units = _beir_chunks(beir.find_corpus(dp.source))
    if not chunks:
        why = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped) or "no text could be extracted"
        raise InputError(f"the corpus of {dp.source} is empty ({why}). Provide readable PDFs or a non-empty corpus.")

    no_text = {p["unit_id"]: p["note"] for p in page_rows if p["chars"] == 0}
    qrels, query_rows, warnings = _validate_judgments(queries, raw_qrels, units, no_text)
    if not query_rows:
        raise InputError(
            f"no query in {dp.source_queries} has a judgment in qrels/{split}.tsv that names a known "
            f"{UNITS[kind]}; check the ids (PDF pages are '<file>#p<page>')"
        )
    warnings = _name_warnings(dp.source, sources) + qrels_warnings + warnings
    # stats.json is the stage's commit marker: remove it first, write it last, so a run killed in between
    # never leaves an old marker beside a new chunk table
    dp.corpus_stats.unlink(missing_ok=True)
    atomic_write_jsonl(dp.chunks, chunks)
    atomic_write_jsonl(dp.queries, query_rows)
    write_qrels(qrels, dp.qrels)
    skipped_df = pd.DataFrame(skipped, columns=["file", "reason"])
    warnings_df = pd.DataFrame(warnings, columns=["kind", "query-id", "corpus-id", "detail"])
    atomic_write_text(dp.skipped_csv, skipped_df.to_csv(index=False))
    atomic_write_text(dp.warnings_csv, warnings_df.to_csv(index=False))
    if page_rows:
        atomic_write_text(dp.pages_csv, pd.DataFrame(page_rows).to_csv(index=False))
    stats = {"dataset": dp.name, "kind": kind, "unit": UNITS[kind], "split": split, "params": params,
             "input_hash": in_hash, "corpus_hash": sha256_file(dp.chunks),
             **_counts(kind, sources, skipped, page_rows, units, chunks, query_rows, qrels), "warnings": len(warnings)}
    atomic_write_json(dp.corpus_stats, stats)
    return CorpusReport(stats, skipped_df, warnings_df, False)


def _read_judgments(path: Path, kind: str) -> tuple[dict[str, dict[str, int]], list[dict[str, str]]]:
    """The qrels keyed by unit id (white space in a PDF page id becomes ``_``, as in the page ids)."""
    unit = (lambda did: "_".join(did.split())) if kind == "pdf" else str
    return beir.merge_judgments(beir.read_judgments(path), path, unit=unit)


def _reusable(dp: DatasetPaths, in_hash: str) -> CorpusReport | None:
    """The saved report when the corpus stage's outputs are complete and were built from these inputs."""
    if not all(p.exists() for p in (dp.chunks, dp.queries, dp.qrels, dp.corpus_stats)):
        return None
    old = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
    if old.get("input_hash") != in_hash or old.get("corpus_hash") != sha256_file(dp.chunks):
        return None
    return CorpusReport(old, _read_csv(dp.skipped_csv), _read_csv(dp.warnings_csv), True)


def _counts(kind, sources, skipped, page_rows, units, chunks, query_rows, qrels) -> dict[str, Any]:
    lengths = [len(c["text"]) for c in chunks]
    grades = Counter(g for rel in qrels.values() for g in rel.values())
    slices: dict[str, Counter] = {}
    for q in query_rows:
        for k, v in q["slices"].items():
            slices.setdefault(k, Counter())[v] += 1
    return {
        "files": len(sources) if kind == "pdf" else 1,
        "files_skipped": len(skipped),
        "pages": len(page_rows) if kind == "pdf" else None,
        "pages_without_text": sum(1 for p in page_rows if p["chars"] == 0) if kind == "pdf" else None,
        "units": len(units),
        "chunks": len(chunks),
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


def _read_csv(path: Path) -> pd.DataFrame:
    """A table of strings (file names and ids are never numbers, and ``NA`` or ``null`` is an id, not missing)."""
    return pd.read_csv(path, dtype=str, keep_default_na=False) if path.exists() else pd.DataFrame()


def _name_warnings(source: Path, sources: dict[str, Path]) -> list[dict[str, str]]:
    """One warning per PDF whose file name is not valid UTF-8 (indexed under its escaped name)."""
    return [
        {"kind": "file name is not valid UTF-8", "query-id": "", "corpus-id": name,
         "detail": f"indexed as '{page_id(name, 1)[:-1]}<page>' (each invalid byte written as \\xNN); use that id "
                   f"in the qrels, or rename the file to UTF-8 (e.g. convmv -f latin1 -t utf-8 --notest)"}
        for name, path in sources.items() if name != path.relative_to(source).as_posix()
    ]


def extract_workers(sources: dict[str, Path]) -> int:
    """Processes that extract PDFs in parallel: one per usable core, never more than the files, and one
    for small folders (below :data:`PARALLEL_MIN_BYTES`, starting the processes costs more than it saves)."""
    if sum(p.stat().st_size for p in sources.values()) < PARALLEL_MIN_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, len(sources)))


def _extract_file(rel: str, path: Path, size: int, overlap: int, x_tolerance: float) -> FileExtract:
    """One PDF's page rows and chunks, or the reason it was skipped (a worker's unit of work)."""
    pages: list[dict[str, Any]] = []
    chunks: list[dict[str, Any]] = []
    try:
        for pg in iter_pages(path, rel, x_tolerance=x_tolerance):
            uid = page_id(rel, pg.page)
            pages.append({"file": rel, "page": pg.page, "unit_id": uid, "chars": len(pg.text), "note": pg.note})
            for span in chunk_text(pg.text, size, overlap):
                chunks.append(
                    {"chunk_id": f"{uid}#c{span.start}", "unit_id": uid, "source": rel, "page": pg.page,
                     "start": span.start, "title": "", "text": span.text}
                )
    except PdfSkipped as exc:
        return FileExtract([], [], exc.reason)  # a file that breaks mid-way is skipped whole
    return FileExtract(pages, chunks, None)


def _extract_all(sources: dict[str, Path], size, overlap, x_tolerance, workers: int) -> dict[str, FileExtract]:
    """Every PDF extracted, in ``workers`` processes when more than one (largest files first, so the
    slowest file starts at once); the result does not depend on ``workers``."""
    args = {rel: (rel, path, size, overlap, x_tolerance) for rel, path in sources.items()}
    if workers <= 1:
        return {rel: _extract_file(*a) for rel, a in args.items()}
    order = sorted(sources, key=lambda rel: sources[rel].stat().st_size, reverse=True)
    with ProcessPoolExecutor(workers, mp_context=_mp_context()) as pool:
        futures = {rel: pool.submit(_extract_file, *args[rel]) for rel in order}
        return {rel: futures[rel].result() for rel in sources}


def _mp_context() -> multiprocessing.context.BaseContext:
    """fork in a single-threaded process (a plain script needs no ``__main__`` guard); spawn when other
    threads run (a Jupyter kernel), since forking a threaded process can deadlock in the child."""
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _pdf_chunks(sources: dict[str, Path], size, overlap, x_tolerance, skipped, page_rows, workers: int = 0):
    chunks: list[dict[str, Any]] = []
    units: set[str] = set()
    found = _extract_all(sources, size, overlap, x_tolerance, workers or extract_workers(sources))
    for rel in sources:
        got = found[rel]
        if got.skipped is not None:
            skipped.append({"file": rel, "reason": got.skipped})
            continue
        page_rows.extend(got.pages)
        units.update(p["unit_id"] for p in got.pages)
        chunks.extend(got.chunks)
    chunks.sort(key=lambda c: (c["source"], c["page"], c["start"]))
    return chunks, units


def _beir_chunks(path: Path):
    docs = beir.read_corpus(path)
    chunks = [
        {"chunk_id": did, "unit_id": did, "source": path.name, "page": None, "start": 0,
         "title": d["title"], "text": d["text"]}
        for did, d in sorted(docs.items())
    ]
    return chunks, set(docs)


def _validate_judgments(queries, raw_qrels, units, no_text: dict[str, str] | None = None):
    """The judgments of known queries and units, the evaluated query rows, and warning rows. ``no_text``
    (page id -> why it has no text) names the judged pages no variant can retrieve: kept, with a warning."""
    no_text = no_text or {}
    warnings: list[dict[str, str]] = []
    qrels: dict[str, dict[str, int]] = {}
    for qid, rels in sorted(raw_qrels.items()):
        if qid not in queries:
            warnings.append({"kind": "qrels query not in queries.jsonl", "query-id": qid, "corpus-id": "",
                             "detail": f"{len(rels)} judgment(s) dropped"})
            continue
        for uid, grade in sorted(rels.items()):
            if uid not in units:
                warnings.append({"kind": "qrels names an unknown unit", "query-id": qid, "corpus-id": uid,
                                 "detail": "dropped: no such page/document in the corpus (skipped file or typo?)"})
                continue
            if uid in no_text:
                warnings.append({"kind": "qrels names a page without text", "query-id": qid, "corpus-id": uid,
                                 "detail": f"kept (grade {grade}), but no variant can retrieve it: {no_text[uid]}"})
            qrels.setdefault(qid, {})[uid] = grade
    unjudged = sorted(set(queries) - set(qrels))
    if unjudged:
        shown = ", ".join(unjudged[:10]) + (" ..." if len(unjudged) > 10 else "")
        warnings.append({"kind": "queries without judgments", "query-id": shown, "corpus-id": "",
                         "detail": f"{len(unjudged)} query(ies) not evaluated (no qrels in this split)"})
    for qid, rels in sorted(qrels.items()):
        if not any(g > 0 for g in rels.values()):
            warnings.append({"kind": "query with no relevant unit", "query-id": qid, "corpus-id": "",
                             "detail": "every judgment has grade 0: metrics are 0 for this query"})
    query_rows = []
    for qid in sorted(qrels):
        n_rel = sum(1 for g in qrels[qid].values() if g > 0)
        slices = {"answers": "multi" if n_rel > 1 else "single"}
        if queries[qid]["slice"]:
            slices["type"] = queries[qid]["slice"]
        query_rows.append({"_id": qid, "text": queries[qid]["text"], "slices": slices})
    return qrels, query_rows, warnings


def summary_table(report: CorpusReport) -> pd.DataFrame:
    """The corpus figures as a two-column table for the notebook and the report."""
    s = report.stats
    rows = [
        ("dataset", s["dataset"]), ("kind", s["kind"]), ("relevance unit", s["unit"]),
        ("files", s["files"]), ("files skipped", s["files_skipped"]), ("pages", s["pages"]),
        ("pages without text", s["pages_without_text"]), ("units", s["units"]), ("chunks", s["chunks"]),
        ("chunk length (chars) median / max", f"{s['chunk_chars']['median']:.0f} / {s['chunk_chars']['max']}"),
        ("queries evaluated", s["queries"]),
        ("queries per slice", "; ".join(f"{k}: {v}" for k, v in s["queries_per_slice"].items())),
        ("judgments", s["judgments"]),
        ("judgments per grade", ", ".join(f"grade {g}: {n}" for g, n in s["judgments_per_grade"].items())),
        ("warnings", s["warnings"]), ("corpus hash", s["corpus_hash"][:16]),
        ("reused from a previous run", report.reused),
    ]
    return pd.DataFrame([(k, "" if v is None else str(v)) for k, v in rows], columns=["figure", "value"])


PAGE_COLUMNS = ["file", "page", "unit_id", "chars", "note"]


def empty_pages(dp: DatasetPaths) -> pd.DataFrame:
    """Pages with no extractable text, PDF datasets only, each with why (``note``: form fields or annotations
    only, images only, blank; see :func:`rerankeval.corpus.pdf.no_text_note`)."""
    path = dp.pages_csv
    if not path.exists():
        return pd.DataFrame(columns=PAGE_COLUMNS)
    df = read_table(path, ids=("file", "unit_id", "note"))
    df = df.reindex(columns=PAGE_COLUMNS, fill_value="")  # pages.csv of an older run has no note
    return df[df.chars == 0].reset_index(drop=True)


def no_text_lines(dp: DatasetPaths) -> list[str]:
    """One line per page without text: ``x.pdf p3: no text layer (only form fields/annotations: ...)``."""
    return [f"{r.file} p{r.page}: {r.note or 'no text layer'}" for r in empty_pages(dp).itertuples()]
