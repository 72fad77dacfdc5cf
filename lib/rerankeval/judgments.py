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

An existing judgment is never silently overwritten: recording a different grade for a judged pair, or merging a
file that disagrees with the qrels, raises :class:`JudgmentConflict` naming both grades and how to resolve it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from . import corpus
from .ioutil import atomic_write_text, sha256_file
from .paths import DatasetPaths
from .runs import Qrels, Run, ranked

HEADER = "query-id\tcorpus-id\tscore\n"
REVIEW_COLUMNS = ["qid", "query", "unit_id", "variants", "n_variants", "best_rank", "snippet"]


class JudgmentConflict(ValueError):
    """A grade disagrees with an existing judgment; the message names both and how to resolve it."""


def split_of(dp: DatasetPaths) -> str:
    """The qrels split stage 01 extracted (``stats.json``), ``test`` when not recorded."""
    try:
        return str(json.loads(dp.corpus_stats.read_text(encoding="utf-8")).get("split") or "test")
    except (OSError, ValueError):
        return "test"


def read_judgments(path: Path) -> list[tuple[str, str, int, int]]:
    """``(qid, unit_id, grade, line number)`` of each line of a judgments file (none when it does not exist)."""
    if not path.is_file():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t")
        if not line.strip() or (lineno == 1 and parts[0] == "query-id"):
            continue
        try:
            out.append((parts[0], parts[1], int(parts[2]), lineno))
        except (IndexError, ValueError):
            raise ValueError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>integer grade', got "
                             f"{line!r}; fix or delete that line") from None
    return out


def _write(path: Path, rows: Sequence[tuple[str, str, int]]) -> Path:
    return atomic_write_text(path, HEADER + "".join(f"{q}\t{u}\t{g}\n" for q, u, g in rows))


def _check_new(dp: DatasetPaths, qid: str, unit_id: str, grade: int) -> None:
    if not isinstance(grade, int) or isinstance(grade, bool) or grade < 0:
        raise ValueError(f"grade must be a whole number >= 0 (0 not relevant, 1 relevant, 2 highly), got {grade!r}")
    if qid not in corpus.load_queries(dp):
        raise ValueError(f"query {qid!r} is not in {dp.queries}: only queries of queries.jsonl can be judged. "
                         "To judge a free-text query, add it to the dataset's queries.jsonl with an id and re-run.")
    if unit_id not in set(corpus.unit_of(dp).values()):
        raise ValueError(f"unit {unit_id!r} is not in the corpus of {dp.name} (see {dp.chunks}): judge a unit id "
                         "the explorer shows")


def record(dp: DatasetPaths, qid: str, unit_id: str, grade: int, *, split: str | None = None,
           replace: bool = False) -> str:
    """Record ``grade`` for (``qid``, ``unit_id``) in ``dp.judgments(split)``; ``recorded``, ``unchanged`` or
    ``replaced``. Raises :class:`JudgmentConflict` when the qrels judge the pair differently, or when the file
    does and ``replace`` is False."""
    _check_new(dp, qid, unit_id, grade)
    split = split or split_of(dp)
    path = dp.judgments(split)
    old = corpus.load_qrels(dp).get(qid, {}).get(unit_id)
    if old is not None and old != grade:
        raise JudgmentConflict(
            f"{qid} / {unit_id} is already judged {old} in the dataset's qrels/{split}.tsv; the new grade {grade} "
            f"is refused (a judgment recorded while exploring never overrides the qrels). To change it, edit "
            f"{dp.source_qrels(split)} and re-run make report.")
    rows = [(q, u, g) for q, u, g, _ in read_judgments(path)]
    mine = next((g for q, u, g in rows if (q, u) == (qid, unit_id)), None)
    if old == grade or mine == grade:
        return "unchanged"
    if mine is not None and not replace:
        raise JudgmentConflict(
            f"{qid} / {unit_id} was already judged {mine} in {path}; the new grade {grade} is refused. To replace "
            f"it, call judge(..., replace=True) (or edit that file).")
    rows = [r for r in rows if (r[0], r[1]) != (qid, unit_id)] + [(qid, unit_id, grade)]
    _write(path, rows)
    return "replaced" if mine is not None else "recorded"


