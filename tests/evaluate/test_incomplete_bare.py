"""Issue 34 item 5: a bare folder's drafted questions (``qrels/draft.tsv``: the one page each was written from,
grade 2) are judgments with unknown neighbours, not the only relevant pages: the other pages of each query's top k
are holes, so the bounds are wide (a neighbour may answer as well as the source page) and the judging queue offers
those neighbours."""

from __future__ import annotations

import json

from builders import TINY_PAGES, write_pdf
from rerankeval import corpus
from rerankeval.apps import explore
from rerankeval.core import paths, runs
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import holes

# the source page each draft was written from (what 08 records: one line of qrels/draft.tsv per question, grade 2)
SOURCES = {"gen-a": "alpha-guide.pdf#p1", "gen-b": "beta-manual.pdf#p2", "gen-c": "gamma-notes.pdf#p1"}
PAGES = ["alpha-guide.pdf#p1", "alpha-guide.pdf#p2", "beta-manual.pdf#p1", "beta-manual.pdf#p2", "gamma-notes.pdf#p1"]
K = 3


def _bare_with_drafts(tmp_path):
    """A folder of PDFs with the drafts' two files and nothing else, through stage 01, and two saved runs: vector
    ranks each source page first, bm25 third (its first two are neighbours nobody judged)."""
    folder = tmp_path / "bare"
    for name, texts in TINY_PAGES.items():
        write_pdf(folder / name, texts)
    (folder / "qrels").mkdir()
    (folder / "queries.draft.jsonl").write_text(
        "".join(
            json.dumps(
                {"_id": q, "text": f"drafted question about {u}", "metadata": {"status": "draft", "source_unit": u}}
            )
            + "\n"
            for q, u in SOURCES.items()
        ),
        encoding="utf-8",
    )
    (folder / "qrels" / "draft.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{u}\t2\n" for q, u in SOURCES.items()), encoding="utf-8"
    )
    dp = paths.resolve_dataset(folder, load_settings())
    corpus.write(dp, corpus.run(dp, corpus.Params(), None))  # stage 01: the drafts are what it evaluates
    vector, bm25 = {}, {}
    for q, src in SOURCES.items():
        others = [u for u in PAGES if u != src]
        vector[q] = {u: 1.0 / r for r, u in enumerate([src, *others], start=1)}
        bm25[q] = {u: 1.0 / r for r, u in enumerate([*others[::-1][:2], src, *others[::-1][2:]], start=1)}
    for name, run in (("vector", vector), ("bm25", bm25)):
        runs.write_trec(run, dp.run_file(name), name)
    return dp


def test_a_bare_folder_s_drafts_leave_the_neighbours_unjudged_bounds_wide_and_queued(tmp_path):
    dp = _bare_with_drafts(tmp_path)
    stats = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
    assert stats["queries_source"] == "generated"
    qrels = runs.read_qrels(dp.qrels)
    assert qrels == {q: {u: 2} for q, u in SOURCES.items()}  # one judged page per question, nothing judged 0
    saved = {v: runs.read_trec(dp.run_file(v)) for v in ("vector", "bm25")}
    rec = holes.analyse(saved, qrels, list(SOURCES), "vector", k=K, n_sim=0)
    by = {v["variant"]: v for v in rec["variants"]}
    # every other page of a top k is a hole: K - 1 per query and variant, none counted as judged non-relevant
    assert by["vector"]["unjudged_in_top_k"] == by["bm25"]["unjudged_in_top_k"] == (K - 1) * len(SOURCES)
    # zero-fill calls vector perfect and bm25 poor; a neighbour graded like the source page could make bm25 perfect
    assert by["vector"]["zero_fill"] == 1.0 and by["bm25"]["best"] == 1.0
    assert by["bm25"]["zero_fill"] < 0.6 and by["bm25"]["best"] - by["bm25"]["worst"] > 0.4
    assert by["vector"]["worst"] < by["vector"]["zero_fill"]  # bm25's neighbours, if relevant, raise the ideal
    (cmp,) = rec["comparisons"]
    assert cmp["status"] == "undecided" and cmp["n_unjudged"] == 4 * len(SOURCES)
    queued = {(r["qid"], r["unit_id"]) for r in rec["queue"]}
    assert queued and all(u != SOURCES[q] for q, u in queued)
    # the explorer's queue (no run of the chain needed) offers those neighbours, with why each matters
    got = explore.next_to_judge(dp, 50)
    offered = set(zip(got.units.qid, got.units.unit_id, strict=True))
    assert offered == queued and all("bm25 vs vector" in why for why in got.units.why)
    assert any("undecided" in line for line in got.status)
