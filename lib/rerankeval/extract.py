"""Stage 01: turn a dataset folder (PDFs or BEIR) into the corpus contract of :mod:`rerankeval.corpus`.

PDF datasets: pages extracted with pdfplumber, normalised, chunked within each page; the relevance
unit is the page (``<file>#p<page>``). BEIR datasets: one chunk per document; the unit is the document.
Chunk ids derive from source, page and character offset, so re-extraction never changes them. The
stage is skipped when its inputs (file contents and parameters) are unchanged.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import beir
from .beir import InputError
from .ioutil import atomic_write_json, atomic_write_jsonl, atomic_write_text, sha256_file, sha256_json
from .paths import DatasetPaths
from .pdf import PdfSkipped, iter_pages, page_id
from .runs import write_qrels
from .textnorm import chunk_text

log = logging.getLogger(__name__)

STAGE_VERSION = 1  # bump when the extraction logic changes output for the same input


@dataclass
class CorpusReport:
    stats: dict[str, Any]
    skipped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["file", "reason"]))
    warnings: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["kind", "query-id", "corpus-id", "detail"])
    )
    reused: bool = False


def detect_kind(source: Path) -> str:
    if not source.is_dir():
        raise InputError(f"dataset folder {source} does not exist; give a folder of PDFs or a BEIR dataset")
    if beir.find_corpus(source):
        return "beir"
    if _pdf_files(source):
        return "pdf"
    raise InputError(
        f"{source} holds no corpus: put PDF files in it, or a BEIR corpus.jsonl[.gz], "
        f"plus queries.jsonl and qrels/test.tsv"
    )


def _pdf_files(source: Path) -> list[Path]:
    return sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")


def _input_hash(source: Path, kind: str, split: str, params: dict[str, Any]) -> str:
    files = [beir.find_corpus(source)] if kind == "beir" else _pdf_files(source)
    files += [source / "queries.jsonl", source / "qrels" / f"{split}.tsv"]
    digest = {str(p.relative_to(source)): (sha256_file(p) if p.is_file() else None) for p in files}
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
    """Extract, chunk and validate the dataset at ``dp.source``; write ``dp.corpus_dir``."""
    kind = detect_kind(dp.source)
    params = {"split": split, "chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "x_tolerance": x_tolerance}
    in_hash = _input_hash(dp.source, kind, split, params)
    outputs = [dp.chunks, dp.queries, dp.qrels, dp.corpus_stats]
    if not force and all(p.exists() for p in outputs):
        old = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
        if old.get("input_hash") == in_hash and old.get("corpus_hash") == sha256_file(dp.chunks):
            skipped, warnings = _read_csv(dp.corpus_dir / "skipped.csv"), _read_csv(dp.corpus_dir / "warnings.csv")
            return CorpusReport(old, skipped, warnings, True)

    skipped: list[dict[str, str]] = []
    page_rows: list[dict[str, Any]] = []
    if kind == "pdf":
        chunks, units = _pdf_chunks(dp.source, chunk_size, chunk_overlap, x_tolerance, skipped, page_rows)
        unit = "page"
    else:
        chunks, units = _beir_chunks(beir.find_corpus(dp.source))
        unit = "document"
    if not chunks:
        why = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped) or "no text could be extracted"
        raise InputError(f"the corpus of {dp.source} is empty ({why}). Provide readable PDFs or a non-empty corpus.")

    queries = beir.read_queries(dp.source / "queries.jsonl")
    raw_qrels = beir.read_qrels(dp.source / "qrels" / f"{split}.tsv")
    qrels, query_rows, warnings = _validate_judgments(queries, raw_qrels, units, normalise_ids=(kind == "pdf"))
    if not query_rows:
        raise InputError(
            f"no query in {dp.source / 'queries.jsonl'} has a judgment in qrels/{split}.tsv that names a "
            f"known {unit}; check the ids (PDF pages are '<file>#p<page>')"
        )

    # stats.json is the stage's commit marker: remove it first, write it last, so a run killed in between
    # never leaves an old marker beside a new chunk table
    dp.corpus_stats.unlink(missing_ok=True)
    atomic_write_jsonl(dp.chunks, chunks)
    atomic_write_jsonl(dp.queries, query_rows)
    write_qrels(qrels, dp.qrels)
    skipped_df = pd.DataFrame(skipped, columns=["file", "reason"])
    warnings_df = pd.DataFrame(warnings, columns=["kind", "query-id", "corpus-id", "detail"])
    atomic_write_text(dp.corpus_dir / "skipped.csv", skipped_df.to_csv(index=False))
    atomic_write_text(dp.corpus_dir / "warnings.csv", warnings_df.to_csv(index=False))
    if page_rows:
        atomic_write_text(dp.corpus_dir / "pages.csv", pd.DataFrame(page_rows).to_csv(index=False))

    lengths = [len(c["text"]) for c in chunks]
    grades = Counter(g for rel in qrels.values() for g in rel.values())
    slices: dict[str, Counter] = {}
    for q in query_rows:
        for k, v in q["slices"].items():
            slices.setdefault(k, Counter())[v] += 1
    stats = {
        "dataset": dp.name,
        "kind": kind,
        "unit": unit,
        "split": split,
        "params": params,
        "input_hash": in_hash,
        "corpus_hash": sha256_file(dp.chunks),
        "files": len(_pdf_files(dp.source)) if kind == "pdf" else 1,
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
        "warnings": len(warnings),
    }
    atomic_write_json(dp.corpus_stats, stats)
    return CorpusReport(stats, skipped_df, warnings_df, False)


def _read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False) if path.exists() else pd.DataFrame()


def _pdf_chunks(source, size, overlap, x_tolerance, skipped, page_rows):
    chunks: list[dict[str, Any]] = []
    units: set[str] = set()
    for path in _pdf_files(source):
        rel = path.relative_to(source).as_posix()
        pages: list[dict[str, Any]] = []
        file_chunks: list[dict[str, Any]] = []
        try:
            for pg in iter_pages(path, rel, x_tolerance=x_tolerance):
                uid = page_id(rel, pg.page)
                pages.append({"file": rel, "page": pg.page, "unit_id": uid, "chars": len(pg.text)})
                for span in chunk_text(pg.text, size, overlap):
                    file_chunks.append(
                        {"chunk_id": f"{uid}#c{span.start}", "unit_id": uid, "source": rel, "page": pg.page,
                         "start": span.start, "title": "", "text": span.text}
                    )
        except PdfSkipped as exc:
            skipped.append({"file": rel, "reason": exc.reason})
            continue  # a file that breaks mid-way is skipped whole: no partial document in the corpus
        page_rows.extend(pages)
        units.update(p["unit_id"] for p in pages)
        chunks.extend(file_chunks)
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


def _validate_judgments(queries, raw_qrels, units, *, normalise_ids: bool):
    warnings: list[dict[str, str]] = []
    qrels: dict[str, dict[str, int]] = {}
    for qid, rels in sorted(raw_qrels.items()):
        if qid not in queries:
            warnings.append({"kind": "qrels query not in queries.jsonl", "query-id": qid, "corpus-id": "",
                             "detail": f"{len(rels)} judgment(s) dropped"})
            continue
        for did, grade in sorted(rels.items()):
            uid = "_".join(did.split()) if normalise_ids else did
            if uid not in units:
                warnings.append({"kind": "qrels names an unknown unit", "query-id": qid, "corpus-id": did,
                                 "detail": "dropped: no such page/document in the corpus (skipped file or typo?)"})
                continue
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


def empty_pages(dp: DatasetPaths) -> pd.DataFrame:
    """Pages with no extractable text (scanned images, blank pages), PDF datasets only."""
    path = dp.corpus_dir / "pages.csv"
    if not path.exists():
        return pd.DataFrame(columns=["file", "page", "unit_id", "chars"])
    df = pd.read_csv(path)
    return df[df.chars == 0].reset_index(drop=True)
