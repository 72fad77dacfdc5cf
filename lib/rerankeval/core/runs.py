"""The one run type and its TREC file format (conventions: ``docs/CONVENTIONS.md#ties``).

A run is ``dict[qid, dict[docid, score]]`` (as in BEIR, ranx and ir_measures). Inside a query the
dict's insertion order is the intended ranking; :func:`ranked` gives it back for any run.

trec_eval, ir_measures and pytrec_eval order a run by score and break ties by document id, not by the
rank column (``tests/core/test_runs.py::test_ir_measures_sees_the_intended_order_on_ties`` shows it); and
pytrec_eval compares scores in single precision (1.0 and 0.999999999 tie there). :func:`write_trec`
therefore writes strictly decreasing scores in the intended order: a score that is not below the previous
one *in float32* is lowered to ``TIE_REL`` (relative) below it, so every evaluator sees the order the
variant produced.

This module also holds the run contract the analysis checks (:func:`read_run_checked`,
:func:`assert_run_contract`, :func:`unit_mapping_check`), the discovery of run files, and the reader for
run files written by other systems (:func:`read_external_run`), which follows trec_eval's rules.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.names import REPORT_ORDER

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

TIE_REL = 2.0**-19  # ~1.9e-6 relative: 32 float32 ulps
# the variants the chain writes, in pipeline order (the catalogue's, rerankeval.core.names); a run file with
# another name is a run from another system, read the way trec_eval reads it
VARIANT_ORDER = REPORT_ORDER


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
    """``(line number, qid, docid, rank, score)`` for each line of a TREC run, in file order, checked.

    A line with a column count other than 6, a rank that is not an integer or a score that is not a finite
    number raises :class:`ValueError` naming the file and line.
    """
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            where = f"{path}:{lineno}"
            if len(parts) != 6:
                raise ValueError(
                    f"{where}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}; "
                    "fix or remove the line"
                )
            q, _, doc, rank, score, _ = parts
            try:
                s, r = float(score), int(rank)
            except ValueError:
                raise ValueError(
                    f"{where}: rank {rank!r} must be an integer and score {score!r} a number; fix or remove the line"
                ) from None
            if not math.isfinite(s):
                raise ValueError(f"{where}: score {score!r} is not finite; fix or remove the line")
            yield lineno, q, doc, r, s


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
    """Read the normalised qrels written by :func:`write_qrels` (see ``rerankeval.corpus.beir`` for user files)."""
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


# --------------------------------------------------------------------------- the run contract
class RunContractError(ReRankEvalError, ValueError):
    """A run file breaks the run contract (duplicate units or tied / increasing scores)."""


@dataclass
class RunCheck:
    """What reading one TREC run file found."""

    variant: str
    path: str
    n_queries: int = 0
    n_lines: int = 0
    n_duplicate: int = 0  # a unit listed twice for one query (first occurrence kept)
    n_ties: int = 0  # a score equal to or above the previous one in file order
    n_rank_mismatch: int = 0  # rank column disagrees with the line order
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.n_duplicate or self.n_ties)

    def problems(self) -> list[str]:
        out = []
        if self.n_duplicate:
            out.append(f"{self.n_duplicate} duplicate unit(s) within a query")
        if self.n_ties:
            out.append(f"{self.n_ties} score(s) not strictly below the previous line")
        if self.n_rank_mismatch:
            out.append(f"{self.n_rank_mismatch} rank column value(s) out of line order")
        return out

    def note(self, example: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(example)


def _lines_by_query(path: Path, chk: RunCheck) -> dict[str, list[tuple[str, float, int]]]:
    raw: dict[str, list[tuple[str, float, int]]] = {}
    for _, q, doc, rank, s in iter_trec(path):
        raw.setdefault(q, []).append((doc, s, rank))
        chk.n_lines += 1
    return raw


def read_run_checked(path: str | os.PathLike[str], variant: str | None = None) -> tuple[Run, RunCheck]:
    """Read a TREC run in file order and check it against the run contract.

    Returns the run (per query, units in file order, first occurrence of a unit wins) and a
    :class:`RunCheck` counting duplicates and scores that are not strictly decreasing.
    """
    path = Path(path)
    chk = RunCheck(variant=variant or path.stem, path=str(path))
    run: Run = {}
    for q, items in _lines_by_query(path, chk).items():
        seen: dict[str, float] = {}
        prev = math.inf
        for i, (doc, s, rank) in enumerate(items, start=1):
            if s >= prev:
                chk.n_ties += 1
                chk.note(f"query {q}: {doc} scores {s!r} after {prev!r}")
            chk.n_rank_mismatch += rank != i
            prev = s
            if doc in seen:
                chk.n_duplicate += 1
                chk.note(f"query {q}: unit {doc} listed twice")
                continue
            seen[doc] = s
        run[q] = seen
    chk.n_queries = len(run)
    return run, chk


def assert_run_contract(checks: Iterable[RunCheck]) -> None:
    """Raise :class:`RunContractError` naming every run file with duplicate units or non-decreasing scores."""
    bad = [c for c in checks if not c.ok]
    if bad:
        lines = [f"{c.variant} ({c.path}): {', '.join(c.problems())}; e.g. {'; '.join(c.examples[:2])}" for c in bad]
        raise RunContractError(
            "run file(s) break the run contract (unit-level, deduplicated, strictly decreasing scores; "
            "see rerankeval.core.runs.write_trec): "
            + " | ".join(lines)
            + ". Re-run the stage that wrote them, or rename a file from another system to a name that is "
            "not a chain variant so that it is read the way trec_eval reads it."
        )


def unit_mapping_check(unit_run: Run, chunk_run: Run, unit_of: Mapping[str, str]) -> int:
    """Queries whose unit ranking is not a prefix of the chunk ranking mapped to units (first wins).

    0 means the unit-level run is exactly the chunk-level run deduplicated by unit (possibly truncated).
    Chunks not in the chunk table count as mismatches.
    """
    bad = 0
    for q, docs in unit_run.items():
        units: list[str] = []
        ok = True
        for chunk, _ in ranked(chunk_run.get(q, {})):
            u = unit_of.get(chunk)
            if u is None:
                ok = False
                break
            if u not in units:
                units.append(u)
        mine = list(docs)
        bad += not ok or units[: len(mine)] != mine
    return bad


def strict_order(run: Run) -> Run:
    """The same rankings with strictly decreasing scores in dict order (stable for ties)."""
    return {q: dict(strictly_decreasing(ranked(docs))) for q, docs in run.items()}


# --------------------------------------------------------------------------- run discovery
def order_variants(names: Iterable[str]) -> list[str]:
    """Chain variants in pipeline order (:data:`VARIANT_ORDER`), then the others alphabetically."""
    names = list(dict.fromkeys(names))
    known = [v for v in VARIANT_ORDER if v in names]
    return known + sorted(v for v in names if v not in VARIANT_ORDER)


def discover_runs(runs_dir: str | os.PathLike[str], variants: Sequence[str] | None = None) -> dict[str, Path]:
    """``variant -> run file`` for every ``*.trec`` directly in ``runs_dir`` (unit-level runs).

    Known variants come in pipeline order (:data:`VARIANT_ORDER`), others alphabetically after them.
    ``variants`` restricts (and orders) the result; a requested variant without a file raises.
    """
    runs_dir = Path(runs_dir)
    found = {p.stem: p for p in sorted(runs_dir.glob("*.trec"))} if runs_dir.is_dir() else {}
    if variants:
        missing = [v for v in variants if v not in found]
        if missing:
            raise FileNotFoundError(
                f"no run file for variant(s) {missing} in {runs_dir} (found: {sorted(found)}); run the stage "
                "that writes them (03-retrieve, 04-rerank) or drop them from eval_variants"
            )
        return {v: found[v] for v in variants}
    return {v: found[v] for v in order_variants(found)}


def is_external(variant: str) -> bool:
    """A run file the chain did not write (its name is not a chain variant)."""
    return variant not in VARIANT_ORDER


# --------------------------------------------------------------------------- runs from other systems
@dataclass
class ExternalRun:
    """What reading a run file from another system found (trec_eval's reading rules)."""

    variant: str
    path: str
    n_lines: int = 0
    n_queries: int = 0
    resorted: int = 0  # queries whose file order was not trec_eval's order
    n_ties: int = 0  # lines whose score equals another line's of the same query
    n_duplicate: int = 0  # a document listed twice for one query (its best-scored line kept)
    unknown_queries: list[str] = field(default_factory=list)  # not in the dataset's queries: ignored

    def describe(self) -> str:
        parts = [
            f"{self.variant} is a run file from another system ({self.path}), read the way trec_eval "
            "reads it: by score descending, ties by document id descending"
        ]
        if self.resorted:
            parts.append(f"{self.resorted} of {self.n_queries} queries were re-sorted")
        parts.append(f"{self.n_ties} lines had tied scores" if self.n_ties else "no tied scores")
        if self.n_duplicate:
            parts.append(f"{self.n_duplicate} duplicate documents dropped (the best-scored line kept)")
        if self.unknown_queries:
            shown = ", ".join(self.unknown_queries[:10]) + (" ..." if len(self.unknown_queries) > 10 else "")
            parts.append(f"{len(self.unknown_queries)} queries the dataset does not have were ignored: {shown}")
        return "; ".join(parts) + "."


def trec_eval_order(items: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """trec_eval's ranking of a query's lines: score descending, ties by document id descending."""
    return sorted(items, key=lambda kv: (kv[1], kv[0]), reverse=True)


def read_external_run(
    path: str | os.PathLike[str], known_qids: Iterable[str] | None = None, variant: str | None = None
) -> tuple[Run, ExternalRun]:
    """Read a TREC run written by another system as trec_eval does, with a note of what was done.

    The rank column is ignored; each query is ordered by :func:`trec_eval_order`; a document listed twice
    keeps its best-scored line; queries not in ``known_qids`` are listed and dropped. Returns the run with
    strictly decreasing scores in that order (so every evaluator sees the same ranking). Broken lines raise
    :class:`ValueError` with file and line (:func:`iter_trec`).
    """
    path = Path(path)
    note = ExternalRun(variant=variant or path.stem, path=str(path))
    raw: dict[str, list[tuple[str, float]]] = {}
    for _, q, doc, _, s in iter_trec(path):
        raw.setdefault(q, []).append((doc, s))
        note.n_lines += 1
    known = set(known_qids) if known_qids is not None else None
    run: Run = {}
    for q, items in raw.items():
        if known is not None and q not in known:
            note.unknown_queries.append(q)
            continue
        order = trec_eval_order(items)
        best = dict(order[::-1])  # the best-scored line of a document wins
        kept = [(d, s) for d, s in order if best.pop(d, None) is not None]
        note.n_duplicate += len(items) - len(kept)
        scores = [s for _, s in kept]
        note.n_ties += len(scores) - len(set(scores))
        note.resorted += [d for d, _ in items] != [d for d, _ in order]
        run[q] = dict(strictly_decreasing(kept))
    note.n_queries = len(run)
    note.unknown_queries.sort()
    return run, note
