"""The explorer's questions: drafted ones reviewed (:func:`drafts`, :func:`draft_source`, :func:`review`,
:func:`promote`) and one's own added with its answer (:func:`add_question`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import pandas as pd

from rerankeval.core.log import get_logger
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import judgments

log = get_logger(__name__)


def drafts(dp: DatasetPaths) -> pd.DataFrame:
    """The drafted questions (``queries.draft.jsonl``) with their review status; prints the review progress."""
    from rerankeval.questions import review as review_mod

    log.info(review_mod.progress(dp, judged=len(judgments.read_judgments(dp.judgments(judgments.split_of(dp))))))
    return review_mod.table(dp)


def review(dp: DatasetPaths, qid: str, action: str, text: str | None = None) -> str:
    """Accept, edit (``text=``, then accepted) or reject a drafted question; what was recorded and the progress.
    Units that also answer it are graded with :func:`judge`."""
    from rerankeval.questions import review as review_mod

    d = review_mod.review(dp, qid, action, text)
    return (
        f"{qid}: {d.status} ({d.text!r}); {review_mod.progress(dp)}. The next make report evaluates the reviewed set."
    )


def promote(dp: DatasetPaths) -> str:
    """Move the accepted (and edited) drafts into ``queries.jsonl`` and the human qrels (see
    :func:`rerankeval.questions.review.promote`); after it the dataset has human questions, so the drafts not
    reviewed yet are no longer evaluated. A second call adds nothing."""
    from rerankeval.questions import review as review_mod

    return review_mod.promote(dp, judgments.split_of(dp))


def add_question(dp: DatasetPaths, text: str, relevant: Sequence[str] | Mapping[str, int]) -> str:
    """Add a free-text question to the dataset's ``queries.jsonl`` under the next id (``dm-061`` after ``dm-060``),
    with its grades appended to ``qrels/<split>.tsv``: ``relevant`` is a list of unit ids (each given the top grade
    of the dataset's scale) or ``{unit_id: grade}``. Lines already there are never rewritten; the next ``make
    report`` evaluates the question. What was written, as a sentence."""
    from rerankeval.corpus import queryset

    question = " ".join(str(text or "").split())
    if not question:
        raise ValueError("add_question needs the question's text: add_question(dp, 'how do I ...', relevant=[...])")
    top = judgments.grade_scale(corpus.load_qrels(dp))
    given = dict(relevant) if isinstance(relevant, Mapping) else {u: top for u in relevant}
    grades = {str(u): judgments.as_grade(g, top) for u, g in given.items()}
    if not any(grades.values()):
        raise ValueError(
            "add_question needs at least one relevant unit (grade above 0), e.g. relevant="
            "['debian-faq.en.pdf#p12']: a question with no relevant unit is not evaluated"
        )
    units = set(corpus.unit_of(dp).values())
    for u in grades:
        if u not in units:
            raise ValueError(f"{judgments.unknown_unit(dp, u, units)}; give unit ids the explorer shows")
    split = judgments.split_of(dp)
    had_human = queryset.query_source(dp, split).kind == queryset.HUMAN
    meta = {"source": "explorer", "added_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    qid = queryset.append_human(dp, [{"_id": None, "text": question, "metadata": meta}], {None: grades}, split)[0]
    tail = (
        ""
        if had_human
        else (
            " The dataset now has human questions, which win over drafts: the drafts are no "
            "longer evaluated (promote the accepted ones with explore.promote(dp))."
        )
    )
    return (
        f"{qid} added to {dp.source_queries} with {len(grades)} grade(s) in {dp.source_qrels(split)}; the next "
        f"make report evaluates it (then explore.show(dp, {qid!r})).{tail}"
    )


def draft_source(dp: DatasetPaths, qid: str) -> str:
    """The unit a drafted question was written from, and its text (to check the question against)."""
    from rerankeval.questions import review as review_mod

    unit, text = review_mod.source_passage(dp, qid)
    return f"{unit}: {text}"
