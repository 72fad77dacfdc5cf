"""What the explorer shows: :class:`Exploration` (one query across every variant, its :class:`Column` of
:class:`Hit`), rendered as static HTML by :func:`render_html` (every text escaped, query terms marked). Part of
:mod:`rerankeval.apps.explore`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rerankeval.core.names import HYBRID_RERANK
from rerankeval.report.htmlsafe import esc


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
    mark: Callable[[str], str] | None = field(default=None, repr=False)  # escaped text with query terms marked
    note: str = ""  # said above the columns (e.g. "q12 is not a query id: did you mean dm-012?")

    def frame(self) -> pd.DataFrame:
        """One row per variant and rank: variant, rank, unit_id, score, llm_score, grade, rank_before, snippet."""
        rows = [[c.variant, h.rank, h.unit_id, h.score, h.llm_score, h.grade, h.before, h.snippet]
                for c in self.columns for h in c.hits]
        return pd.DataFrame(rows, columns=["variant", "rank", "unit_id", "score", "llm_score", "grade", "rank_before",
                                           "snippet"])

    def _repr_html_(self) -> str:
        return render_html(self)

    def __repr__(self) -> str:
        return (f"<Exploration of {self.qid or 'free text'} in {self.dataset}: {len(self.columns)} variants, "
                f"top {self.k}>")


STYLE = """<style>
.rre-x{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:13px;margin:0 0 1.4em 0}
.rre-x .q{background:#f4f6f8;border-left:4px solid #4c72b0;padding:.4em .6em;margin:.6em 0}
.rre-x .cols{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.rre-x .col{flex:1 1 300px;min-width:280px;max-width:100%}
.rre-x h4{margin:.4em 0 .2em 0;font-size:14px}
.rre-x table{border-collapse:collapse!important;width:100%!important;table-layout:fixed!important}
.rre-x td,.rre-x th{border:none!important;border-bottom:1px solid #ddd!important;padding:3px 5px!important;
 vertical-align:top!important;text-align:left!important;overflow-wrap:anywhere;white-space:normal!important;
 background:#fff!important}
.rre-x th{background:#eef1f4!important}
.rre-x .rk{width:2.2em!important;text-align:right!important}
.rre-x .g{width:3.8em!important}
.rre-x tr.gold td{background:#e3f4e1!important}
.rre-x tr.gold td.g{font-weight:bold;color:#1b6e1b}
.rre-x .unit{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.rre-x .mv{color:#666;font-size:11px}
.rre-x .snip{color:#333;font-size:12px}
.rre-x mark{background:#fff3a3;padding:0}
.rre-x .na{color:#a33}
</style>"""


def _ledger_html(row: Mapping[str, Any] | None) -> str:
    if not row:
        return ""
    repairs = sum(int(row.get(c) or 0) for c in ("n_invalid", "n_duplicate", "n_missing"))
    status = str(row.get("status", ""))
    parts = [f"status <b class=\"{'na' if status != 'ok' else ''}\">{esc(status)}</b>", f"repairs {repairs}",
             f"failed calls {esc(row.get('n_failed', 0))}", f"retries {esc(row.get('retries', 0))}",
             f"latency {float(row.get('latency_s') or 0):.2f} s",
             f"LLM calls {esc(row.get('llm_calls', 0))} ({esc(row.get('cache_hits', 0))} from the cache)",
             f"model {esc(row.get('model', ''))}"]
    err = f"; errors: {esc(row['error'])}" if row.get("error") else ""
    return f'<div class="mv">{HYBRID_RERANK} ledger: {", ".join(parts)}{err}</div>'


def _column_html(c: Column, x: Exploration) -> str:
    if c.unavailable:
        return (f'<div class="col"><h4>{esc(c.variant)}</h4><div class="na">unavailable: {esc(c.unavailable)}'
                "</div></div>")
    rows = []
    for h in c.hits:
        g = "" if h.grade is None else (f"gold {h.grade}" if h.grade > 0 else "0")
        g = "?" if h.grade is None and x.gold else g
        snip = x.mark(h.snippet) if x.mark else esc(h.snippet)
        before = "" if h.before is None else f" \u00b7 hybrid #{h.before}"
        score = f"score {h.score:.4g}" if h.llm_score is None else f"LLM score {h.llm_score:.3g}"
        rows.append(f'<tr class="{"gold" if (h.grade or 0) > 0 else ""}"><td class="rk">{h.rank}</td>'
                    f'<td class="g">{esc(g)}</td><td><span class="unit">{esc(h.unit_id)}</span> '
                    f'<span class="mv">{esc(score)}{esc(before)}</span><br><span class="mv">{esc(h.where)}'
                    f'</span><div class="snip">{snip}</div></td></tr>')
    judged = sum(h.grade is not None for h in c.hits)
    cov = f" \u00b7 Judged@{x.k} {judged / len(c.hits):.2f}" if x.gold and c.hits else ""
    body = "".join(rows) or '<tr><td colspan="3" class="na">no results</td></tr>'
    return (f'<div class="col"><h4>{esc(c.variant)} <span class="mv">{esc(cov)}</span></h4><table><thead><tr>'
            f'<th class="rk">#</th><th class="g">grade</th><th>unit / snippet</th></tr></thead><tbody>{body}'
            "</tbody></table></div>")


def render_html(x: Exploration) -> str:
    """The side-by-side view of ``x`` as static HTML (every text escaped, query terms marked)."""
    how = "live search over the saved indexes" if x.live else "the saved runs of stages 03/04"
    judged = (f"{len(x.gold)} judged units ({sum(g > 0 for g in x.gold.values())} relevant); ? = not judged"
              if x.gold else "no judgments for this query")
    head = (f'<div class="q"><b>{esc(x.qid or "free text")}</b>: {esc(x.query)}<br><span class="mv">'
            f"{esc(x.dataset)} \u00b7 top {x.k} from {esc(how)} \u00b7 {esc(judged)} \u00b7 {x.seconds:.2f} s"
            f"</span>{_ledger_html(x.ledger)}</div>")
    if x.note:
        head += f'<p class="na">{esc(x.note)}</p>'
    cols = "".join(_column_html(c, x) for c in x.columns)
    return f'{STYLE}<div class="rre-x">{head}<div class="cols">{cols}</div></div>'
