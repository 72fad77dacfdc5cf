"""Issue 21 "review moves accepted questions to queries.jsonl" and issue 23 "free-text questions can be added to
queries.jsonl from the explorer": ``explore.promote`` / ``review.promote`` and ``explore.add_question``.

Hand-built drafts (one accepted, one edited, one rejected, one not reviewed) give exact expected files after a
promotion; a human file that existed keeps its old lines byte-identical (sha256 of its old bytes is a prefix hash).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from promote_data import UNITS, _dataset
from rerankeval.apps import explore
from rerankeval.corpus import queryset
from rerankeval.questions import review


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_promote_moves_accepted_and_edited_drafts_with_their_grades_and_is_idempotent(tmp_path):
    dp = _dataset(tmp_path, human=False)
    said = explore.promote(dp)
    assert "promoted 2 question(s) (g-a, g-b)" in said and "3 grade(s)" in said
    assert "1 draft(s) not reviewed yet are no longer evaluated" in said
    lines = [json.loads(x) for x in dp.source_queries.read_text(encoding="utf-8").splitlines()]
    assert [(x["_id"], x["text"], x["metadata"]["source"]) for x in lines] == [
        ("g-a", "what is on page one", "drafted, reviewed"),
        ("g-b", "what page two says", "drafted, reviewed"),
    ]
    assert lines[1]["metadata"]["original_text"] == "page two?" and "status" not in lines[1]["metadata"]
    # the draft grade of g-b's source unit is replaced by the grade recorded while exploring (1), p5 added
    assert dp.source_qrels("test").read_text(encoding="utf-8") == (
        "query-id\tcorpus-id\tscore\ng-a\tm.pdf#p1\t2\ng-b\tm.pdf#p2\t1\ng-b\tm.pdf#p5\t2\n"
    )
    marks = {d.qid: d.metadata.get("promoted") for d in queryset.read_drafts(dp.source_draft_queries)}
    assert marks == {"g-a": True, "g-b": True, "g-c": None, "g-d": None}
    assert queryset.query_source(dp).kind == queryset.HUMAN  # human questions win from now on
    before = (_sha(dp.source_queries.read_bytes()), _sha(dp.source_qrels("test").read_bytes()))
    assert explore.promote(dp).startswith("nothing to promote")
    assert (_sha(dp.source_queries.read_bytes()), _sha(dp.source_qrels("test").read_bytes())) == before


def test_a_human_file_that_existed_keeps_its_old_lines_byte_identical(tmp_path):
    dp = _dataset(tmp_path, human=True)
    old_q, old_r = dp.source_queries.read_bytes(), dp.source_qrels("test").read_bytes()
    review.promote(dp)
    new_q, new_r = dp.source_queries.read_bytes(), dp.source_qrels("test").read_bytes()
    assert _sha(new_q[: len(old_q)]) == _sha(old_q) and _sha(new_r[: len(old_r)]) == _sha(old_r)
    assert [json.loads(x)["_id"] for x in new_q.decode().splitlines()] == ["dm-001", "dm-002", "g-a", "g-b"]
    assert new_r[len(old_r) :].decode() == "g-a\tm.pdf#p1\t2\ng-b\tm.pdf#p2\t1\ng-b\tm.pdf#p5\t2\n"


def test_an_id_clash_is_refused_and_nothing_is_written(tmp_path):
    dp = _dataset(tmp_path, human=True)
    with dp.source_queries.open("a", encoding="utf-8") as fh:
        fh.write('\n{"_id": "g-b", "text": "a human question that took the id"}\n')
    before = [p.read_bytes() for p in (dp.source_queries, dp.source_qrels("test"), dp.source_draft_queries)]
    with pytest.raises(queryset.IdClash, match="g-b.*nothing was written.*rename the draft"):
        explore.promote(dp)
    assert [p.read_bytes() for p in (dp.source_queries, dp.source_qrels("test"), dp.source_draft_queries)] == before


def test_add_question_appends_the_next_id_and_its_grades_without_touching_old_lines(tmp_path):
    dp = _dataset(tmp_path, human=True)
    old_q, old_r = dp.source_queries.read_bytes(), dp.source_qrels("test").read_bytes()
    said = explore.add_question(dp, "  where is   page four ", [UNITS[3]])
    assert said.startswith("dm-003 added to") and "no longer evaluated" not in said
    said = explore.add_question(dp, "and page five", {UNITS[4]: 1, UNITS[0]: 0})
    assert said.startswith("dm-004 added to")
    new_q, new_r = dp.source_queries.read_bytes(), dp.source_qrels("test").read_bytes()
    assert _sha(new_q[: len(old_q)]) == _sha(old_q) and _sha(new_r[: len(old_r)]) == _sha(old_r)
    added = [json.loads(x) for x in new_q[len(old_q) :].decode().splitlines() if x.strip()]
    assert [(x["_id"], x["text"], x["metadata"]["source"]) for x in added] == [
        ("dm-003", "where is page four", "explorer"),
        ("dm-004", "and page five", "explorer"),
    ]
    assert new_r[len(old_r) :].decode() == "dm-003\tm.pdf#p4\t2\ndm-004\tm.pdf#p5\t1\ndm-004\tm.pdf#p1\t0\n"


@pytest.mark.parametrize(
    ("relevant", "message"),
    [
        ([UNITS[0].replace("p1", "p9")], "not in the corpus"),
        ({UNITS[0]: 3}, "grade 3 is outside the scale: grades are 0-2"),
        ({UNITS[0]: 0}, "at least one relevant unit"),
    ],
)
def test_add_question_refuses_bad_grades_and_units_and_writes_nothing(tmp_path, relevant, message):
    dp = _dataset(tmp_path, human=True)
    before = dp.source_queries.read_bytes()
    with pytest.raises(ValueError, match=message):
        explore.add_question(dp, "a question", relevant)
    assert dp.source_queries.read_bytes() == before


def test_next_id_follows_the_dataset_prefix_and_width():
    assert queryset.next_id(["dm-001", "dm-060", "x7"]) == "dm-061"
    assert queryset.next_id(["q1", "q2", "q10"]) == "q11"
    assert queryset.next_id(["abc"]) == "q-001"


# -- issue 32's weak spots ----------------------------------------------------------------------------------------
def test_a_draft_whose_qrels_lines_were_deleted_is_held_back_with_the_reason(tmp_path):
    dp = _dataset(tmp_path, human=True)
    dp.source_draft_qrels.write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")  # the user deleted them
    dp.judgments("test").unlink()
    said = review.promote(dp)
    assert said.startswith("nothing to promote") and "Not promoted: g-a: no relevant grade" in said
    assert "Not promoted: g-b: no relevant grade" in said and "explore.judge(dp, 'g-a'" in said
    assert [json.loads(x)["_id"] for x in dp.source_queries.read_text().splitlines()] == ["dm-001", "dm-002"]
    assert not any(d.metadata.get("promoted") for d in queryset.read_drafts(dp.source_draft_queries))


def test_an_edit_that_repeats_a_human_question_is_refused(tmp_path):
    dp = _dataset(tmp_path, human=True)
    before = dp.source_draft_queries.read_bytes()
    with pytest.raises(ValueError, match=r"g-d .*same question as human question dm-001.*nothing"):
        review.review(dp, "g-d", "edit", text="First  HUMAN?")
    with pytest.raises(review.DuplicateQuestion, match="accepted draft g-a"):
        review.review(dp, "g-d", "edit", text="what is on page one")
    assert dp.source_draft_queries.read_bytes() == before
    review.review(dp, "g-d", "reject")  # rejecting is always possible


def test_two_accepted_drafts_with_one_wording_are_not_both_promoted(tmp_path):
    dp = _dataset(tmp_path, human=True)
    drafts = queryset.read_drafts(dp.source_draft_queries)
    drafts[1].text = drafts[0].text  # a hand edit of the draft file (the review refuses it)
    queryset.write_drafts(dp.source_draft_queries, drafts)
    said = review.promote(dp)
    assert "promoted 1 question(s) (g-a)" in said and "Not promoted: g-b: the same question as draft g-a" in said
    texts = [json.loads(x)["text"] for x in dp.source_queries.read_text().splitlines()]
    assert len(texts) == len(set(texts))


def test_add_question_never_takes_a_drafts_id_so_promotion_still_works(tmp_path):
    dp = _dataset(tmp_path, human=True)
    drafts = queryset.read_drafts(dp.source_draft_queries)
    drafts[0].qid = "dm-003"  # drafts numbered like the human questions
    queryset.write_drafts(dp.source_draft_queries, drafts)
    dp.source_draft_qrels.write_text(dp.source_draft_qrels.read_text().replace("g-a\t", "dm-003\t"))
    said = explore.add_question(dp, "where is page four", [UNITS[3]])
    assert said.startswith("dm-004 added to")
    assert "promoted 2 question(s) (dm-003, g-b)" in review.promote(dp)  # no IdClash
