"""The questions stage: draft evaluation questions from the corpus with an LLM, for a dataset that has none.

The method is synthetic test-collection generation: InPars (Bonifacio et al., "InPars: Data Augmentation for
Information Retrieval using Large Language Models", 2022) and Promptagator (Dai et al., "Promptagator: Few-shot
Dense Retrieval From 8 Examples", ICLR 2023) show an LLM a document and ask for a query it answers; BEIR's GenQ
(Thakur et al., 2021) does the same with T5. Per sampled unit:

1. **Sample** (:func:`sample_units`): units (pages, documents) stratified over files with a seed: files in turn,
   each file's units in a seeded random order; units with less than ``min_chars`` of text are not asked about.
2. **Ask** (the one cached LLM call, JSON schema ``{"question", "quote"}``): one question the passage answers
   and the span that answers it, word for word. ``paraphrase`` asks for other words than the passage's:
   questions copied from a passage favour BM25 (the overlap is measured and kept: ``metadata.overlap``).
3. **Check** (:func:`check`): the quote must occur in the passage (after the normalisation citations use); empty,
   too long, duplicate and near-duplicate questions (word-set Jaccard >= .8), repeats of a human question, and
   questions in another language than the corpus (fewer than half of their words occur anywhere in it; checked
   when the corpus has at least 2,000 distinct words) are dropped; every drop is counted by reason (:data:`REASONS`).
4. **Write** (:func:`write`) into the dataset folder, never over a human file: ``queries.draft.jsonl`` and
   ``qrels/draft.tsv`` (the source unit, grade 2), appended to: a re-run adds only what is missing and never
   changes a line already there. When the dataset has no human questions, stage 01's query set is refreshed
   from the drafts (its chunks are kept).
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from rerankeval.core import progress
from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text, dataset_lock, disk_of, sha256_json, sha256_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import beir, queryset
from rerankeval.corpus.contract import load_chunks, load_stats
from rerankeval.corpus.unithash import unit_texts
from rerankeval.llm import budget as budget_mod
from rerankeval.llm import schemas
from rerankeval.llm.breaker import Breaker
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import BUDGET_EXCEEDED, CachedLLM, Call, CallStats, Outcome
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import parse
from rerankeval.questions.checks import REASONS, Language, check, overlap
from rerankeval.questions.units import Unit, sample_units

CACHE_VERSION = 1
GRADE = 2  # the grade a question's source unit gets in qrels/draft.tsv
OVERSAMPLE = 3  # units asked at most per question still missing (drops are expected)
MAX_TOKENS = 160
FEWEST_TOKENS = 60  # a short question and a one-clause quote in the reply's JSON: the plan's low end until measured
TASK = "draft-question"  # what the endpoint's drafts are measured as, for the next plan (llm.rates.Replies)
FAILURES = "failures.json"  # the units whose reply failed the checks, per cache key (see :func:`read_failures`)
LEDGER_COLUMNS = ["unit", "status", "reason", "question", "quote", "overlap", "cached", "seconds", "error"]

SYSTEM = "You write test questions for evaluating a search engine over a collection of documents."
USER = (
    "Below is a passage from {place}. Write one question that a reader of these documents might ask and that "
    "this passage answers.{paraphrase} Then copy, word for word, the shortest span of the passage (at most one "
    'sentence) that answers it. Reply only with JSON: {{"question": "<the question>", "quote": "<the span>"}}.'
    "\n\nPassage:\n{text}"
)
PARAPHRASE = (
    " Use your own words: a user who has not read the passage asks it, so do not copy phrases from "
    "the passage into the question."
)


class DraftReply(BaseModel):
    question: str
    quote: str


class DraftStrict(DraftReply):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class QuestionsParams:
    """The questions stage's parameters (notebook 08's parameters cell; these defaults are the only ones)."""

    dataset: str = "debian-manuals"
    draft: str = "auto"  # "auto": only when the dataset has no human questions; "always": also beside them; "never"
    n_questions: int = 40  # drafted questions to have (a re-run adds only the missing ones)
    draft_seed: int = 0  # seed of the unit sample and of the LLM
    paraphrase: bool = True  # ask for other words than the passage's (questions copied from it favour BM25)
    draft_min_chars: int = 300  # units with less text are not asked about
    draft_passage_chars: int = 1500  # characters of the unit shown to the LLM
    price_per_mtok: Sequence[float] = (0.0, 0.0)  # USD per 1M prompt and completion tokens
    max_calls: int = 0  # budget: fresh LLM calls this run may send; 0: no limit
    max_cost: float = 0.0  # budget: USD this run may spend at price_per_mtok; 0: no limit
    validate_drafts: bool = False  # with human questions: draft a second set in the results, compare rankings
    validate_grid: str = "small"  # validate_drafts: the sweep grid whose points are the systems compared
    retry_failed: bool = False  # ask again the units whose reply failed the checks before (recorded, else skipped)

    def __post_init__(self) -> None:
        if self.draft not in ("auto", "always", "never"):
            raise ValueError(f"draft must be 'auto', 'always' or 'never', got {self.draft!r}")
        if self.n_questions < 0 or self.draft_min_chars < 0 or self.draft_passage_chars < 100:
            raise ValueError("n_questions and draft_min_chars must be >= 0 and draft_passage_chars >= 100")


@dataclass(frozen=True)
class DraftFiles:
    """Where a set of drafts lives: its questions, its qrels, the folder of its summary and ledger, and whether it
    is the dataset's own set (the one stage 01 evaluates when there are no human questions)."""

    queries: Path
    qrels: Path
    record: Path
    own: bool = True


