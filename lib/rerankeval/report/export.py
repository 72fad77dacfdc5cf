"""The headline comparison for a paper or a pull request: Markdown, LaTeX (booktabs) and CSV (issue 23 item 2).

:func:`headline_frame` is the one source of the index's headline table (``render.headline_table`` formats its
cells from it) and of the three exports, so the files say exactly what the page says: per variant the key
metrics with their 95% CIs, the paired difference from the baseline on the headline metric with its CI,
the queries better/tied/worse, the Holm-adjusted p-value and ``*`` when it is below 0.05. :func:`write` writes
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


def headline_frame(
    metrics: pd.DataFrame,
    headline: str = verdict.HEADLINE,
    pool_k: int | None = None,
    comparisons: pd.DataFrame | None = None,
    baseline: str = "",
) -> pd.DataFrame:
    """One row per variant: ``variant, queries``, each key metric with ``_ci_low``/``_ci_high``, then (with a
    baseline) the paired difference from it (:data:`DIFF` columns; NaN on the baseline's row and where untested).
    ``attrs``: ``baseline``, ``headline``, ``metrics`` (the key metric columns), ``pool_k``."""
    base = verdict.baseline_of(metrics, headline, baseline)
    cols = verdict.key_metrics(metrics, headline, pool_k)
    rows = []
    for _, r in metrics.iterrows():
        row = {"variant": r["variant"], "queries": r.get("n_queries")}
        for c in cols:
            row |= {
                c: r[c],
                f"{c}_ci_low": r.get(f"{c}_ci_low", math.nan),
                f"{c}_ci_high": r.get(f"{c}_ci_high", math.nan),
            }
        if base:
            v = None if r["variant"] == base else verdict.versus(comparisons, headline, r["variant"], base)
            row |= (
                {k: math.nan for k in DIFF}
                if v is None
                else {
                    "diff": v["diff"],
                    "diff_ci_low": v["low"],
                    "diff_ci_high": v["high"],
                    "wins": v["wins"],
                    "ties": v["ties"],
                    "losses": v["losses"],
                    "p": v["p"],
                    "p_holm": v["p_holm"],
                    "significant": bool(v["mark"]),
                }
            )
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


Cell = tuple[str, str]  # (the value, its 95% CI in brackets or "")
BTW = "better/tied/worse"  # the queries on which a variant scores higher than, the same as, lower than the baseline


def _cells(f: pd.DataFrame, mark: str) -> list[list[Cell]]:
    """Per variant its cells, each (value, CI), shared by Markdown and LaTeX (``mark``: how a significant
    difference is marked): variant, queries, each key metric, then (with a baseline) the difference from it,
    better/tied/worse and the Holm-adjusted p-value."""
    a, base = f.attrs, f.attrs.get("baseline")
    rows = []
    for _, r in f.iterrows():
        cells = [(str(r["variant"]), ""), ("\u2013" if pd.isna(r["queries"]) else str(int(r["queries"])), "")]
        cells += [
            (_num(r[c]), "" if pd.isna(r[c + "_ci_low"]) else f"[{_num(r[c + '_ci_low'])}, {_num(r[c + '_ci_high'])}]")
            for c in a["metrics"]
        ]
        if base and r["variant"] == base:
            cells += [("baseline", ""), ("", ""), ("", "")]
        elif base:
            tested = not pd.isna(r["diff"])
            sig = mark if tested and r["significant"] else ""
            cells += [
                (f"{_num(r['diff'], True)}{sig}", f"[{_num(r['diff_ci_low'], True)}, {_num(r['diff_ci_high'], True)}]")
                if tested
                else ("\u2013", ""),
                (f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}" if tested else "\u2013", ""),
                (f"{float(r['p_holm']):.3g}" if tested and not pd.isna(r["p_holm"]) else "\u2013", ""),
            ]
        rows.append(cells)
    return rows


def legend(f: pd.DataFrame, n_queries: int | None = None) -> str:
    """What the table's columns, brackets and mark mean, in words (the Markdown note, the LaTeX caption);
    ``n_queries``: the query count of every variant, said when the table leaves that column out."""
    a, base = f.attrs, f.attrs.get("baseline")
    over = f"the {n_queries} evaluated queries" if n_queries is not None else "the evaluated queries"
    out = (
        f"Mean of each metric over {over} (zero-fill: an unjudged unit counts as not relevant), with its 95% "
        "percentile bootstrap confidence interval in brackets."
    )
    if base:
        out += (
            f" {label(a['headline'])} vs {base}: the paired per-query difference from the baseline, {base}, "
            f"with its 95% CI; {BTW}: the queries on which the variant scores higher than, the same as, lower "
            f"than {base}; p (Holm): the paired test's p-value after Holm correction; *: "
            f"{MARK_NOTE.removeprefix('* ')}."
        )
    return out


def to_markdown(f: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table, numbers right-aligned, and the legend below it."""
    a = f.attrs
    head = ["variant", "queries"] + [metric_title(c, a.get("pool_k")) for c in a["metrics"]]
    if a.get("baseline"):
        head += [f"{label(a['headline'])} vs {a['baseline']} [95% CI]", BTW, "p (Holm)"]
    rows = [[f"{v} {ci}".strip() for v, ci in r] for r in _cells(f, "\\*")]
    esc = [[c.replace("|", "\\|") for c in r] for r in [head, *rows]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join([":---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    note = legend(f).replace("*", "\\*")
    return "\n".join([*lines, "", note]) + "\n"


_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\u2013": "--",
    "\u2212": "$-$",
    "<": "$<$",
    ">": "$>$",
}
_TEX_RX = re.compile("|".join(re.escape(k) for k in _TEX))
_SIGNED = re.compile(r"(?<![\w.])([+-])(?=\d)")  # the sign of a number we formatted, not a hyphen in a name


def tex_escape(s: str) -> str:
    """``s`` safe in LaTeX text: the special characters escaped (``hybrid_rerank`` -> ``hybrid\\_rerank``), a
    minus sign (U+2212) as ``$-$`` and ``<``/``>`` in math mode (text mode prints them as other glyphs)."""
    return _TEX_RX.sub(lambda m: _TEX[m.group(0)], str(s))


def _tex_number(s: str) -> str:
    """A formatted number cell in LaTeX: its sign in math mode (``-0.100`` -> ``$-$0.100``, not a hyphen)."""
    return _SIGNED.sub(lambda m: f"${m.group(1)}$", tex_escape(s))


def _tex_head(f: pd.DataFrame) -> list[tuple[str, str]]:
    """The LaTeX column titles, each on two lines (escaped), so that no title is wider than its numbers."""
    a, base = f.attrs, f.attrs.get("baseline")
    pairs = [("variant", ""), ("queries", "")]
    for c in a["metrics"]:
        t = metric_title(c, a.get("pool_k"))
        pairs.append((t.removesuffix(" (pool ceiling)"), "(pool ceiling)" if t.endswith("(pool ceiling)") else ""))
    pairs = [(tex_escape(x), tex_escape(y)) for x, y in pairs]
    if base:
        pairs += [
            (f"$\\Delta$ {tex_escape(label(a['headline']))}", f"vs {tex_escape(base)}"),
            ("better/", "tied/worse"),
            ("$p$", "(Holm)"),
        ]
    return pairs


def _same_queries(f: pd.DataFrame) -> int | None:
    """The query count when every variant has the same one (the caption says it, the column goes), else None."""
    q = f["queries"]
    return int(q.iloc[0]) if len(q) and q.notna().all() and q.nunique() == 1 else None


def to_latex(f: pd.DataFrame, label_: str = "tab:headline") -> str:
    """A ``table`` float (needs ``\\usepackage{booktabs,graphicx}``): a ``\\caption`` with the legend, a booktabs
    ``tabular`` in ``\\footnotesize`` with each CI on a second line in ``\\scriptsize``, minus signs as ``$-$``,
    significant differences marked ``$^{*}$``, the queries column only when variants differ in it; scaled down
    to ``\\linewidth`` only when still wider than it."""
    marker = "\x00"  # placed before escaping, then replaced by the math-mode mark
    n_q = _same_queries(f)
    keep = [i for i in range(len(_tex_head(f))) if not (i == 1 and n_q is not None)]
    head = [_tex_head(f)[i] for i in keep]
    lines = [" & ".join(h[0] for h in head) + r" \\", " & ".join(h[1] for h in head) + r" \\"]
    for r in _cells(f, marker):
        r = [r[i] for i in keep]
        lines.append(
            " & ".join([tex_escape(r[0][0])] + [_tex_number(v).replace(marker, "$^{*}$") for v, _ in r[1:]]) + r" \\"
        )
        if any(ci for _, ci in r):
            lines.append(" & ".join("" if not ci else r"\scriptsize " + _tex_number(ci) for _, ci in r) + r" \\[2pt]")
    lines.insert(2, r"\midrule")
    caption = tex_escape(legend(f, n_q)).replace("*", "$^{*}$", 1)
    return (
        "\n".join(
            [
                "% The headline comparison of ReRankEval; needs \\usepackage{booktabs,graphicx}. \\input{headline.tex}",
                r"\begin{table}[tbp]",
                r"\centering",
                r"\caption{" + caption + "}",
                r"\label{" + label_ + "}",
                r"\footnotesize",
                r"\setlength{\tabcolsep}{3pt}",
                r"\ifdefined\rerankevalbox\else\newsavebox{\rerankevalbox}\fi",
                r"\sbox{\rerankevalbox}{%",
                r"\begin{tabular}{@{}l" + "r" * (len(head) - 1) + "@{}}",
                r"\toprule",
                *lines,
                r"\bottomrule",
                r"\end{tabular}}%",
                r"\ifdim\wd\rerankevalbox>\linewidth\resizebox{\linewidth}{!}{\usebox{\rerankevalbox}}%",
                r"\else\usebox{\rerankevalbox}\fi",
                r"\end{table}",
            ]
        )
        + "\n"
    )


def csv_columns(f: pd.DataFrame) -> dict[str, str]:
    """The CSV's names of the :data:`DIFF` columns, each naming the metric and the baseline it is measured
    against (``diff`` -> ``ndcg@10_diff_vs_bm25``, ``wins`` -> ``queries_better_than_bm25``)."""
    base, m = f.attrs.get("baseline"), f.attrs.get("headline")
    if not base:
        return {}
    return {
        "diff": f"{m}_diff_vs_{base}",
        "diff_ci_low": f"{m}_diff_vs_{base}_ci_low",
        "diff_ci_high": f"{m}_diff_vs_{base}_ci_high",
        "wins": f"queries_better_than_{base}",
        "ties": f"queries_tied_with_{base}",
        "losses": f"queries_worse_than_{base}",
        "p": f"p_vs_{base}",
        "p_holm": f"p_holm_vs_{base}",
        "significant": f"significant_vs_{base}",
    }


def to_csv(f: pd.DataFrame) -> str:
    """The frame's numbers unformatted (empty where untested), for a spreadsheet or a plot; the difference's
    columns name the baseline (:func:`csv_columns`)."""
    return f.rename(columns=csv_columns(f)).to_csv(index=False, float_format="%.6g")


def write(dp: DatasetPaths, f: pd.DataFrame) -> dict[str, Path]:
    """``headline.md``, ``headline.tex`` and ``headline.csv`` in ``dp.report_dir``; returns ``{format: path}``."""
    text = {"markdown": to_markdown(f), "latex": to_latex(f), "csv": to_csv(f)}
    return {k: atomic_write_text(dp.report_dir / FILES[k], text[k]) for k in FILES}
