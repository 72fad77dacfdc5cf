"""The report index page and the notebook renderer (no browser needed here; see test_screenshot.py)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from handmade import dataset_in
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT as PROJECT
from rerankeval.core.settings import load_settings
from rerankeval.corpus.snippets import Snippets
from rerankeval.evaluate import analyse, verdict
from rerankeval.report import fragments, htmlsafe, judged
from rerankeval.report import pages as report_pages
from rerankeval.report import render as report
from roots import env_roots

EVIL = "<script>document.title='PWNED'</script><img src=x onerror=alert(1)>"


@pytest.fixture
def dp(tmp_path, monkeypatch):
    return dataset_in(tmp_path, monkeypatch)


def _metrics():
    rows = []
    for v, nd, rec, fb in (
        ("bm25", 0.60, 0.80, None),
        ("hybrid", 0.70, 0.90, None),
        ("hybrid_rerank", 0.74, 0.90, 0.05),
    ):
        rows.append(
            {
                "variant": v,
                "n_queries": 30,
                "ndcg@10": nd,
                "ndcg@10_ci_low": nd - 0.05,
                "ndcg@10_ci_high": nd + 0.05,
                "mrr@10": nd,
                "mrr@10_ci_low": nd - 0.1,
                "mrr@10_ci_high": nd + 0.1,
                "recall@10": rec - 0.1,
                "recall@20": rec,
                "recall@20_ci_low": rec - 0.1,
                "recall@20_ci_high": rec,
                "fallback_rate": fb,
                "tokens_per_query": 1200.0 if fb else None,
                "seconds_per_query": 12.5 if fb else None,
            }
        )
    return pd.DataFrame(rows)


def _comparisons():
    return pd.DataFrame(
        [
            {
                "metric": "ndcg@10",
                "a": "bm25",
                "b": "hybrid",
                "n": 30,
                "mean_a": 0.6,
                "mean_b": 0.7,
                "diff": -0.1,
                "diff_ci_low": -0.15,
                "diff_ci_high": -0.05,
                "wins": 5,
                "ties": 10,
                "losses": 15,
                "p": 0.01,
                "p_holm": 0.03,
                "significant": True,
                "sd_diff": 0.1,
                "mdd": 0.05,
            },
            {
                "metric": "ndcg@10",
                "a": "bm25",
                "b": "hybrid_rerank",
                "n": 30,
                "mean_a": 0.6,
                "mean_b": 0.74,
                "diff": -0.14,
                "diff_ci_low": -0.2,
                "diff_ci_high": -0.08,
                "wins": 4,
                "ties": 8,
                "losses": 18,
                "p": 0.002,
                "p_holm": 0.006,
                "significant": True,
                "sd_diff": 0.1,
                "mdd": 0.05,
            },
            {
                "metric": "ndcg@10",
                "a": "hybrid",
                "b": "hybrid_rerank",
                "n": 30,
                "mean_a": 0.7,
                "mean_b": 0.74,
                "diff": -0.04,
                "diff_ci_low": -0.09,
                "diff_ci_high": 0.01,
                "wins": 6,
                "ties": 15,
                "losses": 9,
                "p": 0.2,
                "p_holm": 0.2,
                "significant": False,
                "sd_diff": 0.1,
                "mdd": 0.052,
            },
        ]
    )


def test_verdict_lines_from_numbers():
    base, *lines = verdict.verdict_lines(_metrics(), _comparisons(), "ndcg@10", pool_k=20)
    assert base.startswith("Against the baseline, bm25 (the better single retriever), hybrid retrieval (hybrid)")
    assert len(lines) == 3
    # p_holm = 0.2: the best mean is not called a winner (issue 35 item 1; this test used to expect "wins")
    assert lines[0].startswith("No winner on nDCG@10: hybrid_rerank has the highest mean, 0.740")
    assert "+0.040" in lines[0] and " wins" not in lines[0]
    assert "not significant after Holm correction over 3 pairs" in lines[0] and "0.052" in lines[0]
    assert "raised nDCG@10 by 0.040" in lines[1] and "9 queries better, 6 worse, 15 tied" in lines[1]
    assert "fell back on 5.0% of queries" in lines[1] and "1,200 tokens" in lines[1]
    assert "hybrid top 20" in lines[2] and "90.0%" in lines[2] and "Recall@10" in lines[2]
    assert verdict.verdict_lines(pd.DataFrame()) == [
        "No metrics yet: the analysis notebook has not written metrics.csv."
    ]
    one = verdict.verdict_lines(_metrics().iloc[:1], None, pool_k=20)
    assert one[0].startswith("Only bm25") and "No fused run" in one[1]


def test_index_without_metrics(dp):
    pages = [
        {
            "name": "01-extract-corpus",
            "href": "01-extract-corpus.html",
            "status": "failed",
            "seconds": 3.2,
            "error": "Traceback: " + EVIL,
        },
        {"name": "evil", "href": "javascript:alert(1)", "status": "ok", "seconds": 1.0, "error": None},
    ]
    path = report.write_index(dp, pages)
    assert path == dp.report_dir / "index.html"
    text = path.read_text()
    assert "No metrics yet" in text and "1 notebook(s) failed" in text
    assert report_pages.CSP_META in text.split("</head>", 1)[0]
    assert "<script" not in text.lower() and "<img src=x" not in text
    assert (
        "&lt;script&gt;" in text
        and "&lt;img src=x onerror=alert(1)&gt;" in text
        and 'href="#"' in text
        and 'href="01-extract-corpus.html"' in text
    )


def test_index_with_metrics_figures_and_manifest(dp):
    dp.root.mkdir(parents=True, exist_ok=True)
    _metrics().to_csv(dp.metrics_csv, index=False)
    analyse.write_summary(
        dp,
        analyse.Summary(
            headline_metric="ndcg@10",
            pool_k=20,
            query_set="30 queries " + EVIL,
            verified_against="ranx 0.3.21",
            relevance_unit="page",
        ),
        _comparisons(),
    )
    atomic_write_json(dp.manifest, {"llm": {"api_key": "sk-" + "secretsecretsecret123", "model": EVIL}})
    dp.figures_dir.mkdir(parents=True)
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    (dp.figures_dir / "05-metric-bars.png").write_bytes(png)
    text = report.write_index(
        dp,
        [{"name": "05-analyse", "href": "05-analyse.html", "status": "ok", "seconds": 12.0, "error": None}],
    ).read_text()
    assert "No winner on nDCG@10: hybrid_rerank has the highest mean" in text and "Pool ceiling" in text
    assert "verified against ranx 0.3.21" in text and "(pool ceiling)" in text
    assert "data:image/png;base64," in text and "05-metric-bars.png" in text
    assert "sk-secret" not in text and "[REDACTED]" in text
    assert "<script" not in text.lower()
    assert "5.0%" in text and "1,200" in text  # fallback rate and tokens per query


def _png_b64():
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def test_render_notebook_html_offline_and_hides_inputs(tmp_path):
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Title"),
            new_code_cell('dataset = "x"', metadata={"tags": ["parameters"]}),
            new_code_cell('dataset = "injected"', metadata={"tags": ["injected-parameters"]}),
            new_code_cell(
                "SECRET_PLUMBING_CODE = 1\nprint('visible output')",
                metadata={"tags": ["hide-input"]},
                outputs=[new_output("stream", name="stdout", text="visible output\n")],
            ),
            new_code_cell(
                "show()",
                metadata={"tags": ["hide-input"]},
                outputs=[
                    new_output("display_data", data={"image/png": _png_b64(), "text/plain": "<Figure>"}),
                    new_output("display_data", data={"text/html": htmlsafe.esc(EVIL)}),
                ],
            ),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    src = tmp_path / "nb.ipynb"
    nbformat.write(nb, src)
    out = report_pages.render_notebook_html(src, tmp_path / "out" / "nb.html", roots=env_roots())
    text = out.read_text()
    assert "visible output" in text and "SECRET_PLUMBING_CODE" not in text
    assert "injected" in text  # the papermill parameters cell keeps its input
    assert "data:image/png;base64," in text
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", text, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?(https?:)?//", text, re.I)
    assert not re.search(r"import\(\s*[\"'](https?:)?//", text)
    assert "cdnjs" not in text and "unpkg" not in text
    assert "<script>document.title" not in text and "&lt;script&gt;" in text
    head = text.split("</head>", 1)[0]
    assert report_pages.CSP_META in head and "script-src" not in report_pages.CSP  # default-src none covers scripts


def test_strip_remote_resources():
    html = (
        '<head><script src="https://cdn.x/require.js"></script><link rel="stylesheet" href="http://x/a.css">'
        '<script type="module">const m = (await import("https://cdn/m.mjs"));</script>'
        '<script>local()</script><link rel="stylesheet" href="local.css"></head>'
    )
    out = report_pages.strip_remote_resources(html)
    assert "cdn" not in out and "http" not in out and "local()" in out and "local.css" in out


def test_diff_view_escapes_everything():
    runs = {"a": {"q<1>": {"u<1>": 2.0, "u2": 1.0}}, "b": {"q<1>": {"u2": 2.0, "u<1>": 1.0}}}
    qrels = {"q<1>": {"u<1>": 1, "gone": 2}}
    import pandas as pd

    chunks = pd.DataFrame(
        [
            {
                "chunk_id": "c1",
                "unit_id": "u<1>",
                "source": EVIL,
                "page": 3,
                "start": 0,
                "title": EVIL,
                "text": EVIL,
            },
            {
                "chunk_id": "c2",
                "unit_id": "u2",
                "source": "s.pdf",
                "page": None,
                "start": 0,
                "title": "",
                "text": "plain",
            },
        ]
    )
    html = fragments.diff_view_html(
        ["a", "b"],
        runs,
        qrels,
        {"q<1>": EVIL},
        ["q<1>"],
        top_k=5,
        snippets=Snippets(chunks),
        notes={"q<1>": EVIL},
        slices={"q<1>": {"type": EVIL}},
    )
    assert "<script>" not in html and "<img" not in html and "&lt;img src=x onerror" in html
    assert html.count('class="gold"') == 2 and "gold not in either top 5" in html
    assert "q&lt;1&gt;" in html and "u&lt;1&gt;" in html


# --------------------------------------------------------------------------- issue 10 point 4: a shareable report
def test_column_labels_are_for_people():
    assert report.column_label("diff_ci_low") == "difference, 95% CI low"
    assert report.column_label("ndcg@10_ci_high") == "nDCG@10, 95% CI high"
    assert report.column_label("fresh_tokens_per_query") == "new (uncached) tokens per query"
    assert report.column_label("recall@20") == "Recall@20"
    assert report.column_label("some_new_column") == "some new column"
    shown = report.labelled(_comparisons().set_index(["a", "b"]))
    assert list(shown.index.names) == ["variant a", "variant b"]
    assert "difference, 95% CI low" in shown.columns and "diff_ci_low" not in shown.columns


def _index_with_figures(dp, metrics):
    dp.root.mkdir(parents=True, exist_ok=True)
    metrics.to_csv(dp.metrics_csv, index=False)
    dp.figures_dir.mkdir(parents=True)
    png = base64.b64decode(_png_b64())
    for name in (
        "01-chunk-lengths",
        "02-bm25-lengths",
        "03-variants",
        "05-quality-cost",
        "05-funnel",
        "05-rank-heatmap",
        "05-metric-bars",
    ):
        (dp.figures_dir / f"{name}.png").write_bytes(png)
    return report.write_index(dp, []).read_text()


def test_index_leads_with_answers_and_labels_its_columns(dp):
    m = _metrics().assign(fresh_tokens_per_query=[None, None, 300.0])
    text = _index_with_figures(dp, m)
    order = [
        text.index(f'id="fig-{n}"')
        for n in (
            "05-metric-bars",
            "05-rank-heatmap",
            "05-funnel",
            "05-quality-cost",
            "03-variants",
            "01-chunk-lengths",
            "02-bm25-lengths",
        )
    ]
    assert order == sorted(order), "the figures that answer the question must come first, the corpus ones last"
    assert text.index("Appendix") < text.index('id="fig-01-chunk-lengths"')
    assert text.index("Appendix") > text.index('id="fig-03-variants"')
    for raw in ("fresh_tokens_per_query", "tokens_per_query", "seconds_per_query", "fallback_rate", "_ci_low"):
        assert raw not in text, f"raw column name {raw!r} shown on the index"
    assert "new (uncached) tokens per query" in text and "fallback rate" in text
    headline = re.search(r'<table class="headline">.*?</table>', text, re.S).group(0)
    assert "1,200" not in headline and "5.0%" in headline  # tokens in the cost table, fallback in the headline
    assert re.search(r"0\.740<br><span class=\"ci\">\[0\.690, 0\.790\]</span>", headline)


def test_index_shows_no_absolute_path(dp, tmp_path):
    atomic_write_json(
        dp.manifest,
        {
            "results": str(dp.root),
            "dataset": str(dp.source),
            "cache": str(Path.home() / ".cache" / "x"),
            "root": str(PROJECT / "data" / "y"),
        },
    )
    text = _index_with_figures(dp, _metrics())
    no_data = re.sub(r"data:[^\"']+", "", text)
    assert str(tmp_path) not in no_data and str(PROJECT) not in no_data and f"{Path.home()}/" not in no_data
    assert "from results/ds" in text
    assert "<th>results</th>\n<td>results/ds</td>" in text and "<th>dataset</th>\n<td>ds</td>" in text
    assert "~/.cache/x" in text and "data/y" in text


def test_relative_paths_closed_form(monkeypatch, tmp_path):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "res"))
    home = Path.home()
    text = (
        f'a {PROJECT}/data/x "{PROJECT}" {tmp_path}/res/ds/m.csv {home}/.cache/r {PROJECT}2/z '
        f"{tmp_path}/src/ds/a.pdf data:image/png;base64,AB{PROJECT}/c /etc/tmp"
    )
    assert report_pages.relative_paths(text, env_roots(), [(tmp_path / "src" / "ds", "ds")]) == (
        f'a data/x "." results/ds/m.csv ~/.cache/r {PROJECT}2/z ds/a.pdf data:image/png;base64,AB{PROJECT}/c /etc/tmp'
    )


def test_notebook_page_shows_no_absolute_path(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    src = tmp_path / "src" / "mine"
    printed = f"wrote {tmp_path}/results/mine/metrics.csv; corpus {src}/a.pdf; venv {Path.home()}/v; {PROJECT}/x\n"
    nb = new_notebook(
        cells=[
            new_code_cell(f'dataset = "{src}"', metadata={"tags": ["injected-parameters"]}),
            new_code_cell("print()", outputs=[new_output("stream", name="stdout", text=printed)]),
        ],
        metadata={"papermill": {"parameters": {"dataset": str(src)}}},
    )
    nbformat.write(nb, tmp_path / "nb.ipynb")
    text = report_pages.render_notebook_html(tmp_path / "nb.ipynb", tmp_path / "nb.html", roots=env_roots()).read_text()
    assert str(tmp_path) not in text and str(PROJECT) not in text and f"{Path.home()}/" not in text
    assert "wrote results/mine/metrics.csv; corpus mine/a.pdf; venv ~/v; x" in text
    assert re.search(r'>(&quot;|")mine(&quot;|")<', text)  # the injected parameter names the dataset, not its folder


def test_index_says_when_the_headline_comes_from_an_earlier_run_on_other_inputs(dp):
    """Issue 19: after ``--only 01 --only 02 --only 03`` on a changed corpus, 05's numbers are from other inputs."""
    from rerankeval.core.runs import write_trec
    from rerankeval.evaluate import manifest

    dp.corpus_dir.mkdir(parents=True)
    dp.chunks.write_text('{"chunk_id": "a#0", "text": "old corpus"}\n', encoding="utf-8")
    dp.queries.write_text('{"_id": "q1", "text": "q"}\n', encoding="utf-8")
    write_trec({"q1": {"a": 1.0}}, dp.run_file("bm25"), "bm25")
    _metrics().to_csv(dp.metrics_csv, index=False)
    manifest.write_manifest(dp, manifest.build_manifest(dp, load_settings(), variants=["bm25"]))  # what 05 records

    def note() -> str:
        text = report.write_index(dp, []).read_text()
        return next((p for p in text.split("<p") if "earlier run on different inputs" in p), "")

    assert note() == ""  # the inputs are those 05 saw
    dp.chunks.write_text('{"chunk_id": "a#0", "text": "new corpus"}\n', encoding="utf-8")  # 01 re-ran
    write_trec({"q1": {"b": 1.0}}, dp.run_file("bm25"), "bm25")  # 03 re-ran
    text = note()
    assert "corpus/chunks.jsonl" in text and "runs/bm25.trec" in text and "queries.jsonl" not in text
    assert "--only 05" in text and "UTC" in text
    assert report.stale_inputs(dp, None) == []  # no manifest (05 never ran): nothing to compare
    dp.run_file("bm25").unlink()
    assert "runs/bm25.trec" in report.stale_inputs(dp, manifest.read_manifest(dp))


