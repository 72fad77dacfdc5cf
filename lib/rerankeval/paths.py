"""The one paths module: every file location the workbench reads or writes is derived here.

Nothing depends on the working directory. Three roots can be moved by environment variables:

- ``RERANKEVAL_RESULTS``: where per-dataset outputs go (default ``<repo>/results``);
- ``RERANKEVAL_CACHE``: expensive, content-addressed caches shared by every clone (embeddings, LLM
  replies, the llama.cpp build, model weights; default ``~/.cache/rerankeval``);
- ``RERANKEVAL_QDRANT_PATH``: the embedded Qdrant store (default ``<repo>/data/.qdrant``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / "data"
NOTEBOOKS_DIR = ROOT / "notebooks"
PARAMS_DIR = ROOT / "params"
SHARED_DATA_DIR = ROOT.parent / "shared" / "data"
DEFAULT_DATASET = "debian-manuals"


def results_dir() -> Path:
    return Path(os.environ.get("RERANKEVAL_RESULTS", ROOT / "results")).resolve()


def cache_dir() -> Path:
    return Path(os.environ.get("RERANKEVAL_CACHE", Path.home() / ".cache" / "rerankeval")).resolve()


def qdrant_dir() -> Path:
    return Path(os.environ.get("RERANKEVAL_QDRANT_PATH", DATA_DIR / ".qdrant")).resolve()


class DatasetNotFound(FileNotFoundError):
    pass


@dataclass(frozen=True)
class DatasetPaths:
    """Where one dataset's source lives and where each stage writes its output."""

    name: str
    source: Path  # the user's folder: PDFs or a BEIR dataset, plus queries.jsonl and qrels/
    root: Path  # results/<name>

    # -- stage 01: corpus (the one data contract every later stage reads) --
    @property
    def corpus_dir(self) -> Path:
        return self.root / "corpus"

    @property
    def chunks(self) -> Path:
        """JSONL, one chunk per line: chunk_id, unit_id, source, page, start, title, text."""
        return self.corpus_dir / "chunks.jsonl"

    @property
    def queries(self) -> Path:
        """JSONL, one query per line: _id, text, slices (dict of slice name -> value)."""
        return self.corpus_dir / "queries.jsonl"

    @property
    def qrels(self) -> Path:
        """TSV with header ``query-id corpus-id score``; corpus-id is a relevance *unit* id."""
        return self.corpus_dir / "qrels.tsv"

    @property
    def corpus_stats(self) -> Path:
        return self.corpus_dir / "stats.json"

    # -- stage 02: indexes --
    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def qdrant_path(self) -> Path:
        return qdrant_dir() / self.name

    # -- stage 03/04: runs --
    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def run_file(self, variant: str) -> Path:
        """Unit-level run (page or document ids), deduplicated, strictly decreasing scores."""
        return self.runs_dir / f"{variant}.trec"

    def chunk_run_file(self, variant: str) -> Path:
        """Chunk-level run of the same variant, before mapping chunks to units."""
        return self.runs_dir / "chunks" / f"{variant}.trec"

    @property
    def ledger(self) -> Path:
        return self.root / "rerank_ledger.csv"

    # -- stage 05: evaluation and report --
    @property
    def metrics_csv(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def per_query_csv(self) -> Path:
        return self.root / "per_query.csv"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def figures_dir(self) -> Path:
        return self.root / "figures"

    @property
    def executed_dir(self) -> Path:
        return self.root / "executed"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    def stage_dir(self, stage: str) -> Path:
        """A free folder for a stage's own artefacts (e.g. ``stage_dir("rerank")``)."""
        return self.root / stage


def resolve_dataset(name_or_path: str | os.PathLike[str] = DEFAULT_DATASET) -> DatasetPaths:
    """Find a dataset by path, by name under ``data/``, or by name under ``../shared/data``.

    A relative path is taken relative to the repository root, never the working directory.
    """
    raw = str(name_or_path).strip()
    if not raw:
        raise DatasetNotFound("DATASET is empty: give a dataset name under data/ or a folder path.")
    candidates: list[Path] = []
    p = Path(raw).expanduser()
    if p.is_absolute():
        candidates.append(p)
    else:
        candidates += [ROOT / p, DATA_DIR / p, SHARED_DATA_DIR / p]
    for c in candidates:
        if c.is_dir():
            src = c.resolve()
            return DatasetPaths(name=src.name, source=src, root=results_dir() / src.name)
    tried = ", ".join(str(c) for c in candidates)
    raise DatasetNotFound(
        f"Dataset {raw!r} not found (looked in: {tried}). Give a folder holding PDFs or a BEIR dataset "
        f"(corpus.jsonl[.gz]) plus queries.jsonl and qrels/test.tsv, e.g. make report DATASET=/path/to/folder."
    )
