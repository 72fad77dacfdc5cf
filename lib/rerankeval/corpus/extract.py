"""Stage 01: turn a dataset folder (PDFs or BEIR) into the corpus contract of :mod:`rerankeval.corpus.contract`.

PDF datasets: pages extracted with pdfplumber, normalised, chunked within each page; the relevance
unit is the page (``<file>#p<page>``). A PDF that is a symlink to a file outside the dataset folder is skipped
and named, never indexed (:func:`outside_links`); a folder whose PDFs have no text layer (scans) says they need
OCR. BEIR datasets: one chunk per document; the unit is the document.
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

from rerankeval.core.ioutil import (
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    read_jsonl,
    sha256_file,
    sha256_json,
)
from rerankeval.core.paths import DATASET_LAYOUT, DatasetPaths, record_source
from rerankeval.core.runs import write_qrels
from rerankeval.corpus import beir, queryset
from rerankeval.corpus.beir import InputError
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

    Questions are not required: a folder with documents only gets its questions drafted by the questions stage
    (:mod:`rerankeval.corpus.queryset`). Raises :class:`InputError` listing every missing file and the layout.
    """
    if not dp.source.is_dir():
        raise InputError(f"dataset folder {dp.source} does not exist; give a folder of PDFs or a BEIR dataset")
    kind = "beir" if beir.find_corpus(dp.source) else "pdf" if _pdf_files(dp.source) else None
    outside = [p.relative_to(dp.source).as_posix() for p in outside_links(dp.source)]
    links = f"; {len(outside)} PDF link(s) point outside the folder and are skipped: {', '.join(outside)}" if (
        outside) else ""
    missing = [] if kind else [f"a corpus (put PDF files in it, or a BEIR corpus.jsonl[.gz]{links})"]
    src = queryset.query_source(dp, split)
    if src.kind == queryset.HUMAN:  # one of the two without the other
        missing += [p.relative_to(dp.source).as_posix() for p in src.files() if not p.is_file()]
    elif src.kind == queryset.GENERATED and src.qrels is not None and not src.qrels.is_file():
        missing.append(f"{src.qrels.relative_to(dp.source).as_posix()} (the judgments of queries.draft.jsonl; "
                       "`make questions` writes both)")
    if missing:
        raise InputError(
            f"{dp.source} is not a complete dataset; missing: {'; '.join(missing)}. Nothing was extracted. "
            f"Expected layout:\n{DATASET_LAYOUT}"
        )
    return kind


def _every_pdf(source: Path) -> list[Path]:
    return sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")


def _inside(path: Path, source: Path) -> bool:
    return path.resolve().is_relative_to(source.resolve())


def _pdf_files(source: Path) -> list[Path]:
    """The PDFs of the folder: those whose real file is inside it (see :func:`outside_links`)."""
    return [p for p in _every_pdf(source) if _inside(p, source)]


def outside_links(source: Path) -> list[Path]:
    """PDFs of the folder that are symlinks (or under a linked folder) to a file outside it: never indexed (a
    link planted in a shared folder would otherwise put any readable file into the corpus, its snippets and the
    LLM's prompts), each listed in ``skipped.csv`` and said in one warning line. Copy the file in to index it."""
    return [p for p in _every_pdf(source) if not _inside(p, source)]


def _outside_rows(source: Path) -> list[dict[str, str]]:
    """One ``skipped.csv`` row per :func:`outside_links` file, each also said in a warning line."""
    rows = []
    for path in outside_links(source):
        rel = source_name(path.relative_to(source).as_posix())
        reason = (f"a symlink to a file outside the dataset folder ({path.resolve()}): skipped; copy the file "
                  "into the folder to index it")
        log.warning("%s: %s", rel, reason)
        rows.append({"file": rel, "reason": reason})
    return rows


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


def _docs_hash(dp: DatasetPaths, kind: str, sources: dict[str, Path], params: dict[str, Any]) -> str:
    """What the chunks depend on: the documents' contents, the parameters and the extraction code."""
    corpus = beir.find_corpus(dp.source)
    files = {corpus.name: corpus} if kind == "beir" and corpus else dict(sources)
    digest = {name: sha256_file(p) for name, p in files.items()}
    outside = [p.relative_to(dp.source).as_posix() for p in outside_links(dp.source)] if kind == "pdf" else []
    return sha256_json({"files": digest, "params": params, "kind": kind, "version": STAGE_VERSION,
                        **({"outside_links": outside} if outside else {})})


