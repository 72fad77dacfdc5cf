"""The answers as one HTML table, every text escaped (a row in red when a citation is fabricated or misquoted)."""

from __future__ import annotations

import math

from rerankeval.apps import citations
from rerankeval.apps.ask_answers import Answer, AskResult
from rerankeval.report.htmlsafe import esc

STYLE = """
<style>
.rre-ask{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:13px;margin:0 0 1.2em 0}
.rre-ask table{border-collapse:collapse!important;width:100%!important;table-layout:fixed!important}
.rre-ask th,.rre-ask td{border:none!important;border-bottom:1px solid #ddd!important;padding:4px 6px!important;
 vertical-align:top!important;text-align:left!important;overflow-wrap:anywhere;white-space:normal!important;
 background:#fff!important}
.rre-ask th{background:#eef1f4!important}
.rre-ask tr.flag td{background:#fde8e8!important}
.rre-ask .bad{color:#b00020;font-weight:bold}
.rre-ask .ok{color:#1b6e1b;font-weight:bold}
.rre-ask .nid{color:#8a5a00;font-style:italic}
.rre-ask .mv{color:#666;font-size:11px}
.rre-ask .n{width:6em!important}
</style>
"""


def _cite_html(c: citations.Cited) -> str:
    ok = c.status == citations.OK
    mark = '<span class="ok">\u2713</span>' if ok else f'<span class="bad">\u2717 {esc(c.status)}</span>'
    quote = f' <span class="mv">\u201c{esc(c.quote)}\u201d</span>' if c.quote else ""
    return f"<div>{mark} [{esc(c.label)}]{quote}</div>"


def _row_html(a: Answer) -> str:
    nid = '<div class="nid">not in the documents</div>' if a.not_in_documents else ""
    status = a.status if not a.error else f"{a.status}: {a.error}"
    cites = "".join(_cite_html(c) for c in a.citations) or '<span class="mv">no citation</span>'
    gold = "" if a.gold_cited is None else ("yes" if a.gold_cited else "no")
    gold += "" if a.gold_given is None else f' <span class="mv">(gold {"" if a.gold_given else "not "}given)</span>'
    prec = "" if math.isnan(a.precision) else f"{a.precision:.2f}"
    qid = f'<div class="mv">{esc(a.qid)}</div>' if a.qid else '<div class="mv">free text</div>'
    return (f'<tr class="{"flag" if a.flagged else ""}"><td>{esc(a.question)}{qid}</td><td>{esc(a.answer)}{nid}</td>'
            f'<td>{cites}</td><td class="n">{esc(prec)}</td><td class="n">{gold}</td>'
            f'<td class="n">{esc(status)}</td></tr>')


def answers_html(result: AskResult) -> str:
    """The answers as one table (a row in red when a citation is fabricated or misquoted), all text escaped."""
    prec, n = result.precision()
    figure = (f"citation precision {prec:.2f} over {n} judged answers with citations" if n
              else "no judged answer cites anything: no citation precision")
    head = (f"<p>Answers written by <b>{esc(result.model)}</b> ({esc(result.endpoint)}) from the top {result.k} "
            f"passages of <b>{esc(result.variant)}</b>; {esc(figure)}. A red row cites a passage the model was not "
            "given or quotes what that passage does not say.</p>")
    rows = "".join(_row_html(a) for a in result.answers) or '<tr><td colspan="6">no questions</td></tr>'
    return (f'{STYLE}<div class="rre-ask">{head}<table><thead><tr><th>question</th><th>answer</th>'
            '<th>citations (checked)</th><th class="n">citation precision</th><th class="n">gold cited</th>'
            f'<th class="n">status</th></tr></thead><tbody>{rows}</tbody></table></div>')
