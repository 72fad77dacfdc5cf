"""The HTML report's index page over the rendered notebooks (the notebook pages are :mod:`.pages`').

- :func:`write_index` writes ``dp.report_dir/index.html`` from the Jinja2 template
  ``templates/index.html.j2``, sized for a 1280 px laptop screen: the headline table (variants x key metrics,
  each 95% CI on a second line, fallback rate), the verdict (:mod:`rerankeval.evaluate.verdict`, from the numbers the
  analysis wrote; the reranker model's ROC AUC line marked), the table's exports (:mod:`.export`: Markdown,
  LaTeX, CSV), this run against the previous one (:mod:`.history`), a one-line definition of every variant
  (:mod:`.glossary`), a cost table (tokens and seconds per query), the figures answering the question first
  (:data:`FIGURE_ORDER`, captions from :mod:`.captions`), the corpus figures last, page links, and the manifest as
  a table (:mod:`.manifest_view`; the raw ``manifest.json`` linked). Every table scrolls sideways on a phone.
  It renders, with a note, when the analysis has not produced ``metrics.csv`` yet, and says so when the
  headline comes from an earlier analysis on different inputs (:func:`stale_inputs`: e.g. after
  ``--only 01 --only 02 --only 03`` on a changed corpus).
- :func:`column_label` names columns for people (one map, :data:`COLUMN_LABELS`); :func:`labelled` applies it
  to a table. The notebook pages, the path rewriting and the generated-questions banner are
  :mod:`rerankeval.report.pages`'.
- What the judgments let the page say (Judged@k and its warning, the assessor's agreement, the holes and the
  prediction-powered numbers) is :mod:`rerankeval.report.judged`'s.

Everything that comes from data (ids, texts, errors, manifest values) is HTML-escaped: the templates are
rendered with autoescaping on, and only this module's own fixed markup is marked safe.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.names import CROSS_ENCODER, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate import discrimination, injection, limitations, verdict
from rerankeval.evaluate.analysis_records import Summary, read_comparisons, read_summary
from rerankeval.evaluate.metrics import label
from rerankeval.report import export, failures, glossary, history, judged, manifest_view
from rerankeval.report.captions import caption_for
from rerankeval.report.pages import CSP_META, TEMPLATES, questions_note, relative_paths

HEADLINE = verdict.HEADLINE
HEADLINE_EXTRA = ("fallback_rate",)  # shown beside the metrics: a fallback changes what a row measures
COST_COLUMNS = (
    "tokens_per_query",
    "fresh_tokens_per_query",
    "cost_per_query",
    "retrieval_seconds_per_query",
    "llm_seconds_per_query",
    "seconds_per_query",
    "calls_per_query",
)
# Figures that answer the question come first (by stem, in this order; ``*`` ends a prefix: every per-query
# difference chart), then by notebook; the corpus figures (01-, 02-) go last, in an appendix.
FIGURE_ORDER = (
    "05-forest",
    "05-delta-*",
    "05-metric-bars",
    "05-discrimination",
    "05-rank-heatmap",
    "05-funnel",
    "05-rank-shift",
    "05-quality-cost",
)
APPENDIX_PREFIXES = ("01", "02")
COLUMN_LABELS = {
    "variant": "variant",
    "n_queries": "queries",
    "n": "queries",
    "a": "variant a",
    "b": "variant b",
    "mean_a": "mean of a",
    "mean_b": "mean of b",
    "diff": "difference (a \u2212 b)",
    "diff_ci_low": "difference, 95% CI low",
    "diff_ci_high": "difference, 95% CI high",
    "wins": "queries a better",
    "ties": "ties",
    "losses": "queries b better",
    "p": "p-value",
    "p_holm": "p (Holm-adjusted)",
    "significant": "significant (Holm)",
    "sd_diff": "SD of the differences",
    "mdd": "minimal detectable difference",
    "fallback_rate": "fallback rate",
    "repaired_rate": "repaired rate",
    "cache_hit_rate": "cache hit rate",
    "tokens_per_query": "tokens per query",
    "fresh_tokens_per_query": "new (uncached) tokens per query",
    "calls_per_query": "LLM calls per query",
    "requests_per_query": "requests per query",
    "retries_per_query": "retries per query",
    "repairs_per_query": "repairs per query",
    "cost_per_query": "cost per query (USD)",
    "cost_usd": "cost (USD)",
    "retrieval_seconds_per_query": "retrieval seconds per query",
    "llm_seconds_per_query": "LLM seconds per query",
    "seconds_per_query": "seconds per query (retrieval + LLM)",
}


@cache
def _env():
    """The Jinja2 environment over :data:`TEMPLATES`, autoescaping every value."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(
        loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True), keep_trailing_newline=True
    )
    env.filters["breakable"] = breakable
    return env


