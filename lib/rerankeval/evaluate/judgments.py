"""Judging as you explore: Judged@k, the pool of unjudged units to review, and grades recorded by the explorer.

On one's own documents the judgments are always incomplete, and a variant can be punished for finding a good
page nobody judged. Three tools make that visible and fixable:

- :func:`judged_at_k`: per variant, the share of its top k units that have a judgment (any grade, 0 too), as
  ``ir_measures``' ``Judged@k`` computes it (judged units in the top k / units in the top k), averaged over
  the evaluated queries the variant returned something for;
- :func:`unjudged_pool`: the unjudged units of every variant's top k (the pool, as TREC builds it), with the
  variants that retrieved each and its best rank; stage 05 writes it to ``dp.unjudged_review``;
- :func:`record`: a grade for (query, unit), appended to the dataset's own judgments file
  ``<dataset>/qrels/judgments-<split>.tsv`` (``dp.judgments(split)``; beside the qrels, so deleting
  ``results/`` keeps it). :func:`merged_qrels` merges it into the qrels stage 05 evaluates with, and the
  merge is recorded in the analysis summary and the manifest (file, sha256, how many merged).

Each grade carries the sha256 of the unit's text it was given on (a fourth column, ``unit-sha256``;
:mod:`rerankeval.corpus.unithash`). When the unit's text has changed since (a PDF replaced under the same name),
:func:`merged_qrels` sets its grades aside, with a warning naming the file, the page and the count, and records
them under ``stale`` in the merge record; so does a drafted question's grade on its source page (the draft's
``metadata.unit_sha256``, or the hash its review decision recorded). Files written before hashes were kept (three
columns) are read as of unknown hash: merged, as before.

An existing judgment is never silently overwritten: recording a different grade for a judged pair, or merging a
file that disagrees with the qrels, raises :class:`JudgmentConflict` naming both grades and how to resolve it.
The judgments file is checked like the qrels (:mod:`rerankeval.corpus.beir`): a pair graded twice with different grades,
a unit that is not in the corpus, or a grade outside the dataset's scale (:func:`grade_scale`) is refused with the
file, the line and the fix; the same pair twice with the same grade is kept once and listed in the merge record.
Concurrent writers (two explorers, two processes, a reviewer) never lose a grade: :func:`record` holds the dataset
folder's one lock (:func:`rerankeval.core.ioutil.dataset_lock`) around its read-modify-write, and replaces the
file atomically.
"""

from __future__ import annotations

import difflib
import json
import numbers
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_text, dataset_lock, sha256_file
from rerankeval.core.log import get_logger
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, Run, ranked
from rerankeval.corpus import contract as corpus
from rerankeval.corpus import queryset
from rerankeval.corpus.beir import InputError
from rerankeval.corpus.snippets import Snippets, shorten
from rerankeval.corpus.unithash import is_stale, read_grade_lines, unit_hashes

HEADER = "query-id\tcorpus-id\tscore\tunit-sha256\n"
REVIEW_COLUMNS = ["qid", "query", "unit_id", "variants", "n_variants", "best_rank", "snippet"]
# review/unjudged.tsv adds ``weight`` and ``moves`` (the judging queue's, :func:`queue_order`) to these
DEFAULT_TOP_GRADE = 2  # the top of the scale when the qrels hold no positive grade (0 not, 1 relevant, 2 highly)
log = get_logger(__name__)
_PAGE_ID = re.compile(r"^(?P<file>.+)#p(?P<page>\d+)$")


class JudgmentConflict(ReRankEvalError, ValueError):
    """A grade disagrees with an existing judgment; the message names both and how to resolve it."""


def _in_dataset(dp: DatasetPaths, path: Path) -> str:
    """``path`` relative to the dataset folder (a manifest carries no absolute path of this machine)."""
    try:
        return str(Path(path).relative_to(dp.source))
    except ValueError:
        return Path(path).name