def _discrimination(auc: float, lo: float, hi: float, status: str) -> dict:
    return {
        "pool": "reranker",
        "model": "qwen2.5-coder-0.5b-instruct",
        "status": status,
        "auc": auc,
        "ci_low": lo,
        "ci_high": hi,
        "n_candidates": 300,
        "n_unjudged": 200,
        "n_relevant": 40,
        "n_non_relevant": 60,
        "n_queries": 30,
        "n_defined": 28,
        "n_one_class": 2,
        "negatives": "judged",
        "shift": {"relevant": {"n": 40, "mean_abs_change": 1.2, "up": 0.4, "down": 0.3, "same": 0.3}},
    }


@pytest.mark.parametrize(
    "auc, lo, hi, status, words, not_words",
    [
        (
            0.93,
            0.88,
            0.97,
            "informative",
            "separates relevant from non-relevant candidates better than chance",
            "no reranking gain",
        ),
        (
            0.51,
            0.45,
            0.57,
            "uninformative",
            "its judgments are uninformative and no reranking gain can be expected",
            "better than chance",
        ),
        (
            0.08,
            0.03,
            0.14,
            "inverted",
            "its judgments are inverted and reranking with them can only hurt",
            "better than chance",
        ),
    ],
)
def test_the_verdict_names_the_model_and_its_discrimination(auc, lo, hi, status, words, not_words):
    _base, *lines = verdict.verdict_lines(
        _metrics(), _comparisons(), "ndcg@10", pool_k=20, discrimination=_discrimination(auc, lo, hi, status)
    )
    assert len(lines) == 4 and "raised nDCG@10" in lines[1] and lines[3].startswith("Pool ceiling")
    assert lines[2].startswith("The reranker's model (qwen2.5-coder-0.5b-instruct)")
    assert f"ROC AUC {auc:.3f} (95% CI {lo:.3f}\u2013{hi:.3f}" in lines[2] and "over 28 queries" in lines[2]
    assert words in lines[2] and not_words not in lines[2]
    assert ("OPENAI_BASE_URL" in lines[2]) == (status != "informative")


