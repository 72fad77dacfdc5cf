"""How far to trust an LLM judge: its agreement with human grades, and the agreement of two system rankings.

- :func:`cohen_kappa`: Cohen's kappa (Cohen, "A Coefficient of Agreement for Nominal Scales", Educational and
  Psychological Measurement 20, 1960), and with linear weights the weighted kappa (Cohen, "Weighted kappa:
  Nominal scale agreement with provision for scaled disagreement or partial credit", Psychological Bulletin 70,
  1968): ``1 - sum(w * observed) / sum(w * expected)`` over the confusion matrix, ``expected`` the product of
  its margins. Computed from the matrix it also returns (tests cross-check it against sklearn).
- :func:`agreement`: on the pairs both the humans and the LLM graded, kappa binary (a human grade > 0 is relevant,
  an LLM grade from 2: UMBRELA's 0 and 1 are not relevant, :mod:`rerankeval.core.judge_grades`) and graded (0-3,
  linear weights), the confusion matrix, and a plain warning below :data:`LOW_KAPPA` (Landis and
  Koch's "fair" band ends at .4). When the human grades of the overlap are all of one class kappa cannot measure
  anything (it is 0 or undefined whatever the judge does): that is said, and the share of the humans' relevant
  pairs the LLM also calls relevant is given instead.
- :func:`kendall_tau`: Kendall's tau-b between two system rankings (scipy.stats.kendalltau), with the number
  of systems and of pairs of systems it rests on.

The LLM's grades are a file of their own in the dataset folder, ``qrels/llm-<model>-<hash>.tsv`` with the record
of the model that wrote it beside it (:mod:`rerankeval.core.judge_grades`), written by
:mod:`rerankeval.questions.assess`; this module only reads it (:func:`llm_qrels_files`, :func:`read_llm_qrels`):
evaluate never calls the LLM. 05 reads one judge's file, never two as one (:func:`analysis_qrels`).

Grades are labelled for what they are: on a dataset whose questions were drafted by an LLM (``queries.draft.jsonl``)
the base grades are the drafts' source units, never "human" (``qrels_source`` ``drafts`` / ``drafts+llm``), and a
judge that is the model that drafted the questions is said so (:func:`self_judged`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rerankeval.core import judge_grades
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels
from rerankeval.corpus import queryset
from rerankeval.evaluate import judgments

LOW_KAPPA = 0.4
LOW_KAPPA_WARNING = "this judge agrees with your judgments little better than chance"
LABELS = (0, 1, 2, 3)  # the LLM assessor's scale (UMBRELA's 0-3)


def llm_qrels_files(dp: DatasetPaths) -> list[Path]:
    """Every LLM assessor file of the dataset: those with a record of their model first, each group newest first
    (a file of the earlier naming, which two judges may have shared, only when no recorded one exists)."""
    folder = dp.source / "qrels"
    found = list(folder.glob("llm-*.tsv")) if folder.is_dir() else []
    return sorted(found, key=lambda p: (judge_grades.read_record(p) is None, -p.stat().st_mtime, p.name))


def read_llm_qrels(path: Path) -> Qrels:
    """``qid -> {unit: grade}`` of an LLM assessor file (header line, tab-separated, integer grades 0-3)."""
    out: Qrels = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split("\t")
        if not line.strip() or (lineno == 1 and parts[0] == "query-id"):
            continue
        try:
            q, u, g = parts[0].strip(), parts[1].strip(), int(parts[2])
        except (IndexError, ValueError):
            raise ValueError(
                f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>grade 0-3', got {line!r}; "
                "delete the file and re-run 09-assess (its replies are cached)"
            ) from None
        if g not in LABELS:
            raise ValueError(
                f"{path}:{lineno}: grade {g} is outside 0-3; delete the line or the file and re-run 09-assess"
            )
        out.setdefault(q, {})[u] = g
    return out


def confusion(a: Sequence[int], b: Sequence[int], labels: Sequence[int]) -> np.ndarray:
    """Counts of (row: ``a``'s label, column: ``b``'s label)."""
    index = {lab: i for i, lab in enumerate(labels)}
    m = np.zeros((len(labels), len(labels)), dtype=int)
    for x, y in zip(a, b, strict=True):
        m[index[x], index[y]] += 1
    return m


def cohen_kappa(
    a: Sequence[int], b: Sequence[int], labels: Sequence[int], weights: str | None = None
) -> tuple[float, np.ndarray]:
    """(kappa, confusion matrix) of two raters' labels; ``weights="linear"`` for weighted kappa (Cohen 1968).
    NaN when chance agreement is total (both raters used one and the same label)."""
    m = confusion(a, b, labels)
    n = m.sum()
    if n == 0:
        return math.nan, m
    k = len(labels)
    idx = np.arange(k)
    w = np.abs(idx[:, None] - idx[None, :]).astype(float) if weights == "linear" else 1.0 - np.eye(k)
    if weights == "linear" and k > 1:
        w /= k - 1
    expected = np.outer(m.sum(axis=1), m.sum(axis=0)) / n
    denom = float((w * expected).sum())
    return (math.nan if denom == 0 else 1.0 - float((w * m).sum()) / denom), m


def overlap_pairs(human: Qrels, llm: Qrels) -> list[tuple[str, str, int, int]]:
    """``(qid, unit, human grade, LLM grade)`` of every pair both graded, sorted."""
    return [
        (q, u, int(human[q][u]), int(g))
        for q in sorted(set(human) & set(llm))
        for u, g in sorted(llm[q].items())
        if u in human[q]
    ]


def agreement(human: Qrels, llm: Qrels, source: str = "") -> dict[str, Any]:
    """Kappa binary and graded, the confusion matrices and the warning, on the pairs both graded (JSON-able)."""
    pairs = overlap_pairs(human, llm)
    h, g = [p[2] for p in pairs], [p[3] for p in pairs]
    hb, gb = [int(x > 0) for x in h], [int(judge_grades.is_relevant(x)) for x in g]
    labels = sorted(set(LABELS) | set(h))
    kb, mb = cohen_kappa(hb, gb, (0, 1))
    kg, mg = cohen_kappa(h, g, labels, weights="linear")
    out: dict[str, Any] = {
        "source": source,
        "n_pairs": len(pairs),
        "kappa_binary": _num(kb),
        "kappa_graded": _num(kg),
        "confusion_binary": {"labels": [0, 1], "rows": "human", "columns": "llm", "counts": mb.tolist()},
        "confusion_graded": {"labels": labels, "rows": "human", "columns": "llm", "counts": mg.tolist()},
        "human_relevant": sum(hb),
        "llm_relevant_of_human_relevant": sum(1 for x, y in zip(hb, gb, strict=True) if x and y),
        "warning": "",
        "note": "",
    }
    out["note"], out["warning"] = _words(out, set(hb))
    return out


def _words(a: Mapping[str, Any], human_classes: set[int]) -> tuple[str, str]:
    n, kb = a["n_pairs"], a["kappa_binary"]
    if n == 0:
        return "no pair is graded by both the humans and the LLM: agreement cannot be measured", ""
    if len(human_classes) < 2:
        what = "relevant" if 1 in human_classes else "not relevant"
        share = (
            f"; the LLM calls {a['llm_relevant_of_human_relevant']} of the {a['human_relevant']} relevant "
            f"({a['llm_relevant_of_human_relevant'] / a['human_relevant']:.0%})"
            if a["human_relevant"]
            else ""
        )
        return (
            f"every one of the {n} human-graded pairs the LLM also graded is {what}, so kappa cannot measure "
            f"agreement (it is 0 or undefined whatever the judge does){share}; grade some non-relevant units "
            "in 00-explore to measure it"
        ), ""
    warn = f"kappa {kb:.2f} < {LOW_KAPPA}: {LOW_KAPPA_WARNING}" if kb is not None and kb < LOW_KAPPA else ""
    kg = a["kappa_graded"]
    return (f"Cohen's kappa on {n} pairs: binary {_fmt(kb)}, graded (0-3, linear weights) {_fmt(kg)}"), warn


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 4)


def _fmt(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.2f}"


def kendall_tau(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Any]:
    """Kendall's tau-b (scipy.stats.kendalltau) between two systems' scores (``system -> score``) on the
    systems both score, with ``n_systems`` and ``n_pairs`` (pairs of systems compared)."""
    from scipy.stats import kendalltau

    systems = sorted(set(a) & set(b))
    n = len(systems)
    out: dict[str, Any] = {"n_systems": n, "n_pairs": n * (n - 1) // 2, "tau": None, "p_value": None}
    if n < 2:
        out["note"] = f"{n} system(s) in common: Kendall's tau needs at least two"
        return out
    res = kendalltau([a[s] for s in systems], [b[s] for s in systems], variant="b")
    out.update(tau=_num(float(res.statistic)), p_value=_num(float(res.pvalue)))
    out["note"] = "" if out["tau"] is not None else "one ranking has every system tied: tau is undefined"
    return out


def merge_llm(human: Qrels, llm: Qrels, top: int) -> tuple[Qrels, int]:
    """``human`` plus the LLM's grades of the pairs no human judged (a human grade is never replaced), and how
    many were added. Each LLM grade is put on the human scale 0..``top`` by
    :func:`~rerankeval.core.judge_grades.to_qrels_grade`: UMBRELA's 0 and 1 are not relevant (0), a 3 is the human
    scale's top grade (not above it), a 2 one below."""
    out = {q: dict(rel) for q, rel in human.items()}
    added = 0
    for q, rel in llm.items():
        for u, g in rel.items():
            if u not in out.get(q, {}):
                out.setdefault(q, {})[u] = judge_grades.to_qrels_grade(g, top)
                added += 1
    return out, added


