"""The one paths module: every file location the workbench reads or writes is derived here.

Nothing depends on the working directory, nor reads the environment. Three roots can be moved in the environment or
`.env` (read by :class:`rerankeval.core.settings.Settings`, whose :class:`Roots` a program's entry point passes down:
``resolve_dataset(name, settings)`` gives a :class:`DatasetPaths` that carries them):

- ``RERANKEVAL_RESULTS``: where per-dataset outputs go (default ``<repo>/results``);
- ``RERANKEVAL_CACHE``: expensive, content-addressed caches shared by every clone (embeddings, LLM
  replies, the llama.cpp build, model weights; default ``~/.cache/rerankeval``);
- ``RERANKEVAL_QDRANT_PATH``: the embedded Qdrant store (default ``<repo>/data/.qdrant``).

A dataset's outputs live in ``results/<folder name>/``; stage 01 records the folder there
(``source.json``), and another folder of the same name is refused rather than overwriting them.
Every file a stage writes is a :class:`DatasetPaths` property or method: build no path by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_json

if TYPE_CHECKING:
    from rerankeval.core.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
DATA_DIR = ROOT / "data"
NOTEBOOKS_DIR = ROOT / "notebooks"
PARAMS_DIR = ROOT / "params"
SHARED_DATA_DIR = ROOT.parent / "shared" / "data"
DEFAULT_DATASET = "debian-manuals"


@dataclass(frozen=True)
class Roots:
    """The results, cache and embedded Qdrant folders of a program (``RERANKEVAL_RESULTS``, ``_CACHE``,
    ``_QDRANT_PATH``), absolute, defaults filled in: :meth:`of` the settings its entry point read. Nothing here reads
    the environment; a library function takes them from its :class:`DatasetPaths` (``dp.roots``) or its caller."""

    results: Path
    cache: Path
    qdrant: Path

    @classmethod
    def of(cls, settings: Settings) -> Roots:
        return cls(**settings.roots())


class DatasetNotFound(ReRankEvalError, FileNotFoundError):
    """``DATASET`` names no dataset folder; the message says where it looked and what to give."""


class DatasetNameClash(DatasetNotFound):
    """Another folder with the same name already owns ``results/<name>/`` (see :func:`check_results_owner`).

    A subclass of :class:`DatasetNotFound` so that every caller reporting a bad ``DATASET`` reports this too.
    """


# public test collections the README and benchmarks name, which the project does not ship (their terms stay with them)
PUBLIC_DATASETS = {
    "scifact": "BEIR's SciFact (https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip, or "
    "ir_datasets' beir/scifact): unzip it so that data/scifact/ holds corpus.jsonl, queries.jsonl and "
    "qrels/test.tsv",
    "cranfield": "Cranfield 1400 in BEIR format with two commands: pip install ir_datasets (in the venv: "
    "~/.cache/rerankeval/venv/bin/pip install ir_datasets), then python -m rerankeval.corpus.cranfield "
    "(ir_datasets downloads the collection; it writes data/cranfield/ with corpus.jsonl, queries.jsonl "
    "and qrels/test.tsv, the query ids and grades fixed as its docstring says)",
}
SOURCE_RECORD = "source.json"
DATASET_LAYOUT = (
    "my-docs/\n"
    "  *.pdf              (or a BEIR corpus.jsonl / corpus.jsonl.gz)\n"
    '  queries.jsonl      one {"_id": ..., "text": ...} per line\n'
    "  qrels/test.tsv     query-id<TAB>corpus-id<TAB>score"
)


@dataclass(frozen=True)
class DatasetPaths:
    """Where one dataset's source lives and where each stage writes its output."""

    name: str
    source: Path  # the user's folder: PDFs or a BEIR dataset, plus queries.jsonl and qrels/
    root: Path  # results/<name>
    roots: Roots  # the program's results, cache and Qdrant folders it was resolved with

    # -- the user's folder (read by stage 01 only) --
    @property
    def source_queries(self) -> Path:
        return self.source / "queries.jsonl"

    def source_qrels(self, split: str = "test") -> Path:
        return self.source / "qrels" / f"{split}.tsv"

    @property
    def source_draft_queries(self) -> Path:
        """JSONL of generated questions (``_id, text, metadata``), written by the questions stage
        (:mod:`rerankeval.questions.draft`) beside the user's files, never over them."""
        return self.source / "queries.draft.jsonl"

    @property
    def source_draft_qrels(self) -> Path:
        """TSV ``query-id corpus-id score``: each generated question's source unit, grade 2."""
        return self.source / "qrels" / "draft.tsv"

    def judgments(self, split: str = "test") -> Path:
        """TSV ``query-id corpus-id score``: grades recorded while exploring (:mod:`rerankeval.evaluate.judgments`).

        Kept in the dataset folder beside ``qrels/<split>.tsv`` (it is the user's work, and survives deleting
        ``results/``); stage 05 merges it into the qrels it evaluates with.
        """
        return self.source / "qrels" / f"judgments-{split}.tsv"

    @property
    def source_record(self) -> Path:
        """JSON ``{"source": <folder>}``: which dataset folder owns ``root`` (see :func:`check_results_owner`)."""
        return self.root / SOURCE_RECORD

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

    @property
    def skipped_csv(self) -> Path:
        """CSV ``file, reason``: source files stage 01 could not read."""
        return self.corpus_dir / "skipped.csv"

    @property
    def warnings_csv(self) -> Path:
        """CSV ``kind, query-id, corpus-id, detail``: judgment and file-name problems that did not stop stage 01."""
        return self.corpus_dir / "warnings.csv"

    @property
    def pages_csv(self) -> Path:
        """CSV ``file, page, unit_id, chars`` (PDF datasets only)."""
        return self.corpus_dir / "pages.csv"

    # -- stage 02: indexes --
    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def index_manifest(self) -> Path:
        return self.index_dir / "manifest.json"

    @property
    def bm25_dir(self) -> Path:
        """Parent of the BM25 indexes, one sub-folder per corpus and parameter key."""
        return self.index_dir / "bm25"

    @property
    def qdrant_path(self) -> Path:
        return self.roots.qdrant / self.name

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
    def retrieve_dir(self) -> Path:
        return self.stage_dir("retrieve")

    def variant_record(self, variant: str) -> Path:
        """JSON: the parameters and timing of one retrieval variant (stage 03)."""
        return self.retrieve_dir / f"{variant}.json"

    @property
    def ledger(self) -> Path:
        return self.root / "rerank_ledger.csv"

    @property
    def rerank_dir(self) -> Path:
        return self.stage_dir("rerank")

    @property
    def rerank_candidates(self) -> Path:
        return self.rerank_dir / "candidates.csv"

    @property
    def rerank_stability(self) -> Path:
        return self.rerank_dir / "stability.csv"

    @property
    def rerank_summary(self) -> Path:
        return self.rerank_dir / "summary.json"

    @property
    def rerank_bench_dir(self) -> Path:
        return self.rerank_dir / "bench"

    # -- questions: drafted from the corpus when the dataset has none (rerankeval.questions) --
    @property
    def questions_dir(self) -> Path:
        """The questions stage's summary (counts, drops by reason, plan) and ledger (one row per unit asked)."""
        return self.stage_dir("questions")

    # -- 06: sweeps --
    @property
    def sweep_dir(self) -> Path:
        """The sweep's own files (summary, folds) and its scratch datasets (``chunking/``)."""
        return self.stage_dir("sweep")

    @property
    def sweep_csv(self) -> Path:
        """CSV, one row per sweep point, split and pool_k: settings, quality, pool ceiling, costs."""
        return self.root / "sweep.csv"

    # -- stage 05: evaluation and report --
    @property
    def analyse_dir(self) -> Path:
        return self.stage_dir("analyse")

    @property
    def analyse_summary(self) -> Path:
        """JSON: the analysis facts the report's index page needs."""
        return self.analyse_dir / "summary.json"

    @property
    def analyse_winner(self) -> Path:
        """JSON: the best variant on the headline metric (what 07-ask answers from), alone in its file so that a
        new variant that does not win leaves 07's input unchanged."""
        return self.analyse_dir / "winner.json"

    @property
    def analyse_comparisons(self) -> Path:
        return self.analyse_dir / "comparisons.csv"

    @property
    def metrics_csv(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def per_query_csv(self) -> Path:
        return self.root / "per_query.csv"

    @property
    def review_dir(self) -> Path:
        return self.stage_dir("review")

    @property
    def unjudged_review(self) -> Path:
        """TSV: the unjudged units of every variant's top k (the judging pool), written by stage 05."""
        return self.review_dir / "unjudged.tsv"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def figures_dir(self) -> Path:
        return self.root / "figures"

    def figure(self, name: str) -> Path:
        """A PNG figure, named ``<notebook number>-<what>`` (e.g. ``01-chunk-lengths``)."""
        return self.figures_dir / f"{name}.png"

    @property
    def executed_dir(self) -> Path:
        return self.root / "executed"

    def executed_notebook(self, notebook: str) -> Path:
        """The executed copy of a notebook, by file name (``01-extract-corpus.ipynb``)."""
        return self.executed_dir / notebook

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    @property
    def report_index(self) -> Path:
        return self.report_dir / "index.html"

    def notebook_html(self, stem: str) -> Path:
        """The HTML rendering of an executed notebook, by stem (``01-extract-corpus``)."""
        return self.report_dir / f"{stem}.html"

    def stage_dir(self, stage: str) -> Path:
        """A free folder for a stage's own artefacts (e.g. ``stage_dir("rerank")``)."""
        return self.root / stage


def resolve_dataset(name_or_path: str | os.PathLike[str], settings: Settings) -> DatasetPaths:
    """Find a dataset by path, by name under ``data/``, or by name under ``../shared/data``; its outputs go under
    the results root of ``settings`` (the caller's, read once by its entry point: :class:`Roots`).

    A relative path is taken relative to the repository root, never the working directory. Raises
    :class:`DatasetNotFound` when no folder matches (naming the folder probably meant when ``DATASET``
    is a file inside one) and :class:`DatasetNameClash` when ``results/<name>/`` belongs to another
    folder of the same name.
    """
    raw = str(name_or_path).strip()
    if not raw:
        raise DatasetNotFound("DATASET is empty: give a dataset name under data/ or a folder path.")
    p = Path(raw).expanduser()
    candidates = [p] if p.is_absolute() else [ROOT / p, DATA_DIR / p, SHARED_DATA_DIR / p]
    for c in candidates:
        if c.is_dir():
            src, roots = c.resolve(), Roots.of(settings)
            dp = DatasetPaths(name=src.name, source=src, root=roots.results / src.name, roots=roots)
            check_results_owner(dp)
            return dp
    for c in candidates:
        if c.exists():
            guess = _dataset_folder_of(c.resolve())
            raise DatasetNotFound(
                f"DATASET {raw!r} is a file ({c}), but a dataset is a folder. Did you mean {guess}? "
                f"e.g. make report DATASET={guess}. Expected layout:\n{DATASET_LAYOUT}"
            )
    tried = ", ".join(str(c) for c in candidates)
    public = PUBLIC_DATASETS.get(p.name.lower())
    if public:
        raise DatasetNotFound(
            f"Dataset {raw!r} not found (looked in: {tried}). It is not shipped with ReRankEval: get {public}; "
            f"or keep it in ../shared/data/{p.name} beside the clone. Then: make report DATASET={p.name}"
        )
    close = _close_datasets(p)
    meant = f" Did you mean {' or '.join(close)}? e.g. make report DATASET={close[0]}." if close else ""
    raise DatasetNotFound(
        f"Dataset {raw!r} not found (looked in: {tried}).{meant} Give a folder holding PDFs or a BEIR dataset "
        f"(corpus.jsonl[.gz]) plus queries.jsonl and qrels/test.tsv, e.g. make report DATASET=/path/to/folder."
    )


def _close_datasets(p: Path) -> list[str]:
    """Dataset names close to ``p``'s (a typo: ``debian-manual`` -> ``debian-manuals``): the folders under
    ``data/`` and ``../shared/data`` (as names) and, for a path, beside it (as paths); the public datasets."""
    import difflib

    found: dict[str, str] = {name: name for name in PUBLIC_DATASETS}
    for folder in (DATA_DIR, SHARED_DATA_DIR):
        with contextlib.suppress(OSError):
            found.update((c.name, c.name) for c in folder.iterdir() if c.is_dir() and not c.name.startswith("."))
    parent = (p if p.is_absolute() else ROOT / p).parent
    if len(p.parts) > 1 and parent.is_dir():
        with contextlib.suppress(OSError):
            found.update((c.name, str(c)) for c in parent.iterdir() if c.is_dir() and not c.name.startswith("."))
    return [found[n] for n in difflib.get_close_matches(p.name, sorted(found), n=2, cutoff=0.75)]


def _dataset_folder_of(file: Path) -> Path:
    """The folder a file most likely belongs to: the nearest ancestor holding queries.jsonl, else its parent."""
    for folder in file.parents[:3]:
        if (folder / "queries.jsonl").is_file():
            return folder
    return file.parent


def recorded_source(dp: DatasetPaths) -> Path | None:
    """The dataset folder recorded as the owner of ``dp.root``, or None when nothing is recorded yet."""
    try:
        return Path(json.loads(dp.source_record.read_text(encoding="utf-8"))["source"])
    except FileNotFoundError:
        return None


def check_results_owner(dp: DatasetPaths) -> None:
    """Refuse ``dp.root`` when it holds the results of another folder with the same name.

    Results are kept per folder *name* (``results/<name>/``, so the default dataset stays at
    ``results/debian-manuals/``); stage 01 records the folder in ``dp.source_record``. A second folder
    of the same name would silently replace those results, so it is an error naming both folders.
    """
    owner = recorded_source(dp)
    if owner is None or owner == dp.source:
        return
    raise DatasetNameClash(
        f"{dp.root} holds the results of another dataset folder with the same name, {owner} "
        f"(recorded in {dp.source_record}); this run's folder is {dp.source}. Running it would replace those "
        f"results. To keep both, rename this folder (the results folder is named after it), or run with "
        f"RERANKEVAL_RESULTS and RERANKEVAL_QDRANT_PATH set to other folders. To replace the old results, "
        f"delete {dp.root} (or only {dp.source_record}, if {owner} was moved to {dp.source})."
    )


def record_source(dp: DatasetPaths) -> None:
    """Record ``dp.source`` as the owner of ``dp.root`` (stage 01), after :func:`check_results_owner`."""
    check_results_owner(dp)
    if recorded_source(dp) is None:
        atomic_write_json(dp.source_record, {"source": str(dp.source)})
