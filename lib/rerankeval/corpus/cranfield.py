"""Cranfield 1400 in BEIR format, from ir_datasets' ``cranfield``: ``python -m rerankeval.corpus.cranfield [folder]``.

ReRankEval does not ship Cranfield. This writes the folder a dataset needs (default ``data/cranfield/``):
``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``), ``qrels/test.tsv``
(``query-id  corpus-id  score``) and ``qid_map.tsv`` (each query id to the collection's own ``.I`` number).
ir_datasets downloads the collection once (``pip install ir_datasets`` first).

Two quirks of the collection, handled here as in ``../shared/data/cranfield`` (see its README):

- the qrels number the queries 1..225 in file order, but the query file's ``.I`` numbers skip (1, 2, 4, 8, ...);
  ir_datasets keeps the ``.I`` numbers, which then match the wrong qrels. A query's id is its position.
- the qrels hold Cleverdon's codes: 1 (a complete answer) to 4 (of minimum interest), and -1 (of no interest).
  A grade is ``5 - code`` (4 = a complete answer); the -1 rows are dropped (unjudged, as in trec_eval's 0).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rerankeval.core import paths
from rerankeval.core.ioutil import atomic_write_jsonl, atomic_write_text

IR_DATASETS_NAME = "cranfield"
INSTALL = "pip install ir_datasets  (in the project's venv: ~/.cache/rerankeval/venv/bin/pip install ir_datasets)"


def grade(code: int) -> int | None:
    """The grade of a Cleverdon code (1 best .. 4), None for -1 (no interest) and anything else."""
    return 5 - code if 1 <= code <= 4 else None


def write_beir(docs: Iterable[Any], queries: Iterable[Any], qrels: Iterable[Any], folder: Path) -> dict[str, int]:
    """Write ``folder`` in BEIR format from ir_datasets-style records (``doc_id``/``title``/``text``,
    ``query_id``/``text``, ``query_id``/``doc_id``/``relevance``); the counts written."""
    corpus = [{"_id": str(d.doc_id), "title": d.title, "text": d.text} for d in docs]
    numbered = list(enumerate(queries, start=1))  # the qrels' query ids: positions in the file
    atomic_write_jsonl(folder / "corpus.jsonl", corpus)
    atomic_write_jsonl(folder / "queries.jsonl", [{"_id": str(i), "text": q.text} for i, q in numbered])
    atomic_write_text(
        folder / "qid_map.tsv", "qrels_qid\tcran_qry_I\n" + "".join(f"{i}\t{q.query_id}\n" for i, q in numbered)
    )
    known = {str(i) for i, _ in numbered}
    rows = [
        (str(r.query_id), str(r.doc_id), g)
        for r in qrels
        if (g := grade(int(r.relevance))) is not None and str(r.query_id) in known
    ]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows)
    )
    return {"docs": len(corpus), "queries": len(numbered), "qrels": len(rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.corpus.cranfield", description=__doc__.splitlines()[0])
    ap.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=paths.DATA_DIR / "cranfield",
        help="where to write it (default: data/cranfield)",
    )
    args = ap.parse_args(argv)
    try:
        import ir_datasets
    except ImportError:
        print(f"[cranfield] ERROR: the ir_datasets package is not installed. Install it: {INSTALL}", file=sys.stderr)
        return 2
    ds = ir_datasets.load(IR_DATASETS_NAME)
    counts = write_beir(ds.docs_iter(), ds.queries_iter(), ds.qrels_iter(), args.folder)
    print(
        f"[cranfield] wrote {args.folder}: {counts['docs']} documents, {counts['queries']} queries, "
        f"{counts['qrels']} judgments; run it with make report DATASET={args.folder}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
