"""Readers for the corpus stage's saved output: the one data contract every later stage uses.

``results/<dataset>/corpus/`` holds (written by :func:`rerankeval.corpus.stage.write`):

- ``chunks.jsonl``: ``chunk_id, unit_id, source, page, start, title, text`` (one line per chunk; for
  BEIR datasets one chunk per document and ``chunk_id == unit_id == doc id``, ``page`` is null);
- ``queries.jsonl``: ``_id, text, slices`` (``slices`` maps a slice name to a value, e.g.
  ``{"type": "lexical", "answers": "multi"}``);
- ``qrels.tsv``: ``query-id corpus-id score`` where corpus-id is a relevance unit id (page id
  ``<file>#p<page>`` for PDF datasets, document id for BEIR);
- ``stats.json``: counts, the relevance unit, parameters and the corpus hash.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import read_jsonl
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, read_qrels

CHUNK_COLUMNS = ["chunk_id", "unit_id", "source", "page", "start", "title", "text"]


class StageMissing(ReRankEvalError, FileNotFoundError):
    pass


def _need(path, stage: str) -> None:
    if not path.exists():
        raise StageMissing(f"{path} is missing: run the {stage} stage first (notebook {stage}, or `make report`).")


def load_chunks(dp: DatasetPaths) -> pd.DataFrame:
    """The chunk table, in file order (sorted by chunk id), with columns :data:`CHUNK_COLUMNS`."""
    _need(dp.chunks, "01-extract-corpus")
    df = pd.DataFrame(read_jsonl(dp.chunks))
    if df.empty:
        return pd.DataFrame(columns=CHUNK_COLUMNS)
    return df[CHUNK_COLUMNS]


def chunk_texts(dp: DatasetPaths, chunks: pd.DataFrame | None = None) -> dict[str, str]:
    """chunk_id -> text to index and rerank (title and body joined for BEIR); ``chunks``: the table when the
    caller has already read it (:func:`load_chunks`)."""
    df = load_chunks(dp) if chunks is None else chunks
    return {
        cid: (f"{title}\n{text}" if title else text)
        for cid, title, text in zip(df.chunk_id, df.title.fillna(""), df.text, strict=True)
    }


def unit_of(dp: DatasetPaths) -> dict[str, str]:
    """chunk_id -> relevance unit id."""
    df = load_chunks(dp)
    return dict(zip(df.chunk_id, df.unit_id, strict=True))


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    slices: dict[str, str]


def load_queries(dp: DatasetPaths) -> dict[str, str]:
    """qid -> query text, for the judged queries of the evaluated split."""
    return {q.qid: q.text for q in load_query_table(dp)}


def load_query_table(dp: DatasetPaths) -> list[Query]:
    _need(dp.queries, "01-extract-corpus")
    return [Query(r["_id"], r["text"], dict(r.get("slices") or {})) for r in read_jsonl(dp.queries)]


def load_qrels(dp: DatasetPaths) -> Qrels:
    _need(dp.qrels, "01-extract-corpus")
    return read_qrels(dp.qrels)


def read_table(path: str | Path, ids: Sequence[str] = ("qid",)) -> pd.DataFrame:
    """A CSV this project wrote, its ``ids`` columns as written: strings, and ``NA``, ``nan``, ``null``,
    ``N/A`` or ``None`` an id like any other (pandas reads them as missing by default). In the other
    columns only an empty field is missing (how ``DataFrame.to_csv`` writes NaN)."""
    head = pd.read_csv(path, nrows=0).columns
    return pd.read_csv(
        path,
        dtype={c: str for c in ids if c in head},
        keep_default_na=False,
        na_values={c: [""] for c in head if c not in ids},
    )


def load_stats(dp: DatasetPaths) -> dict:
    _need(dp.corpus_stats, "01-extract-corpus")
    return json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
