"""The HTML report: an index page over the rendered notebooks, and the notebook renderer.

- :func:`write_index` writes ``dp.report_dir/index.html``: headline table (variants x key metrics with
  CIs, fallback rate, tokens and seconds per query), a three-line verdict generated from the numbers, the
  manifest, the figures (embedded) and links to each notebook page. It renders, with a note, when the
  analysis has not produced ``metrics.csv`` yet.
- :func:`render_notebook_html` renders an executed notebook to one self-contained HTML file (images
  embedded, no script or style fetched from the network, inputs of ``hide-input`` cells removed).

Everything that comes from data (ids, texts, errors, manifest values) is HTML-escaped.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from .htmlsafe import esc
from .ioutil import atomic_write_json, atomic_write_text
from .metrics import label, parse_column
from .paths import DatasetPaths

# Every page is static: no script may run (not even one that slipped into an output unescaped) and nothing
# is fetched from the network; images and fonts are embedded as data: URLs.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:"
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
FUSED = "hybrid"
RERANKED = "hybrid_rerank"
HEADLINE = "ndcg@10"
SUMMARY_NAME = "summary.json"
COMPARISONS_NAME = "comparisons.csv"
LEDGER_COLUMNS = ("fallback_rate", "tokens_per_query", "seconds_per_query")


# --------------------------------------------------------------------------- analysis artefacts
def analyse_dir(dp: DatasetPaths) -> Path:
    return dp.stage_dir("analyse")


def write_summary(
    dp: DatasetPaths, summary: Mapping[str, Any], comparisons: pd.DataFrame | None = None
) -> Path:
    """Save the analysis facts the index page needs (headline metric, pool size, checks, comparisons)."""
    if comparisons is not None:
        atomic_write_text(analyse_dir(dp) / COMPARISONS_NAME, comparisons.to_csv(index=False))
    return atomic_write_json(
        analyse_dir(dp) / SUMMARY_NAME, json.loads(json.dumps(dict(summary), default=str))
    )


def read_summary(dp: DatasetPaths) -> dict[str, Any]:
    p = analyse_dir(dp) / SUMMARY_NAME
    try:
        return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}
    except ValueError:
        return {}


def read_comparisons(dp: DatasetPaths) -> pd.DataFrame | None:
    p = analyse_dir(dp) / COMPARISONS_NAME
    try:
        return pd.read_csv(p) if p.exists() else None
    except (ValueError, OSError):
        return None


# --------------------------------------------------------------------------- verdict
def _fmt(x: Any, digits: int = 3) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if math.isnan(v) else f"{v:.{digits}f}"


def _pair_row(comparisons: pd.DataFrame | None, metric: str, a: str, b: str) -> dict[str, Any] | None:
    """The comparison of a vs b on metric, oriented so that diff = a - b."""
    if comparisons is None or comparisons.empty:
        return None
    c = comparisons[comparisons.metric == metric]
    hit = c[(c.a == a) & (c.b == b)]
    if len(hit):
        return dict(hit.iloc[0])
    hit = c[(c.a == b) & (c.b == a)]
    if len(hit):
        r = dict(hit.iloc[0])
        r.update(
            a=a,
            b=b,
            mean_a=r["mean_b"],
            mean_b=r["mean_a"],
            diff=-r["diff"],
            wins=r["losses"],
            losses=r["wins"],
            diff_ci_low=-r["diff_ci_high"],
            diff_ci_high=-r["diff_ci_low"],
        )
        return r
    return None


def _sig(r: Mapping[str, Any], family: int | None) -> str:
    fam = f" over {family} pairs" if family else ""
    p_holm = float(r.get("p_holm", math.nan))
    if math.isnan(p_holm):
        return "significance not tested"
    word = "significant" if p_holm < 0.05 else "not significant"
    return f"{word} after Holm correction{fam}: p = {r['p']:.3g}, p_holm = {p_holm:.3g}"


def verdict_lines(
    metrics: pd.DataFrame,
    comparisons: pd.DataFrame | None = None,
    headline: str = HEADLINE,
    pool_k: int | None = None,
    fused: str = FUSED,
    reranked: str | None = None,
) -> list[str]:
    """Three plain-language sentences generated from the numbers: winner, what reranking did, pool ceiling.

    ``metrics`` is the metrics.csv table (one row per variant, columns ``<metric>``, ``<metric>_ci_low``,
    ``<metric>_ci_high`` and optionally the ledger columns); ``comparisons`` is stats.compare's output.
    ``reranked`` defaults to ``hybrid_rerank``, else ``cross_encoder`` when only that one was run.
    """
    if metrics is None or metrics.empty or headline not in metrics:
        return ["No metrics yet: the analysis notebook has not written metrics.csv."]
    m = metrics.set_index("variant")
    if reranked is None:
        reranked = next((v for v in (RERANKED, "cross_encoder") if v in m.index), RERANKED)
    hl = label(headline)
    n = int(m["n_queries"].iloc[0]) if "n_queries" in m else None
    ranked_v = m[headline].sort_values(ascending=False)
    best = ranked_v.index[0]
    fam = None
    if comparisons is not None and not comparisons.empty:
        fam = int((comparisons.metric == headline).sum()) or None
    lines = []
    ci = (
        f"95% CI {_fmt(m.at[best, headline + '_ci_low'])}\u2013{_fmt(m.at[best, headline + '_ci_high'])}"
        if headline + "_ci_low" in m
        else ""
    )
    if len(ranked_v) == 1:
        lines.append(f"Only {best} was evaluated: {hl} = {_fmt(ranked_v.iloc[0])} ({ci}, n = {n} queries).")
    else:
        second = ranked_v.index[1]
        r = _pair_row(comparisons, headline, best, second)
        diff = ranked_v.iloc[0] - ranked_v.iloc[1]
        tail = _sig(r, fam) if r else "significance not tested"
        mdd = (
            f"; differences below about {_fmt(r['mdd'])} are hard to detect with n = {n}"
            if r and not math.isnan(float(r.get("mdd", math.nan)))
            else ""
        )
        lines.append(
            f"{best} wins on {hl} with {_fmt(ranked_v.iloc[0])} ({ci}), {diff:+.3f} over the runner-up "
            f"{second} ({_fmt(ranked_v.iloc[1])}); {tail}{mdd}."
        )
    if fused in m.index and reranked in m.index:
        r = _pair_row(comparisons, headline, reranked, fused)
        d = m.at[reranked, headline] - m.at[fused, headline]
        wtl = (
            f" ({int(r['wins'])} queries better, {int(r['losses'])} worse, {int(r['ties'])} tied; "
            f"{_sig(r, fam)})"
            if r
            else ""
        )
        cost = []
        if "fallback_rate" in m and not pd.isna(m.at[reranked, "fallback_rate"]):
            cost.append(f"fell back on {100 * float(m.at[reranked, 'fallback_rate']):.1f}% of queries")
        use = []
        if "tokens_per_query" in m and not pd.isna(m.at[reranked, "tokens_per_query"]):
            use.append(f"{float(m.at[reranked, 'tokens_per_query']):,.0f} tokens")
        if "llm_seconds_per_query" in m and not pd.isna(m.at[reranked, "llm_seconds_per_query"]):
            use.append(f"{float(m.at[reranked, 'llm_seconds_per_query']):.1f} s of LLM time")
        if use:
            cost.append("used " + " and ".join(use) + " per query")
        costs = ("; the reranker " + ", ".join(cost)) if cost else ""
        verb = "raised" if d > 0 else ("lowered" if d < 0 else "did not change")
        amount = f" by {abs(d):.3f}" if d != 0 else ""
        lines.append(f"Reranking ({fused} \u2192 {reranked}) {verb} {hl}{amount}{wtl}{costs}.")
    elif fused in m.index:
        lines.append(f"No reranked run ({reranked}) yet, so the effect of reranking is not measured.")
    else:
        lines.append(f"No fused run ({fused}) yet, so fusion and reranking are not measured.")
    rec = f"recall@{pool_k}" if pool_k else None
    if rec and rec in m:
        base = fused if fused in m.index else ranked_v.index[0]
        fam_k = parse_column(headline)[1] or 10
        got = ""
        rk = f"recall@{fam_k}"
        if reranked in m.index and rk in m:
            got = f"; {reranked}'s top {fam_k} holds {100 * float(m.at[reranked, rk]):.1f}% (Recall@{fam_k})"
        lines.append(
            f"Pool ceiling: a perfect reranker of the {base} top {pool_k} would find "
            f"{100 * float(m.at[base, rec]):.1f}% of the relevant units (Recall@{pool_k}){got}."
        )
    else:
        lines.append("Pool ceiling not computed (no Recall@pool_k column).")
    return lines


# --------------------------------------------------------------------------- index page
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fff}
main{max-width:1150px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:24px;margin:.2em 0 .1em}h2{font-size:18px;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
.sub{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:.4em 0}
th,td{border-bottom:1px solid #e2e2e2;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f7}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.verdict{background:#f5f9ff;border-left:5px solid #4c72b0;padding:8px 14px;font-size:15px;line-height:1.45}
.verdict p{margin:.35em 0}
.note{background:#fff6e0;border-left:5px solid #e0a100;padding:8px 14px}
.ok{color:#1b6e1b;font-weight:600}.failed{color:#b00020;font-weight:600}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px;max-height:420px;white-space:pre-wrap;
 overflow-wrap:anywhere}
figure{margin:12px 0 24px}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:12px}
"""