QRELS_SOURCES = ("human", "human+llm")
DRAFTS = {"human": "drafts", "human+llm": "drafts+llm"}  # the same sources on a drafted question set


def drafted_by(dp: DatasetPaths) -> list[str]:
    """The models that wrote the evaluated questions when they are generated (the drafts record it), else []."""
    src = queryset.query_source(dp)
    if src.kind != queryset.GENERATED or src.queries is None:
        return []
    return queryset.describe(queryset.read_drafts(src.queries))["models"]


def self_judged(path: Path, judge: str | None, drafters: Sequence[str]) -> str:
    """The drafting model that is also the judge of ``path`` ("" when none is): its recorded model, or for a file
    without a record the drafting model whose name the earlier naming gave the file."""
    if judge is not None:
        return judge if judge in drafters else ""
    return next((m for m in drafters if judge_grades.legacy_path(path.parent, m).name == path.name), "")


def _judge_record(dp: DatasetPaths, files: Sequence[Path], llm: Qrels) -> dict[str, Any]:
    """Who the judge is and what to warn about: one grade for nearly everything, its own drafts, an old file."""
    path, drafters = files[0], drafted_by(dp)
    judge = judge_grades.judge_of(path)
    mine = self_judged(path, judge, drafters)
    notes = [
        judge_grades.one_grade(g for rel in llm.values() for g in rel.values()),
        (
            f"WARNING: the LLM judge graded questions its own model wrote ({mine} drafted them and graded "
            f"{path.name}): these grades hold no human judgment. Judge with another model (JUDGE_MODEL), or grade "
            "some units in 00-explore."
        )
        if mine
        else "",
        judge_grades.legacy_note(path),
        (
            f"other LLM grades files left out (05 reads one judge's grades): {', '.join(p.name for p in files[1:])}"
            if len(files) > 1
            else ""
        ),
    ]
    return {
        "judge_model": judge or "",
        "drafted_by": list(drafters),
        "self_judged": bool(mine),
        "judge_warning": " ".join(n.rstrip(".") + "." for n in notes if n),
    }


