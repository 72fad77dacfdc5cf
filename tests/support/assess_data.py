"""Hand-made stage outputs judged by humans on page 2 and the fake assessor's rules, for the tests of the LLM
assessor (questions.assess) and of whose grades a grades file holds (core.judge_grades)."""

from __future__ import annotations

import json

from builders import hand_made_stages
from rerankeval.core import runs

QIDS = ["q1", "q2", "q3"]
PAGES = {
    "m.pdf#p1": ["Apt installs packages."],
    "m.pdf#p2": ["GOLD the network file is interfaces."],
    "m.pdf#p3": ["GOLD grub starts the kernel."],
    "m.pdf#p4": ["Exim delivers mail."],
}


def _passage(body: dict) -> str:
    user = body["messages"][-1]["content"]
    return user.split("Passage:\n", 1)[1].split("\n\nWork it out", 1)[0]


def gold_judge(n: int, body: dict) -> dict:
    """The fake assessor: grade 3 for a passage containing GOLD, else 0."""
    return {"content": json.dumps({"score": 3 if "GOLD" in _passage(body) else 0})}


def broken_judge(n: int, body: dict) -> dict:
    """A judge off its scale: 7 for a GOLD passage, prose for the others."""
    return {"content": json.dumps({"score": 7}) if "GOLD" in _passage(body) else "It is somewhat relevant."}


def _dataset(tmp_path):
    """Three queries judged (grade 1) on page 2, two variants, and the human files in the dataset folder."""
    dp = hand_made_stages(tmp_path / "ds", PAGES, QIDS)
    units = list(PAGES)
    runs.write_trec(
        {q: {u: 1.0 / (i + 1) for i, u in enumerate(reversed(units))} for q in QIDS}, dp.run_file("bm25"), "bm25"
    )
    (dp.source / "qrels").mkdir()
    (dp.source / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": f"question {q}"}) + "\n" for q in QIDS)
    )
    (dp.source / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\tm.pdf#p2\t1\n" for q in QIDS)
    )
    return dp