def split_of(dp: DatasetPaths) -> str:
    """The qrels split stage 01 extracted (``stats.json``), ``test`` when not recorded."""
    try:
        return str(json.loads(dp.corpus_stats.read_text(encoding="utf-8")).get("split") or "test")
    except (OSError, ValueError):
        return "test"


def _looked_at(path: Path) -> bool:
    """Whether the judgments file exists, found by opening it: the chain's read trace sees the look also when there
    is no file yet, so a grade recorded later re-runs the analysis (``apps.chain.files``)."""
    try:
        with path.open("rb"):
            return True
    except OSError:
        return False


def read_judgments(path: Path) -> list[tuple[str, str, int, int]]:
    """``(qid, unit_id, grade, line number)`` of each line of a judgments file (none when it does not exist)."""
    return [row[:4] for row in read_grade_lines(path)]


def _write(path: Path, rows: Sequence[tuple[str, str, int, str]]) -> Path:
    return atomic_write_text(path, HEADER + "".join(f"{q}\t{u}\t{g}\t{h}\n" for q, u, g, h in rows))


def grade_scale(qrels: Qrels) -> int:
    """The top grade of the dataset's scale: the largest grade in its qrels (:data:`DEFAULT_TOP_GRADE` when none
    is positive); a grade is valid from 0 to it."""
    top = max((int(g) for rel in qrels.values() for g in rel.values()), default=0)
    return top if top > 0 else DEFAULT_TOP_GRADE


def _scale_text(top: int) -> str:
    return f"grades are 0-{top} on this dataset (0 not relevant, {top} the highest grade its qrels use)"


def as_grade(grade: Any, top: int) -> int:
    """``grade`` as an int (a whole number: ``2``, ``np.int64(2)``, ``2.0``), checked against the scale 0..``top``."""
    whole = None
    if isinstance(grade, numbers.Integral) and not isinstance(grade, bool):
        whole = int(grade)
    elif isinstance(grade, numbers.Real) and not isinstance(grade, bool) and float(grade).is_integer():
        whole = int(grade)
    if whole is None:
        raise ValueError(f"grade must be a whole number, got {grade!r}: {_scale_text(top)}")
    if not 0 <= whole <= top:
        raise ValueError(f"grade {whole} is outside the scale: {_scale_text(top)}. Give a grade from 0 to {top}.")
    return whole


def _pages(dp: DatasetPaths) -> tuple[dict[str, tuple[str, int, str]], dict[str, tuple[str, int]], dict[str, str]]:
    """What stage 01 saw of each PDF (``pages.csv``, ``skipped.csv``): page unit id -> (file, page, note), file id
    (white space as ``_``) -> (file, page count), and skipped file id -> why. All empty for a BEIR dataset."""

    def read(path: Path) -> pd.DataFrame:
        return pd.read_csv(path, dtype=str, keep_default_na=False) if path.is_file() else pd.DataFrame()

    pages, skipped = read(dp.pages_csv), read(dp.skipped_csv)
    by_unit: dict[str, tuple[str, int, str]] = {}
    count: dict[str, tuple[str, int]] = {}
    if {"file", "page", "unit_id"} <= set(pages.columns):
        notes = pages["note"] if "note" in pages.columns else [""] * len(pages)
        for f, pg, u, note in zip(pages.file, pages.page, pages.unit_id, notes, strict=True):
            by_unit[u] = (f, int(pg), note)
            fid = "_".join(f.split())
            count[fid] = (f, max(count.get(fid, (f, 0))[1], int(pg)))
    why = (
        {"_".join(f.split()): r for f, r in zip(skipped.file, skipped.reason, strict=True)}
        if {"file", "reason"} <= set(skipped.columns)
        else {}
    )
    return by_unit, count, why