def analysis_qrels(dp: DatasetPaths, qrels: Qrels, source: str) -> tuple[Qrels, dict[str, Any]]:
    """The qrels stage 05 evaluates with for ``source`` (``human``: ``qrels``, stage 01's merged with the explorer's
    judgments, as they are; ``human+llm``: plus the LLM file's grades of the pairs no human judged, on the human
    scale), and the record: the source used (``drafts`` / ``drafts+llm`` when the questions were drafted by an LLM:
    their source units are no human grades), the LLM file and its judge, how many grades it added, the judge's
    warnings, and the agreement with the human grades when a file exists (for a generated question set only the
    explorer's judgments are human grades, and only they are compared). The file read is the first of
    :func:`llm_qrels_files`: one judge's grades, never two as one.
    """
    if source not in QRELS_SOURCES:
        raise ValueError(f"qrels_source must be one of {', '.join(QRELS_SOURCES)}, got {source!r}")
    files = llm_qrels_files(dp)
    generated = queryset.query_source(dp).kind == queryset.GENERATED
    label = DRAFTS if generated else {s: s for s in QRELS_SOURCES}
    rec: dict[str, Any] = {
        "qrels_source": label[source],
        "requested": source,
        "llm_file": "",
        "llm_added": 0,
        "base": "drafts" if generated else "human",
        "agreement": {},
        "warning": "",
    }
    if not files:
        if source != "human":
            rec.update(
                qrels_source=label["human"],
                warning="qrels_source='human+llm' but the dataset has no LLM "
                "grades (qrels/llm-<model>-<hash>.tsv): no LLM grade is used. Run 09-assess with assess=true "
                'first (make report P="assess=true qrels_source=human+llm")',
            )
        return qrels, rec
    llm = read_llm_qrels(files[0])
    human = judgments.merged_qrels(dp, {})[0] if generated else qrels
    rec.update(llm_file=files[0].name, agreement=agreement(human, llm, files[0].name), **_judge_record(dp, files, llm))
    if source == "human":
        return qrels, rec
    merged, rec["llm_added"] = merge_llm(qrels, llm, judgments.grade_scale(qrels))
    return merged, rec