def merged_qrels(dp: DatasetPaths, qrels: Qrels, split: str | None = None) -> tuple[Qrels, dict[str, Any]]:
    """``qrels`` plus the grades of ``dp.judgments(split)``, and the record of the merge (for the manifest).

    A grade for a pair the qrels judge differently raises :class:`JudgmentConflict`; a line naming a query
    the qrels and query table do not know is ignored and listed in the record.
    """
    split = split or split_of(dp)
    path = dp.judgments(split)
    rec: dict[str, Any] = {"file": str(path), "exists": path.is_file(), "merged": 0, "already_in_qrels": 0}
    if not path.is_file():
        return qrels, rec
    known = set(qrels) | set(corpus.load_queries(dp))
    out = {q: dict(rel) for q, rel in qrels.items()}
    ignored = []
    for q, u, g, lineno in read_judgments(path):
        old = qrels.get(q, {}).get(u)
        if old is not None and old != g:
            raise JudgmentConflict(
                f"{path}:{lineno} grades {q} / {u} as {g}, but the qrels (qrels/{split}.tsv) say {old}. Resolve it: "
                f"delete or correct line {lineno} of {path}, or change the grade in {dp.source_qrels(split)} and "
                "re-run make report.")
        if q not in known:
            ignored.append(f"line {lineno}: unknown query {q}")
            continue
        rec["already_in_qrels" if old is not None else "merged"] += 1
        out.setdefault(q, {})[u] = g
    rec.update(sha256=sha256_file(path), ignored=ignored)
    return out, rec


def judged_at_k(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], k: int) -> dict[str, float]:
    """variant -> mean over ``qids`` (those it returned units for) of ir_measures' ``Judged@k``."""
    import ir_measures

    measure = ir_measures.Judged @ k
    wanted = set(qids)
    qrels_df = pd.DataFrame([(q, d, int(g)) for q in sorted(wanted & set(qrels)) for d, g in qrels[q].items()],
                            columns=["query_id", "doc_id", "relevance"])
    out = {}
    for v, run in runs.items():
        rows = [(q, d, float(s)) for q in sorted(wanted & set(run)) for d, s in run[q].items()]
        run_df = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])
        found = ir_measures.iter_calc([measure], qrels_df, run_df) if rows and len(qrels_df) else []
        values = [m.value for m in found if m.query_id in run]  # ir_measures gives 0 for unanswered queries
        out[v] = float(sum(values) / len(values)) if values else float("nan")
    return out


def unjudged_pool(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], k: int,
                  queries: Mapping[str, str] | None = None, snippet=None) -> pd.DataFrame:
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
            rows.append([q, (queries or {}).get(q, ""), d, ",".join(by_v), len(by_v), by_v[best_v],
                         snippet(best_v, q, d) if snippet else ""])
    df = pd.DataFrame(rows, columns=REVIEW_COLUMNS)
    return df.sort_values(["qid", "n_variants", "best_rank", "unit_id"], ascending=[True, False, True, True],
                          kind="stable", ignore_index=True)


def judging_summary(merge: Mapping[str, Any], runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str],
                    k: int) -> dict[str, Any]:
    """What stage 05 records about judging: Judged@k per variant, the pool size and the merged judgments."""
    pool = unjudged_pool(runs, qrels, qids, k)
    return {"k": k, "judged_at_k": judged_at_k(runs, qrels, qids, k), "unjudged_units": len(pool),
            "review_file": "review/unjudged.tsv", "judgments": dict(merge)}


def write_review(dp: DatasetPaths, runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], k: int,
                 chunk_runs: Mapping[str, Run] | None = None) -> Path:
    """Write :func:`unjudged_pool` (with snippets) to ``dp.unjudged_review`` (TSV, one unit per line)."""
    from .htmlsafe import Snippets, shorten

    snips = Snippets(corpus.load_chunks(dp), chunk_runs)
    pool = unjudged_pool(runs, qrels, qids, k, corpus.load_queries(dp),
                         lambda v, q, d: shorten(snips.get(v, q, d)["text"], 300))
    pool["query"] = pool["query"].map(lambda s: " ".join(str(s).split()))
    return atomic_write_text(dp.unjudged_review, pool.to_csv(sep="\t", index=False))