def _input_hash(docs_hash: str, src: queryset.QuerySource) -> str:
    """What the whole stage depends on: the documents and the question files evaluated with."""
    files = {p.name: (sha256_file(p) if p.is_file() else None) for p in src.files()}
    return sha256_json({"docs": docs_hash, "queries": src.kind, "files": files})


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
    files, colliding file names, the results folder's owner, the queries and the judgments. When only the
    questions changed (new drafts, an edited queries.jsonl) the saved chunks are kept: nothing is re-extracted.
    """
    kind = check_inputs(dp, split)
    src = queryset.query_source(dp, split)
    sources = pdf_sources(dp.source) if kind == "pdf" else {}
    record_source(dp)
    params = {"split": split, "chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "x_tolerance": x_tolerance}
    docs_hash = _docs_hash(dp, kind, sources, params)
    in_hash = _input_hash(docs_hash, src)
    if not force and (old := _reusable(dp, in_hash)) is not None:
        return old

    queries = queryset.read_source_queries(src)
    raw_qrels, qrels_warnings = _read_judgments(src.qrels, kind) if src.kind != queryset.NONE else ({}, [])
    docs = None if force else _saved_docs(dp, docs_hash)
    if docs is None:
        docs = _extract_docs(dp, kind, sources, chunk_size, chunk_overlap, x_tolerance)
    no_text = {p["unit_id"]: p["note"] for p in docs.pages if p["chars"] == 0}
    qrels, query_rows, warnings = queryset.validate_judgments(queries, raw_qrels, docs.units, no_text)
    if not query_rows and src.kind != queryset.NONE:
        raise InputError(
            f"no query in {src.queries} has a judgment in {src.qrels} that names a known "
            f"{UNITS[kind]}; check the ids (PDF pages are '<file>#p<page>')"
        )
    warnings = _name_warnings(dp.source, sources) + qrels_warnings + warnings
    stats = {"dataset": dp.name, "kind": kind, "unit": UNITS[kind], "split": split, "params": params,
             "input_hash": in_hash, "docs_hash": docs_hash, "queries_source": src.kind,
             **_counts(kind, sources, docs.skipped, docs.pages, docs.units, docs.chunks, query_rows, qrels),
             "warnings": len(warnings)}
    if src.kind == queryset.GENERATED and src.queries is not None:
        stats["generated"] = queryset.describe(queryset.read_drafts(src.queries))
    return _write_corpus(dp, docs, query_rows, qrels, warnings, stats)


@dataclass
class Docs:
    """Stage 01's document side: chunks, relevance units, page rows (PDF) and skipped files."""

    chunks: list[dict[str, Any]]
    units: set[str]
    pages: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    saved: bool = False  # read back from the previous run's files (only the questions changed)


def _extract_docs(dp: DatasetPaths, kind: str, sources: dict[str, Path], size: int, overlap: int,
                  x_tolerance: float) -> Docs:
    skipped: list[dict[str, str]] = _outside_rows(dp.source) if kind == "pdf" else []
    page_rows: list[dict[str, Any]] = []
    if kind == "pdf":
        chunks, units = _pdf_chunks(sources, size, overlap, x_tolerance, skipped, page_rows)
    else:
        chunks, units = _beir_chunks(beir.find_corpus(dp.source))
    if not chunks:
        raise InputError(_empty_corpus(dp.source, skipped, page_rows))
    return Docs(chunks, units, page_rows, skipped)


