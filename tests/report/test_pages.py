"""Every rendered page is clean (issue 23 item 5): no NaN, None or Python True/False cell, no dict/list repr, no
17-digit float, no capitalised "DOES NOT", no header cell a long name can run out of, every table in a sideways
scrolling box.

The real report: the default dataset's results (``results/debian-manuals``, left by ``make report``) copied to a
temporary folder and rendered again with this code (every executed notebook and the index); skipped when that
run is absent. The index of a small hand-made dataset is checked always.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from handmade import dataset_in
from pagecheck import defects
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from roots import env_roots

DEFAULT = paths.ROOT / "results" / "debian-manuals"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really an image").decode()


def test_the_checker_finds_each_defect():
    bad = (
        "<table><tr><th>hybrid_reformulate</th><td>NaN</td><td>False</td></tr></table>"
        "<p>{'k1': 1.2} 0.51647037981859410 unit run DOES NOT match</p>"
    )
    found = defects(bad)
    assert any("NaN" in d for d in found) and any("False" in d for d in found) and any("repr" in d for d in found)
    assert any("long float" in d for d in found) and any("DOES NOT" in d for d in found)
    assert any("cannot wrap" in d for d in found) and any("scroll box" in d for d in found)
    good = (
        '<div class="scroll"><table><tr><th>hybrid_<wbr>reformulate</th><td>\u2013</td><td>no</td></tr>'
        "</table></div><div class=\"highlight\"><pre>{'code': 1}</pre></div>"
    )
    assert defects(good) == []


@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    """The default dataset's report rendered again by this code in a copy of its results."""
    if not (DEFAULT / "executed" / "pages.json").is_file():
        pytest.skip(f"{DEFAULT} has no executed notebooks: run make report first")
    tmp = tmp_path_factory.mktemp("clean")
    shutil.copytree(DEFAULT, tmp / "debian-manuals", ignore=shutil.ignore_patterns("report"))
    old = os.environ.get("RERANKEVAL_RESULTS")
    os.environ["RERANKEVAL_RESULTS"] = str(tmp)
    try:
        from rerankeval.report import pages, render

        dp = paths.resolve_dataset("debian-manuals", load_settings())
        listed = list(json.loads((dp.executed_dir / "pages.json").read_text()).values())
        note = pages.questions_note(dp)
        for p in listed:
            nb = dp.executed_dir / f"{p['name']}.ipynb"
            if nb.is_file():
                pages.render_notebook_html(nb, dp.report_dir / f"{p['name']}.html", note, roots=env_roots())
        render.write_index(dp, listed)
        yield dp
    finally:
        if old is None:
            os.environ.pop("RERANKEVAL_RESULTS", None)
        else:
            os.environ["RERANKEVAL_RESULTS"] = old


def test_every_page_of_the_default_report_is_clean(real_report):
    pages = sorted(real_report.report_dir.glob("*.html"))
    assert len(pages) >= 6 and real_report.report_index in pages
    found = {p.name: defects(p.read_text(encoding="utf-8"), p.name) for p in pages}
    assert not {k: v for k, v in found.items() if v}, found


def _small_index(tmp_path: Path) -> Path:
    from fake_results import make_fake_dataset
    from rerankeval.evaluate import analyse
    from rerankeval.report import render

    dp = make_fake_dataset(tmp_path / "src")
    a = analyse.run(
        dp, analyse.AnalysisParams(dataset=str(dp.source), n_boot=200, n_perm=200, verify_with=[]), load_settings()
    )
    analyse.write(dp, a)
    dp.figures_dir.mkdir(parents=True, exist_ok=True)
    (dp.figures_dir / "05-forest.png").write_bytes(base64.b64decode(PNG))  # a figure: its alt text is its caption
    return render.write_index(
        dp, [{"name": "05-analyse", "href": "05-analyse.html", "status": "ok", "seconds": 1.0, "error": None}]
    )


