"""What the judgments let the first screen say: the Judged@k column and its warning, the LLM assessor's agreement
with the human grades and its warnings, and the holes in the judgments (zero-fill, condensed and bpref with their
[worst, best] bounds, Buckley & Voorhees 2004; Sakai 2007) with the prediction-powered human+LLM numbers (Angelopoulos
et al., Science 2023). Each function turns what stage 05 or 09 wrote into template values for :mod:`.render`'s index
page; none computes a metric.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate import holes, verdict
from rerankeval.evaluate.analysis_records import Summary
from rerankeval.evaluate.metrics import label


def judged_at_k(summary: Summary | None) -> dict[str, Any] | None:
    """The Judged@k column (share of each variant's top k with a judgment), or None before stage 05 wrote it."""
    j = (summary.judging if summary else None) or {}
    if not j.get("judged_at_k"):
        return None
    return {"k": j["k"], "values": {v: verdict.fmt(x) for v, x in j["judged_at_k"].items()}}


def assessor(summary: Summary | None) -> dict[str, Any]:
    """The LLM assessor's agreement with the human grades (09-assess, measured by 05) and the grades caption."""
    from rerankeval.evaluate import agreement

    grades = (summary.grades if summary else None) or {}
    a = grades.get("agreement")
    box = None
    if a:
        conf = a.get("confusion_graded") or {}
        box = {
            "text": agreement.describe(grades),
            "warning": a.get("warning"),
            "labels": conf.get("labels", []),
            "rows": conf.get("counts", []),
        }
    return {"assessor": box, "grades_caption": agreement.caption(grades) if grades else ""}


LOW_JUDGED = 0.5  # Judged@k below which the verdict box warns that the scores are lower bounds


def judged_warning(summary: Summary | None) -> str | None:
    """A warning for the verdict box when a variant's top k is mostly unjudged, with the next step; else None."""
    j = (summary.judging if summary else None) or {}
    shares = {v: float(x) for v, x in (j.get("judged_at_k") or {}).items() if x is not None and not pd.isna(x)}
    if not shares or min(shares.values()) >= LOW_JUDGED:
        return None
    low = min(shares, key=shares.get)
    return (
        f"Judged@{j['k']} is low: only {100 * shares[low]:.0f}% of {low}'s top {j['k']} has a judgment "
        f"(unjudged units count as not relevant, so these scores are lower bounds and a variant that finds "
        f"unjudged relevant pages is punished). Next step: grade the pool in 00-explore (review/unjudged.tsv "
        f'lists it), or let the LLM assessor grade it (make report P="assess=true").'
    )


STATUS_WORDS = {"decided": "decided", "undecided": "undecided", "tied": "tied", "identical": "identical (degenerate)"}


def _signed(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "\u2013"
    return "\u2013" if math.isnan(v) else f"{v:+.3f}"


def holes_block(dp: DatasetPaths) -> dict[str, Any] | None:
    """The first screen's view of the holes in the judgments (``analyse/incomplete.json``,
    :mod:`rerankeval.evaluate.holes`): per comparison the zero-fill difference, [worst, best] over the unjudged
    units and the status word with its sentence; per variant zero-fill, condensed and bpref with [worst, best]; the
    assumption each number rests on. None before 05 wrote it."""
    rec = holes.read(dp)
    if not rec or not rec.get("variants"):
        return None
    comps = [
        {
            "pair": f"{c.get('a')} vs {c.get('b')}",
            "zero_fill": _signed(c.get("zero_fill")),
            "interval": f"[{_signed(c.get('worst'))}, {_signed(c.get('best'))}]",
            "status": STATUS_WORDS.get(str(c.get("status")), str(c.get("status"))),
            "cls": "ok" if c.get("status") == "decided" else "failed" if c.get("status") == "undecided" else "",
            "sentence": str(c.get("sentence", "")),
        }
        for c in rec.get("comparisons") or []
    ]
    variants = [
        {
            "variant": v.get("variant"),
            "zero_fill": verdict.fmt(v.get("zero_fill")),
            "condensed": verdict.fmt(v.get("condensed")),
            "bpref": verdict.fmt(v.get("bpref")),
            "interval": f"[{verdict.fmt(v.get('worst'))}, {verdict.fmt(v.get('best'))}]",
            "unjudged": int(v.get("unjudged_in_top_k") or 0),
        }
        for v in rec["variants"]
    ]
    names = {"zero_fill": "zero-fill", "condensed": "condensed", "bpref": "bpref", "worst_best": "[worst, best]"}
    got = rec.get("assumptions") or {}
    assumptions = [{"name": names.get(k, k), "text": got[k]} for k in [*names, *got] if k in got]
    assumptions = list({a["name"]: a for a in assumptions}.values())  # zero-fill first, each once
    return {
        "metric": label(str(rec.get("metric", verdict.HEADLINE))),
        "k": rec.get("k"),
        "baseline": rec.get("baseline"),
        "comparisons": comps,
        "variants": variants,
        "assumptions": assumptions,
        "queue_size": int(rec.get("queue_size") or 0),
        "top_grade": rec.get("top_grade"),
        "expected_skipped": int(rec.get("expected_skipped") or 0),
        "ppi": _ppi_view(rec.get("ppi")),
    }


def _ppi_view(got: Any) -> dict[str, Any] | None:
    """The human+LLM numbers with prediction-powered intervals (``analyse/incomplete.json`` → ``ppi``), or why
    they were not computed; None without LLM grades."""
    if not isinstance(got, dict):
        return None
    rows = [
        {
            "variant": v,
            "estimate": verdict.fmt(r.get("estimate")),
            "ci": f"[{verdict.fmt(r.get('ci_low'))}, {verdict.fmt(r.get('ci_high'))}]",
            "llm_only": verdict.fmt(r.get("llm_only")),
        }
        for v, r in (got.get("variants") or {}).items()
        if isinstance(r, dict)
    ]
    return {
        "n_human": int(got.get("n_human") or 0),
        "rows": rows,
        "refused": str(got.get("refused") or ""),
        "fallback": str(got.get("fallback") or ""),
    }


def assess_warnings(dp: DatasetPaths, summary: Summary | None = None) -> list[str]:
    """The LLM judge's warnings, shown on the index beside the headline: 09-assess's (``assess/summary.json``, key
    ``warning``: a text or a list of texts, e.g. "100 % of grades are 1") and those 05 recorded about the judge whose
    grades it read (``summary.grades["judge_warning"]``: its own drafts graded, an old grades file), each once."""
    try:
        got = json.loads((dp.stage_dir("assess") / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        got = {}
    w = got.get("warning") if isinstance(got, dict) else None
    items = (w if isinstance(w, list) else [w]) + [((summary.grades if summary else None) or {}).get("judge_warning")]
    texts = [str(x).strip() for x in items if isinstance(x, str | int | float) and str(x).strip()]
    return list(dict.fromkeys(texts))