def _empty_corpus(source: Path, skipped: list[dict[str, str]], page_rows: list[dict[str, Any]]) -> str:
    """Why no text came out of ``source``, and the fix: PDFs whose pages have no text layer are scans (or
    images, forms): they need OCR first; files that were skipped say why."""
    why = [f"{s['file']}: {s['reason']}" for s in skipped]
    if page_rows:
        files = sorted({p["file"] for p in page_rows})
        scans = sum(1 for p in page_rows if "images only" in p["note"] or "scan" in p["note"])
        images = f" ({scans} hold only images: scanned pages)" if scans else ""
        why.insert(0, f"none of the {len(page_rows)} page(s) of {len(files)} PDF(s) ({', '.join(files[:5])}"
                      f"{' ...' if len(files) > 5 else ''}) has a text layer{images}")
        return (f"the corpus of {source} is empty: {'; '.join(why)}. PDFs without a text layer (scans) need OCR "
                "before they can be searched: run e.g. `ocrmypdf --skip-text scan.pdf scan-ocr.pdf` "
                "(https://ocrmypdf.readthedocs.io) on each, keep the OCR'd copies in the folder instead of the "
                "scans, then run again.")
    return (f"the corpus of {source} is empty ({'; '.join(why) or 'no text could be extracted'}). Provide "
            "readable PDFs or a non-empty corpus.")


def _saved_docs(dp: DatasetPaths, docs_hash: str) -> Docs | None:
    """The previous run's document side when it was built from the same documents and parameters."""
    if not (dp.corpus_stats.is_file() and dp.chunks.is_file()):
        return None
    old = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
    if old.get("docs_hash") != docs_hash or old.get("corpus_hash") != sha256_file(dp.chunks):
        return None
    chunks = read_jsonl(dp.chunks)
    pages = [{**r, "page": int(r["page"]), "chars": int(r["chars"])}
             for r in _read_csv(dp.pages_csv).to_dict("records")] if dp.pages_csv.is_file() else []
    units = {p["unit_id"] for p in pages} if old.get("kind") == "pdf" else {c["unit_id"] for c in chunks}
    return Docs(chunks, units, pages, _read_csv(dp.skipped_csv).to_dict("records"), saved=True)


def _write_corpus(dp: DatasetPaths, docs: Docs, query_rows: list[dict[str, Any]], qrels: dict[str, dict[str, int]],
                  warnings: list[dict[str, str]], stats: dict[str, Any]) -> CorpusReport:
    # stats.json is the stage's commit marker: remove it first, write it last, so a run killed in between
    # never leaves an old marker beside a new chunk table
    dp.corpus_stats.unlink(missing_ok=True)
    if not docs.saved:
        atomic_write_jsonl(dp.chunks, docs.chunks)
    atomic_write_jsonl(dp.queries, query_rows)
    write_qrels(qrels, dp.qrels)
    skipped_df = pd.DataFrame(docs.skipped, columns=["file", "reason"])
    warnings_df = pd.DataFrame(warnings, columns=["kind", "query-id", "corpus-id", "detail"])
    atomic_write_text(dp.skipped_csv, skipped_df.to_csv(index=False))
    atomic_write_text(dp.warnings_csv, warnings_df.to_csv(index=False))
    if docs.pages and not docs.saved:
        atomic_write_text(dp.pages_csv, pd.DataFrame(docs.pages).to_csv(index=False))
    atomic_write_json(dp.corpus_stats, {**stats, "corpus_hash": sha256_file(dp.chunks)})
    return CorpusReport(stats | {"corpus_hash": sha256_file(dp.chunks)}, skipped_df, warnings_df, False)


def _read_judgments(path: Path | None, kind: str) -> tuple[dict[str, dict[str, int]], list[dict[str, str]]]:
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
    from concurrent.futures import as_completed

    from rerankeval.core.progress import Progress

    args = {rel: (rel, path, size, overlap, x_tolerance) for rel, path in sources.items()}
    with Progress(len(args), desc="extracting PDFs", unit="PDF") as bar:
        if workers <= 1:
            done = {}
            for rel, a in args.items():
                done[rel] = _extract_file(*a)
                bar.update(1)
            return done
        order = sorted(sources, key=lambda rel: sources[rel].stat().st_size, reverse=True)
        with ProcessPoolExecutor(workers, mp_context=_mp_context()) as pool:
            futures = {rel: pool.submit(_extract_file, *args[rel]) for rel in order}
            for _ in as_completed(futures.values()):
                bar.update(1)
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
