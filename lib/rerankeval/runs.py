"""The one run type and its TREC file format.

A run is ``dict[qid, dict[docid, score]]`` (as in BEIR, ranx and ir_measures). Inside a query the
dict's insertion order is the intended ranking; :func:`ranked` gives it back for any run.

trec_eval, ir_measures and pytrec_eval order a run by score and break ties by document id, not by the
rank column (field notes); and pytrec_eval compares scores in single precision (measured: 1.0 and
0.999999999 tie there). :func:`write_trec` therefore writes strictly decreasing scores in the intended
order: a score that is not below the previous one *in float32* is lowered to ``TIE_REL`` (relative)
below it, so every evaluator sees the order the variant produced.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from .ioutil import atomic_write_text

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

TIE_REL = 2.0**-19  # ~1.9e-6 relative: 32 float32 ulps


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """Items by score descending; ties keep their insertion order (stable sort)."""
    return sorted(scores.items(), key=lambda kv: -kv[1])


def strictly_decreasing(items: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Keep the given order and make scores strictly decreasing, also in float32, by nudging ties down."""
    out: list[tuple[str, float]] = []
    prev = math.inf
    for doc, score in items:
        s = float(score)
        if not math.isfinite(s):
            raise ValueError(f"score for {doc!r} is not finite: {score!r}")
        if prev != math.inf and np.float32(s) >= np.float32(prev):
            s = prev - TIE_REL * max(abs(prev), 1e-30)
        out.append((doc, s))
        prev = s
    return out


def from_ranking(ranking: Mapping[str, list[str]]) -> Run:
    """A run from ordered doc-id lists, with rank-derived scores ``1/rank``."""
    return {q: {d: 1.0 / (i + 1) for i, d in enumerate(docs)} for q, docs in ranking.items()}


def to_ranking(run: Run) -> dict[str, list[str]]:
    return {q: [d for d, _ in ranked(docs)] for q, docs in run.items()}


def truncate(run: Run, k: int) -> Run:
    return {q: dict(ranked(docs)[:k]) for q, docs in run.items()}


def to_units(run: Run, unit_of: Mapping[str, str]) -> Run:
    """Map a chunk-level run to relevance units, first (best-ranked) occurrence wins.

    Applied before any cutoff, so duplicate chunks of one page/document never earn credit twice and the
    unit keeps its best chunk's score.
    """
    out: Run = {}
    for q, docs in run.items():
        seen: dict[str, float] = {}
        for chunk, score in ranked(docs):
            try:
                unit = unit_of[chunk]
            except KeyError as exc:
                raise KeyError(f"run for query {q!r} names chunk {chunk!r}, which is not in the chunk table") from exc
            if unit not in seen:
                seen[unit] = score
        out[q] = seen
    return out


def best_chunks(run: Run, unit_of: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """For each query and unit, the best-ranked chunk that brought the unit in (for snippets/reranking)."""
    out: dict[str, dict[str, str]] = {}
    for q, docs in run.items():
        best: dict[str, str] = {}
        for chunk, _ in ranked(docs):
            best.setdefault(unit_of[chunk], chunk)
        out[q] = best
    return out


def write_trec(run: Run, path: str | os.PathLike[str], tag: str) -> Path:
    """Write a run as a TREC file ``qid Q0 docid rank score tag``, atomically.

    Queries are written in sorted order; documents in ranking order with strictly decreasing scores.
    """
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag must be a non-empty word, got {tag!r}")
    lines: list[str] = []
    for q in sorted(run):
        if any(c.isspace() for c in q):
            raise ValueError(f"query id {q!r} contains white space; TREC files cannot hold it")
        for rank, (doc, score) in enumerate(strictly_decreasing(ranked(run[q])), start=1):
            if any(c.isspace() for c in doc):
                raise ValueError(f"doc id {doc!r} contains white space; TREC files cannot hold it")
            lines.append(f"{q} Q0 {doc} {rank} {score!r} {tag}\n")
    return atomic_write_text(path, "".join(lines))


def iter_trec(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, str, int, float]]:
    """``(line number, qid, docid, rank, score)`` for each line of a TREC run, in file order, checked."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{lineno}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}")
            q, _, doc, rank, score, _ = parts
            s = float(score)
            if not math.isfinite(s):
                raise ValueError(f"{path}:{lineno}: score {score!r} is not finite")
            yield lineno, q, doc, int(rank), s


def read_trec(path: str | os.PathLike[str]) -> Run:
    """Read a TREC run; documents come back in the order of decreasing score (file order on ties)."""
    raw: dict[str, list[tuple[str, float]]] = {}
    for _, q, doc, _, score in iter_trec(path):
        raw.setdefault(q, []).append((doc, score))
    return {q: dict(sorted(items, key=lambda kv: -kv[1])) for q, items in raw.items()}


def write_qrels(qrels: Qrels, path: str | os.PathLike[str]) -> Path:
    """BEIR qrels TSV with header, sorted, atomically."""
    lines = ["query-id\tcorpus-id\tscore\n"]
    for q in sorted(qrels):
        for d in sorted(qrels[q]):
            lines.append(f"{q}\t{d}\t{int(qrels[q][d])}\n")
    return atomic_write_text(path, "".join(lines))


def read_qrels(path: str | os.PathLike[str]) -> Qrels:
    """Read the normalised qrels written by :func:`write_qrels` (see ``rerankeval.beir`` for user files)."""
    out: Qrels = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.rstrip("\n").split("\t")
            if lineno == 1 and parts[0] == "query-id":
                continue
            if len(parts) != 3:
                raise ValueError(f"{path}:{lineno}: expected 3 tab-separated columns, got {len(parts)}")
            out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out