def test_the_index_of_a_small_dataset_is_clean(tmp_path):
    text = _small_index(tmp_path).read_text(encoding="utf-8")
    assert defects(text) == []
    assert "The variants." in text and "Markdown" in text and "manifest.json" in text
    assert re.search(r"<details><summary>[^\n]*manifest\.json", text), "the manifest is collapsed"
    alts = re.findall(r'<img alt="([^"]*)"', text)
    assert alts and not any(re.fullmatch(r"\d\d-[\w-]+", a) for a in alts), alts  # captions, not file stems


WIDTH = (
    '<script>document.title = "W " + document.documentElement.scrollWidth + " " + '
    "document.documentElement.clientWidth;</script>"
)


@pytest.mark.slow
def test_the_index_does_not_scroll_sideways_on_a_phone(tmp_path):
    """At a phone's width the tables scroll in their boxes, not the page (the page's policy forbids scripts, so a
    copy without it measures itself)."""
    import subprocess

    from headless import _chrome_args, _chromium
    from rerankeval.report.pages import CSP_META

    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    index = _small_index(tmp_path)
    probe = index.with_name("width-probe.html")
    probe.write_text(index.read_text(encoding="utf-8").replace(CSP_META, "").replace("</body>", WIDTH + "</body>"))
    args = [
        a if not a.startswith("--window-size") else "--window-size=390,844"
        for a in _chrome_args(exe, tmp_path / "profile")
    ]
    out = subprocess.run([*args, "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r"<title>W (\d+) (\d+)</title>", out.stdout)
    assert m, f"the measuring script did not run: {out.stderr[-1000:]}"
    assert int(m.group(1)) <= int(m.group(2)), f"the index is {m.group(1)} px wide in a {m.group(2)} px window"


def test_tidy_shows_dashes_yes_no_and_small_tables():
    import math

    import pandas as pd

    from rerankeval.evaluate import views

    t = views.tidy(pd.DataFrame({"x": [1.0, math.nan], "ok": [True, False], "d": [{"a": 1}, None], "w": [0.5, 0.25]}))
    assert t.x.tolist() == ["1", "\u2013"] and t.ok.tolist() == ["yes", "no"] and t.d.tolist() == ["a: 1", "\u2013"]
    assert t.w.dtype.kind == "f"  # a column of numbers without gaps stays numbers
    kv = views.kv_table({"bm25_params": {"k1": 1.2, "b": 0.75}, "recall": None, "exact": True})
    assert kv.to_dict()["value"] == {
        "bm25 params: k1": "1.200",
        "bm25 params: b": "0.750",
        "recall": "\u2013",
        "exact": "yes",
    }
    assert views.rounded({"auc": 0.5164703798185941, "n": [1.1102230246251565e-16]}) == {"auc": 0.5165, "n": [1.11e-16]}
    assert "DOES NOT" not in views.unit_mapping_note("bm25", 3) and "re-run 03-retrieve" in views.unit_mapping_note(
        "bm25", 3
    )
    assert "by design" in views.unit_mapping_note("hybrid", 60) and "as expected" in views.unit_mapping_note("bm25", 0)


def test_the_manifest_is_a_table_of_rounded_values():
    from rerankeval.report import manifest_view

    rows = manifest_view.rows(
        {
            "created_utc": "2026",
            "analysis": {"auc": 0.5164703798185941, "exact": False},
            "runs": [{"name": "bm25"}],
            "cutoffs": [1, 10],
            "missing": None,
            "reason": "",
        }
    )
    assert [r["key"] for r in rows] == ["created_utc", "analysis", "runs", "cutoffs", "missing", "reason"]
    assert rows[5]["value"] == "\u2013"
    assert rows[1]["children"] == [
        {"key": "auc", "value": "0.5165", "children": []},
        {"key": "exact", "value": "no", "children": []},
    ]
    assert rows[2]["children"][0]["children"] == [{"key": "name", "value": "bm25", "children": []}]
    assert rows[3]["value"] == "1, 10" and rows[4]["value"] == "\u2013"


def test_this_run_against_the_previous_one(tmp_path, monkeypatch):
    import pandas as pd

    from rerankeval.report import history

    dp = dataset_in(tmp_path, monkeypatch, root=True)
    pd.DataFrame({"variant": ["hybrid_rerank", "bm25"], "ndcg@10": [0.642, 0.5]}).to_csv(dp.metrics_csv, index=False)
    assert history.since_previous(dp, {"created_utc": "2026-12-01T10:00:00+00:00"}, "ndcg@10") == history.FIRST_RUN
    assert history.since_previous(dp, {"created_utc": "2026-12-01T10:00:00+00:00"}, "ndcg@10") == history.FIRST_RUN
    pd.DataFrame({"variant": ["hybrid_rerank", "vector"], "ndcg@10": [0.651, 0.6]}).to_csv(dp.metrics_csv, index=False)
    line = history.since_previous(dp, {"created_utc": "2026-12-02T12:49:01+00:00"}, "ndcg@10")
    assert line == (
        "nDCG@10 since the run of 2026-12-01 10:00 UTC: hybrid_rerank 0.642 \u2192 0.651 (+0.009); "
        "new: vector; no longer run: bm25."
    )
    again = history.since_previous(dp, {"created_utc": "2026-12-02T12:49:01+00:00"}, "ndcg@10")
    assert again == line  # rendering the same analysis twice keeps the comparison


def test_the_pool_ceiling_column_is_labelled_once():
    from types import SimpleNamespace

    import pandas as pd

    from rerankeval.evaluate import views

    table = pd.DataFrame({"variant": ["hybrid"], "ndcg@10": [0.6], "recall@10": [0.7], "recall@20": [0.8]})
    same = SimpleNamespace(params=SimpleNamespace(final_k=10), pool_k=10, headline="ndcg@10", table=table)
    assert list(views.ceiling_table(same).columns) == ["nDCG@10", "Recall@10 (= pool ceiling, pool_k = 10)"]
    other = SimpleNamespace(params=SimpleNamespace(final_k=10), pool_k=20, headline="ndcg@10", table=table)
    assert list(views.ceiling_table(other).columns) == ["nDCG@10", "Recall@10", "Recall@20 (pool ceiling)"]


def test_notebook_tables_are_cleaned_and_wrapped():
    from rerankeval.report.pages import clean_tables

    out = clean_tables(
        '<table><thead><tr><th>rank_hybrid_rerank</th><th class="x">NaN</th></tr></thead><tbody>'
        "<tr><th>True</th><td>None</td><td>nan </td><td>False</td><td>NaNa</td></tr></tbody></table>"
    )
    assert out == (
        '<div class="scroll"><table><thead><tr><th>rank hybrid_<wbr>rerank</th><th class="x">\u2013'
        "</th></tr></thead><tbody><tr><th>yes</th><td>\u2013</td><td>\u2013</td><td>no</td><td>NaNa</td>"
        "</tr></tbody></table></div>"
    )
    assert defects(out) == []


def test_the_forest_and_the_delta_charts_come_first_with_their_captions(tmp_path):
    from rerankeval.report import render

    for i, stem in enumerate(("05-metric-bars", "03-variants", "05-delta-hybrid", "05-forest", "05-funnel")):
        f = tmp_path / f"{stem}.png"
        f.write_bytes(b"png")
        os.utime(f, (1000 + i, 1000 + i))
    figs = render._figures(tmp_path)
    assert [f["stem"] for f in figs] == ["05-forest", "05-delta-hybrid", "05-metric-bars", "05-funnel", "03-variants"]
    assert figs[0]["caption"] != "05-forest.png"  # what to look for, from report.captions
    assert render.caption("99-unknown", "99-unknown.png")  # never empty: the file name at worst


def test_the_checker_finds_the_report_defects():
    bad = (
        "<html><head><style>.jp-OutputArea-output pre{word-break: break-all}pre{overflow-wrap:anywhere}</style>"
        "</head><body>"
        '<img src="x.png"><img alt="No description has been provided for this image" src="y.png">'
        '<div class="scroll"><table><thead><tr><th>n_pages</th></tr></thead><tr><th>pages</th><td>38.0000</td>'
        "<td>NoNewQuery</td></tr></table></div>"
        "<pre>'No file was skipped.'</pre></body></html>"
    )
    found = " | ".join(defects(bad, "01-extract-corpus.html"))
    for what in (
        "x.png",
        "y.png",
        "38.0000",
        "NoNewQuery",
        "'No file was skipped.'",
        "back to the index",
        "break-all",
        "anywhere",
        "n_pages",
    ):
        assert what in found, (what, found)
    good = (
        '<html><body><nav><a href="index.html">index</a></nav><img alt="Recall by variant" src="x.png">'
        '<div class="scroll"><table><thead><tr><th>rank hybrid_rerank</th></tr></thead>'
        "<tr><th>pages</th><td>38</td><td>0.5000</td><td>1.0000</td>"
        "<td>no new query</td></tr></table></div><pre>No file was skipped. It's 'quoted' here.</pre></body></html>"
    )
    assert defects(good, "01-extract-corpus.html") == []


def _notebook(path: Path) -> Path:
    """An executed notebook with what made pages read like raw pandas: a string returned by a cell, a figure with
    its caption below, a table of counts as floats with a class name as a status, a long line of output."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    table = (
        "<table><thead><tr><th></th><th>n_pages</th><th>recall</th><th>status</th></tr></thead><tbody>"
        "<tr><th>0</th><td>38.0000</td><td>1.0000</td><td>NoNewQuery</td></tr>"
        "<tr><th>1</th><td>7.0000</td><td>0.5000</td><td>kept</td></tr></tbody></table>"
    )
    nb = new_notebook(
        cells=[
            new_markdown_cell("## Skipped files"),
            new_code_cell(
                "skipped_note()",
                outputs=[new_output("execute_result", {"text/plain": "'No file was skipped.'"}, execution_count=1)],
            ),
            new_markdown_cell("## Recall by variant"),
            new_code_cell(
                "show()",
                outputs=[
                    new_output("display_data", {"image/png": PNG, "text/plain": "<IPython.core.display.Image object>"}),
                    new_output(
                        "display_data",
                        {
                            "text/markdown": "*Recall@10 by variant, with 95\\% CIs.*",
                            "text/plain": "<IPython.core.display.Markdown object>",
                        },
                    ),
                    new_output("display_data", {"image/png": PNG, "text/plain": "<IPython.core.display.Image object>"}),
                ],
            ),
            new_code_cell(
                "ledger",
                outputs=[new_output("execute_result", {"text/html": table, "text/plain": "t"}, execution_count=3)],
            ),
            new_code_cell("print(log)", outputs=[new_output("stream", name="stdout", text="word " * 400)]),
        ]
    )
    nb.metadata["papermill"] = {"duration": 126.4, "end_time": "2026-12-06T10:01:07+00:00"}
    nbformat.write(nb, str(path))
    return path


def test_a_notebook_page_reads_like_a_report(tmp_path):
    from rerankeval.report import pages

    out = pages.render_notebook_html(
        _notebook(tmp_path / "01-extract-corpus.ipynb"), tmp_path / "01.html", roots=env_roots()
    )
    text = out.read_text(encoding="utf-8")
    assert defects(text, "01-extract-corpus.html") == []
    assert 'alt="Recall@10 by variant, with 95% CIs."' in text and 'alt="Recall by variant"' in text
    assert "No file was skipped." in text and ">38<" in text and ">1.0000<" in text and "no new query" in text
    assert "<th>n pages</th>" in text


def test_the_notebooks_table_says_when_a_skipped_notebook_ran_and_for_how_long(tmp_path, monkeypatch):
    from rerankeval.report import render

    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    (tmp_path / "ds").mkdir()
    dp = paths.resolve_dataset(str(tmp_path / "ds"), load_settings())
    dp.executed_dir.mkdir(parents=True)
    _notebook(dp.executed_dir / "01-extract-corpus.ipynb")
    rows = render._pages(
        [
            {
                "name": "01-extract-corpus",
                "href": "01-extract-corpus.html",
                "status": "ok",
                "seconds": None,
                "error": None,
                "skipped": True,
                "finished": None,
            },
            {
                "name": "05-analyse",
                "href": "05-analyse.html",
                "status": "ok",
                "seconds": 12.3,
                "error": None,
                "rerun": True,
                "finished": "2026-12-06T10:05:00+00:00",
            },
            {"name": "07-ask", "href": "07-ask.html", "status": "failed", "seconds": None, "error": "404"},
        ],
        dp,
    )
    assert [(r["status"], r["seconds"]) for r in rows] == [
        ("up to date", "ran 10:01 UTC, 126 s"),
        ("ok", "12 s"),
        ("failed", "time not recorded"),
    ]


def test_snippets_lose_pdf_glyph_codes_and_are_cut_between_words():
    from rerankeval.corpus.snippets import shorten

    assert shorten("apt(cid:104) installs  packages") == "apt installs packages"
    text = "dpkg configures the unpacked packages afterwards"
    assert shorten(text, 27) == "dpkg configures the\u2026"  # not "... the unpack…"
    assert shorten(text, 30) == "dpkg configures the unpacked\u2026"
    assert shorten("x" * 40, 10) == "x" * 9 + "\u2026"  # one long word is cut inside


def test_an_answer_not_in_the_documents_says_it_once():
    from types import SimpleNamespace

    from rerankeval.report import fragments

    result = SimpleNamespace(model="m", endpoint="e", k=3, variant="hybrid")
    row = {
        "flagged": False,
        "question": "q?",
        "qid": "q1",
        "answer": "not in the documents",
        "not_in_documents": True,
        "precision": "",
        "gold": "",
        "given": None,
        "status": "ok",
        "citations": [],
    }
    html_text = fragments.render("answers.html.j2", result=result, figure="f", rows=[row])
    assert html_text.lower().count("not in the documents") == 1
    other = fragments.render("answers.html.j2", result=result, figure="f", rows=[row | {"answer": "Use apt."}])
    assert "Use apt." in other and "not in the documents" in other


def test_tidy_shows_counts_as_integers_and_keeps_rates():
    import pandas as pd

    from rerankeval.evaluate import views

    t = views.tidy(pd.DataFrame({"pages": [38.0, 7.0], "recall": [1.0, 0.5], "all_one": [1.0, 1.0]}))
    assert t.pages.dtype.kind == "i" and t.pages.tolist() == [38, 7]
    assert t.recall.dtype.kind == "f" and t.all_one.dtype.kind == "f"  # a rate of 1.0 stays a rate
    assert "38.0" not in t.to_html()


def test_tidy_shows_a_count_among_fractions_as_an_integer():
    """03's Qdrant comparison (one ``value`` column: overlaps and a count of queries) and its mean chunks per query
    (100 beside 166.18): the whole numbers are not printed ``38.0000``."""
    import pandas as pd

    from rerankeval.evaluate import views

    t = views.tidy(pd.DataFrame({"value": [0.8467, -0.0066, 38.0], "chunks (mean)": [100.0, 166.1833, 167.2]}))
    assert t.value.tolist() == ["0.847", "-0.0066", "38"]
    assert t["chunks (mean)"].tolist() == ["100", "166.183", "167.200"]
    assert ".0000" not in t.to_html()