def breakable(text: Any) -> Any:
    """``text`` escaped, with a line-break opportunity after each underscore: a long name such as
    ``hybrid_reformulate`` wraps inside its header cell instead of running into the next one."""
    from markupsafe import Markup, escape

    return Markup(str(escape(text)).replace("_", "_<wbr>"))


# --------------------------------------------------------------------------- index page
def _safe_href(href: Any) -> str:
    s = str(href or "")
    try:
        scheme = urlsplit(s).scheme.lower()
    except ValueError:
        return "#"
    return s if scheme in ("", "http", "https", "file") else "#"


def _load_metrics(dp: DatasetPaths) -> pd.DataFrame | None:
    if not dp.metrics_csv.exists():
        return None
    try:
        return pd.read_csv(dp.metrics_csv)
    except (ValueError, OSError):
        return None


def column_label(col: str) -> str:
    """A column name for people: :data:`COLUMN_LABELS`, metric labels (``ndcg@10_ci_low`` ->
    ``nDCG@10, 95% CI low``), else the name with underscores as spaces."""
    col = str(col)
    if col in COLUMN_LABELS:
        return COLUMN_LABELS[col]
    for suffix, words in (("_ci_low", ", 95% CI low"), ("_ci_high", ", 95% CI high")):
        if col.endswith(suffix):
            return column_label(col[: -len(suffix)]) + words
    try:
        return label(col)
    except (KeyError, ValueError):
        return col.replace("_", " ")