def dataset_files(dp: DatasetPaths) -> DraftFiles:
    """The dataset folder's ``queries.draft.jsonl`` and ``qrels/draft.tsv`` (beside the user's files)."""
    return DraftFiles(dp.source_draft_queries, dp.source_draft_qrels, dp.questions_dir)


def validation_files(dp: DatasetPaths) -> DraftFiles:
    """A set drafted to check a generated set against the human one (``validate_drafts``): kept in the results,
    never evaluated as the dataset's questions, never in the dataset folder."""
    folder = dp.questions_dir / "validation"
    return DraftFiles(folder / "queries.draft.jsonl", folder / "draft.tsv", folder, own=False)


@dataclass
class QuestionsResult:
    params: QuestionsParams
    existing: list[queryset.Draft]
    files: DraftFiles
    new: list[queryset.Draft] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)
    ledger: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LEDGER_COLUMNS))
    plan: budget_mod.Plan | None = None
    stats: CallStats = field(default_factory=CallStats)
    model: str = ""
    skipped: str = ""  # why nothing was drafted (human questions, draft="never", enough drafts)
    stopped: str = ""  # why drafting stopped before enough questions were kept (budget, endpoint down, disk full)
    seconds: float = 0.0
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # cache key -> a deterministic failure
    skipped_failed: int = 0  # units not asked: their reply failed before (``retry_failed`` asks them again)
    retried: set[str] = field(default_factory=set)  # keys of recorded failures asked again this run

    @property
    def drafts(self) -> list[queryset.Draft]:
        return self.existing + self.new


# -- 2. the call ---------------------------------------------------------------------------------------------
def messages(unit: Unit, paraphrase: bool) -> list[dict[str, str]]:
    user = USER.format(place=unit.place, paraphrase=PARAPHRASE if paraphrase else "", text=unit.text)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def prompt_hash() -> str:
    """The hash of the prompt templates (recorded with every draft)."""
    return sha256_json([SYSTEM, USER, PARAPHRASE])[:12]


def material(unit: Unit, params: QuestionsParams, model: str, endpoint: str) -> dict[str, Any]:
    """Everything the reply depends on: its cache key."""
    return {
        "v": CACHE_VERSION,
        "purpose": "draft-question",
        "model": model,
        "endpoint": endpoint,
        "template": prompt_hash(),
        "schema": schemas.schema_hash(DraftStrict),
        "paraphrase": params.paraphrase,
        "gen": {"temperature": 0, "seed": params.draft_seed, "max_tokens": MAX_TOKENS},
        "unit": unit.uid,
        "text": sha256_text(unit.text),
    }


def _read(reply: Reply) -> DraftReply:
    return parse(reply.content, DraftReply)[0]  # raises Unusable: asked again, never cached


