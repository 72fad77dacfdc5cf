"""Stage 01's document side: the dataset folder checked (:func:`check_inputs`) and its documents turned into chunks
(:func:`extract_docs`); the stage itself (questions, judgments, the files written) is :mod:`.stage`.

PDF datasets: pages extracted with pdfplumber, normalised, chunked within each page; the relevance
unit is the page (``<file>#p<page>``). A PDF that is a symlink to a file outside the dataset folder is skipped
and named, never indexed (:func:`outside_links`); a folder whose PDFs have no text layer (scans) says they need
OCR. BEIR datasets: one chunk per document; the unit is the document.
Chunk ids derive from source, page and character offset, so re-extraction never changes them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from rerankeval.core.paths import DATASET_LAYOUT, DatasetPaths
from rerankeval.core.progress import Progress, default_mode, terminal
from rerankeval.core.settings import Settings
from rerankeval.corpus import beir, queryset
from rerankeval.corpus.beir import InputError
from rerankeval.corpus.pdf import PdfSkipped, iter_pages, page_id, source_name
from rerankeval.corpus.textnorm import chunk_text

log = logging.getLogger(__name__)

STAGE_VERSION = 2  # bump when the extraction logic changes output for the same input
PARALLEL_MIN_BYTES = 1_000_000  # PDF bytes from which extraction runs in one process per core


class FileExtract(NamedTuple):
    """What one PDF yields: its page rows and chunks, or (``skipped``) why it was left out."""

    pages: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    skipped: str | None


def check_inputs(dp: DatasetPaths, split: str) -> str:
    """The dataset kind ("pdf" or "beir") once every required file is there, before anything is extracted.

    Questions are not required: a folder with documents only gets its questions drafted by the questions stage
    (:mod:`rerankeval.corpus.queryset`). Raises :class:`InputError` listing every missing file and the layout.
    """
    if not dp.source.is_dir():
        raise InputError(f"dataset folder {dp.source} does not exist; give a folder of PDFs or a BEIR dataset")
    kind = "beir" if beir.find_corpus(dp.source) else "pdf" if _pdf_files(dp.source) else None
    outside = [p.relative_to(dp.source).as_posix() for p in outside_links(dp.source)]
    links = (
        f"; {len(outside)} PDF link(s) point outside the folder and are skipped: {', '.join(outside)}"
        if (outside)
        else ""
    )
    missing = [] if kind else [f"a corpus (put PDF files in it, or a BEIR corpus.jsonl[.gz]{links})"]
    src = queryset.query_source(dp, split)
    if src.kind == queryset.HUMAN:  # one of the two without the other
        missing += [p.relative_to(dp.source).as_posix() for p in src.files() if not p.is_file()]
    elif src.kind == queryset.GENERATED and src.qrels is not None and not src.qrels.is_file():
        missing.append(
            f"{src.qrels.relative_to(dp.source).as_posix()} (the judgments of queries.draft.jsonl; "
            "`make questions` writes both)"
        )
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
        reason = (
            f"a symlink to a file outside the dataset folder ({path.resolve()}): skipped; copy the file "
            "into the folder to index it"
        )
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


@dataclass
class Docs:
    """Stage 01's document side: chunks, relevance units, page rows (PDF) and skipped files."""

    chunks: list[dict[str, Any]]
    units: set[str]
    pages: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    saved: bool = False  # read back from the previous run's files (only the questions changed)


def extract_docs(
    dp: DatasetPaths,
    kind: str,
    sources: dict[str, Path],
    *,
    chunk_size: int,
    chunk_overlap: int,
    x_tolerance: float,
    settings: Settings | None,
) -> Docs:
    """The document side of ``dp.source`` (``kind`` and ``sources`` from :func:`check_inputs` and
    :func:`pdf_sources`): every PDF page chunked, or one chunk per BEIR document; ``settings`` give the progress
    mode."""
    skipped: list[dict[str, str]] = _outside_rows(dp.source) if kind == "pdf" else []
    page_rows: list[dict[str, Any]] = []
    if kind == "pdf":
        chunks, units = _pdf_chunks(
            sources, chunk_size, chunk_overlap, x_tolerance, skipped, page_rows, mode=default_mode(terminal(), settings)
        )
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
        why.insert(
            0,
            f"none of the {len(page_rows)} page(s) of {len(files)} PDF(s) ({', '.join(files[:5])}"
            f"{' ...' if len(files) > 5 else ''}) has a text layer{images}",
        )
        return (
            f"the corpus of {source} is empty: {'; '.join(why)}. PDFs without a text layer (scans) need OCR "
            "before they can be searched: run e.g. `ocrmypdf --skip-text scan.pdf scan-ocr.pdf` "
            "(https://ocrmypdf.readthedocs.io) on each, keep the OCR'd copies in the folder instead of the "
            "scans, then run again."
        )
    return (
        f"the corpus of {source} is empty ({'; '.join(why) or 'no text could be extracted'}). Provide "
        "readable PDFs or a non-empty corpus."
    )


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
                    {
                        "chunk_id": f"{uid}#c{span.start}",
                        "unit_id": uid,
                        "source": rel,
                        "page": pg.page,
                        "start": span.start,
                        "title": "",
                        "text": span.text,
                    }
                )
    except PdfSkipped as exc:
        return FileExtract([], [], exc.reason)  # a file that breaks mid-way is skipped whole
    return FileExtract(pages, chunks, None)


def _extract_all(
    sources: dict[str, Path], size, overlap, x_tolerance, workers: int, mode: str | None
) -> dict[str, FileExtract]:
    """Every PDF extracted, in ``workers`` processes when more than one (largest files first, so the
    slowest file starts at once); the result does not depend on ``workers``."""
    from concurrent.futures import as_completed

    args = {rel: (rel, path, size, overlap, x_tolerance) for rel, path in sources.items()}
    with Progress(len(args), desc="extracting PDFs", unit="PDF", mode=mode) as bar:
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


def _pdf_chunks(
    sources: dict[str, Path], size, overlap, x_tolerance, skipped, page_rows, workers: int = 0, mode: str | None = None
):
    chunks: list[dict[str, Any]] = []
    units: set[str] = set()
    found = _extract_all(sources, size, overlap, x_tolerance, workers or extract_workers(sources), mode)
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
        {
            "chunk_id": did,
            "unit_id": did,
            "source": path.name,
            "page": None,
            "start": 0,
            "title": d["title"],
            "text": d["text"],
        }
        for did, d in sorted(docs.items())
    ]
    return chunks, set(docs)