def warnings(rec: Mapping[str, Any]) -> list[str]:
    """The record's warnings: LLM grades asked for but absent, the judge's (one grade, its own drafts), a low
    kappa."""
    return [w for w in (rec.get("warning"), rec.get("judge_warning"), (rec.get("agreement") or {}).get("warning")) if w]


def caption(rec: Mapping[str, Any]) -> str:
    """The sentence every table of the analysis carries: which grades it rests on (never "human" for an LLM's)."""
    source = str(rec.get("qrels_source") or "human")
    drafts = source.startswith("drafts")
    base = (
        "the drafted questions' source units (an LLM wrote the questions: no human grade, except the explorer's "
        "judgments)"
        if drafts
        else "human"
    )
    judge = f" of the LLM judge {rec['judge_model']}" if rec.get("judge_model") else ""
    mine = " The LLM judge graded questions its own model wrote." if rec.get("self_judged") else ""
    if source.endswith("+llm"):
        return (
            f"Grades: {base}, plus {rec.get('llm_added', 0)} LLM grades{judge} ({rec.get('llm_file')}) for "
            f"pairs nobody judged, 0-1 of its 0-3 scale counted not relevant (qrels_source = "
            f"{rec.get('requested') or 'human+llm'}).{mine}"
        )
    if drafts:
        return f"Grades: {base} only (qrels_source = {rec.get('requested') or 'human'})."
    return "Grades: human only (qrels and the explorer's judgments; qrels_source = human)."


def describe(rec: Mapping[str, Any]) -> str:
    """The agreement of the LLM assessor with the human grades, and the judge's warnings, in plain sentences
    (notebook 05, the index)."""
    a = rec.get("agreement") or {}
    if not a:
        return (
            "No LLM grades (qrels/llm-<model>-<hash>.tsv): run 09-assess with assess=true to grade the unjudged "
            "pool and measure the judge's agreement with your grades."
        )
    judge = f" ({rec['judge_model']})" if rec.get("judge_model") else ""
    text = f"LLM assessor {a.get('source')}{judge}: {a.get('note')}."
    text += f" WARNING: {a['warning']}." if a.get("warning") else ""
    return text + (f" {rec['judge_warning']}" if rec.get("judge_warning") else "")


def confusion_frame(a: Mapping[str, Any], graded: bool = True):
    """The confusion matrix of :func:`agreement` as a table (rows: human grade, columns: LLM grade)."""
    import pandas as pd

    m = a["confusion_graded" if graded else "confusion_binary"]
    labels = m["labels"]
    return pd.DataFrame(
        m["counts"], index=pd.Index([f"human {x}" for x in labels], name=""), columns=[f"LLM {x}" for x in labels]
    )


def tables(rec: Mapping[str, Any]) -> list:
    """What notebook 05 shows of the agreement: the graded confusion matrix, when some pair was graded by both."""
    a = rec.get("agreement") or {}
    return [confusion_frame(a)] if a.get("n_pairs") else []
