"""Static, escaped HTML: every piece of corpus text, query text, id and LLM output goes through :func:`esc`.

A ``<script>`` inside a PDF, a query or a model reply must render as text in the notebook and in the HTML
report (which nbconvert copies verbatim). Markup is only ever built here from escaped values; no output
carries scripts or event handlers, and nothing is fetched from the network.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from rerankeval.core.runs import Qrels, Run, ranked

SNIPPET_CHARS = 220


def esc(value: Any) -> str:
    """HTML-escape anything (quotes too), ``None``/NaN as an empty string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return html.escape(str(value), quote=True)


def shorten(text: Any, limit: int = SNIPPET_CHARS) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "\u2026"


class Snippets:
    """Snippet of a unit for a query: the chunk that brought the unit into that variant's list.

    Uses the variant's chunk-level run (``runs/chunks/<variant>.trec``) when given, else the unit's first
    chunk (lowest ``start``) from the chunk table.
    """

    def __init__(self, chunks: pd.DataFrame, chunk_runs: Mapping[str, Run] | None = None):
        df = chunks.copy()
        self._by_chunk = {r.chunk_id: r for r in df.itertuples(index=False)}
        self._unit_of = dict(zip(df.chunk_id, df.unit_id, strict=True))
        first = df.sort_values(["unit_id", "start"], kind="stable").drop_duplicates("unit_id")
        self._first = {r.unit_id: r for r in first.itertuples(index=False)}
        self._chunk_runs = dict(chunk_runs or {})
        self._best: dict[tuple[str, str], dict[str, str]] = {}

    def _best_chunks(self, variant: str, qid: str) -> dict[str, str]:
        key = (variant, qid)
        if key not in self._best:
            best: dict[str, str] = {}
            for chunk, _ in ranked(self._chunk_runs.get(variant, {}).get(qid, {})):
                u = self._unit_of.get(chunk)
                if u is not None:
                    best.setdefault(u, chunk)
            self._best[key] = best
        return self._best[key]

    def get(self, variant: str, qid: str, unit: str) -> dict[str, Any]:
        chunk = self._best_chunks(variant, qid).get(unit)
        row = self._by_chunk.get(chunk) if chunk else self._first.get(unit)
        if row is None:
            return {"text": "", "title": "", "source": "", "page": None, "chunk_id": None}
        return {
            "text": row.text,
            "title": row.title,
            "source": row.source,
            "page": row.page,
            "chunk_id": row.chunk_id,
        }


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
    parts = []
    if sn.get("source"):
        parts.append(esc(sn["source"]))
    if sn.get("title"):
        parts.append(esc(sn["title"]))
    page = sn.get("page")
    if page is not None and page != "" and not (isinstance(page, float) and math.isnan(page)):
        if isinstance(page, float) and page.is_integer():
            page = int(page)
        parts.append(f"p.{esc(page)}")
    return " \u00b7 ".join(parts)


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
