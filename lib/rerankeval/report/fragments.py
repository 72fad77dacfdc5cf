"""HTML fragments a notebook displays (the explorer's view, the cited answers, 05's verdict and diff view), rendered
from the Jinja2 templates in ``templates/`` with autoescaping: every corpus text, query, id and model reply is
escaped by the template engine, so a ``<script>`` in a PDF or a reply renders as text.

Each fragment carries its own rules of the one stylesheet, ``templates/report.css`` (:func:`scoped_css`: the rules
whose every selector starts with the fragment's class, e.g. ``.rre-x``), so it looks the same in JupyterLab, in the
executed notebook and in the HTML report; no CSS is written anywhere else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.core.runs import Qrels, Run, ranked
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.snippets import Snippets, place, shorten

if TYPE_CHECKING:
    from markupsafe import Markup

    from rerankeval.evaluate.analyse import Analysis

TEMPLATES = Path(__file__).with_name("templates")
STYLESHEET = TEMPLATES / "report.css"


@cache
def _env() -> Any:
    """The fragments' Jinja2 environment: autoescape on for every template and string."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.globals["scoped_css"] = scoped_css
    return env


def render(template: str, **values: Any) -> str:
    """``templates/<template>`` rendered with ``values`` (escaped by the engine)."""
    return _env().get_template(template).render(**values)


@cache
def scoped_css(scope: str) -> Markup:
    """The rules of ``report.css`` whose every selector starts with ``.<scope>`` (the fragment's own rules),
    serialised by tinycss2, one a line. Raises ValueError when the stylesheet has none (a renamed class, a lost
    rule)."""
    import tinycss2
    from markupsafe import Markup

    own = re.compile(rf"^\.{re.escape(scope)}(?![\w-])")
    rules = []
    for rule in tinycss2.parse_stylesheet(
        STYLESHEET.read_text(encoding="utf-8"), skip_comments=True, skip_whitespace=True
    ):
        if rule.type != "qualified-rule":
            continue
        selectors = [s.strip() for s in tinycss2.serialize(rule.prelude).split(",")]
        if all(own.match(s) for s in selectors):
            body = " ".join(tinycss2.serialize(rule.content).split())  # one rule a line
            rules.append(f"{', '.join(selectors)}{{{body}}}")
    if not rules:
        raise ValueError(f"{STYLESHEET} has no rule for .{scope}: add the fragment's rules at its end")
    return Markup("\n".join(rules))


def status_html(text: Any, error: bool = False) -> str:
    """One status line (the explorer widget's), in red when ``error``."""
    return render("status.html.j2", text=str(text), error=error)


def banner_html(note: Mapping[str, str]) -> str:
    """The banner at the top of a notebook page (``head`` in bold, then ``body``; :func:`.pages.questions_note`)."""
    return render("banner.html.j2", note=note)


# --------------------------------------------------------------------------- 05: the verdict and the diff view
def verdict_html(lines: Sequence[str]) -> str:
    """Notebook 05's verdict: one paragraph per line in the verdict box."""
    return render("verdict.html.j2", lines=list(lines))


def _rows(
    variant: str,
    qid: str,
    docs: list[str],
    gold: Mapping[str, int],
    other_rank: Mapping[str, int],
    snippets: Snippets | None,
) -> list[dict[str, Any]]:
    rows = []
    for i, d in enumerate(docs, start=1):
        sn = snippets.get(variant, qid, d) if snippets else {}
        o = other_rank.get(d)
        rows.append(
            {
                "rank": i,
                "unit": d,
                "grade": gold.get(d, 0),
                "move": "" if o is None else (f"was {o}" if o != i else "same"),
                "where": place(sn.get("source"), sn.get("title"), sn.get("page")),
                "snippet": shorten(sn.get("text", "")),
            }
        )
    return rows


def _diff_query(
    pair: Sequence[str],
    q: str,
    runs: Mapping[str, Run],
    qrels: Qrels,
    top_k: int,
    snippets: Snippets | None,
    metric_values: Callable[[str, str], str] | None,
) -> dict[str, Any]:
    """One query of the diff view: its gold units, both lists, and the gold units neither top ``top_k`` holds."""
    gold = {d: g for d, g in qrels.get(q, {}).items() if g > 0}
    order = {v: [d for d, _ in ranked(runs.get(v, {}).get(q, {}))] for v in pair}
    rank = {v: {d: i for i, d in enumerate(order[v], start=1)} for v in pair}
    tops = {v: order[v][:top_k] for v in pair}
    a, b = pair
    lists = [
        {
            "variant": v,
            "metric": metric_values(v, q) if metric_values else "",
            "rows": _rows(v, q, tops[v], gold, rank[w], snippets),
        }
        for v, w in ((a, b), (b, a))
    ]
    missed = [
        {"unit": d, "grade": gold[d], "ranks": [rank[v].get(d, "-") for v in pair]}
        for d in gold
        if d not in tops[a] and d not in tops[b]
    ]
    return {"qid": q, "lists": lists, "missed": missed}


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
    shown = []
    for q in qids:
        one = _diff_query(pair, q, runs, qrels, top_k, snippets, metric_values)
        one.update(
            text=queries.get(q, ""),
            note=(notes or {}).get(q, ""),
            slices=", ".join(f"{k}: {v}" for k, v in (slices or {}).get(q, {}).items()),
        )
        shown.append(one)
    return render("diff_view.html.j2", pair=list(pair), top_k=top_k, queries=shown)


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
        pair,
        a.runs,
        a.qrels,
        a.queries,
        chosen,
        top_k=a.params.diff_top_k,
        snippets=snippets,
        metric_values=lambda v, q: f"{metrics.label(a.headline)} {w.at[q, v]:.3f}",
        slices=a.slices,
        notes=ledger_notes(a.ledger, variant=a.reranked),
    )