def unknown_unit(dp: DatasetPaths, unit_id: str, units: set[str]) -> str:
    """Why ``unit_id`` is not a unit of the corpus: a page with no text, a page past the file's end, a skipped
    file, or a typo (with the closest unit id, by :mod:`difflib`)."""
    head = f"unit {unit_id!r} is not in the corpus of {dp.name} ({dp.chunks})"
    spaced = "_".join(unit_id.split())
    if spaced != unit_id and spaced in units:
        return f"{head}: did you mean {spaced!r} (unit ids write white space as '_')?"
    m = _PAGE_ID.match(spaced)
    if m:
        by_unit, count, skipped = _pages(dp)
        fid, page = m["file"], int(m["page"])
        if spaced in by_unit:
            f, pg, note = by_unit[spaced]
            why = note or (
                "no extractable text: a scanned image, a blank page, or text only in a form field or annotation"
            )
            return (
                f"{head}: page {pg} of {f} has no text in the corpus (it was skipped at extraction: {why}), so "
                "no variant can retrieve it and a grade for it cannot count"
            )
        if fid in skipped:
            return f"{head}: the file {fid} was skipped at extraction ({skipped[fid]})"
        if fid in count:
            return f"{head}: {count[fid][0]} has {count[fid][1]} page(s), there is no page {page}"
    close = difflib.get_close_matches(unit_id, sorted(units), n=1)
    return head + (f": did you mean {close[0]!r}?" if close else "")


def _sentence(text: str) -> str:
    return text if text.endswith(("?", ".")) else text + "."


def _check_new(
    dp: DatasetPaths, qid: str, unit_id: str, grade: Any, qrels: Qrels
) -> tuple[int, set[str], pd.DataFrame]:
    """The grade as an int, the corpus' unit ids and its chunks, or ValueError naming what is wrong."""
    grade = as_grade(grade, grade_scale(qrels))
    if qid not in corpus.load_queries(dp):
        raise ValueError(
            f"query {qid!r} is not in {dp.queries}: only queries of queries.jsonl can be judged. "
            "To judge a free-text query, add it with explore.add_question(dp, text, relevant=[unit ids]) "
            "and re-run make report."
        )
    chunks = corpus.load_chunks(dp)
    units = set(chunks.unit_id)
    if unit_id not in units:
        raise ValueError(f"{_sentence(unknown_unit(dp, unit_id, units))} Judge a unit id the explorer shows.")
    return grade, units, chunks


def checked_judgments(
    dp: DatasetPaths, path: Path, qrels: Qrels, units: set[str] | None = None
) -> tuple[list[tuple[str, str, int, int]], list[str]]:
    """The lines of the judgments file ``path`` (:func:`read_judgments`, each pair once), checked as the qrels
    reader checks the qrels, and the lines repeating a pair with the same grade (accepted, kept once).

    Raises :class:`JudgmentConflict` for a pair graded twice differently, :class:`rerankeval.corpus.beir.InputError` for
    a unit not in the corpus or a grade outside :func:`grade_scale`: each names the file, the line and the fix.
    """
    rows = read_judgments(path)
    if not rows:
        return [], []
    units = set(corpus.unit_of(dp).values()) if units is None else units
    top = grade_scale(qrels)
    first: dict[tuple[str, str], tuple[str, str, int, int]] = {}
    repeated = []
    for row in rows:
        q, u, g, lineno = row
        if not 0 <= g <= top:
            raise InputError(
                f"{path}:{lineno}: grade {g} for {q} / {u} is outside the scale: {_scale_text(top)}. "
                f"Fix: correct or delete line {lineno} of {path}."
            )
        if u not in units:
            raise InputError(
                f"{path}:{lineno}: {_sentence(unknown_unit(dp, u, units))} Fix: correct or delete "
                f"line {lineno} of {path}."
            )
        seen = first.setdefault((q, u), row)
        if seen is row:
            continue
        if seen[2] != g:
            raise JudgmentConflict(
                f"{path}:{seen[3]} and {path}:{lineno} grade {q} / {u} differently ({seen[2]} and {g}). Fix: keep "
                f"one of the two lines (delete the other) and re-run."
            )
        repeated.append(f"line {lineno}: {q} / {u} repeats line {seen[3]} with the same grade {g} (kept once)")
    return list(first.values()), repeated