def labelled(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its column and index names passed through :func:`column_label` (for display only)."""
    out = df.rename(columns=lambda c: column_label(c) if isinstance(c, str) else c)
    if isinstance(out.index, pd.MultiIndex):
        return out.rename_axis([column_label(n) if n else n for n in out.index.names])
    return out.rename_axis(column_label(out.index.name) if out.index.name else out.index.name)


def _ledger_cell(c: str, val: Any) -> dict[str, Any]:
    if pd.isna(val):
        return {"cls": "num", "text": "\u2013"}
    if c.endswith("_rate"):  # any fallback is shown in red
        red = c == "fallback_rate" and float(val) > 0
        return {"cls": "num failed" if red else "num", "text": f"{100 * float(val):.1f}%"}
    if "tokens" in c:
        return {"cls": "num", "text": f"{float(val):,.0f}"}
    return {"cls": "num", "text": f"{float(val):.3g}"}


def headline_table(
    metrics: pd.DataFrame,
    headline: str = HEADLINE,
    pool_k: int | None = None,
    comparisons: pd.DataFrame | None = None,
    baseline: str = "",
) -> dict[str, Any]:
    """The headline table as plain values for the template: ``head`` (column titles), ``rows``, ``baseline``
    and ``frame`` (:func:`rerankeval.report.export.headline_frame`, the numbers the exports write).

    Key metrics (each 95% CI in ``ci``, shown on a second line), each variant's difference from the baseline
    (:func:`rerankeval.evaluate.verdict.baseline_of`) with its CI, wins/ties/losses and ``*`` when it survives
    Holm correction, and the fallback rate; the cost columns are in :func:`cost_table` (the table fits 1280 px).
    """
    f = export.headline_frame(metrics, headline, pool_k, comparisons, baseline)
    base, cols = f.attrs["baseline"], f.attrs["metrics"]
    extra = [c for c in HEADLINE_EXTRA if c in metrics.columns]
    head = ["variant", "queries"] + [
        export.metric_title(c, pool_k) + (" (zero-fill)" if c == headline else "") for c in cols
    ]
    head += [f"{label(headline)} vs {base} (baseline)"] if base else []
    head += [column_label(c) for c in extra]
    best = verdict.clear_winner(metrics, comparisons, headline)  # bold only for a winner (significant, not 0.000)
    rows = []
    for (_, r), (_, m) in zip(f.iterrows(), metrics.iterrows(), strict=True):
        cells = [{"cls": "num", "text": "\u2013" if pd.isna(r["queries"]) else str(int(r["queries"]))}]
        for c in cols:
            ci = (
                f"[{verdict.fmt(r[c + '_ci_low'])}, {verdict.fmt(r[c + '_ci_high'])}]"
                if not pd.isna(r[f"{c}_ci_low"])
                else ""
            )
            bold = c == headline and best is not None and r["variant"] == best
            cells.append({"cls": "num", "text": verdict.fmt(r[c]), "ci": ci, "bold": bold})
        if base:
            cells.append(_versus_cell(r, base))
        cells += [_ledger_cell(c, m[c]) for c in extra]
        rows.append({"variant": r["variant"], "cells": cells})
    return {"head": head, "rows": rows, "baseline": base, "frame": f}


def _versus_cell(r: pd.Series, base: str) -> dict[str, Any]:
    if r["variant"] == base:
        return {"cls": "num", "text": "baseline"}
    if pd.isna(r["diff"]):
        return {"cls": "num", "text": "\u2013"}
    return {
        "cls": "num",
        "text": f"{r['diff']:+.3f}{'*' if r['significant'] else ''}",
        "ci": f"[{r['diff_ci_low']:+.3f}, {r['diff_ci_high']:+.3f}] {int(r['wins'])}/{int(r['ties'])}/"
        f"{int(r['losses'])}",
    }


def cost_table(metrics: pd.DataFrame) -> dict[str, Any] | None:
    """Tokens and seconds per query by variant (the :data:`COST_COLUMNS` with a value), or None."""
    cols = [c for c in COST_COLUMNS if c in metrics.columns and metrics[c].notna().any()]
    if not cols:
        return None
    rows = [{"variant": r["variant"], "cells": [_ledger_cell(c, r[c]) for c in cols]} for _, r in metrics.iterrows()]
    return {"head": ["variant"] + [column_label(c) for c in cols], "rows": rows}


def _blank() -> dict[str, Any]:
    return dict(
        csp_meta="",
        name="",
        generated="",
        root="",
        failed=[],
        headline=None,
        costs=None,
        fallbacks=[],
        facts=[],
        verdict=[],
        judged=None,
        stale=None,
        pages=[],
        figures=[],
        appendix=[],
        manifest=None,
        judged_warning=None,
        auc=None,
        questions_note=None,
        assessor=None,
        grades_caption="",
        variants=[],
        exports={},
        baseline_why="",
        since=None,
        headline_other=None,
        injection=None,
        assess_warnings=[],
        holes=None,
        banners=[],
    )


def _hhmm(when: Any) -> str:
    """``HH:MM`` (UTC) of an ISO time, else ""."""
    try:
        return _dt.datetime.fromisoformat(str(when)).astimezone(_dt.UTC).strftime("%H:%M")
    except ValueError:
        return ""


def _last_run(dp: DatasetPaths | None, name: str) -> dict[str, Any]:
    """When the executed copy of ``name`` finished and how long it ran (papermill's record), else {}."""
    if dp is None:
        return {}
    try:
        meta = json.loads((dp.executed_dir / f"{name}.ipynb").read_text(encoding="utf-8"))["metadata"]["papermill"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {"finished": meta.get("end_time"), "seconds": meta.get("duration")}


def _page_time(p: Mapping[str, Any], dp: DatasetPaths | None) -> tuple[str, str]:
    """(status word, time cell) of one notebook: "ok" and "126 s" for one this run ran, "up to date" and
    "ran 10:01 UTC, 126 s" for one it skipped (or an earlier run's page), from its record or papermill's."""
    status = str(p.get("status", "")).lower()
    secs, when = p.get("seconds"), p.get("finished")
    reused = bool(p.get("skipped")) or p.get("rerun") is False
    if reused or not isinstance(secs, (int, float)):
        last = _last_run(dp, str(p.get("name", "")).split(" ")[0])
        secs = secs if isinstance(secs, (int, float)) else last.get("seconds")
        when = when or last.get("finished")
    took = f"{float(secs):.0f} s" if isinstance(secs, (int, float)) and not math.isnan(float(secs)) else ""
    ran = ", ".join(x for x in (f"ran {_hhmm(when)} UTC" if _hhmm(when) else "", took) if x)
    if status == "ok" and reused:
        return "up to date" if p.get("skipped") else "earlier run", ran or "time not recorded"
    return status, (ran if reused else took) or "time not recorded"


def _pages(pages: Sequence[Mapping[str, Any]], dp: DatasetPaths | None = None) -> list[dict[str, Any]]:
    """The Notebooks table's rows: link, status word, time (never empty) and error."""
    out = []
    for p in pages:
        status, time = _page_time(p, dp)
        err = p.get("error")
        out.append(
            {
                "href": _safe_href(p.get("href")),
                "name": p.get("name", p.get("href", "")),
                "status": status,
                "cls": "failed" if str(p.get("status", "")).lower() != "ok" else "ok",
                "seconds": time,
                "error": str(err)[:4000] if err else "",
            }
        )
    return out


def _figure_rank(stem: str) -> int:
    for i, s in enumerate(FIGURE_ORDER):
        if stem == s or (s.endswith("*") and stem.startswith(s[:-1])):
            return i
    return len(FIGURE_ORDER)


def _figure_key(f: Path) -> tuple:
    """Answers first (:data:`FIGURE_ORDER`), then by notebook (file name prefix), then in the order written."""
    return _figure_rank(f.stem), f.name.split("-", 1)[0], f.stat().st_mtime, f.name


def caption(stem: str, name: str) -> str:
    """What to look for in a figure (:func:`rerankeval.report.captions.caption_for`), else its file name."""
    return caption_for(stem) or name


def _figures(figures_dir: Path) -> list[dict[str, str]]:
    if not figures_dir.is_dir():
        return []
    figs = sorted(figures_dir.glob("*.png"), key=_figure_key)
    return [
        {
            "stem": f.stem,
            "name": f.name,
            "caption": caption(f.stem, f.name),
            "data": base64.b64encode(f.read_bytes()).decode("ascii"),
            "appendix": f.name.split("-", 1)[0] in APPENDIX_PREFIXES,
        }
        for f in figs
    ]


def _facts(summary: Summary | None) -> list[str]:
    if summary is None:
        return []
    facts = [summary.query_set] if summary.query_set else []
    if summary.relevance_unit and summary.relevance_unit != "unknown":
        facts.append(f"relevance unit: {summary.relevance_unit}; {summary.dedupe_policy}")
    if summary.verified_against:
        facts.append(
            f"metrics computed with {summary.primary}, verified against {summary.verified_against} on "
            f"the TREC run files (max difference {summary.max_abs_diff})"
        )
    d = summary.discrimination or None
    facts += [x for x in (discrimination.coverage(d), discrimination.shift_sentence(d)) if x]
    return facts + list(summary.external) + [f"warning: {w}" for w in summary.warnings]


def stale_inputs(dp: DatasetPaths, manifest: Mapping[str, Any] | None) -> list[str]:
    """The inputs of the analysis that changed since it ran: the corpus, query and judgment files and the run
    files whose SHA-256 differs from the one 05-analyse recorded in its manifest, or that are gone since
    (``corpus/chunks.jsonl``, ``runs/bm25.trec`` ...); empty without a manifest."""
    from rerankeval.core.ioutil import sha256_file

    if not manifest:
        return []
    dataset, runs = manifest.get("dataset"), manifest.get("runs")
    recorded = (dataset.get("file_sha256") if isinstance(dataset, Mapping) else None) or {}
    files = {"chunks": dp.chunks, "queries": dp.queries, "qrels": dp.qrels}
    checks = [(files[k], h) for k, h in recorded.items() if k in files]
    if isinstance(runs, Mapping):
        checks += [(dp.run_file(v), r.get("sha256")) for v, r in runs.items() if isinstance(r, Mapping)]
    changed = []
    for path, digest in checks:
        try:
            same = sha256_file(path) == digest
        except OSError:
            same = False
        if not same:
            changed.append(str(path.relative_to(dp.root)))
    return changed


def _staleness(dp: DatasetPaths, man: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the index says when the headline was computed on inputs that changed since (or None); ``man``: the
    manifest as read."""
    changed = stale_inputs(dp, man)
    if not changed:
        return None
    when = str((man or {}).get("created_utc") or "")[:16].replace("T", " ")
    return {"when": f"{when} UTC" if when else "an earlier run", "files": changed}


def _headline_parts(dp: DatasetPaths, man: Mapping[str, Any] | None) -> dict[str, Any]:
    """Template values of the headline section, from what the analysis wrote (``man``: the manifest as read)."""
    metrics = _load_metrics(dp)
    if metrics is None or metrics.empty:
        return {}
    summary = read_summary(dp)
    headline = summary.headline_metric if summary else HEADLINE
    pool_k = summary.pool_k if summary else None
    if headline not in metrics.columns:
        headline = next((c for c in metrics.columns if c.startswith("ndcg@")), headline)
    fallbacks = []
    if "fallback_rate" in metrics.columns:
        fallbacks = [
            {"variant": r["variant"], "rate": f"{100 * float(r['fallback_rate']):.1f}%"}
            for _, r in metrics[metrics.fallback_rate.fillna(0) > 0].iterrows()
        ]
    disc = (summary.discrimination if summary else None) or None
    comparisons = read_comparisons(dp)
    base = summary.baseline if summary else ""
    lines = verdict.verdict_lines(
        metrics,
        comparisons,
        headline,
        pool_k,
        missing=summary.missing if summary else None,
        discrimination=disc,
        baseline=base,
    )
    auc = discrimination.sentence(disc)
    table = headline_table(metrics, headline, pool_k, comparisons, base)
    exports = {k: p.name for k, p in export.write(dp, table["frame"]).items()}
    return {
        "headline": table,
        "costs": cost_table(metrics),
        "exports": exports,
        "variants": glossary.variants(metrics["variant"]),
        "since": history.since_previous(dp, man, headline),
        "baseline_why": verdict.baseline_reason(metrics, headline, base),
        "fallbacks": fallbacks,
        "facts": _facts(summary),
        "verdict": lines,
        "judged": judged.judged_at_k(summary),
        "stale": _staleness(dp, man),
        "judged_warning": judged.judged_warning(summary),
        **judged.assessor(summary),
        "auc": {"text": auc, "status": disc.get("status", "")} if auc else None,
        "headline_other": _headline_other(dp, headline, pool_k, base),
        "injection": injection_block(dp, list(metrics["variant"])),
        "assess_warnings": judged.assess_warnings(dp, summary),
        "holes": judged.holes_block(dp),
    }


def _headline_other(dp: DatasetPaths, headline: str, pool_k: int | None, base: str) -> dict[str, Any] | None:
    """The headline table under the other grades (human+llm beside human, or the reverse) when 05 wrote one."""
    from rerankeval.evaluate import agreement, other_grades

    got = other_grades.read(dp)
    if got is None or headline not in got[0].columns:
        return None
    table, comparisons, rec = got
    return {
        "table": headline_table(table, headline, pool_k, comparisons, base),
        "source": rec.get("qrels_source"),
        "caption": agreement.caption(rec),
    }


def injection_block(dp: DatasetPaths, variants: Sequence[str]) -> dict[str, Any] | None:
    """The warning block of the units that instruct the model (``analyse/injection.json``,
    :mod:`rerankeval.evaluate.injection`): the sentence, the units and each variant's headline with and without
    them; None when nothing was flagged (or 05 has not checked)."""
    rec = injection.read(dp)
    reranked = [v for v in variants if v in (HYBRID_RERANK, CROSS_ENCODER) or "rerank" in str(v)]
    text = injection.headline_sentence(rec, reranked)
    if not text or rec is None:
        return None
    effect = [
        {
            "variant": r.get("variant"),
            "with": verdict.fmt(r.get("with")),
            "without": verdict.fmt(r.get("without")),
            "diff": "\u2013" if r.get("diff") is None else f"{r['diff']:+.3f}",
        }
        for r in rec.get("effect") or []
    ]
    return {"text": text, "units": rec.get("flagged") or [], "effect": effect, "metric": label(str(rec.get("metric")))}


def write_index(dp: DatasetPaths, pages: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``dp.report_dir/index.html`` and return its path.

    ``pages``: ``[{"name": "05-analyse", "href": "05-analyse.html", "status": "ok"|"failed",
    "seconds": float, "error": str|None}, ...]`` in chain order.
    """
    from markupsafe import Markup

    from rerankeval.evaluate.manifest import read_manifest

    man = read_manifest(dp)  # read and redacted once: every part below reads this copy
    figures = _figures(dp.figures_dir)
    values = (
        _blank()
        | _headline_parts(dp, man)
        | dict(
            csp_meta=Markup(CSP_META),
            name=dp.name,
            generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            root=f"results/{dp.name}",
            failed=[str(p.get("name", "?")) for p in pages if str(p.get("status", "")).lower() != "ok"],
            banners=failures.banners(dp, pages),
            pages=_pages(pages, dp),
            figures=[f for f in figures if not f["appendix"]],
            appendix=[f for f in figures if f["appendix"]],
            manifest=None if man is None else manifest_view.rows(man),
            limitations=limitations.report_values(dp),  # issue 11
            questions_note=questions_note(dp),
        )
    )
    text = _env().get_template("index.html.j2").render(**values)
    return atomic_write_text(dp.report_dir / "index.html", relative_paths(text, dp.roots, [(dp.source, dp.name)]))