# -- the stage -----------------------------------------------------------------------------------------------
def run(
    dp: DatasetPaths,
    params: QuestionsParams,
    settings: Settings,
    cache: LLMCache | None = None,
    files: DraftFiles | None = None,
) -> QuestionsResult:
    """Draft what is missing (see the module docstring) into ``files`` (default: the dataset's own,
    :func:`dataset_files`) through ``settings``' endpoint and ``cache`` (default: the one under ``dp.roots.cache``);
    nothing is written (:func:`write` does). A set that is not the dataset's own is drafted whatever
    ``params.draft`` says. A unit whose reply failed the checks before (recorded in ``failures.json`` per unit and
    prompt/model key) is not asked again unless ``params.retry_failed``: a warm re-run makes no LLM call."""
    t0 = time.perf_counter()
    files = files or dataset_files(dp)
    existing = queryset.read_drafts(files.queries)
    res = QuestionsResult(params, existing, files)
    src = queryset.query_source(dp)
    if files.own and (params.draft == "never" or (params.draft == "auto" and src.kind == queryset.HUMAN)):
        res.skipped = (
            "the dataset has human questions (queries.jsonl): nothing drafted (draft='always' adds drafts beside them)"
            if params.draft == "auto"
            else "draft='never': nothing drafted"
        )
        return res
    missing = params.n_questions - sum(1 for d in existing if d.status != queryset.REJECTED)
    if missing <= 0:
        res.skipped = (
            f"n_questions={params.n_questions}: no question asked for"
            if not params.n_questions
            else f"{len(existing)} drafted questions already there (n_questions={params.n_questions})"
        )
        return res
    chunks = load_chunks(dp)
    asked = {d.unit for d in existing}
    units = [
        u
        for u in sample_units(chunks, params.draft_seed, params.draft_min_chars, params.draft_passage_chars)
        if u.uid not in asked
    ][: OVERSAMPLE * missing]
    human = [q["text"] for q in beir.read_queries(dp.source_queries).values()] if dp.source_queries.is_file() else []
    vocabulary = Language.of(chunks.text)  # the corpus's words and languages (empty: no language check)
    llm = CachedLLM.open(
        settings,
        cache if cache is not None else LLMCache.under(dp.roots.cache),
        breaker=Breaker(threshold=2),
        budget=budget_mod.Budget(params.max_calls, params.max_cost),
        price=(float(params.price_per_mtok[0]), float(params.price_per_mtok[1])),
    )
    try:
        res.model = llm.model
        units = _not_failed(llm, units, params, res)
        res.plan = _plan(llm, units, missing, params)
        budget_mod.announce(res.plan, params.price_per_mtok, settings.base_url, settings.endpoint_id, stage="questions")
        _draft(llm, units, missing, params, res, human, vocabulary)
    finally:
        llm.close()
    res.seconds = round(time.perf_counter() - t0, 1)
    return res