def record(
    dp: DatasetPaths, qid: str, unit_id: str, grade: Any, *, split: str | None = None, replace: bool = False
) -> str:
    """Record ``grade`` for (``qid``, ``unit_id``) in ``dp.judgments(split)``, with the sha256 of the unit's
    current text; ``recorded``, ``unchanged`` or ``replaced``. Raises :class:`JudgmentConflict` when the qrels judge
    the pair differently, or when the file does and ``replace`` is False (a grade given on the unit's previous text
    is replaced without it); ``ValueError`` for a grade off the dataset's scale (:func:`as_grade`) or an unknown
    query or unit. The read-modify-write holds the dataset folder's lock
    (:func:`rerankeval.core.ioutil.dataset_lock`)."""
    qrels = corpus.load_qrels(dp)
    grade, units, chunks = _check_new(dp, qid, unit_id, grade, qrels)
    sha = unit_hashes(chunks, only=[unit_id]).get(unit_id, "")
    split = split or split_of(dp)
    path = dp.judgments(split)
    old = qrels.get(qid, {}).get(unit_id)
    if old is not None and old != grade:
        raise JudgmentConflict(
            f"{qid} / {unit_id} is already judged {old} in the dataset's qrels/{split}.tsv; the new grade {grade} "
            f"is refused (a judgment recorded while exploring never overrides the qrels). To change it, edit "
            f"{dp.source_qrels(split)} and re-run make report."
        )
    with dataset_lock(dp.source):
        checked_judgments(dp, path, qrels, units)
        lines = read_grade_lines(path)
        mine = next((row for row in lines if row[:2] == (qid, unit_id)), None)
        stale = mine is not None and is_stale(mine[4], sha)
        if old == grade or (mine is not None and mine[2] == grade and not stale):
            return "unchanged"
        if mine is not None and not replace and not stale:
            raise JudgmentConflict(
                f"{qid} / {unit_id} was already judged {mine[2]} in {path}; the new grade {grade} is refused. To "
                f"replace it, call judge(..., replace=True) (or edit that file)."
            )
        rows = [(q, u, g, h) for q, u, g, _, h in lines if (q, u) != (qid, unit_id)]
        _write(path, rows + [(qid, unit_id, grade, sha)])
    return "replaced" if mine is not None else "recorded"


def merged_qrels(dp: DatasetPaths, qrels: Qrels, split: str | None = None) -> tuple[Qrels, dict[str, Any]]:
    """``qrels`` plus the grades of ``dp.judgments(split)``, and the record of the merge (for the manifest).

    The file is checked first (:func:`checked_judgments`: a pair graded twice differently, a unit not in the corpus
    or a grade off the scale stops the merge, naming the file and line). A grade for a pair the qrels judge
    differently raises :class:`JudgmentConflict`; a line naming a query the qrels and query table do not know is
    ignored and listed in the record, as are the lines repeating a pair with the same grade. A grade given on a
    unit's earlier text (its ``unit-sha256`` differs from the unit's text now), and a drafted question's grade on a
    source page that changed since it was drafted or reviewed, are set aside: listed under ``stale`` (file, unit,
    count) with a warning, never merged. Lines without a hash (files from before hashes were kept) are merged.
    """
    split = split or split_of(dp)
    path = dp.judgments(split)
    rec: dict[str, Any] = {
        "file": _in_dataset(dp, path),
        "exists": _looked_at(path),
        "merged": 0,
        "already_in_qrels": 0,
        "stale": [],
    }
    out = {q: dict(rel) for q, rel in qrels.items()}
    rec["stale"] += _set_aside_drafts(dp, out)
    if not rec["exists"]:
        return out, rec
    recorded = {(q, u): h for q, u, _, _, h in reversed(read_grade_lines(path))}  # the first line of a pair wins
    chunks = corpus.load_chunks(dp) if recorded else None
    rows, repeated = checked_judgments(dp, path, qrels, None if chunks is None else set(chunks.unit_id))
    known = set(qrels) | set(corpus.load_queries(dp))
    hashed = {u for (_, u), h in recorded.items() if h}
    now = unit_hashes(chunks, only=hashed) if hashed and chunks is not None else {}
    ignored, stale = [], {}
    for q, u, g, lineno in rows:
        old = qrels.get(q, {}).get(u)
        if old is not None and old != g:
            raise JudgmentConflict(
                f"{path}:{lineno} grades {q} / {u} as {g}, but the qrels (qrels/{split}.tsv) say {old}. Resolve it: "
                f"delete or correct line {lineno} of {path}, or change the grade in {dp.source_qrels(split)} and "
                "re-run make report."
            )
        if q not in known:
            ignored.append(f"line {lineno}: unknown query {q}")
            continue
        if is_stale(recorded.get((q, u)), now.get(u)):
            stale[u] = stale.get(u, 0) + 1
            continue
        rec["already_in_qrels" if old is not None else "merged"] += 1
        out.setdefault(q, {})[u] = g
    rec["stale"] += _say_stale(
        dp,
        path,
        stale,
        "grade(s)",
        f"grade the page again with explore.judge(dp, qid, "
        f"unit_id, grade) (it replaces the old grade), or delete those lines of {path}",
    )
    rec.update(sha256=sha256_file(path), ignored=ignored, repeated=repeated)
    return out, rec


