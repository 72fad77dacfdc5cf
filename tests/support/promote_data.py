"""A dataset folder with four drafts (accepted, edited, rejected, not reviewed) and optionally human questions, for
the tests of promotion (questions.review), the dataset lock (core.ioutil) and stale grades (evaluate.judgments)."""

from __future__ import annotations

from handmade import dataset_at, write_pages
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.corpus import queryset

UNITS = [f"m.pdf#p{p}" for p in range(1, 6)]


def _dataset(tmp_path, human: bool):
    """Five one-chunk pages; four drafts with their draft qrels; a grade recorded while exploring on g-b; with
    ``human`` a queries.jsonl (dm-001, dm-002) and qrels/test.tsv already there."""
    src = tmp_path / "src" / "ex"
    dp = dataset_at(src, qrels=True)
    write_pages(dp, UNITS, [f"text of page {i + 1}" for i in range(len(UNITS))])
    atomic_write_json(dp.corpus_stats, {"unit": "page", "split": "test"})
    drafts = [
        ("g-a", "what is on page one", "accepted", UNITS[0]),
        ("g-b", "what page two says", "accepted", UNITS[1]),
        ("g-c", "a rejected one", "rejected", UNITS[2]),
        ("g-d", "not reviewed yet", "draft", UNITS[3]),
    ]
    meta = {"g-b": {"original_text": "page two?"}}
    queryset.write_drafts(
        dp.source_draft_queries,
        [
            queryset.Draft(q, t, {"source_unit": u, "model": "fake", "status": s, **meta.get(q, {})})
            for q, t, s, u in drafts
        ],
    )
    (src / "qrels" / "draft.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{u}\t2\n" for q, _, _, u in drafts), encoding="utf-8"
    )
    dp.judgments("test").write_text(
        "query-id\tcorpus-id\tscore\ng-b\tm.pdf#p2\t1\ng-b\tm.pdf#p5\t2\n", encoding="utf-8"
    )
    if human:
        (src / "queries.jsonl").write_text(
            '{"_id": "dm-001", "text": "first human"}\n{"_id": "dm-002", "text": "second human"}', encoding="utf-8"
        )  # no \n
        (src / "qrels" / "test.tsv").write_text(
            "query-id\tcorpus-id\tscore\ndm-001\tm.pdf#p1\t2\ndm-002\tm.pdf#p3\t1\n", encoding="utf-8"
        )
    qrels = {"dm-001": {UNITS[0]: 2}} if human else {"g-a": {UNITS[0]: 2}}
    runs.write_qrels(qrels, dp.qrels)
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": "t", "slices": {}} for q in qrels])
    return dp
