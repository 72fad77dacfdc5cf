"""Smoke run of the whole notebook chain through papermill on a tiny PDF dataset, twice.

Also the reliability checks that need the whole chain: determinism (byte-identical outputs on a second
run), the cache (the second run makes no LLM call), secrets (a sentinel key appears in no output), and
safe HTML (script and markup injected through a PDF and a query render as text).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from builders import TINY_PAGES, TINY_QUERIES, tiny_pdf_dataset

SENTINEL = "sk-" + "SENTINEL-do-not-leak-0123456789abcdef"
XSS_PDF = "<script>document.title='pwned-pdf'</script> <img src=x onerror=alert(1)>"
XSS_QUERY = "<script>document.title='pwned-query'</script> how to upgrade beta <b>now</b>"
SMALL = ["leg_k=10", "pool_k=5", "final_k=5", "ks=[1,3,5]", "expand_compare=true"]


def run_chain(dataset: Path, results: Path, *extra: str, only: list[str] | None = None, force: bool = False):
    env = dict(os.environ)
    env.update(
        {
            "RERANKEVAL_RESULTS": str(results),
            "RERANKEVAL_QDRANT_PATH": str(results / "qdrant"),
            "OPENAI_API_KEY": SENTINEL,
            "PYTHONHASHSEED": "0",
        }
    )
    env.pop("OPENAI_BASE_URL", None)
    cmd = [sys.executable, "-m", "rerankeval.apps.chain", "--dataset", str(dataset), "--kernel", "python3"]
    for s in [*SMALL, *extra]:
        cmd += ["--set", s]
    for o in only or []:
        cmd += ["--only", o]
    cmd += ["--force"] if force else []
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="module")
def chain_twice(tmp_path_factory):
    root = tmp_path_factory.mktemp("chain")
    pages = {k: list(v) for k, v in TINY_PAGES.items()}
    pages["beta-manual.pdf"][1] += " " + XSS_PDF
    queries = [*TINY_QUERIES[:-1], ("t5", XSS_QUERY, "lexical", {"beta-manual.pdf#p1": 2})]
    ds = tiny_pdf_dataset(root / "tiny", pages, queries)
    results = root / "results"
    first = run_chain(ds, results)
    snap1 = snapshot(results / "tiny")
    second = run_chain(ds, results, force=True)  # every notebook again (not skipped): determinism and the cache
    return {
        "first": first,
        "second": second,
        "snap1": snap1,
        "snap2": snapshot(results / "tiny"),
        "out": results / "tiny",
    }


# measurements of the run itself (wall time, what the cache answered), not results: they differ by design
RUN_DEPENDENT = (
    "seconds_per_query",
    "llm_seconds_per_query",
    "retrieval_seconds_per_query",
    "fresh_tokens_per_query",
    "cache_hit_rate",
    "cost_per_query",
)


def snapshot(out: Path) -> dict[str, bytes]:
    keep = ("corpus/", "runs/", "per_query.csv")
    snap = {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and str(p.relative_to(out)).startswith(keep)
    }
    metrics = pd.read_csv(out / "metrics.csv")
    snap["metrics.csv (results columns)"] = metrics.drop(columns=[c for c in RUN_DEPENDENT if c in metrics]).to_csv()
    return snap


def test_chain_runs_end_to_end(chain_twice):
    r = chain_twice["first"]
    assert r.returncode == 0, f"chain failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = chain_twice["out"]
    assert (out / "report" / "index.html").is_file()
    for nb in ("01-extract-corpus", "02-build-indexes", "03-retrieve", "04-rerank", "05-analyse"):
        assert (out / "executed" / f"{nb}.ipynb").is_file()
        assert (out / "report" / f"{nb}.html").is_file()
    for variant in ("vector", "bm25", "hybrid", "qdrant_hybrid", "hybrid_rerank"):
        assert (out / "runs" / f"{variant}.trec").stat().st_size > 0, variant
    metrics = pd.read_csv(out / "metrics.csv")
    assert {"vector", "bm25", "hybrid", "qdrant_hybrid", "hybrid_rerank"} <= set(metrics.iloc[:, 0])


def test_second_run_is_byte_identical(chain_twice):
    assert chain_twice["second"].returncode == 0, chain_twice["second"].stderr[-3000:]
    a, b = chain_twice["snap1"], chain_twice["snap2"]
    assert a.keys() == b.keys() and len(a) > 5
    changed = [k for k in a if a[k] != b[k]]
    assert not changed, f"outputs differ between two runs on the same inputs: {changed}"


def test_second_run_makes_no_llm_call(chain_twice):
    ledger = pd.read_csv(chain_twice["out"] / "rerank_ledger.csv")
    assert len(ledger) >= len(TINY_QUERIES)
    assert ledger["cache_hit"].astype(bool).all(), "a re-run must answer every rerank call from the cache"


def test_no_secret_in_any_output(chain_twice):
    leaks = [str(p) for p in chain_twice["out"].rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()]
    assert not leaks, f"the API key leaked into {leaks}"
    for r in (chain_twice["first"], chain_twice["second"]):
        assert SENTINEL not in r.stdout + r.stderr


def test_injected_markup_renders_as_text(chain_twice):
    for html in (chain_twice["out"] / "report").glob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert "<script>document.title=" not in text, f"{html.name}: injected script is live"
        assert "<img src=x onerror" not in text, f"{html.name}: injected img is live"


def test_a_failing_notebook_is_named_and_kept(tmp_path, tiny_pdf):
    r = run_chain(tiny_pdf, tmp_path / "res", "chunk_size=-5", only=["01"])
    assert r.returncode == 1
    assert "01-extract-corpus.ipynb failed in cell" in r.stderr and "chunk size must be positive" in r.stderr
    out = tmp_path / "res" / "tiny-pdf"
    assert (out / "executed" / "01-extract-corpus.ipynb").is_file()
    assert (out / "report" / "index.html").is_file()


def test_unknown_parameter_is_reported(tmp_path, tiny_pdf):
    r = run_chain(tiny_pdf, tmp_path / "res", "no_such_param=3", only=["01"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "no_such_param" in r.stderr


def test_every_page_the_chain_rendered_is_clean(chain_twice):
    """The tiny chain's own pages (every notebook and the index, as CI renders them: no default results needed)
    hold no NaN/None/True/False cell, no dict or list repr, no 17-digit float, no table without its scroll box."""
    from pagecheck import defects

    pages = sorted((chain_twice["out"] / "report").glob("*.html"))
    assert len(pages) >= 8
    found = {p.name: defects(p.read_text(encoding="utf-8")) for p in pages}
    assert not {k: v for k, v in found.items() if v}, found


def test_the_console_of_a_cold_and_a_forced_run_is_clean(chain_twice):
    """What the user's terminal shows for `make report` (cold, then every notebook again): no kernel warning or
    error ("[IPKernelApp] WARNING | Kernel is running over TCP ...", "KeyboardInterrupt caught in kernel"), no
    traceback (Qdrant's __del__, Jupyter's), no Python warning category."""
    for run in ("first", "second"):
        console = chain_twice[run].stdout + chain_twice[run].stderr
        for bad in ("IPKernelApp", "Traceback", "Warning:", "Exception ignored"):
            assert bad not in console, f"{run} run printed {bad!r}:\n{console[-3000:]}"