def _hashes(dp: DatasetPaths, units: set[str]) -> dict[str, str]:
    """unit -> sha256 of its text now, for ``units`` (nothing read when there are none)."""
    return unit_hashes(corpus.load_chunks(dp), only=units) if units else {}


def _set_aside_drafts(dp: DatasetPaths, out: Qrels) -> list[dict[str, Any]]:
    """Remove from ``out`` (in place) the drafted grade of every draft whose source page changed since it was
    drafted or reviewed, when the drafts are the evaluated questions; what was set aside."""
    if queryset.query_source(dp).kind != queryset.GENERATED:
        return []
    drafts = [d for d in queryset.read_drafts(dp.source_draft_queries) if d.status != queryset.REJECTED]
    made = {d.qid: (d.unit, d.unit_sha256) for d in drafts}
    now = _hashes(dp, {u for u, h in made.values() if h and u})
    stale: dict[str, int] = {}
    for qid, (unit, sha) in made.items():
        if is_stale(sha, now.get(unit)) and unit in out.get(qid, {}):
            del out[qid][unit]
            if not out[qid]:
                del out[qid]
            stale[unit] = stale.get(unit, 0) + 1
    return _say_stale(
        dp,
        dp.source_draft_qrels,
        stale,
        "drafted question(s)",
        "review those drafts again in the explorer (accept, edit or reject each: a decision records "
        "the page as it reads now), or re-draft: make questions",
    )


def _say_stale(dp: DatasetPaths, path: Path, stale: Mapping[str, int], what: str, fix: str) -> list[dict[str, Any]]:
    """Warn once per unit whose grades in ``path`` were set aside; the records for the merge summary."""
    for unit, n in sorted(stale.items()):
        log.warning(
            f"{path}: {n} {what} of {unit} set aside (not merged): the page's text changed since they were "
            f"made (the file replaced under the same name?). Fix: {fix}."
        )
    return [{"file": _in_dataset(dp, path), "unit": u, "count": n} for u, n in sorted(stale.items())]


def judged_at_k(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], k: int) -> dict[str, float]:
    """variant -> mean over ``qids`` (those it returned units for) of ir_measures' ``Judged@k``."""
    import ir_measures

    measure = ir_measures.Judged @ k
    wanted = set(qids)
    qrels_df = pd.DataFrame(
        [(q, d, int(g)) for q in sorted(wanted & set(qrels)) for d, g in qrels[q].items()],
        columns=["query_id", "doc_id", "relevance"],
    )
    out = {}
    for v, run in runs.items():
        rows = [(q, d, float(s)) for q in sorted(wanted & set(run)) for d, s in run[q].items()]
        run_df = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])
        found = ir_measures.iter_calc([measure], qrels_df, run_df) if rows and len(qrels_df) else []
        values = [m.value for m in found if m.query_id in run]  # ir_measures gives 0 for unanswered queries
        out[v] = float(sum(values) / len(values)) if values else float("nan")
    return out


