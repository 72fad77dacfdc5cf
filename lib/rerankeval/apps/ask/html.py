"""The answers as one HTML table (``report/templates/answers.html.j2``, every text escaped by the engine; a row in
red when a citation is fabricated or misquoted)."""

from __future__ import annotations

import math
from typing import Any

from rerankeval.apps.ask import citations
from rerankeval.apps.ask.answers import Answer, Result
from rerankeval.report import fragments


def _row(a: Answer) -> dict[str, Any]:
    """One answer as the table shows it."""
    gold = "" if a.gold_cited is None else ("yes" if a.gold_cited else "no")
    given = None if a.gold_given is None else f"(gold {'' if a.gold_given else 'not '}given)"
    precision = "" if math.isnan(a.precision) else f"{a.precision:.2f}"
    return {
        "flagged": a.flagged,
        "question": a.question,
        "qid": a.qid or "free text",
        "answer": a.answer,
        "not_in_documents": a.not_in_documents,
        "precision": precision,
        "gold": gold,
        "given": given,
        "status": a.status if not a.error else f"{a.status}: {a.error}",
        "citations": [
            {"ok": c.status == citations.OK, "status": c.status, "label": c.label, "quote": c.quote}
            for c in a.citations
        ],
    }


def answers_html(result: Result) -> str:
    """The answers as one table (a row in red when a citation is fabricated or misquoted), all text escaped."""
    prec, n = result.precision()
    figure = (
        f"citation precision {prec:.2f} over {n} judged answers with citations"
        if n
        else "no judged answer cites anything: no citation precision"
    )
    return fragments.render("answers.html.j2", result=result, figure=figure, rows=[_row(a) for a in result.answers])
