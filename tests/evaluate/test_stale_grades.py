"""Issue 32 defect 1: a grade, a draft and a review decision carry the sha256 of the unit text they were made on;
when the page's text changed (a PDF replaced under the same name) its grades are set aside with a warning naming
the file, the page and the count, never merged silently. Files from before hashes were kept are merged as before.

Each test builds a dataset by hand (one chunk per page), grades or drafts on it, then "replaces the PDF": the page's
chunk gets another text, as stage 01 would extract from a different document of the same name.
"""

from __future__ import annotations

import json
import logging

from judgments_data import UNITS as J_UNITS
from judgments_data import _dataset as judged_dataset
from promote_data import UNITS, _dataset
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_jsonl, read_jsonl, sha256_text
from rerankeval.corpus import queryset
from rerankeval.corpus.contract import load_qrels
from rerankeval.evaluate import judgments
from rerankeval.questions import review

GARDENING = "how to prune roses and water tomatoes in a dry summer"


def _replace_page(dp, unit: str, text: str = GARDENING) -> None:
    """Stage 01 after the page's file was replaced by another document under the same name."""
    rows = read_jsonl(dp.chunks)
    for r in rows:
        if r["unit_id"] == unit:
            r["text"] = text
    atomic_write_jsonl(dp.chunks, rows)


def test_a_grade_on_a_page_replaced_since_is_set_aside_with_a_warning(tmp_path, caplog):
    dp = judged_dataset(tmp_path)
    assert judgments.record(dp, "q1", J_UNITS[2], 2) == "recorded"
    assert judgments.record(dp, "q2", J_UNITS[2], 1) == "recorded"
    assert judgments.record(dp, "q1", J_UNITS[3], 1) == "recorded"
    path = dp.judgments("test")
    lines = path.read_text().splitlines()
    _replace_page(dp, J_UNITS[2])
    with caplog.at_level(logging.WARNING):
        merged, rec = judgments.merged_qrels(dp, load_qrels(dp))
    assert J_UNITS[2] not in merged["q1"] and "q2" in merged and J_UNITS[2] not in merged["q2"]
    assert merged["q1"][J_UNITS[3]] == 1 and rec["merged"] == 1  # the page that did not change is merged
    assert rec["stale"] == [{"file": "qrels/judgments-test.tsv", "unit": J_UNITS[2], "count": 2}]  # in the folder
    said = " ".join(r.getMessage() for r in caplog.records)
    assert str(path) in said and J_UNITS[2] in said and "2 grade(s)" in said and "set aside" in said
    assert lines[0].split("\t") == ["query-id", "corpus-id", "score", "unit-sha256"]
    assert lines[1].split("\t")[3] == sha256_text("page 3 about topic 2")  # the page's text when it was graded


def test_grading_the_replaced_page_again_replaces_the_stale_grade(tmp_path):
    dp = judged_dataset(tmp_path)
    judgments.record(dp, "q1", J_UNITS[2], 2)
    _replace_page(dp, J_UNITS[2])
    assert judgments.record(dp, "q1", J_UNITS[2], 0) == "replaced"  # no replace=True needed: the old one is stale
    merged, rec = judgments.merged_qrels(dp, load_qrels(dp))
    assert merged["q1"][J_UNITS[2]] == 0 and rec["stale"] == []


def test_a_judgments_file_without_the_hash_column_is_merged_as_before(tmp_path):
    dp = judged_dataset(tmp_path)
    dp.judgments("test").write_text(f"query-id\tcorpus-id\tscore\nq1\t{J_UNITS[2]}\t2\n", encoding="utf-8")
    _replace_page(dp, J_UNITS[2])
    merged, rec = judgments.merged_qrels(dp, load_qrels(dp))
    assert merged["q1"][J_UNITS[2]] == 2 and rec["merged"] == 1 and rec["stale"] == []
    judgments.record(dp, "q3", J_UNITS[4], 1)  # the old lines are kept as they were, the new one with its hash
    assert [len(x.split("\t")) for x in dp.judgments("test").read_text().splitlines()[1:]] == [4, 4]


def _generated(tmp_path, reviewed: bool = False):
    """Drafts evaluated as the dataset's questions (no human file), each with the hash of its page's text."""
    dp = _dataset(tmp_path, human=False)
    drafts = queryset.read_drafts(dp.source_draft_queries)
    for i, d in enumerate(drafts):
        d.metadata["unit_sha256"] = sha256_text(f"text of page {i + 1}")
    queryset.write_drafts(dp.source_draft_queries, drafts)
    dp.judgments("test").unlink()
    evaluated = [d for d in drafts if d.status != queryset.REJECTED]
    runs.write_qrels({d.qid: {d.unit: 2} for d in evaluated}, dp.qrels)
    atomic_write_jsonl(dp.queries, [{"_id": d.qid, "text": d.text, "slices": {}} for d in evaluated])
    return dp, drafts


def test_a_drafted_question_whose_page_changed_loses_its_grade_with_a_warning(tmp_path, caplog):
    dp, drafts = _generated(tmp_path)
    _replace_page(dp, UNITS[0])
    with caplog.at_level(logging.WARNING):
        merged, rec = judgments.merged_qrels(dp, load_qrels(dp))
    assert "g-a" not in merged and merged["g-b"] == {UNITS[1]: 2}
    assert rec["stale"] == [{"file": "qrels/draft.tsv", "unit": UNITS[0], "count": 1}]
    assert str(dp.source_draft_qrels) in caplog.text and UNITS[0] in caplog.text


def test_a_review_records_the_page_it_saw_and_a_re_review_after_the_change_vouches_for_it(tmp_path):
    dp, _ = _generated(tmp_path)
    _replace_page(dp, UNITS[3])
    assert judgments.merged_qrels(dp, load_qrels(dp))[1]["stale"][0]["unit"] == UNITS[3]
    d = review.review(dp, "g-d", "accept")  # the reviewer read the page as it reads now
    assert d.metadata["reviewed_sha256"] == sha256_text(GARDENING)
    merged, rec = judgments.merged_qrels(dp, load_qrels(dp))
    assert rec["stale"] == [] and merged["g-d"] == {UNITS[3]: 2}


def test_promote_leaves_out_stale_grades_and_holds_back_a_draft_left_without_one(tmp_path):
    dp, _ = _generated(tmp_path)
    judgments.record(dp, "g-a", UNITS[4], 1)  # graded while exploring, on p5's text of now
    judgments.record(dp, "g-b", UNITS[4], 2)
    _replace_page(dp, UNITS[4])  # g-a keeps its source page's grade; g-b's p5 grade goes stale
    _replace_page(dp, UNITS[1])  # g-b's own page changed after it was drafted and accepted: no grade left
    said = review.promote(dp)
    lines = [json.loads(x) for x in dp.source_queries.read_text().splitlines()]
    assert [x["_id"] for x in lines] == ["g-a"]
    assert dp.source_qrels("test").read_text().splitlines()[1:] == [f"g-a\t{UNITS[0]}\t2"]
    assert "Not promoted: g-b: no relevant grade" in said and f"grade(s) of {UNITS[4]} left out" in said
    assert f"grade(s) of {UNITS[1]} left out" in said
