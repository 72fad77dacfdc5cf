"""The headline comparison exported as Markdown, LaTeX and CSV from the numbers the index shows (issue 23 item 2)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rerankeval.core.paths import resolve_dataset
from rerankeval.report import export, render

METRICS = pd.DataFrame({
    "variant": ["bm25", "vector", "hybrid_rerank"], "n_queries": [20, 20, 20],
    "ndcg@10": [0.5, 0.6, 0.66], "ndcg@10_ci_low": [0.4, 0.5, 0.56], "ndcg@10_ci_high": [0.6, 0.7, 0.76],
    "mrr@10": [0.55, 0.65, 0.7], "mrr@10_ci_low": [0.45, 0.55, 0.6], "mrr@10_ci_high": [0.65, 0.75, 0.8]})


def _cmp(a, b, diff, p_holm, wins, ties, losses):
    return {"metric": "ndcg@10", "a": a, "b": b, "n": 20, "mean_a": 0.0, "mean_b": 0.0, "diff": diff,
            "diff_ci_low": diff - 0.05, "diff_ci_high": diff + 0.05, "wins": wins, "ties": ties, "losses": losses,
            "p": p_holm / 3, "p_holm": p_holm, "significant": p_holm < 0.05, "sd_diff": 0.1, "mdd": 0.05,
            "n_left_out": 0}


# stored as vector - hybrid_rerank (so the export must flip it) and bm25 - vector
COMPARISONS = pd.DataFrame([_cmp("vector", "hybrid_rerank", -0.06, 0.03, 5, 3, 12),
                            _cmp("bm25", "vector", -0.10, 0.20, 4, 6, 10)])


@pytest.fixture
def frame():
    return export.headline_frame(METRICS, comparisons=COMPARISONS)


def test_the_frame_holds_the_paired_difference_from_the_baseline(frame):
    assert frame.attrs["baseline"] == "vector" and frame.attrs["metrics"] == ["ndcg@10", "mrr@10"]
    r = frame.set_index("variant")
    assert r.at["hybrid_rerank", "diff"] == pytest.approx(0.06)
    assert (r.at["hybrid_rerank", "diff_ci_low"], r.at["hybrid_rerank", "diff_ci_high"]) == (
        pytest.approx(0.01), pytest.approx(0.11))
    assert (r.at["hybrid_rerank", "wins"], r.at["hybrid_rerank", "losses"]) == (12, 5)
    assert bool(r.at["hybrid_rerank", "significant"]) and not bool(r.at["bm25", "significant"])
    assert math.isnan(r.at["vector", "diff"])


def test_markdown(frame):
    assert export.to_markdown(frame).splitlines() == [
        "| variant | queries | nDCG@10 | MRR@10 | nDCG@10 vs vector [95% CI] | wins/ties/losses | p (Holm) |",
        "|:---|---:|---:|---:|---:|---:|---:|",
        "| bm25 | 20 | 0.500 [0.400, 0.600] | 0.550 [0.450, 0.650] | -0.100 [-0.150, -0.050] | 4/6/10 | 0.2 |",
        "| vector | 20 | 0.600 [0.500, 0.700] | 0.650 [0.550, 0.750] | baseline |  |  |",
        "| hybrid_rerank | 20 | 0.660 [0.560, 0.760] | 0.700 [0.600, 0.800] | +0.060\\* [+0.010, +0.110] | 12/3/5 "
        "| 0.03 |",
        "",
        "\\* p < 0.05 after Holm correction (paired test over all pairs of the metric); brackets: 95% bootstrap CI."]


def test_latex_is_booktabs_with_math_marks_and_escaped_underscores(frame):
    tex = export.to_latex(frame).splitlines()
    assert tex[:3] == [r"\begin{tabular}{lrrrrrr}", r"\toprule",
                       r"variant & queries & nDCG@10 & MRR@10 & nDCG@10 vs vector [95\% CI] & wins/ties/losses & "
                       r"p (Holm) \\"]
    assert tex[3] == r"\midrule" and tex[-3:-1] == [r"\bottomrule", r"\end{tabular}"]
    assert tex[6] == (r"hybrid\_rerank & 20 & 0.660 [0.560, 0.760] & 0.700 [0.600, 0.800] & "
                      r"+0.060$^{*}$ [+0.010, +0.110] & 12/3/5 & 0.03 \\")
    assert r"0.500 [0.400, 0.600]" in tex[4] and "$^{*}$" not in tex[4]
    assert export.tex_escape("a_b & 50% {x} #1 $") == r"a\_b \& 50\% \{x\} \#1 \$"


def test_csv_has_the_numbers(frame):
    back = pd.read_csv(pd.io.common.StringIO(export.to_csv(frame)))
    assert list(back.columns[:5]) == ["variant", "queries", "ndcg@10", "ndcg@10_ci_low", "ndcg@10_ci_high"]
    assert back.set_index("variant").at["hybrid_rerank", "diff"] == pytest.approx(0.06)
    assert back.set_index("variant").at["vector", "diff"] != back.set_index("variant").at["vector", "diff"]  # NaN


def test_the_index_table_and_the_exports_say_the_same(frame):
    t = render.headline_table(METRICS, comparisons=COMPARISONS)
    col = t["head"].index("nDCG@10 vs vector (baseline)") - 1
    cell = {r["variant"]: r["cells"][col] for r in t["rows"]}["hybrid_rerank"]
    assert cell["text"] == "+0.060*" and cell["ci"] == "[+0.010, +0.110] 12/3/5"
    assert t["frame"].equals(frame)


def test_write_index_writes_and_links_the_three_files(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    (tmp_path / "src" / "ds").mkdir(parents=True)
    dp = resolve_dataset(str(tmp_path / "src" / "ds"))
    dp.root.mkdir(parents=True)
    METRICS.to_csv(dp.metrics_csv, index=False)
    text = render.write_index(dp, []).read_text()
    for name in export.FILES.values():
        assert (dp.report_dir / name).is_file() and f'href="{name}"' in text
    assert (dp.report_dir / "headline.md").read_text().startswith("| variant | queries | nDCG@10 |")