def _safe_href(href: Any) -> str:
    s = str(href or "")
    try:
        scheme = urlsplit(s).scheme.lower()
    except ValueError:
        return "#"
    return esc(s) if scheme in ("", "http", "https", "file") else "#"


def _load_metrics(dp: DatasetPaths) -> pd.DataFrame | None:
    if not dp.metrics_csv.exists():
        return None
    try:
        return pd.read_csv(dp.metrics_csv)
    except (ValueError, OSError):
        return None


def key_metrics(metrics: pd.DataFrame, headline: str = HEADLINE, pool_k: int | None = None) -> list[str]:
    k = parse_column(headline)[1] or 10
    want = (
        [headline, f"mrr@{k}", f"success@{k}", f"recall@{k}"]
        + ([f"recall@{pool_k}"] if pool_k else [])
        + ["map"]
    )
    return [c for c in dict.fromkeys(want) if c in metrics.columns]


def headline_table_html(metrics: pd.DataFrame, headline: str = HEADLINE, pool_k: int | None = None) -> str:
    cols = key_metrics(metrics, headline, pool_k)
    head = ["variant", "queries"] + [
        label(c) + (" (pool ceiling)" if pool_k and c == f"recall@{pool_k}" else "") for c in cols
    ]
    extra = [c for c in LEDGER_COLUMNS if c in metrics.columns]
    head += [c.replace("_", " ") for c in extra]
    rows = []
    best = metrics[headline].max() if headline in metrics else None
    for _, r in metrics.iterrows():
        cells = [f"<th>{esc(r['variant'])}</th>", f'<td class="num">{esc(r.get("n_queries", ""))}</td>']
        for c in cols:
            v = _fmt(r[c])
            if f"{c}_ci_low" in r and not pd.isna(r[f"{c}_ci_low"]):
                v += f' <span class="sub">[{_fmt(r[c + "_ci_low"])}, {_fmt(r[c + "_ci_high"])}]</span>'
            if c == headline and best is not None and r[c] == best:
                v = f"<b>{v}</b>"
            cells.append(f'<td class="num">{v}</td>')
        for c in extra:
            val = r[c]
            if pd.isna(val):
                cells.append('<td class="num">\u2013</td>')
            elif c == "fallback_rate":
                cls = "num failed" if float(val) > 0 else "num"  # any fallback is shown in red
                cells.append(f'<td class="{cls}">{100 * float(val):.1f}%</td>')
            elif c == "tokens_per_query":
                cells.append(f'<td class="num">{float(val):,.0f}</td>')
            else:
                cells.append(f'<td class="num">{float(val):.3g}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (
        "<table><thead><tr>"
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _pages_html(pages: Sequence[Mapping[str, Any]]) -> str:
    if not pages:
        return '<p class="note">No notebook pages were rendered.</p>'
    rows = []
    for p in pages:
        status = str(p.get("status", "")).lower()
        cls = "ok" if status == "ok" else "failed"
        secs = p.get("seconds")
        secs_s = (
            f"{float(secs):.1f} s" if isinstance(secs, (int, float)) and not math.isnan(float(secs)) else ""
        )
        err = p.get("error")
        err_html = f"<pre>{esc(str(err)[:4000])}</pre>" if err else ""
        rows.append(
            f'<tr><td><a href="{_safe_href(p.get("href"))}">{esc(p.get("name", p.get("href", "")))}</a></td>'
            f'<td class="{cls}">{esc(status)}</td><td class="num">{esc(secs_s)}</td><td>{err_html}</td></tr>'
        )
    return (
        "<table><thead><tr><th>notebook</th><th>status</th><th>time</th><th>error</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _figures_html(figures_dir: Path) -> str:
    if not figures_dir.is_dir():
        return '<p class="sub">No figures yet.</p>'
    # by notebook (file name prefix), then in the order the notebook wrote them
    figs = sorted(
        figures_dir.glob("*.png"), key=lambda f: (f.name.split("-", 1)[0], f.stat().st_mtime, f.name)
    )
    if not figs:
        return '<p class="sub">No figures yet.</p>'
    out = []
    for f in figs:
        data = base64.b64encode(f.read_bytes()).decode("ascii")
        out.append(
            f'<figure><img alt="{esc(f.stem)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(f.name)}</figcaption></figure>"
        )
    return "\n".join(out)


def write_index(dp: DatasetPaths, pages: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``dp.report_dir/index.html`` and return its path.

    ``pages``: ``[{"name": "05-analyse", "href": "05-analyse.html", "status": "ok"|"failed",
    "seconds": float, "error": str|None}, ...]`` in chain order.
    """
    from .manifest import read_manifest, redact

    summary = read_summary(dp)
    headline = summary.get("headline_metric", HEADLINE)
    pool_k = summary.get("pool_k")
    metrics = _load_metrics(dp)
    comparisons = read_comparisons(dp)
    failed = [p for p in pages if str(p.get("status", "")).lower() != "ok"]

    parts = [
        f"<h1>ReRankEval report: {esc(dp.name)}</h1>",
        f'<p class="sub">Generated {esc(_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))} '
        f"from {esc(dp.root)}</p>",
    ]
    if failed:
        names = ", ".join(esc(p.get("name", "?")) for p in failed)
        parts.append(
            f'<p class="note"><b>{len(failed)} notebook(s) failed:</b> {names}. '
            "Numbers below come from whatever earlier runs left on disk; see the error column.</p>"
        )
    parts.append("<h2>Headline</h2>")
    if metrics is None or metrics.empty:
        parts.append(
            '<p class="note"><b>No metrics yet.</b> <code>metrics.csv</code> does not exist: the chain '
            "stopped before the analysis notebook (05-analyse) finished. The notebook pages below show "
            "how far it got.</p>"
        )
    else:
        if headline not in metrics.columns:
            headline = next((c for c in metrics.columns if c.startswith("ndcg@")), headline)
        parts.append(headline_table_html(metrics, headline, pool_k))
        if "fallback_rate" in metrics.columns:
            for _, r in metrics[metrics.fallback_rate.fillna(0) > 0].iterrows():
                parts.append(
                    f'<p class="failed">{esc(r["variant"])}: the reranker fell back to the fused order on '
                    f"{100 * float(r['fallback_rate']):.1f}% of queries (see the ledger in 04-rerank); for "
                    "those queries its row measures the fused ranking, not the LLM.</p>"
                )
        qs = summary.get("query_set")
        facts = []
        if qs:
            facts.append(esc(qs))
        if summary.get("relevance_unit"):
            facts.append(
                f"relevance unit: {esc(summary['relevance_unit'])}; {esc(summary.get('dedupe_policy', ''))}"
            )
        if summary.get("verified_against"):
            facts.append(
                f"metrics computed with {esc(summary.get('primary', 'ir_measures'))}, "
                f"<b>verified against {esc(summary['verified_against'])}</b> on the TREC run files "
                f"(max difference {esc(summary.get('max_abs_diff', ''))})"
            )
        if facts:
            parts.append('<p class="sub">' + "<br>".join(facts) + "</p>")
        parts.append(
            '<div class="verdict">'
            + "".join(f"<p>{esc(s)}</p>" for s in verdict_lines(metrics, comparisons, headline, pool_k))
            + "</div>"
        )
    parts.append("<h2>Notebooks</h2>")
    parts.append(_pages_html(pages))
    parts.append("<h2>Figures</h2>")
    parts.append(_figures_html(dp.figures_dir))
    parts.append("<h2>Reproducibility manifest</h2>")
    man = read_manifest(dp)
    if man is None:
        parts.append('<p class="sub">No manifest yet (written by 05-analyse).</p>')
    else:
        parts.append(f"<pre>{esc(json.dumps(redact(man), indent=2, ensure_ascii=False))}</pre>")
    html_doc = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"{CSP_META}"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ReRankEval report: {esc(dp.name)}</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(parts)}</main></body></html>\n"
    )
    return atomic_write_text(dp.report_dir / "index.html", html_doc)


# --------------------------------------------------------------------------- notebook pages
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
"""

_REMOTE_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc\s*=\s*[\"']?\s*(?:https?:)?//[^>]*>\s*</script\s*>", re.I | re.S
)
_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"']?\s*(?:https?:)?//[^>]*>", re.I | re.S)
_REMOTE_IMPORT = re.compile(
    r"<script\b[^>]*>(?:(?!</script).)*?import\(\s*[\"'](?:https?:)?//(?:(?!</script).)*"
    r"</script\s*>",
    re.I | re.S,
)


def strip_remote_resources(html_text: str) -> str:
    """Remove ``<script src=http…>``, ``<link href=http…>`` and scripts importing remote modules."""
    for rx in (_REMOTE_SCRIPT, _REMOTE_LINK, _REMOTE_IMPORT):
        html_text = rx.sub("", html_text)
    return html_text


def render_notebook_html(executed_ipynb_path: str | Path, out_html_path: str | Path) -> Path:
    """Render an executed notebook to a self-contained, offline HTML page.

    nbconvert's lab template with images embedded, without require.js/MathJax/mermaid/widget scripts from
    CDNs, and with the inputs of cells tagged ``hide-input`` (or ``remove-input``) removed; cells tagged
    ``remove-cell`` are dropped. The papermill ``injected-parameters`` cell keeps its input. A
    Content-Security-Policy (:data:`CSP`) forbids every script and network fetch, so even an output that
    forgot to escape data cannot run code in the report.
    """
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    from traitlets.config import Config

    nb = nbformat.read(str(executed_ipynb_path), as_version=4)
    c = Config()
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = {"hide-input", "remove-input"}
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    exporter = HTMLExporter(
        config=c,
        template_name="lab",
        embed_images=True,
        extra_loaders=[DictLoader({"rerankeval_offline.html.j2": _OFFLINE_TEMPLATE})],
    )
    exporter.template_file = "rerankeval_offline.html.j2"
    exporter.register_preprocessor(TagRemovePreprocessor(config=c), enabled=True)
    body, _ = exporter.from_notebook_node(
        nb, resources={"metadata": {"name": Path(executed_ipynb_path).stem}}
    )
    body = strip_remote_resources(body)
    body = re.sub(r"<head>", lambda m: m.group(0) + "\n" + CSP_META, body, count=1, flags=re.I)
    return atomic_write_text(out_html_path, body)
