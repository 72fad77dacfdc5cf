"""The headline comparison for a paper or a pull request: Markdown, LaTeX (booktabs) and CSV (issue 23 item 2).

:func:`headline_frame` is the one source of the index's headline table (``render.headline_table`` formats its
cells from it) and of the three exports, so the files say exactly what the page says: per variant the key
metrics with their 95% CIs, the paired difference from the baseline on the headline metric with its CI,
wins/ties/losses, the Holm-adjusted p-value and ``*`` when it is below 0.05. :func:`write` writes
``headline.md``, ``headline.tex`` and ``headline.csv`` into ``dp.report_dir``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate import verdict
from rerankeval.evaluate.metrics import label

FILES = {"markdown": "headline.md", "latex": "headline.tex", "csv": "headline.csv"}
DIFF = ("diff", "diff_ci_low", "diff_ci_high", "wins", "ties", "losses", "p", "p_holm", "significant")
MARK_NOTE = "* p < 0.05 after Holm correction (paired test over all pairs of the metric)"


def headline_frame(metrics: pd.DataFrame, headline: str = verdict.HEADLINE, pool_k: int | None = None,
                   comparisons: pd.DataFrame | None = None, baseline: str = "") -> pd.DataFrame:
    """One row per variant: ``variant, queries``, each key metric with ``_ci_low``/``_ci_high``, then (with a
    baseline) the paired difference from it (:data:`DIFF` columns; NaN on the baseline's row and where untested).
    ``attrs``: ``baseline``, ``headline``, ``metrics`` (the key metric columns), ``pool_k``."""
    base = verdict.baseline_of(metrics, headline, baseline)
    cols = verdict.key_metrics(metrics, headline, pool_k)
    rows = []
    for _, r in metrics.iterrows():
        row = {"variant": r["variant"], "queries": r.get("n_queries")}
        for c in cols:
            row |= {c: r[c], f"{c}_ci_low": r.get(f"{c}_ci_low", math.nan), f"{c}_ci_high": r.get(f"{c}_ci_high",
                                                                                                   math.nan)}
        if base:
            v = None if r["variant"] == base else verdict.versus(comparisons, headline, r["variant"], base)
            row |= {k: math.nan for k in DIFF} if v is None else {
                "diff": v["diff"], "diff_ci_low": v["low"], "diff_ci_high": v["high"], "wins": v["wins"],
                "ties": v["ties"], "losses": v["losses"], "p": v["p"], "p_holm": v["p_holm"],
                "significant": bool(v["mark"])}
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update(baseline=base, headline=headline, metrics=cols, pool_k=pool_k)
    return out


def _num(x: object, signed: bool = False) -> str:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "\u2013"
    return "\u2013" if math.isnan(v) else (f"{v:+.3f}" if signed else f"{v:.3f}")


def metric_title(c: str, pool_k: int | None) -> str:
    return label(c) + (" (pool ceiling)" if pool_k and c == f"recall@{pool_k}" else "")


def _cells(f: pd.DataFrame, mark: str) -> tuple[list[str], list[list[str]]]:
    """Column titles and text cells shared by Markdown and LaTeX (``mark``: how a significant difference is marked)."""
    a = f.attrs
    head = ["variant", "queries"] + [metric_title(c, a.get("pool_k")) for c in a["metrics"]]
    base = a.get("baseline")
    if base:
        head += [f"{label(a['headline'])} vs {base} [95% CI]", "wins/ties/losses", "p (Holm)"]
    rows = []
    for _, r in f.iterrows():
        cells = [str(r["variant"]), "\u2013" if pd.isna(r["queries"]) else str(int(r["queries"]))]
        cells += [f"{_num(r[c])} [{_num(r[c + '_ci_low'])}, {_num(r[c + '_ci_high'])}]"
                  if not pd.isna(r[c + "_ci_low"]) else _num(r[c]) for c in a["metrics"]]
        if base and r["variant"] == base:
            cells += ["baseline", "", ""]
        elif base:
            tested = not pd.isna(r["diff"])
            sig = mark if tested and r["significant"] else ""
            cells += [f"{_num(r['diff'], True)}{sig} [{_num(r['diff_ci_low'], True)}, {_num(r['diff_ci_high'], True)}]"
                      if tested else "\u2013",
                      f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}" if tested else "\u2013",
                      f"{float(r['p_holm']):.3g}" if tested and not pd.isna(r["p_holm"]) else "\u2013"]
        rows.append(cells)
    return head, rows


def to_markdown(f: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table, numbers right-aligned, and the note on the mark."""
    head, rows = _cells(f, "\\*")
    esc = [[c.replace("|", "\\|") for c in r] for r in [head, *rows]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    note = [f"\n\\{MARK_NOTE}; brackets: 95% bootstrap CI."] if f.attrs.get("baseline") else []
    return "\n".join(lines + note) + "\n"


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\u2013": "--", "\u2212": "-"}
_TEX_RX = re.compile("|".join(re.escape(k) for k in _TEX))


def tex_escape(s: str) -> str:
    """``s`` safe in LaTeX text: the ten special characters escaped (``hybrid_rerank`` -> ``hybrid\\_rerank``)."""
    return _TEX_RX.sub(lambda m: _TEX[m.group(0)], str(s))


def to_latex(f: pd.DataFrame) -> str:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``): significant differences marked ``$^{*}$``."""
    marker = "\x00"  # placed before escaping, then replaced by the math-mode mark
    head, rows = _cells(f, marker)
    body = [" & ".join(tex_escape(c).replace(marker, "$^{*}$") for c in r) + r" \\" for r in rows]
    out = [r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule",
           " & ".join(tex_escape(h) for h in head) + r" \\", r"\midrule", *body, r"\bottomrule", r"\end{tabular}"]
    if f.attrs.get("baseline"):
        out.append("% $^{*}$: " + tex_escape(MARK_NOTE[2:]) + "; brackets: 95% bootstrap CI")
    return "\n".join(out) + "\n"


def to_csv(f: pd.DataFrame) -> str:
    """The frame's numbers unformatted (empty where untested), for a spreadsheet or a plot."""
    return f.to_csv(index=False, float_format="%.6g")


def write(dp: DatasetPaths, f: pd.DataFrame) -> dict[str, Path]:
    """``headline.md``, ``headline.tex`` and ``headline.csv`` in ``dp.report_dir``; returns ``{format: path}``."""
    text = {"markdown": to_markdown(f), "latex": to_latex(f), "csv": to_csv(f)}
    return {k: atomic_write_text(dp.report_dir / FILES[k], text[k]) for k in FILES}
