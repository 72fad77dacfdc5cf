"""Stage 05's record of the holes in the judgments (issue 34): :func:`rerankeval.evaluate.incomplete.first_screen`
over the analysed runs, written to ``analyse/incomplete.json`` for the report's first screen (per comparison the
zero-fill difference, the [worst, best] interval over the unjudged units and decided/undecided; per variant the
zero-fill, condensed and bpref values), and read back by the report."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.log import get_logger
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, Run
from rerankeval.evaluate import incomplete, judging_queue

FILE_NAME = "incomplete.json"
log = get_logger(__name__)


EXPECTED_BUDGET_S = 20.0  # seconds 05 spends at most simulating the queue's expected judgments (then "at most N")


def analyse(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    baseline: str,
    k: int = 10,
    n_sim: int = 3,
    budget_s: float = EXPECTED_BUDGET_S,
    llm: Qrels | None = None,
    original: Qrels | None = None,
    human: Qrels | None = None,
) -> dict[str, Any] | None:
    """:func:`incomplete.first_screen` of ``runs`` against ``baseline`` (the first run when ``baseline`` is empty),
    with ``baseline`` recorded; None without runs or queries. The expected judgments of the undecided comparisons
    (``n_sim`` simulations of the queue each) are added in order while ``budget_s`` lasts; a comparison past it
    keeps only the most judgments it can need (``expected`` None, said in its sentence). With an LLM judge's grades
    (``llm``), also ``ppi``: :func:`prediction_powered` over the holes of ``original`` with the ``human`` grades."""
    if not runs or not qids:
        return None
    base = baseline if baseline in runs else next(iter(runs))
    rec = incomplete.first_screen(runs, qrels, list(qids), base, k=k, n_sim=0)
    start = time.monotonic()
    for c in rec["comparisons"]:
        if c["status"] != "undecided" or not n_sim or time.monotonic() - start >= budget_s:
            continue
        c["expected"] = judging_queue.expected_judgments(
            runs, qrels, list(qids), (c["a"], c["b"]), rec["metric"], rec["top_grade"], n_sim=n_sim
        )
        c["sentence"] = incomplete.Comparison(**c).describe()
    skipped = sum(1 for c in rec["comparisons"] if c["status"] == "undecided" and c.get("expected") is None)
    out = {"baseline": base, **rec, "expected_skipped": skipped}
    if llm:  # an LLM judge's grades exist: the human+LLM numbers with prediction-powered intervals, or why not
        out["ppi"] = prediction_powered(runs, original or {}, human or qrels, llm, list(qids), k)
    return out


def prediction_powered(
    runs: Mapping[str, Run], original: Qrels, human: Qrels, llm: Qrels, qids: Sequence[str], k: int
) -> dict[str, Any]:
    """Each run's nDCG@``k`` with the holes of ``original`` (the dataset's own qrels) filled by the LLM's grades (on
    the human scale) and rectified by the human grades of the judged prefix of :func:`judging_queue.sample_order`
    (Angelopoulos et al., Science 2023); with fewer than :data:`rerankeval.evaluate.ppi.PPI_MIN_HUMAN` such grades,
    why not (the bounds stand instead)."""
    from rerankeval.evaluate import agreement, ppi
    from rerankeval.evaluate.judgments import grade_scale

    mapped, _ = agreement.merge_llm({}, llm, grade_scale(human) or 1)
    sample = judging_queue.sampled_grades(judging_queue.sample_order(runs, original, qids, k), human)
    rec: dict[str, Any] = {"n_human": len(sample), "metric": f"ndcg@{k}"}
    try:
        rec["variants"] = {v: ppi.ppi_metric(r, original, mapped, sample, qids, f"ndcg@{k}") for v, r in runs.items()}
    except ppi.TooFewHumanGrades as exc:
        rec.update(refused=str(exc), fallback="the [worst, best] bounds over every grading of the unjudged units")
    return rec


def review_weights(
    runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str], record: Mapping[str, Any] | None
) -> dict[tuple[str, str], tuple[float, str]]:
    """The judging queue's weights for ``review/unjudged.tsv`` (:func:`incomplete.review_weights`, with the
    baseline and ``k`` of ``record``, :func:`analyse`'s); empty without a record."""
    if not record or record.get("baseline") not in runs:
        return {}
    return incomplete.review_weights(runs, qrels, list(qids), record["baseline"], int(record.get("k", 10)))


def sentences(record: Mapping[str, Any] | None) -> list[str]:
    """What the unjudged units could change, for the notebook's verdict: one line on the assumptions, then each
    comparison's sentence (decided / undecided with its interval); empty without a record."""
    if not record or not record.get("comparisons"):
        return []
    head = (
        f"With holes in the judgments ({record.get('metric')}, top {record.get('k')}): the differences below "
        "are zero-fill (an unjudged unit counts as not relevant) with their [worst, best] over every grading of "
        "the unjudged units; decided means the sign holds whatever those units turn out to be."
    )
    return [head] + [str(c.get("sentence", "")) for c in record["comparisons"]]


def write(dp: DatasetPaths, record: Mapping[str, Any] | None) -> dict[str, Path]:
    """``analyse/incomplete.json`` (nothing when ``record`` is None)."""
    if record is None:
        return {}
    return {"incomplete": atomic_write_json(dp.stage_dir("analyse") / FILE_NAME, json.loads(json.dumps(record)))}


def read(dp: DatasetPaths) -> dict[str, Any] | None:
    """What :func:`write` saved, or None (not written yet, or unreadable: said once in the log)."""
    path = dp.stage_dir("analyse") / FILE_NAME
    if not path.is_file():
        return None
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("%s cannot be read (%s): re-run 05-analyse to write it again", path, exc)
        return None
    return got if isinstance(got, dict) else None
