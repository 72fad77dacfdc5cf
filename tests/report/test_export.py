"""The headline comparison exported as Markdown, LaTeX and CSV from the numbers the index shows (issue 23 item 2)."""

from __future__ import annotations

import io
import math
import re
import shutil
import subprocess

import pandas as pd
import pytest

from comparison_rows import comparison
from handmade import dataset_in
from rerankeval.report import export, render

METRICS = pd.DataFrame(
    {
        "variant": ["bm25", "vector", "hybrid_rerank"],
        "n_queries": [20, 20, 20],
        "ndcg@10": [0.5, 0.6, 0.66],
        "ndcg@10_ci_low": [0.4, 0.5, 0.56],
        "ndcg@10_ci_high": [0.6, 0.7, 0.76],
        "mrr@10": [0.55, 0.65, 0.7],
        "mrr@10_ci_low": [0.45, 0.55, 0.6],
        "mrr@10_ci_high": [0.65, 0.75, 0.8],
    }
)


# stored as vector - hybrid_rerank (so the export must flip it) and bm25 - vector
COMPARISONS = pd.DataFrame(
    [
        comparison("vector", "hybrid_rerank", -0.06, 0.03, 5, 3, 12),
        comparison("bm25", "vector", -0.10, 0.20, 4, 6, 10),
    ]
)


@pytest.fixture
def frame():
    return export.headline_frame(METRICS, comparisons=COMPARISONS)


def test_the_frame_holds_the_paired_difference_from_the_baseline(frame):
    assert frame.attrs["baseline"] == "vector" and frame.attrs["metrics"] == ["ndcg@10", "mrr@10"]
    r = frame.set_index("variant")
    assert r.at["hybrid_rerank", "diff"] == pytest.approx(0.06)
    assert (r.at["hybrid_rerank", "diff_ci_low"], r.at["hybrid_rerank", "diff_ci_high"]) == (
        pytest.approx(0.01),
        pytest.approx(0.11),
    )
    assert (r.at["hybrid_rerank", "wins"], r.at["hybrid_rerank", "losses"]) == (12, 5)
    assert bool(r.at["hybrid_rerank", "significant"]) and not bool(r.at["bm25", "significant"])
    assert math.isnan(r.at["vector", "diff"])


def test_markdown(frame):
    lines = export.to_markdown(frame).splitlines()
    assert lines[:5] == [
        "| variant | queries | nDCG@10 | MRR@10 | nDCG@10 vs vector [95% CI] | better/tied/worse | p (Holm) |",
        "|:---|---:|---:|---:|---:|---:|---:|",
        "| bm25 | 20 | 0.500 [0.400, 0.600] | 0.550 [0.450, 0.650] | -0.100 [-0.150, -0.050] | 4/6/10 | 0.2 |",
        "| vector | 20 | 0.600 [0.500, 0.700] | 0.650 [0.550, 0.750] | baseline |  |  |",
        "| hybrid_rerank | 20 | 0.660 [0.560, 0.760] | 0.700 [0.600, 0.800] | +0.060\\* [+0.010, +0.110] | 12/3/5 "
        "| 0.03 |",
    ]
    assert lines[5] == "" and lines[6] == export.legend(frame).replace("*", "\\*")


def test_the_legend_says_what_every_column_and_mark_means(frame):
    text = export.legend(frame)
    assert "95% percentile bootstrap confidence interval" in text
    assert (
        "better/tied/worse: the queries on which the variant scores higher than, the same as, lower than vector" in text
    )
    assert "*: " + export.MARK_NOTE.removeprefix("* ") in text and "paired per-query difference" in text
    assert "wins" not in text and "losses" not in text


def test_latex_is_a_captioned_booktabs_table_with_math_minus_and_marks(frame):
    tex = export.to_latex(frame)
    lines = tex.splitlines()
    assert r"\begin{table}[tbp]" in lines and r"\end{table}" in lines and r"\toprule" in lines
    caption = next(x for x in lines if x.startswith(r"\caption{"))
    assert "better/tied/worse" in caption and "95\\% percentile bootstrap" in caption
    assert "$^{*}$: p $<$ 0.05" in caption
    assert not any(x.lstrip().startswith("%") and "brackets" in x for x in lines)  # the legend is no comment
    head = lines.index(r"\toprule")
    assert lines[head + 1 : head + 3] == [
        r"variant & nDCG@10 & MRR@10 & $\Delta$ nDCG@10 & better/ & $p$ \\",
        r" &  &  & vs vector & tied/worse & (Holm) \\",
    ]  # 20 queries each: caption
    assert "the 20 evaluated queries" in caption
    row = lines.index(r"hybrid\_rerank & 0.660 & 0.700 & $+$0.060$^{*}$ & 12/3/5 & 0.03 \\")
    assert lines[row + 1] == (
        r" & \scriptsize [0.560, 0.760] & \scriptsize [0.600, 0.800] & "
        r"\scriptsize [$+$0.010, $+$0.110] &  &  \\[2pt]"
    )
    bm25 = next(x for x in lines if x.startswith("bm25 &"))
    assert "$-$0.100" in bm25 and "$^{*}$" not in bm25
    assert "wins" not in tex and not re.search(r"(?<![$\w])-\d", tex)  # no hyphen as a minus sign
    assert export.tex_escape("a_b & 50% {x} #1 $ <") == r"a\_b \& 50\% \{x\} \#1 \$ $<$"