def unjudged_pool(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    k: int,
    queries: Mapping[str, str] | None = None,
    snippet=None,
) -> pd.DataFrame:
    """The unjudged units of every variant's top ``k`` per query (:data:`REVIEW_COLUMNS`).

    ``snippet(variant, qid, unit) -> str`` gives the text shown (from the variant with the best rank).
    """
    rows = []
    for q in qids:
        seen: dict[str, dict[str, int]] = {}
        for v, run in runs.items():
            for rank, (d, _) in enumerate(ranked(run.get(q, {}))[:k], start=1):
                if d not in qrels.get(q, {}):
                    seen.setdefault(d, {})[v] = rank
        for d, by_v in seen.items():
            best_v = min(by_v, key=lambda v: (by_v[v], list(runs).index(v)))
            rows.append(
                [
                    q,
                    (queries or {}).get(q, ""),
                    d,
                    ",".join(by_v),
                    len(by_v),
                    by_v[best_v],
                    snippet(best_v, q, d) if snippet else "",
                ]
            )
    df = pd.DataFrame(rows, columns=REVIEW_COLUMNS)
    return df.sort_values(
        ["qid", "n_variants", "best_rank", "unit_id"],
        ascending=[True, False, True, True],
        kind="stable",
        ignore_index=True,
    )


def judging_summary(
    merge: Mapping[str, Any], runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], k: int
) -> dict[str, Any]:
    """What stage 05 records about judging: Judged@k per variant, the pool size and the merged judgments."""
    pool = unjudged_pool(runs, qrels, qids, k)
    return {
        "k": k,
        "judged_at_k": judged_at_k(runs, qrels, qids, k),
        "unjudged_units": len(pool),
        "review_file": "review/unjudged.tsv",
        "judgments": dict(merge),
    }


def write_review(
    dp: DatasetPaths,
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    k: int,
    chunk_runs: Mapping[str, Run] | None = None,
    weights: Mapping[tuple[str, str], tuple[float, str]] | None = None,
) -> Path:
    """Write :func:`unjudged_pool` (with snippets) to ``dp.unjudged_review`` (TSV, one unit per line), in the
    judging queue's order when ``weights`` are given (:func:`queue_order`)."""
    snips = Snippets(corpus.load_chunks(dp), chunk_runs)
    pool = unjudged_pool(
        runs, qrels, qids, k, corpus.load_queries(dp), lambda v, q, d: shorten(snips.get(v, q, d)["text"], 300)
    )
    pool["query"] = pool["query"].map(lambda s: " ".join(str(s).split()))
    return atomic_write_text(dp.unjudged_review, queue_order(pool, weights or {}).to_csv(sep="\t", index=False))


def queue_order(pool: pd.DataFrame, weights: Mapping[tuple[str, str], tuple[float, str]]) -> pd.DataFrame:
    """``pool`` (:func:`unjudged_pool`) with ``weight`` and ``moves`` (the open comparisons a unit's grade can move)
    from the judging queue's ``weights`` ((qid, unit) -> (weight, moves):
    :func:`rerankeval.evaluate.incomplete.review_weights`), heaviest first; the units that move no open comparison
    last (weight 0), in the pool's order."""
    keys = list(zip(pool.qid.astype(str), pool.unit_id.astype(str), strict=True))
    out = pool.assign(
        weight=[round(float(weights.get(key, (0.0, ""))[0]), 6) for key in keys],
        moves=[weights.get(key, (0.0, ""))[1] for key in keys],
    )
    return out.sort_values("weight", ascending=False, kind="stable", ignore_index=True)
