"""Static, escaped HTML: every piece of corpus text, query text, id and LLM output goes through :func:`esc`.

A ``<script>`` inside a PDF, a query or a model reply must render as text in the notebook and in the HTML
report (which nbconvert copies verbatim). Markup is only ever built here from escaped values; no output
carries scripts or event handlers, and nothing is fetched from the network.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rerankeval.core.runs import Qrels, Run, ranked
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.snippets import SNIPPET_CHARS, Snippets, place, shorten  # re-exported: text, not HTML

if TYPE_CHECKING:
    from rerankeval.evaluate.analyse import Analysis

__all__ = ["SNIPPET_CHARS", "STYLE", "Snippets", "analysis_diff_html", "diff_view_html", "esc", "shorten"]


def esc(value: Any) -> str:
    """HTML-escape anything (quotes too), ``None``/NaN as an empty string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return html.escape(str(value), quote=True)


STYLE = """
<style>
.rre-diff{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:13px;margin:0 0 1.2em 0}
.rre-diff h4{margin:.6em 0 .2em 0;font-size:14px}
.rre-diff .rre-q{background:#f4f6f8;border-left:4px solid #4c72b0;padding:.4em .6em;margin:.8em 0 .4em 0}
.rre-diff .rre-cols{display:flex;gap:12px;align-items:flex-start}
.rre-diff .rre-col{flex:1 1 0;min-width:0}
.rre-diff table.rre-list{border-collapse:collapse!important;width:100%!important;table-layout:fixed!important;
 margin:0!important}
.rre-diff table.rre-list th,.rre-diff table.rre-list td{border:none!important;
 border-bottom:1px solid #ddd!important;
 padding:3px 5px!important;vertical-align:top!important;text-align:left!important;overflow-wrap:anywhere;
 white-space:normal!important;background:#fff!important}
.rre-diff table.rre-list th{background:#eef1f4!important}
.rre-diff table.rre-list .rk{width:2.4em!important;text-align:right!important;
 font-variant-numeric:tabular-nums}
.rre-diff table.rre-list .g{width:3.6em!important}
.rre-diff table.rre-list tr.gold td{background:#e3f4e1!important}
.rre-diff table.rre-list tr.gold td.g{font-weight:bold;color:#1b6e1b}
.rre-diff .unit{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.rre-diff .snip{color:#444;font-size:12px}
.rre-diff .mv{color:#666;font-size:11px}
.rre-diff .miss{color:#a33}
.rre-diff .note{color:#8a5a00}
</style>
"""


def _where(sn: Mapping[str, Any]) -> str:
    return esc(place(sn.get("source"), sn.get("title"), sn.get("page")))


def _list_html(
    variant: str,
    qid: str,
    docs: list[str],
    gold: Mapping[str, int],
    other_rank: Mapping[str, int],
    snippets: Snippets | None,
    metric_text: str,
) -> str:
    rows = []
    for i, d in enumerate(docs, start=1):
        g = gold.get(d, 0)
        sn = snippets.get(variant, qid, d) if snippets else {}
        where = _where(sn)
        o = other_rank.get(d)
        move = "" if o is None else (f"was {o}" if o != i else "same")
        snip = esc(shorten(sn.get("text", "")))
        rows.append(
            f'<tr class="{"gold" if g > 0 else ""}"><td class="rk">{i}</td>'
            f'<td class="g">{"gold " + esc(g) if g > 0 else ""}</td>'
            f'<td><span class="unit">{esc(d)}</span> <span class="mv">{esc(move)}</span><br>'
            f'<span class="mv">{where}</span><div class="snip">{snip}</div></td></tr>'
        )
    body = "".join(rows) or '<tr><td colspan="3" class="miss">no results</td></tr>'
    return (
        f'<div class="rre-col"><h4>{esc(variant)} <span class="mv">{esc(metric_text)}</span></h4>'
        '<table class="rre-list"><thead><tr><th class="rk">#</th><th class="g">gold</th>'
        "<th>unit / snippet</th></tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def diff_view_html(
    pair: Sequence[str],
    runs: Mapping[str, Run],
    qrels: Qrels,
    queries: Mapping[str, str],
    qids: Sequence[str],
    top_k: int = 10,
    snippets: Snippets | None = None,
    metric_values: Callable[[str, str], str] | None = None,
    slices: Mapping[str, Mapping[str, str]] | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """Side-by-side top ``top_k`` of two variants for each query, gold units highlighted, all text escaped.

    ``metric_values(variant, qid)`` gives a short label (e.g. ``"nDCG@10 0.63"``) shown beside each list;
    ``notes`` maps a query id to a remark shown under it (e.g. a rerank fallback).
    """
    a, b = pair
    parts = [STYLE, '<div class="rre-diff">']
    for q in qids:
        gold = {d: g for d, g in qrels.get(q, {}).items() if g > 0}
        la = [d for d, _ in ranked(runs.get(a, {}).get(q, {}))][:top_k]
        lb = [d for d, _ in ranked(runs.get(b, {}).get(q, {}))][:top_k]
        ra = {d: i for i, (d, _) in enumerate(ranked(runs.get(a, {}).get(q, {})), start=1)}
        rb = {d: i for i, (d, _) in enumerate(ranked(runs.get(b, {}).get(q, {})), start=1)}
        sl = ", ".join(f"{esc(k)}: {esc(v)}" for k, v in (slices or {}).get(q, {}).items())
        missed = [d for d in gold if d not in la and d not in lb]
        miss_html = ""
        if missed:
            items = ", ".join(
                f'<span class="unit">{esc(d)}</span> (grade {esc(gold[d])}; '
                f"{esc(a)} rank {esc(ra.get(d, '-'))}, {esc(b)} rank {esc(rb.get(d, '-'))})"
                for d in missed
            )
            miss_html = f'<div class="miss">gold not in either top {esc(top_k)}: {items}</div>'
        sl_html = f' <span class="mv">({sl})</span>' if sl else ""
        note = (notes or {}).get(q)
        note_html = f'<div class="note">{esc(note)}</div>' if note else ""
        parts.append(
            f'<div class="rre-q"><b>query {esc(q)}</b>{sl_html}<br>'
            f"{esc(queries.get(q, ''))}{miss_html}{note_html}</div>"
        )
        parts.append('<div class="rre-cols">')
        parts.append(_list_html(a, q, la, gold, rb, snippets, metric_values(a, q) if metric_values else ""))
        parts.append(_list_html(b, q, lb, gold, ra, snippets, metric_values(b, q) if metric_values else ""))
        parts.append("</div>")
    parts.append("</div>")
    return "\n".join(parts)


def analysis_diff_html(a: Analysis) -> str:
    """Notebook 05's diff view of an analysis (:meth:`~rerankeval.evaluate.analyse.Analysis.diff_view`): two
    variants' top lists side by side, headline metric per list, rerank fallbacks noted; "" without a pair."""
    from rerankeval.evaluate import metrics
    from rerankeval.rerank.ledger import ledger_notes

    pair, chosen = a.diff_view()
    if len(pair) != 2:
        return ""
    w = metrics.wide(a.per_query, a.headline)
    snippets = Snippets(corpus.load_chunks(a.dp), a.chunk_runs)
    return diff_view_html(
        pair, a.runs, a.qrels, a.queries, chosen, top_k=a.params.diff_top_k, snippets=snippets,
        metric_values=lambda v, q: f"{metrics.label(a.headline)} {w.at[q, v]:.3f}", slices=a.slices,
        notes=ledger_notes(a.ledger, variant=a.reranked))