def test_index_shows_the_auc_line_in_the_verdict_above_the_fold(dp):
    dp.root.mkdir(parents=True, exist_ok=True)
    _metrics().to_csv(dp.metrics_csv, index=False)
    d = _discrimination(0.51, 0.45, 0.57, "uninformative")
    analyse.write_summary(dp, analyse.Summary(headline_metric="ndcg@10", pool_k=20, discrimination=d), _comparisons())
    dp.figures_dir.mkdir(parents=True)
    for stem in ("05-funnel", "05-metric-bars", "05-discrimination"):  # written in this order
        (dp.figures_dir / f"{stem}.png").write_bytes(base64.b64decode(_png_b64()))
    text = report.write_index(dp, []).read_text()
    body = text.split("<h2>Headline</h2>", 1)[1]
    auc = body.index('<p class="auc uninformative">The reranker&#39;s model (qwen2.5-coder-0.5b-instruct) cannot')
    assert body.index("</table>") < auc < body.index("<h2>Cost per query") < body.index("<h2>Figures")
    assert auc < body.index("200 unjudged left out")  # the facts line (what the AUC was computed over) follows
    assert "relevant: 40% moved up, 30% down" in body
    figs = re.findall(r'<span class="file">\(([^<]+)\)</span></figcaption>', body)
    assert figs == ["05-metric-bars.png", "05-discrimination.png", "05-funnel.png"]  # the AUC's figure second


