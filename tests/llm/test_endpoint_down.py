"""The LLM endpoint is down for the whole run: every query falls back to its fused order, the stage still
writes its outputs, and the analysis and the report say so (fallback rate 100%, shown as a warning).

A single refused connection is covered by tests/rerank/test_faults.py; this is the whole run, through
the stage outputs, the analysis helpers notebook 05 uses, and the report index page.
"""

from __future__ import annotations

import json
import re
import socket

import pandas as pd
import pytest

from handmade import dataset_at, write_pages, write_questions, write_rotated_runs
from rerank_data import run_cached
from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.settings import Settings, load_settings
from rerankeval.evaluate import analyse
from rerankeval.llm.cache import LLMCache
from rerankeval.report import render as report
from rerankeval.rerank.config import Params

QIDS = [f"q{i}" for i in range(1, 7)]
UNITS = [f"m.pdf#p{p}" for p in range(1, 6)]
POOL_K = 3


def _dataset(tmp_path):
    """Chunks (one per page), six judged queries and a hybrid run whose order differs per query."""
    dp = dataset_at(tmp_path / "src" / "down")
    write_pages(dp, UNITS, [f"page {i + 1} text" for i in range(len(UNITS))])
    write_questions(dp, QIDS)
    runs.write_qrels({q: {UNITS[i % len(UNITS)]: 1} for i, q in enumerate(QIDS)}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page"})
    write_rotated_runs(dp, QIDS, UNITS, ("hybrid",))
    return dp


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def _analyse(dp) -> None:
    """Notebook 05's analysis and writer (small n_boot), so that metrics.csv and the summary exist."""
    a = analyse.run(
        dp,
        {"ks": [1, 3, 10], "final_k": POOL_K, "pool_k": POOL_K, "n_boot": 200, "n_perm": 200, "stats_seed": 0},
        load_settings(),
    )
    analyse.write(dp, a)


@pytest.fixture
def down_run(tmp_path):
    dp = _dataset(tmp_path)
    settings = Settings(base_url=_dead_url(), api_key="sk-test", model="fake-reranker", timeout=1, max_retries=1)
    res = run_cached(dp, Params(mode="listwise", alpha=1.0, pool_k=POOL_K), settings, LLMCache(tmp_path / "llm"))
    rerank.write(dp, res)
    _analyse(dp)
    page = report.write_index(
        dp, [{"name": "04-rerank", "href": "04-rerank.html", "status": "ok", "seconds": 1.0, "error": None}]
    ).read_text(encoding="utf-8")
    return dp, res.inputs.fused, res, page, tmp_path / "llm"


def _reranked_row(page: str) -> str:
    m = re.search(r"<tr><th>hybrid_(?:<wbr>)?rerank</th>.*?</tr>", page, re.S)  # a long name may break after _
    assert m, "the headline table has no hybrid_rerank row"
    return m.group(0)


def test_every_query_falls_back_and_the_outputs_say_so(down_run):
    dp, fused, res, page, llm_cache = down_run
    led = rerank.read_ledger(dp.ledger)
    assert sorted(led.qid) == QIDS and set(led.status) == {"fallback"}
    assert set(led.error) == {"APIConnectionError"} and (led.n_failed == 1).all()
    assert (led.retries == 1).all() and (led.requests == 2).all() and not led.cache_hit.any()
    # nothing failed was cached: a later run with the endpoint back asks again
    assert not list(llm_cache.rglob("*.json"))
    # the reranked run is the fused run, query by query, full depth
    written = runs.read_trec(dp.run_file("hybrid_rerank"))
    assert {q: list(d) for q, d in written.items()} == {q: list(d) for q, d in fused.items()}
    summary = json.loads((dp.stage_dir("rerank") / "summary.json").read_text())
    assert summary["main"]["fallback_rate"] == 1.0 and summary["main"]["fallback"] == len(QIDS)
    # the analysis carries it into metrics.csv ...
    table = pd.read_csv(dp.metrics_csv).set_index("variant")
    assert table.loc["hybrid_rerank", "fallback_rate"] == 1.0
    assert pd.isna(table.loc["hybrid", "fallback_rate"])  # no reranker, no fallback figure
    assert table.loc["hybrid_rerank", "ndcg@10"] == table.loc["hybrid", "ndcg@10"]
    # ... and the report's headline table and verdict state it
    assert "100.0%" in _reranked_row(page)
    # a failed stage is a degenerate comparison, said as such (issue 35 item 1), never a measured effect
    assert "fell back to the fused order on every query (a failed stage)" in page
    assert f"did not change nDCG@{POOL_K}" not in page  # not measured: a failed stage is no evidence


def test_a_total_fallback_is_flagged_in_red_on_the_index_page(down_run):
    page = down_run[3]
    red = r'class="[^"]*\b(?:failed|warn\w*|alert|danger|bad)\b[^"]*"'  # .failed is the page's red style
    cell = re.search(rf"<td {red}[^>]*>\s*100\.0%\s*</td>", _reranked_row(page))
    banner = re.search(rf"<(p|div)\s+{red}[^>]*>(?:(?!</\1>).)*fell back(?:(?!</\1>).)*</\1>", page, re.S)
    assert cell or banner, "a 100% fallback rate is not styled as a warning on the index page"


def test_a_dead_endpoint_trips_the_circuit_breaker(tmp_path):
    """Past BREAKER_THRESHOLD consecutive unreachable calls the rest fall back without calling."""
    from rerankeval.llm.breaker import BREAKER_THRESHOLD

    dp = _dataset(tmp_path)
    settings = Settings(base_url=_dead_url(), api_key="sk-test", model="fake-reranker", timeout=1, max_retries=0)
    # yesno: one call per candidate, 6 queries x 3 candidates = 18 calls if nothing stopped them
    params = Params(mode="yesno", yesno_json=True, alpha=1.0, pool_k=POOL_K)
    res = run_cached(dp, params, settings, LLMCache(tmp_path / "llm"))
    rerank.write(dp, res)
    fused = res.inputs.fused
    led = rerank.read_ledger(dp.ledger)
    assert set(led.status) == {"fallback"} and set(led.error) == {"APIConnectionError"}
    assert led.requests.sum() == BREAKER_THRESHOLD < len(QIDS) * POOL_K
    written = runs.read_trec(dp.run_file("hybrid_rerank"))
    assert {q: list(d) for q, d in written.items()} == {q: list(d) for q, d in fused.items()}


CACHED_ONLY = """
import sys
from rerankeval.core.settings import Settings
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import CachedLLM, CallStats, Call
from rerankeval.llm.server import check_endpoint

settings = Settings(base_url={url!r}, api_key="sk-test", model="fake-reranker", timeout=1, max_retries=0)
llm = CachedLLM.open(settings, LLMCache({cache!r}))
call = Call([{{"role": "user", "content": "hi"}}], {{"purpose": "test"}}, max_tokens=4)
llm.cache.put(llm.cache.key(call.material), call.material, {{"content": "cached", "response_format": "none"}})
stats = CallStats()
hit = llm.call(call, lambda r: r.content, stats)
problem = check_endpoint(settings, timeout=1)
print("openai" in sys.modules, hit.value, stats.cache_hits, "cannot be reached" in problem and {url!r} in problem)
miss = llm.call(Call(call.messages, {{"purpose": "other"}}, max_tokens=4), lambda r: r.content, stats)
print("openai" in sys.modules, miss.failure.error_class, stats.failed)
llm.close()
"""


def test_a_cached_only_call_and_the_endpoint_probe_never_import_openai(tmp_path):
    """openai (about 1 s to import) is loaded by the first request only: a reply from the cache and the probe of a
    dead endpoint (httpx) do without it; the first miss still fails as the openai client names it."""
    import subprocess
    import sys

    from rerankeval.core import paths

    code = CACHED_ONLY.format(url=_dead_url(), cache=str(tmp_path / "llm"))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(paths.ROOT / "lib"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["False cached 1 True", "True APIConnectionError 1"]


def test_the_endpoint_probe_takes_any_answer_for_reachable_and_401_for_a_refused_key():
    """What check_endpoint asks (GET <base>/models with the key as a bearer token) and how it reads the answers."""
    import http.server
    import threading

    from rerankeval.core.settings import Settings
    from rerankeval.llm.server import check_endpoint

    seen: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server name
            seen.append((self.path, self.headers.get("Authorization", "")))
            self.send_response(401 if "wrong" in self.headers.get("Authorization", "") else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as srv:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{srv.server_address[1]}/v1/"
        right = check_endpoint(Settings(base_url=base, api_key="sk-right-0001", model="m"), timeout=5)
        wrong = check_endpoint(Settings(base_url=base, api_key="sk-wrong-0002", model="m"), timeout=5)
        srv.shutdown()
    assert right is None  # a 404: not every server lists its models, but it answered
    assert "HTTP 401" in wrong and "OPENAI_API_KEY" in wrong and "wrong-0002" not in wrong
    assert seen == [("/v1/models", "Bearer sk-right-0001"), ("/v1/models", "Bearer sk-wrong-0002")]
