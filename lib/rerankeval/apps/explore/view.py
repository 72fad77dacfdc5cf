"""What the explorer shows: :class:`Exploration` (one query across every variant, its :class:`Column` of
:class:`Hit`), rendered by :func:`render_html` through the template ``report/templates/explore.html.j2`` (every
text escaped by the engine, query terms marked). Part of :mod:`rerankeval.apps.explore`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rerankeval.core.names import HYBRID_RERANK
from rerankeval.report import fragments


@dataclass
class Hit:
    rank: int
    unit_id: str
    score: float
    grade: int | None  # None: no judgment for this (query, unit)
    snippet: str  # plain text
    where: str  # source file, title, page
    before: int | None = None  # rank in the hybrid list (reranked columns)
    llm_score: float | None = None  # the reranker's own score (hybrid_rerank; None: not scored, below pool_k)


@dataclass
class Column:
    variant: str
    hits: list[Hit] = field(default_factory=list)
    unavailable: str = ""  # why the column is empty (no index, no LLM endpoint ...)


@dataclass(repr=False)
class Exploration:
    """One query across every variant; ``_repr_html_`` renders it (escaped), :meth:`frame` as a table."""

    dataset: str
    query: str
    qid: str | None  # None: free text
    live: bool  # True: searched now; False: read from the saved runs
    k: int
    columns: list[Column]
    gold: dict[str, int]  # the query's judgments (empty: none)
    ledger: dict[str, Any] | None  # the reranker's ledger row for this query
    terms: frozenset[str]
    seconds: float
    # the text cut into (piece, is a query term) for the template to mark; None: nothing marked
    mark: Callable[[str], list[tuple[str, bool]]] | None = field(default=None, repr=False)
    note: str = ""  # said above the columns (e.g. "q12 is not a query id: did you mean dm-012?")

    def frame(self) -> pd.DataFrame:
        """One row per variant and rank: variant, rank, unit_id, score, llm_score, grade, rank_before, snippet."""
        rows = [
            [c.variant, h.rank, h.unit_id, h.score, h.llm_score, h.grade, h.before, h.snippet]
            for c in self.columns
            for h in c.hits
        ]
        return pd.DataFrame(
            rows, columns=["variant", "rank", "unit_id", "score", "llm_score", "grade", "rank_before", "snippet"]
        )

    def _repr_html_(self) -> str:
        return render_html(self)

    def __repr__(self) -> str:
        return (
            f"<Exploration of {self.qid or 'free text'} in {self.dataset}: {len(self.columns)} variants, top {self.k}>"
        )


def _ledger(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The reranker's ledger row as the view shows it: status, the counts in order, errors."""
    if not row:
        return None
    repairs = sum(int(row.get(c) or 0) for c in ("n_invalid", "n_duplicate", "n_missing"))
    parts = [
        f"repairs {repairs}",
        f"failed calls {row.get('n_failed', 0)}",
        f"retries {row.get('retries', 0)}",
        f"latency {float(row.get('latency_s') or 0):.2f} s",
        f"LLM calls {row.get('llm_calls', 0)} ({row.get('cache_hits', 0)} from the cache)",
        f"model {row.get('model', '')}",
    ]
    return {
        "variant": HYBRID_RERANK,
        "status": str(row.get("status", "")),
        "parts": parts,
        "error": row.get("error") or "",
    }


def _hit(h: Hit, x: Exploration) -> dict[str, Any]:
    g = "" if h.grade is None else (f"gold {h.grade}" if h.grade > 0 else "0")
    score = f"score {h.score:.4g}" if h.llm_score is None else f"LLM score {h.llm_score:.3g}"
    return {
        "gold": (h.grade or 0) > 0,
        "rank": h.rank,
        "grade": "?" if h.grade is None and x.gold else g,
        "unit": h.unit_id,
        "score": score + ("" if h.before is None else f" \u00b7 hybrid #{h.before}"),
        "where": h.where,
        "snippet": x.mark(h.snippet) if x.mark else [(h.snippet, False)],
    }


def _column(c: Column, x: Exploration) -> dict[str, Any]:
    judged = sum(h.grade is not None for h in c.hits)
    cov = f" \u00b7 Judged@{x.k} {judged / len(c.hits):.2f}" if x.gold and c.hits else ""
    return {"variant": c.variant, "unavailable": c.unavailable, "coverage": cov, "hits": [_hit(h, x) for h in c.hits]}


def render_html(x: Exploration) -> str:
    """The side-by-side view of ``x`` (``templates/explore.html.j2``: every text escaped, query terms marked)."""
    how = "live search over the saved indexes" if x.live else "the saved runs of stages 03/04"
    judged = (
        f"{len(x.gold)} judged units ({sum(g > 0 for g in x.gold.values())} relevant); ? = not judged"
        if x.gold
        else "no judgments for this query"
    )
    return fragments.render(
        "explore.html.j2",
        x=x,
        how=how,
        judged=judged,
        ledger=_ledger(x.ledger),
        columns=[_column(c, x) for c in x.columns],
    )


# --------------------------------------------------------------------------- the widget's view, part by part
def unjudged(h: Hit, x: Exploration) -> bool:
    """Whether ``h`` is a hit of a query id that nobody graded yet (the widget marks it and offers its grades)."""
    return x.qid is not None and h.grade is None


def widget_head_html(x: Exploration, top: int) -> str:
    """The widget view's head: the query, where the lists come from, the ledger, and how to grade (scale 0-``top``,
    how many shown units are unjudged), with the rules of ``.rre-x`` (the view box carries that class)."""
    how = "live search over the saved indexes" if x.live else "the saved runs of stages 03/04"
    judged = (
        f"{len(x.gold)} judged units ({sum(g > 0 for g in x.gold.values())} relevant)"
        if x.gold
        else "no judgments for this query"
    )
    if x.qid is None:
        how_to = "free text: press \u201canswers it\u201d under the unit that answers it to add it as a question"
    else:
        shown = {h.unit_id for c in x.columns for h in c.hits if unjudged(h, x)}
        how_to = (
            f"grade a unit with the buttons under it (0-{top}); ? marks the {len(shown)} shown unit(s) nobody "
            "judged yet"
            if shown
            else "every shown unit is judged"
        )
    return fragments.render(
        "explore_widget.html.j2", part="head", x=x, how=how, judged=judged, how_to=how_to, ledger=_ledger(x.ledger)
    )


def widget_column_html(c: Column, x: Exploration) -> str:
    """A column's title in the widget: the variant and its Judged@k (or why it is unavailable)."""
    return fragments.render("explore_widget.html.j2", part="column", c=_column(c, x))


def widget_hit_html(h: Hit, x: Exploration) -> str:
    """One hit in the widget: rank, grade (``?`` in red when unjudged), unit, score, place and marked snippet."""
    one = _hit(h, x)
    one["unjudged"] = unjudged(h, x)
    if one["unjudged"]:
        one["grade"] = "?"
    return fragments.render("explore_widget.html.j2", part="hit", h=one)
