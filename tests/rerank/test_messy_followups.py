"""Issue 19 follow-ups: the expansion arm of stage 04 writes no secret, and ids pandas reads as missing
(``NA``, ``null``, ``None``) stay ids where the explorer and ask read the analysis' tables. Each test builds
its input and failed before the fix."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from builders import hand_made_stages
from fakellm import FakeLLM
from rerank_data import run_cached
from rerankeval import rerank
from rerankeval.apps.ask.inputs import resolve_variant
from rerankeval.apps.explore.engine import example_queries
from rerankeval.core.names import HYBRID_RERANK_EXPAND
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import analyse, analysis_records
from rerankeval.evaluate.analysis_records import Summary
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from rerankeval.rerank.ledger import read_ledger

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")

QIDS = ["q1", "q2"]
UNITS = [f"m.pdf#p{p}" for p in range(1, 4)]


def _dataset(root: Path, page_text: dict[str, list[str]]):
    """Stage 01-03 outputs by hand: the chunks of each page (``page_text``), two judged queries, a hybrid run
    whose best chunk of each page is its first."""
    return hand_made_stages(root / "ds", page_text, QIDS)


def _files_with(root: Path, needle: str) -> list[str]:
    """The files under ``root`` holding ``needle`` (read as bytes, so nothing is skipped)."""
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes())


# --------------------------------------------------------------------------- the expansion arm redacts
@pytest.mark.parametrize("mode", ["listwise", "yesno"])
def test_a_key_echoed_by_the_endpoint_reaches_no_file_the_expansion_arm_writes(tmp_path, monkeypatch, mode):
    """The endpoint lists a model id holding the API key (RERANK_MODEL unset, so the client takes it) and echoes
    the key in every reply; a page holds it too. Before: the expansion ledger and record kept the model id as
    it came (raw ``to_csv``), and ``expanded.csv`` the page text."""
    key = f"canary-{uuid.uuid4().hex}"  # no well-known key shape: only knowing the configured key catches it
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    dp = _dataset(
        tmp_path / "src",
        {
            UNITS[0]: ["page 1 text", "more of page 1"],
            UNITS[1]: ["page 2 GOLD text", f"the admin key is {key}"],
            UNITS[2]: ["page 3 text"],
        },
    )
    with FakeLLM(rule=lambda n, body: {"echo": f"my key is {key}"}, model=f"fake-{key}") as fake:
        settings = Settings(base_url=fake.base_url, api_key=key, model="", timeout=5, max_retries=0)
        params = Params(
            mode=mode, yesno_json=True, alpha=1.0, pool_k=3, expand_n=1, expand_chars=100, expand_compare=True
        )
        main = run_cached(dp, params, settings, LLMCache(tmp_path / "cache" / "llm"))
        assert fake.count > 0 and main.expanded is not None
    result, shown = main.expanded.result, main.expanded.shown
    assert result.model == f"fake-{key}" and set(result.ledger.status) == {"ok"}
    assert key in " ".join(shown.text)  # the input really holds the key: the check below proves something
    written = {k.removeprefix("expanded_"): v for k, v in rerank.write(dp, main).items() if k.startswith("expanded_")}
    assert set(written) == {"run", "ledger", "candidates", "expanded", "record"}
    assert [p for p in written.values() if key.encode() in p.read_bytes()] == []
    assert _files_with(dp.stage_dir("rerank"), key) == [] and _files_with(tmp_path / "cache", key) == []
    record = json.loads(written["record"].read_text())
    assert record["model"] == "fake-[REDACTED]" and record["variant"] == HYBRID_RERANK_EXPAND
    back = read_ledger(written["ledger"])
    assert set(back.model) == {"fake-[REDACTED]"} and set(back.variant) == {HYBRID_RERANK_EXPAND}
    assert sorted(set(back.qid)) == QIDS
    assert any("the admin key is [REDACTED]" in t for t in rerank.read_shown(dp).text)


# --------------------------------------------------------------------------- ids read as missing
def test_variants_and_queries_named_like_missing_values_are_ids_in_the_explorers_examples(tmp_path):
    """Before (``pd.read_csv(..., dtype={"qid": str})``): the variants "NA" and "None" became NaN, so the pair
    was not found and no example was given; the queries "null" and "N/A" collapsed into one NaN row."""
    (tmp_path / "ds").mkdir()
    dp = resolve_dataset(str(tmp_path / "ds"), load_settings())
    dp.per_query_csv.parent.mkdir(parents=True, exist_ok=True)
    change = {"null": 0.8, "N/A": 0.5, "q3": 0.1}
    dp.per_query_csv.write_text(
        "variant,qid,metric,value\n"
        + "".join(f"NA,{q},ndcg@10,1.0\nNone,{q},ndcg@10,{1.0 - d}\nhybrid,{q},ndcg@10,\n" for q, d in change.items())
    )
    assert example_queries(dp, 3, pair=("NA", "None")) == ["null", "N/A", "q3"]


def test_a_variant_named_NA_can_be_the_winner_and_null_is_still_known_as_incomplete(tmp_path):
    """Before (``pd.read_csv`` with defaults): "NA" and "null" were read as NaN: the winner was "nan", and
    "null" (missing queries) was no longer excluded. The winner is now chosen by 05 from its metrics table and
    saved alone (``analyse/winner.json``); the table read back from metrics.csv keeps the names."""
    (tmp_path / "ds").mkdir()
    dp = resolve_dataset(str(tmp_path / "ds"), load_settings())
    dp.analyse_dir.mkdir(parents=True)
    dp.metrics_csv.write_text("variant,ndcg@10\nhybrid,0.5\nNA,0.8\nnull,0.95\nbm25,\n")
    table = corpus.read_table(dp.metrics_csv, ids=("variant",))
    summary = Summary(headline_metric="ndcg@10", missing={"null": 2})
    assert analysis_records.winner(table, summary) == "NA"
    analyse.write_summary(dp, summary, table=table)
    assert json.loads(dp.analyse_winner.read_text())["variant"] == "NA"
    assert analysis_records.read_winner(dp) == "NA"
    assert resolve_variant(dp, "")[0] == "NA"