def test_latex_keeps_the_queries_column_when_variants_differ(frame):
    f = export.headline_frame(METRICS.assign(n_queries=[20, 20, 18]), comparisons=COMPARISONS)
    lines = export.to_latex(f).splitlines()
    assert lines[lines.index(r"\toprule") + 1].startswith("variant & queries & nDCG@10")
    assert any(x.startswith(r"hybrid\_rerank & 18 & 0.660") for x in lines)


def test_csv_names_the_baseline_in_the_difference_columns(frame):
    back = pd.read_csv(io.StringIO(export.to_csv(frame)))
    assert list(back.columns[:5]) == ["variant", "queries", "ndcg@10", "ndcg@10_ci_low", "ndcg@10_ci_high"]
    assert list(back.columns[8:]) == [
        "ndcg@10_diff_vs_vector",
        "ndcg@10_diff_vs_vector_ci_low",
        "ndcg@10_diff_vs_vector_ci_high",
        "queries_better_than_vector",
        "queries_tied_with_vector",
        "queries_worse_than_vector",
        "p_vs_vector",
        "p_holm_vs_vector",
        "significant_vs_vector",
    ]
    r = back.set_index("variant")
    assert r.at["hybrid_rerank", "ndcg@10_diff_vs_vector"] == pytest.approx(0.06)
    assert r.at["hybrid_rerank", "queries_better_than_vector"] == 12
    assert math.isnan(r.at["vector", "ndcg@10_diff_vs_vector"])
    assert "diff" in frame.columns  # the frame the page formats keeps its names


def _wide_frame(n_metrics: int) -> pd.DataFrame:
    """Every catalogue variant (long names) and ``n_metrics`` key metrics with CIs, each compared with vector."""
    from rerankeval.core import names

    vs, ms = list(names.REPORT_ORDER), ["ndcg@10", "mrr@10", "success@10", "recall@10", "recall@20", "map"][:n_metrics]
    cols = {"variant": vs, "n_queries": [200] * len(vs)}
    for i, m in enumerate(ms):
        v = [0.3 + 0.01 * (i + j) for j in range(len(vs))]
        cols |= {m: v, f"{m}_ci_low": [x - 0.05 for x in v], f"{m}_ci_high": [x + 0.05 for x in v]}
    cmp = [
        {
            "metric": "ndcg@10",
            "a": a,
            "b": "vector",
            "n": 200,
            "mean_a": 0.0,
            "mean_b": 0.0,
            "diff": -0.0123,
            "diff_ci_low": -0.05,
            "diff_ci_high": 0.02,
            "wins": 100,
            "ties": 50,
            "losses": 50,
            "p": 1e-5,
            "p_holm": 4e-5,
            "significant": True,
            "sd_diff": 0.1,
            "mdd": 0.05,
            "n_left_out": 0,
        }
        for a in vs
        if a != "vector"
    ]
    return export.headline_frame(pd.DataFrame(cols), pool_k=20, comparisons=pd.DataFrame(cmp), baseline="vector")


def _pdflatex(tmp_path, f: pd.DataFrame) -> str:
    """Compile ``headline.tex`` inside an article page; the log, with a line ``RRE-SCALED`` when it was scaled."""
    (tmp_path / "headline.tex").write_text(export.to_latex(f))
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage{booktabs,graphicx}\n\\let\\rreresize\\resizebox\n"
        "\\renewcommand{\\resizebox}[3]{\\typeout{RRE-SCALED}\\rreresize{#1}{#2}{#3}}\n"
        "\\begin{document}\nText.\n\\input{headline.tex}\n\\input{headline.tex}\n\\end{document}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (tmp_path / "doc.log").read_text(errors="replace")
    assert done.returncode == 0, log[-2000:]
    return log


@pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex is not installed: apt-get install texlive-latex-base texlive-latex-recommended",
)
def test_headline_tex_compiles_in_an_article_page_without_an_overfull_box(tmp_path, frame):
    log = _pdflatex(tmp_path, frame)
    assert "Overfull \\hbox" not in log and "RRE-SCALED" not in log  # fits at its own size
    log = _pdflatex(tmp_path, _wide_frame(6))  # 13 variants, 6 metrics: scaled to the column, never over it
    assert "Overfull \\hbox" not in log and "RRE-SCALED" in log


def test_the_index_table_and_the_exports_say_the_same(frame):
    t = render.headline_table(METRICS, comparisons=COMPARISONS)
    col = t["head"].index("nDCG@10 vs vector (baseline)") - 1
    cell = {r["variant"]: r["cells"][col] for r in t["rows"]}["hybrid_rerank"]
    assert cell["text"] == "+0.060*" and cell["ci"] == "[+0.010, +0.110] 12/3/5"
    assert t["frame"].equals(frame)


def test_write_index_writes_and_links_the_three_files(tmp_path, monkeypatch):
    dp = dataset_in(tmp_path, monkeypatch, root=True)
    METRICS.to_csv(dp.metrics_csv, index=False)
    text = render.write_index(dp, []).read_text()
    for name in export.FILES.values():
        assert (dp.report_dir / name).is_file() and f'href="{name}"' in text
    assert (dp.report_dir / "headline.md").read_text().startswith("| variant | queries | nDCG@10 |")
