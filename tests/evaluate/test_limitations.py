"""Known limitations (issue 11): tagged queries get their own section and a change shows up as a change."""

from __future__ import annotations

import json

import pandas as pd

from rerankeval.core.paths import DatasetPaths
from rerankeval.evaluate import limitations
from roots import env_roots

QUERIES = {"q1": "found by everyone", "q2": "the hard one", "q3": "the other hard one"}
QRELS = {"q1": {"A": 1}, "q2": {"G": 2}, "q3": {"H": 1}}


def dataset(tmp_path) -> DatasetPaths:
    src = tmp_path / "ds"
    src.mkdir()
    rows = [
        {"_id": "q1", "text": QUERIES["q1"]},
        {"_id": "q2", "text": QUERIES["q2"], "metadata": {"known_limitation": "vocabulary mismatch"}},
        {"_id": "q3", "text": QUERIES["q3"], "metadata": {"slice": "x", "known_limitation": "answer split"}},
    ]
    (src / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return DatasetPaths("ds", src, tmp_path / "results" / "ds", env_roots())


def per_query(success3: dict[tuple[str, str], float]) -> pd.DataFrame:
    rows = [
        {"variant": v, "qid": q, "metric": m, "value": x if m == "success@3" else 0.5}
        for (v, q), x in success3.items()
        for m in ("success@3", "ndcg@10")
    ]
    return pd.DataFrame(rows)


RUNS = {  # now: hybrid_rerank finds q2's gold at rank 2; nobody finds q3's in the top 3 (rank 5 at best)
    "hybrid": {"q1": {"A": 3, "B": 2}, "q2": {"X": 5, "Y": 4, "Z": 3, "G": 2}, "q3": {"H": 1}},
    "hybrid_rerank": {"q1": {"A": 3}, "q2": {"X": 5, "G": 4}, "q3": {"1": 9, "2": 8, "3": 7, "4": 6, "H": 5}},
}


def test_the_tagged_queries_are_read_from_the_dataset(tmp_path):
    assert limitations.known(dataset(tmp_path)) == {"q2": "vocabulary mismatch", "q3": "answer split"}


def test_a_known_limitation_that_starts_succeeding_is_reported(tmp_path):
    dp = dataset(tmp_path)
    dp.root.mkdir(parents=True)
    before = {
        ("hybrid", "q2"): 0.0,
        ("hybrid_rerank", "q2"): 0.0,
        ("hybrid", "q3"): 1.0,
        ("hybrid_rerank", "q3"): 0.0,
        ("hybrid", "q1"): 1.0,
        ("hybrid_rerank", "q1"): 1.0,
    }
    per_query(before).to_csv(dp.per_query_csv, index=False)  # the previous run's file
    runs = {"hybrid": dict(RUNS["hybrid"]), "hybrid_rerank": RUNS["hybrid_rerank"]}
    runs["hybrid"]["q3"] = {"1": 4, "2": 3, "3": 2, "H": 1}  # hybrid lost q3's gold from its top 3
    t = limitations.analyse(dp, runs, QRELS, QUERIES).set_index("qid")
    assert list(t.index) == ["q2", "q3"]  # only the tagged ones; q1 is no limitation
    assert t.loc["q2"].to_dict() == {
        "query": "the hard one",
        "reason": "vocabulary mismatch",
        "hybrid": 4,
        "hybrid_rerank": 2,
        "status": "now succeeds",
        "detail": "now in the top 3: hybrid_rerank",
    }
    assert (t.loc["q3", "status"], t.loc["q3", "detail"]) == ("now fails", "no longer in the top 3: hybrid")
    assert (dp.stage_dir("analyse") / limitations.PREVIOUS).read_bytes() == dp.per_query_csv.read_bytes()
    lines = limitations.summary_lines(t.reset_index())
    assert lines[0].startswith(
        "2 queries are tagged as known limitations (counted in every average); 1 now succeed and 1 now fail"
    )
    assert "q2 now succeeds: now in the top 3: hybrid_rerank" in lines


def test_without_a_previous_run_the_ranks_are_still_listed(tmp_path):
    t = limitations.analyse(dataset(tmp_path), RUNS, QRELS, QUERIES).set_index("qid")
    assert t.loc["q2", "status"] == limitations.NO_PREVIOUS
    assert t.loc["q2", "detail"] == "in the top 3: hybrid_rerank"
    assert (t.loc["q3", "hybrid"], t.loc["q3", "hybrid_rerank"]) == (1, 5)
    assert limitations.summary_lines(t.reset_index()) == [  # not "0 now succeed and 0 now fail"
        "2 queries are tagged as known limitations (counted in every average); there is no previous run to compare "
        "them with yet."
    ]


def test_status_closed_form():
    s = limitations.status
    assert [s({"a"}, set()), s(set(), {"a"}), s(set(), set()), s({"a"}, {"b"}), s(set(), None)] == [
        "now succeeds",
        "now fails",
        "still fails",
        "succeeds (as before)",
        "no previous run",
    ]


def test_write_and_read_back(tmp_path):
    dp = dataset(tmp_path)
    t = limitations.analyse(dp, RUNS, QRELS, QUERIES)
    limitations.write(dp, t)
    back = limitations.read(dp)
    assert list(back.qid) == ["q2", "q3"] and list(back.hybrid_rerank) == ["2", "5"]
    assert limitations.write(dp, t.iloc[:0]) == {} and limitations.read(dp) is None  # none tagged: no stale file


def test_the_report_index_has_the_section_escaped(tmp_path):
    from rerankeval.report import render as report

    dp = dataset(tmp_path)
    queries = {**QUERIES, "q2": "<script>alert(1)</script> hard"}
    limitations.write(dp, limitations.analyse(dp, RUNS, QRELS, queries))
    html = report.write_index(dp, []).read_text(encoding="utf-8")
    assert "<h2>Known limitations</h2>" in html and "2 queries are tagged as known limitations" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hard" in html and "<script>alert(1)" not in html