def read_failures(folder: Path) -> dict[str, dict[str, Any]]:
    """The deterministic drafting failures recorded in ``folder/failures.json``: cache key -> unit, reason, model,
    prompt hash, when ({} when there is none, or the file does not read)."""
    try:
        got = json.loads((folder / FAILURES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def _key(llm: CachedLLM, u: Unit, params: QuestionsParams) -> str:
    return llm.cache.key(material(u, params, llm.model, llm.endpoint))


def _not_failed(llm: CachedLLM, units: list[Unit], params: QuestionsParams, res: QuestionsResult) -> list[Unit]:
    """``units`` without those whose reply failed before (all of them with ``retry_failed``)."""
    failed = read_failures(res.files.record)
    if params.retry_failed:
        res.retried = {k for u in units if (k := _key(llm, u, params)) in failed}
        return units
    keep = [u for u in units if _key(llm, u, params) not in failed]
    res.skipped_failed = len(units) - len(keep)
    return keep


def _plan(llm: CachedLLM, units: Sequence[Unit], missing: int, params: QuestionsParams) -> budget_mod.Plan:
    """The cost plan of asking about every unit of ``units``; the run stops earlier once ``missing`` are kept, so
    the units past the first ``missing`` are optional (the plan's time is a range until replies are measured)."""
    tasks, previous, replies = [], "", llm.replies(TASK)
    for i, u in enumerate(units):
        msgs = messages(u, params.paraphrase)
        hit = llm.cache.get(llm.cache.key(material(u, params, llm.model, llm.endpoint))) is not None
        prompt = "\n".join(m["content"] for m in msgs)
        est = budget_mod.task_estimate(hit, prompt, previous, replies, most=MAX_TOKENS, fewest=FEWEST_TOKENS)
        est.optional = i >= missing
        tasks.append((u.uid, "draft", [est]))
        previous = prompt
    rate, source = llm.measured_rate()
    plan = budget_mod.plan(
        tasks,
        price=llm.price,
        max_calls=params.max_calls,
        max_cost=params.max_cost,
        s_per_token=rate,
        rate_source=source,
    )
    plan.what = "units at most (asking stops once enough questions are kept)"
    return plan


def _draft(
    llm: CachedLLM,
    units: Sequence[Unit],
    missing: int,
    params: QuestionsParams,
    res: QuestionsResult,
    human: Sequence[str],
    vocabulary: Language,
) -> None:
    """Ask about ``units`` in order until ``missing`` questions are kept; fills ``res``."""
    kept = [d.text for d in res.existing]
    rows = []
    with progress.Progress(len(units), desc="drafting questions", unit="unit") as bar:
        for u in units:
            if len(res.new) >= missing:
                break
            t0 = time.perf_counter()
            got = _ask(llm, u, params, res)
            if got.failure is not None and got.failure.error_class == BUDGET_EXCEEDED:
                res.stopped = f"the budget is spent (max_calls={params.max_calls}, max_cost={params.max_cost:g})"
                break
            row = {"unit": u.uid, "cached": got.cached, "seconds": round(time.perf_counter() - t0, 3)}
            if not got.ok or got.value is None:
                reason = "no_reply"
                row["error"] = got.failure.error_class if got.failure else (got.errors[-1] if got.errors else "")
            else:
                q, quote = " ".join(got.value.question.split()), got.value.quote
                reason = check(q, quote, u.text, kept, human, vocabulary, unit=u.uid)
                row.update(question=q, quote=quote, overlap=overlap(q, u.text))
                if not reason:
                    kept.append(q)
                    res.new.append(_new_draft(u, q, quote, params, llm.model, row["overlap"]))
            if reason:
                res.drops[reason] += 1
                if got.failure is None:  # the reply itself failed: greedy decoding gives it again
                    res.failures[_key(llm, u, params)] = _failure(u, reason, row.get("error", ""), llm.model)
            rows.append({**row, "status": "dropped" if reason else "kept", "reason": reason})
            bar.update(1, kept=len(res.new))
            if got.failure is not None and llm.breaker is not None and llm.breaker.open:
                res.stopped = f"the endpoint stopped answering ({got.failure.error_class}); a re-run resumes"
                break  # the drafts so far are kept
            if res.stopped:
                break
    res.ledger = pd.DataFrame(rows).reindex(columns=LEDGER_COLUMNS)


def _ask(llm: CachedLLM, u: Unit, params: QuestionsParams, res: QuestionsResult) -> Outcome[DraftReply]:
    """The one cached call for ``u``. A reply the cache cannot store (its disk full) is kept for this run and
    drafting stops, saying which disk (``res.stopped``)."""
    call = Call(
        messages(u, params.paraphrase),
        material(u, params, llm.model, llm.endpoint),
        MAX_TOKENS,
        response_format=schemas.response_format(DraftStrict, "draft_question"),
        seed=params.draft_seed,
        task=TASK,
    )
    seen: list[DraftReply] = []

    def read(reply: Reply) -> DraftReply:
        seen.append(_read(reply))
        return seen[-1]

    try:
        return llm.call(call, read, res.stats, label=f"unit {u.uid}")  # greedy: a re-ask repeats the reply
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        root = getattr(llm.cache, "root", "the LLM cache")
        res.stopped = (
            f"the disk is full: the reply cache {root} is on {disk_of(root)}; the replies so far are kept "
            "in the drafts. Free space there (or set RERANKEVAL_CACHE to a larger disk) and re-run"
        )
        return Outcome(value=seen[-1], ok=True) if seen else Outcome()


def _failure(u: Unit, reason: str, error: str, model: str) -> dict[str, Any]:
    return {
        "unit": u.uid,
        "reason": reason,
        "error": error,
        "model": model,
        "prompt_hash": prompt_hash(),
        "at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def _new_draft(
    u: Unit, question: str, quote: str, params: QuestionsParams, model: str, lexical: float
) -> queryset.Draft:
    qid = "gen-" + sha256_text(f"{u.uid}\n{question}")[:10]
    return queryset.Draft(
        qid,
        question,
        {
            "source_unit": u.uid,
            "quote": quote,
            "model": model,
            "prompt_hash": prompt_hash(),
            "seed": params.draft_seed,
            "paraphrase": params.paraphrase,
            "overlap": lexical,
            "unit_sha256": u.sha256,
            "status": queryset.DRAFT,
        },
    )


def write(dp: DatasetPaths, res: QuestionsResult) -> dict[str, str]:
    """Append the new drafts to the dataset folder's draft files (never touching a human file or a line already
    there), write the stage's summary, ledger and failure record, and refresh stage 01's query set when it is the
    drafts. The appends hold the dataset folder's lock (:func:`rerankeval.core.ioutil.dataset_lock`, the one a
    reviewer takes) and re-read the files under it: a draft another run appended meanwhile is not written twice
    (``res.new`` is left with the drafts this call wrote)."""
    written: dict[str, str] = {}
    f = res.files
    if res.new:
        with dataset_lock(dp.source if f.own else f.record):
            res.new = _unwritten(f, res.new)
            try:
                _append(f.queries, [_line(d) for d in res.new])
                header = "" if f.qrels.is_file() else "query-id\tcorpus-id\tscore\n"
                _append(f.qrels, [f"{d.qid}\t{d.unit}\t{GRADE}" for d in res.new], header)
            except OSError as exc:
                raise _unwritable(exc, f, res.new) from None
        written.update(queries=str(f.queries), qrels=str(f.qrels))
    f.record.mkdir(parents=True, exist_ok=True)
    atomic_write_text(f.record / "ledger.csv", res.ledger.to_csv(index=False))
    atomic_write_json(f.record / "summary.json", summary(res))
    failures = {k: v for k, v in read_failures(f.record).items() if k not in res.retried} | res.failures
    atomic_write_json(f.record / FAILURES, failures)
    if f.own and queryset.query_source(dp).kind == queryset.GENERATED:
        refresh_corpus(dp)
    return written


def _unwritten(f: DraftFiles, new: Sequence[queryset.Draft]) -> list[queryset.Draft]:
    """The drafts of ``new`` not in ``f.queries`` yet (read under the lock)."""
    there = {d.qid for d in queryset.read_drafts(f.queries)}
    return [d for d in new if d.qid not in there]


class DraftWriteError(ReRankEvalError, OSError):
    """The drafted questions could not be written to the dataset folder (read-only, disk full)."""


def _unwritable(exc: OSError, f: DraftFiles, new: Sequence[queryset.Draft]) -> DraftWriteError:
    """The error to raise when ``new`` could not be appended: it names the file, the disk when it is full, and
    where the drafts were kept (the results folder when it is writable; the LLM cache always holds the replies)."""
    kept = "a re-run drafts them again from the LLM cache, without a request"
    try:
        spare = atomic_write_text(f.record / "unsaved.draft.jsonl", "".join(_line(d) + "\n" for d in new))
        kept = f"the {len(new)} new drafts are kept in {spare}; " + kept
    except OSError:
        pass
    if exc.errno == errno.ENOSPC:
        return DraftWriteError(
            exc.errno,
            f"the disk is full: cannot write the drafted questions to {f.queries} "
            f"({disk_of(f.queries)}); {kept}. Free space there and re-run",
        )
    return DraftWriteError(
        exc.errno,
        f"{exc.strerror}: cannot write the drafted questions to {f.queries}; {kept}. "
        "Make the dataset folder writable, or copy it somewhere writable and give that "
        "folder as DATASET",
    )


def _line(d: queryset.Draft) -> str:
    return json.dumps(d.to_json(), ensure_ascii=False, sort_keys=True)


def _append(path: Path, lines: Sequence[str], header: str = "") -> None:
    """``path`` with ``lines`` added at its end, atomically; the bytes already there are kept as they are. The
    caller holds the dataset folder's lock."""
    if not lines:
        return
    old = path.read_text(encoding="utf-8") if path.is_file() else header
    if old and not old.endswith("\n"):
        old += "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, old + "".join(line + "\n" for line in lines))


def refresh_corpus(dp: DatasetPaths) -> None:
    """Stage 01's queries and qrels from the drafts, with its parameters of the last run (chunks kept, so nothing
    is extracted and no progress is shown: no settings)."""
    from rerankeval import corpus

    params = corpus.Params.of(load_stats(dp).get("params", {}))
    corpus.write(dp, corpus.run(dp, params, None))


def summary(res: QuestionsResult) -> dict[str, Any]:
    """The stage's record: counts, drops by reason, the plan, the calls, and the review state of the set."""
    s = res.stats
    return {
        "model": res.model,
        "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in res.params.__dict__.items()},
        "prompt_hash": prompt_hash(),
        "skipped": res.skipped,
        "stopped": res.stopped,
        "new": len(res.new),
        "asked": int(len(res.ledger)),
        "drops": {r: int(res.drops.get(r, 0)) for r in REASONS},
        "set": queryset.describe(res.drafts),
        "plan": res.plan.to_dict() if res.plan else None,
        "calls": s.summary(),
        "mean_overlap": _mean(res.ledger.loc[res.ledger.status == "kept", "overlap"]),
        "seconds": res.seconds,
        "failures": {"new": len(res.failures), "skipped": res.skipped_failed, "retried": len(res.retried)},
    }


def _mean(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return round(float(v.mean()), 3) if len(v) else None


def describe(res: QuestionsResult) -> str:
    """What the run did, in a few plain sentences (the notebook prints it)."""
    if res.skipped:
        return f"Nothing drafted: {res.skipped}."
    drops = ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in res.drops.most_common())
    s, stopped = res.stats, f" Stopped: {res.stopped}." if res.stopped else ""
    skipped = (
        f" {res.skipped_failed} unit(s) not asked: their reply failed the checks before "
        f"({res.files.record / FAILURES}; retry_failed=true asks them again)."
        if res.skipped_failed
        else ""
    )
    if not res.new:
        dropped = f"{sum(res.drops.values())} dropped: {drops}" if drops else "nothing dropped"
        head = (
            f"No question was kept ({dropped}) of {len(res.ledger)} units asked with {res.model or 'the model'}; "
            f"{len(res.drafts)} drafted in all."
        )
    else:
        head = (
            f"Asked {len(res.ledger)} units with {res.model}: kept {len(res.new)} new questions "
            f"({len(res.drafts)} drafted in all); dropped: {drops or 'none'}."
        )
    return (
        f"{head} LLM calls: {s.calls} ({s.cache_hits} from the cache, {s.requests} requests, {s.failed} failed)."
        f"{skipped}{stopped} The questions are generated and not yet reviewed."
    )


def overlap_table(dp: DatasetPaths, drafts: Sequence[queryset.Draft], chunks: pd.DataFrame) -> pd.DataFrame:
    """Lexical overlap with their source unit of generated and (where both exist) human questions, side by side:
    high overlap favours BM25."""
    texts = unit_texts(chunks)
    rows = [
        {"set": "generated", "overlap": overlap(d.text, texts.get(d.unit, ""))}
        for d in drafts
        if d.status != queryset.REJECTED
    ]
    if dp.source_queries.is_file() and dp.source_qrels().is_file():
        queries = beir.read_queries(dp.source_queries)
        for j in beir.read_judgments(dp.source_qrels()):
            if j.grade > 0 and j.qid in queries and j.did in texts:
                rows.append({"set": "human", "overlap": overlap(queries[j.qid]["text"], texts[j.did])})
    df = pd.DataFrame(rows, columns=["set", "overlap"])
    if df.empty:  # no question kept, none drafted yet: an empty table, not a KeyError
        return pd.DataFrame(columns=["count", "mean", "median"], index=pd.Index([], name="set"))
    return df.groupby("set").overlap.describe()[["count", "mean", "50%"]].rename(columns={"50%": "median"})