# --------------------------------------------------------------------------- issue 32: the judge's own warnings
def test_the_llm_judge_s_warning_from_09_is_shown_on_the_index(dp):
    dp.root.mkdir(parents=True, exist_ok=True)
    _metrics().to_csv(dp.metrics_csv, index=False)
    assert "LLM judge." not in report.write_index(dp, []).read_text()  # 09 has not run: nothing to say
    atomic_write_json(dp.stage_dir("assess") / "summary.json", {"warning": "100 % of grades are 1: the judge " + EVIL})
    text = report.write_index(dp, []).read_text()
    assert "<b>LLM judge.</b> 100 % of grades are 1: the judge &lt;script&gt;" in text
    assert "<script>document" not in text
    atomic_write_json(
        dp.stage_dir("assess") / "summary.json",
        {"warning": ["100 % of grades are 1", "the LLM judge graded its own drafts"]},
    )
    assert judged.assess_warnings(dp) == ["100 % of grades are 1", "the LLM judge graded its own drafts"]
    assert "the LLM judge graded its own drafts" in report.write_index(dp, []).read_text()
    atomic_write_json(dp.stage_dir("assess") / "summary.json", {"warning": None, "grades": 3})
    assert judged.assess_warnings(dp) == []
    own = "WARNING: the LLM judge graded questions its own model wrote."  # what 05 recorded about the judge it read
    assert judged.assess_warnings(dp, analyse.Summary(grades={"judge_warning": own})) == [own]
