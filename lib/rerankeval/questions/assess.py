"""The LLM assessor: grade the unjudged pool on a 0-3 scale, into a file of its own, and enough judged pairs to
measure how well it agrees with the humans.

The prompt follows UMBRELA (Upadhyay et al., "UMBRELA: UMbrela is the (Open-Source Reproduction of the) Bing
RELevance Assessor", 2024, arXiv:2406.06519), the open reproduction of Thomas et al.'s Bing assessor used to judge
TREC RAG 2024: the query, the passage, the definitions of grades 0-3, the steps (the searcher's intent, how well the
passage matches it, how trustworthy it is) and the score alone, here as JSON ``{"score": 0..3}`` (schema sent as
``response_format``). The wording is ours.

1. **Pool** (:func:`pool`): for every evaluated query, the union of every variant's top ``k`` units
   (``runs/<variant>.trec``) minus the pairs already graded (the qrels stage 01 evaluates with, the explorer's
   judgments file, the drafted questions' source units);
2. **Overlap** (:func:`overlap_sample`): up to ``agreement_pairs`` pairs the humans graded (seeded sample), asked
   too so that :mod:`rerankeval.evaluate.agreement` can measure Cohen's kappa; their LLM grades go to the same LLM
   file and never replace a human grade (the analysis adds LLM grades only where no human judged);
3. **Ask** each pair, the overlap sample first (on a budget, how far to trust the judge comes first), through the
   one cached call (plan printed first, ``max_calls`` / ``max_cost``, the breaker): a reply that is not JSON, or
   whose grade is not a whole number 0-3, is asked once more, then dropped and counted by reason (:data:`REASONS`),
   never clipped. A re-run resumes from the cache;
4. **Write** (:func:`write`) ``<dataset>/qrels/llm-<model>-<hash>.tsv`` (header, ``query-id corpus-id score``; the
   grades of earlier runs kept) and beside it the record of the exact model id
   (:mod:`rerankeval.core.judge_grades`: one file per model identity, never two judges in one), never a human file,
   and ``assess/summary.json`` / ``assess/ledger.csv`` in the results. The summary's ``warning`` says what the index
   must show: a judge giving one grade to nearly everything, or grading questions its own model drafted.

The grades follow UMBRELA's scale, where 0 and 1 are not relevant (:mod:`rerankeval.core.judge_grades`). The judge
is the model and endpoint of ``JUDGE_MODEL`` / ``JUDGE_BASE_URL`` / ``JUDGE_API_KEY`` when set (the notebook's
``judge_model`` wins over ``JUDGE_MODEL``), else the reranker's (:func:`judge_settings`); :func:`judge_endpoint` checks
the judge's own endpoint before anything is asked, and never falls back to the reranker's.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, field_validator

from rerankeval.core import judge_grades, progress, runs
from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text, dataset_lock, sha256_json, sha256_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels
from rerankeval.core.settings import Settings
from rerankeval.corpus import queryset
from rerankeval.corpus.contract import load_chunks, load_qrels, load_queries
from rerankeval.corpus.unithash import read_grade_lines, unit_texts
from rerankeval.llm import budget as budget_mod
from rerankeval.llm import schemas
from rerankeval.llm.breaker import Breaker
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import BUDGET_EXCEEDED, CachedLLM, Call, CallStats
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Unusable, parse

CACHE_VERSION = 1
MAX_TOKENS = 16
GRADES = judge_grades.GRADES
REASONS = ("no_reply", "unreadable", "out_of_range")
LEDGER_COLUMNS = ["qid", "unit", "kind", "grade", "reason", "cached", "seconds", "error"]
HEADER = "query-id\tcorpus-id\tscore\n"

SYSTEM = "You are a careful search quality rater. You judge how well a passage answers a search query."
USER = (
    "Grade how relevant the passage is to the query, on a whole-number scale from 0 to 3:\n"
    "3 = the passage is about the query and holds its exact answer;\n"
    "2 = the passage answers the query in part, or the answer is unclear or buried in other information;\n"
    "1 = the passage is on a related topic but does not answer the query;\n"
    "0 = the passage has nothing to do with the query.\n\n"
    "Query: {query}\n\nPassage:\n{passage}\n\n"
    "Work it out in steps, silently: think of what the person searching most likely wants; judge how well the "
    "passage meets that need and how trustworthy it is; weigh both and settle on one grade. "
    'Answer with the grade only, as JSON: {{"score": <0, 1, 2 or 3>}}.'
)


class GradeReply(BaseModel):
    score: float

    @field_validator("score", mode="before")
    @classmethod
    def _no_bool(cls, v: Any) -> Any:
        """``true`` / ``false`` are not grades (pydantic would read them as 1 and 0)."""
        if isinstance(v, bool):
            raise ValueError(f"the score {str(v).lower()} is a yes/no, not a grade from 0 to 3")
        return v


class GradeStrict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    score: Literal[0, 1, 2, 3]


@dataclass(frozen=True)
class AssessParams:
    """Stage 09's parameters (notebook 09's parameters cell; these defaults are the only ones)."""

    dataset: str = "debian-manuals"
    assess: bool = False  # opt-in: one LLM call per unjudged pair
    k: int = 10  # the pool: every variant's top k per evaluated query (final_k of 05)
    judge_model: str = ""  # model the assessor asks; empty: JUDGE_MODEL, else the reranker's (RERANK_MODEL)
    agreement_pairs: int = 100  # human-graded pairs also graded by the LLM, to measure agreement (kappa)
    assess_seed: int = 0  # seed of the overlap sample and of the LLM
    passage_chars: int = 1500  # characters of a unit shown to the LLM
    max_calls: int = 0  # budget: fresh LLM calls this run may send; 0: no limit
    max_cost: float = 0.0  # budget: USD this run may spend at price_per_mtok; 0: no limit
    price_per_mtok: Sequence[float] = (0.0, 0.0)  # USD per 1M prompt and completion tokens

    def __post_init__(self) -> None:
        if self.k < 1 or self.agreement_pairs < 0 or self.passage_chars < 100:
            raise ValueError(
                f"k must be >= 1 (got {self.k}), agreement_pairs >= 0 (got {self.agreement_pairs}) "
                f"and passage_chars >= 100 (got {self.passage_chars})"
            )


@dataclass(frozen=True)
class Pair:
    """One (query, unit) pair to grade; ``kind`` is ``pool`` (unjudged) or ``overlap`` (a human graded it)."""

    qid: str
    unit: str
    kind: str


@dataclass
class AssessResult:
    params: AssessParams
    pairs: list[Pair] = field(default_factory=list)
    grades: dict[tuple[str, str], int] = field(default_factory=dict)
    drops: Counter = field(default_factory=Counter)
    ledger: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LEDGER_COLUMNS))
    plan: budget_mod.Plan | None = None
    stats: CallStats = field(default_factory=CallStats)
    model: str = ""
    endpoint: str = ""
    skipped: str = ""
    stopped: str = ""
    seconds: float = 0.0
    pool_size: int = 0
    drafted_by: list[str] = field(default_factory=list)  # the models that wrote the evaluated (generated) questions


# -- 1-2. what to grade -----------------------------------------------------------------------------------------
def _add(into: Qrels, qrels: Qrels) -> None:
    for q, rel in qrels.items():
        into.setdefault(q, {}).update({u: int(g) for u, g in rel.items()})


def human_qrels(dp: DatasetPaths) -> Qrels:
    """The human grades: stage 01's qrels unless they are the drafts' (a generated set), plus the explorer's."""
    out: Qrels = {}
    if queryset.query_source(dp).kind != queryset.GENERATED and dp.qrels.is_file():
        _add(out, load_qrels(dp))
    for path in sorted((dp.source / "qrels").glob("judgments-*.tsv")) if (dp.source / "qrels").is_dir() else []:
        for q, u, g, _, _ in read_grade_lines(path):
            out.setdefault(q, {})[u] = int(g)
    return out


def graded_pairs(dp: DatasetPaths) -> set[tuple[str, str]]:
    """Every pair something already grades (stage 01's qrels, human or drafted, and the explorer's judgments)."""
    known: Qrels = human_qrels(dp)
    if dp.qrels.is_file():
        _add(known, load_qrels(dp))
    return {(q, u) for q, rel in known.items() for u in rel}


def pool(dp: DatasetPaths, k: int, qids: Sequence[str], graded: set[tuple[str, str]]) -> list[Pair]:
    """The unjudged units of every variant's top ``k`` for each of ``qids`` (query order, then best rank)."""
    loaded = [runs.read_trec(p) for p in runs.discover_runs(dp.runs_dir).values()]
    out: list[Pair] = []
    for q in qids:
        best: dict[str, int] = {}
        for run in loaded:
            for rank, (u, _) in enumerate(runs.ranked(run.get(q, {}))[:k], start=1):
                if (q, u) not in graded:
                    best[u] = min(best.get(u, rank), rank)
        out.extend(Pair(q, u, "pool") for u in sorted(best, key=lambda u: (best[u], u)))
    return out


def overlap_sample(human: Qrels, qids: Sequence[str], n: int, seed: int) -> list[Pair]:
    """Up to ``n`` human-graded pairs of ``qids``, a seeded sample (sorted, so the order does not depend on it)."""
    wanted = set(qids)
    pairs = sorted((q, u) for q, rel in human.items() if q in wanted for u in rel)
    chosen = sorted(random.Random(seed).sample(pairs, min(n, len(pairs))))
    return [Pair(q, u, "overlap") for q, u in chosen]


# -- 3. the call ------------------------------------------------------------------------------------------------
def messages(query: str, passage: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER.format(query=query, passage=passage)},
    ]


def prompt_hash() -> str:
    return sha256_json([SYSTEM, USER])[:12]


def material(query: str, passage: str, unit: str, model: str, endpoint: str, seed: int) -> dict[str, Any]:
    """Everything the reply depends on: its cache key."""
    return {
        "v": CACHE_VERSION,
        "purpose": "assess",
        "model": model,
        "endpoint": endpoint,
        "template": prompt_hash(),
        "schema": schemas.schema_hash(GradeStrict),
        "gen": {"temperature": 0, "seed": seed, "max_tokens": MAX_TOKENS},
        "query": sha256_text(query),
        "unit": unit,
        "text": sha256_text(passage),
    }


def read_grade(reply: Reply) -> int:
    """The grade of a reply; :class:`Unusable` (asked again, never cached) for prose or a grade not in 0-3."""
    score = parse(reply.content, GradeReply)[0].score
    if not float(score).is_integer() or int(score) not in GRADES:
        raise Unusable("GradeOutOfRange", f"grade {score:g} is not a whole number from 0 to 3")
    return int(score)


def _reason(errors: Sequence[str], failure: Any) -> str:
    if failure is not None:
        return "no_reply"
    return "out_of_range" if errors and errors[-1] == "GradeOutOfRange" else "unreadable"


# -- the stage --------------------------------------------------------------------------------------------------
class JudgeEndpointError(ReRankEvalError, RuntimeError):
    """The judge's own endpoint (``JUDGE_BASE_URL``) does not answer: 09 stops rather than judge with another."""


def judge_settings(settings: Settings, judge_model: str = "") -> Settings:
    """The judge's settings: its own endpoint when ``JUDGE_BASE_URL`` is set (key ``JUDGE_API_KEY``, else the
    reranker's), its model ``judge_model`` or ``JUDGE_MODEL`` when named; else the reranker's settings."""
    update: dict[str, Any] = {}
    if settings.judge_base_url:
        update.update(
            base_url=settings.judge_base_url, api_key=settings.judge_api_key or settings.api_key, endpoint_id=None
        )
    model = judge_model.strip() or (settings.judge_model or "").strip()
    if model:
        update["model"] = model
    return settings.model_copy(update=update) if update else settings


@contextlib.contextmanager
def judge_endpoint(settings: Settings, judge_model: str = "") -> Iterator[Settings]:
    """The settings 09 judges with (give them to :func:`run`). With ``JUDGE_BASE_URL`` the judge's own endpoint,
    checked first: one that does not answer raises :class:`JudgeEndpointError` (09 never judges with the
    reranker's endpoint instead). Without it the reranker's endpoint, the local server started when none is set."""
    from rerankeval.llm.client import UNREACHABLE_HINT
    from rerankeval.llm.server import check_endpoint, endpoint

    if settings.judge_base_url:
        problem = check_endpoint(judge_settings(settings, judge_model))
        if problem:  # its fix names the reranker's variables: the judge's are said below
            for reranker_fix in (UNREACHABLE_HINT, " Fix OPENAI_API_KEY in .env or the environment."):
                problem = problem.replace(reranker_fix, "")
            raise JudgeEndpointError(
                f"The LLM judge's endpoint (JUDGE_BASE_URL) does not answer: {problem.strip().rstrip('.')}. Nothing "
                "was graded. Start it, or fix JUDGE_BASE_URL / JUDGE_API_KEY (.env or the environment); unset "
                "JUDGE_BASE_URL to judge with the reranker's endpoint."
            )
        yield settings
        return
    with endpoint(settings) as served:
        yield served


def drafted_by(dp: DatasetPaths) -> list[str]:
    """The models that wrote the evaluated questions when they are generated (the drafts record it), else []."""
    src = queryset.query_source(dp)
    if src.kind != queryset.GENERATED or src.queries is None:
        return []
    return queryset.describe(queryset.read_drafts(src.queries))["models"]


def run(dp: DatasetPaths, params: AssessParams, settings: Settings, cache: LLMCache | None = None) -> AssessResult:
    """Grade the pool and the overlap sample (see the module docstring); nothing is written (:func:`write`)."""
    t0 = time.perf_counter()
    res = AssessResult(params)
    if not params.assess:
        res.skipped = 'assess=false: nothing graded, no LLM call (make report P="assess=true" grades the pool)'
        return res
    queries = load_queries(dp)
    qids = sorted(queries)
    human = human_qrels(dp)
    # the overlap first: on a budget, knowing how far to trust the judge comes before its grades
    unjudged = pool(dp, params.k, qids, graded_pairs(dp))
    res.pairs, res.pool_size = (
        overlap_sample(human, qids, params.agreement_pairs, params.assess_seed) + unjudged,
        len(unjudged),
    )
    res.drafted_by = drafted_by(dp)
    texts = {u: t[: params.passage_chars] for u, t in unit_texts(load_chunks(dp)).items()}
    js = judge_settings(settings, params.judge_model)
    llm = CachedLLM.open(
        js,
        cache if cache is not None else LLMCache.under(dp.roots.cache),
        breaker=Breaker(threshold=2),
        budget=budget_mod.Budget(params.max_calls, params.max_cost),
        price=(float(params.price_per_mtok[0]), float(params.price_per_mtok[1])),
    )
    try:
        res.model, res.endpoint = llm.model, llm.endpoint
        asks = [(p, queries[p.qid], texts.get(p.unit, "")) for p in res.pairs]
        res.plan = _plan(llm, asks, params)
        budget_mod.announce(res.plan, params.price_per_mtok, js.base_url, js.endpoint_id, stage="assess")
        _grade(llm, asks, params, res)
    finally:
        llm.close()
    res.seconds = round(time.perf_counter() - t0, 1)
    return res


def _call(llm: CachedLLM, query: str, passage: str, unit: str, seed: int) -> Call:
    return Call(
        messages(query, passage),
        material(query, passage, unit, llm.model, llm.endpoint, seed),
        MAX_TOKENS,
        response_format=schemas.response_format(GradeStrict, "relevance_grade"),
        seed=seed,
    )


def _plan(llm: CachedLLM, asks: Sequence[tuple[Pair, str, str]], params: AssessParams) -> budget_mod.Plan:
    tasks, previous = [], ""
    for p, query, passage in asks:
        call = _call(llm, query, passage, p.unit, params.assess_seed)
        hit = llm.cache.get(llm.cache.key(call.material)) is not None
        tasks.append((p.qid, p.kind, [budget_mod.call_estimate(hit, call.prompt, previous, 8.0)]))
        previous = call.prompt
    rate, source = llm.measured_rate()
    plan = budget_mod.plan(
        tasks,
        price=llm.price,
        max_calls=params.max_calls,
        max_cost=params.max_cost,
        s_per_token=rate,
        rate_source=source,
    )
    plan.what = "pairs (query, unit) to grade"
    return plan


def _grade(llm: CachedLLM, asks: Sequence[tuple[Pair, str, str]], params: AssessParams, res: AssessResult) -> None:
    rows = []
    with progress.Progress(len(asks), desc="grading pairs", unit="pair") as bar:
        for p, query, passage in asks:
            t0 = time.perf_counter()
            got = llm.call(
                _call(llm, query, passage, p.unit, params.assess_seed),
                read_grade,
                res.stats,
                retries=1,
                label=f"{p.qid} / {p.unit}",
            )
            if got.failure is not None and got.failure.error_class == BUDGET_EXCEEDED:
                res.stopped = f"the budget is spent (max_calls={params.max_calls}, max_cost={params.max_cost:g})"
                break
            row = {
                "qid": p.qid,
                "unit": p.unit,
                "kind": p.kind,
                "cached": got.cached,
                "seconds": round(time.perf_counter() - t0, 3),
                "reason": "",
                "grade": None,
            }
            if got.ok and got.value is not None:
                res.grades[(p.qid, p.unit)] = row["grade"] = int(got.value)
            else:
                row["reason"] = _reason(got.errors, got.failure)
                row["error"] = got.failure.error_class if got.failure else ",".join(got.errors)
                res.drops[row["reason"]] += 1
            rows.append(row)
            bar.update(1, graded=len(res.grades))
            if got.failure is not None and llm.breaker is not None and llm.breaker.open:
                res.stopped = f"the endpoint stopped answering ({got.failure.error_class}); a re-run resumes"
                break
    res.ledger = pd.DataFrame(rows).reindex(columns=LEDGER_COLUMNS)


# -- 4. the files -----------------------------------------------------------------------------------------------
def write(dp: DatasetPaths, res: AssessResult) -> dict[str, str]:
    """The LLM grades into ``qrels/llm-<model>-<hash>.tsv`` (earlier runs' grades kept, a re-graded pair updated)
    with the record of the model beside it, and the stage's summary and ledger. Nothing is written when the stage
    was skipped. A grades file whose record names another model is refused (never two judges in one file)."""
    if res.skipped:
        return {}
    path = llm_qrels_path(dp, res.model)
    with dataset_lock(dp.source):  # the grades file lives in the dataset folder: the one lock of its writers
        judge_grades.check_record(path, res.model)
        grades = read_grades(path)
        grades.update(res.grades)
        rows = [f"{q}\t{u}\t{g}\n" for (q, u), g in sorted(grades.items())]
        path.parent.mkdir(parents=True, exist_ok=True)
        judge_grades.write_record(path, res.model, res.endpoint)
        written = {
            "llm_qrels": str(atomic_write_text(path, HEADER + "".join(rows))),
            "record": str(judge_grades.record_path(path)),
        }
    folder = dp.stage_dir("assess")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "ledger.csv", res.ledger.to_csv(index=False))
    legacy = judge_grades.legacy_path(path.parent, res.model)
    old = judge_grades.legacy_note(legacy) if legacy.is_file() else ""
    written["summary"] = str(
        atomic_write_json(folder / "summary.json", {**summary(res, old), "file": str(path), "in_file": len(grades)})
    )
    return written


def llm_qrels_path(dp: DatasetPaths, model: str) -> Path:
    """``<dataset>/qrels/llm-<model>-<hash>.tsv``: the assessor's grades, beside the human files and never one of
    them (:func:`rerankeval.core.judge_grades.grades_path`: one file per exact model id)."""
    return judge_grades.grades_path(dp.source / "qrels", model)


def read_grades(path: Path) -> dict[tuple[str, str], int]:
    """The grades of an earlier run's LLM file (none when there is none; a line that does not read is left out:
    it is graded again from the cache)."""
    out: dict[tuple[str, str], int] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip() in ("0", "1", "2", "3"):
            out[(parts[0].strip(), parts[1].strip())] = int(parts[2])
    return out


def self_judged(res: AssessResult) -> str:
    """The warning when the judge is the model that drafted the evaluated questions ("" otherwise)."""
    if not res.model or res.model not in res.drafted_by:
        return ""
    return (
        f"WARNING: the LLM judge graded questions its own model wrote ({res.model} drafted them): there is no "
        "human grade in these numbers, and a model tends to favour its own questions' pages. Judge with another "
        "model (JUDGE_MODEL), or review the drafts and grade some units in 00-explore."
    )


def warnings(res: AssessResult, legacy: str = "") -> list[str]:
    """What the index must show of this run: one grade for nearly everything, self-judging, an old grades file."""
    return [w for w in (judge_grades.one_grade(res.grades.values()), self_judged(res), legacy) if w]


def summary(res: AssessResult, legacy: str = "") -> dict[str, Any]:
    """The stage's record: pool and overlap sizes, grades by value and kind, drops by reason, plan and calls, and
    ``warning`` (every warning in one text; the index shows it)."""
    s = res.stats
    kinds = Counter(p.kind for p in res.pairs)
    by_grade = Counter(res.grades.values())
    return {
        "model": res.model,
        "endpoint": res.endpoint,
        "prompt_hash": prompt_hash(),
        "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in res.params.__dict__.items()},
        "skipped": res.skipped,
        "stopped": res.stopped,
        "pool": res.pool_size,
        "overlap": kinds.get("overlap", 0),
        "graded": len(res.grades),
        "grades": {str(g): int(by_grade.get(g, 0)) for g in GRADES},
        "scale": judge_grades.SCALE,
        "relevant_from": judge_grades.RELEVANT_FROM,
        "one_grade_warning": judge_grades.one_grade(res.grades.values()),
        "drafted_by": list(res.drafted_by),
        "self_judged": bool(self_judged(res)),
        "warning": " ".join(warnings(res, legacy)),
        "drops": {r: int(res.drops.get(r, 0)) for r in REASONS},
        "plan": res.plan.to_dict() if res.plan else None,
        "calls": s.summary(),
        "seconds": res.seconds,
    }


def describe(res: AssessResult) -> str:
    """What the run did, in plain sentences (notebook 09 prints it)."""
    if res.skipped:
        return f"Nothing graded: {res.skipped}."
    s = res.stats
    drops = ", ".join(f"{r.replace('_', ' ')} {n}" for r, n in res.drops.most_common()) or "none"
    stopped = f" Stopped: {res.stopped}." if res.stopped else ""
    return (
        f"Graded {len(res.grades)} of {len(res.pairs)} pairs with {res.model} ({res.pool_size} unjudged in the "
        f"pool, {len(res.pairs) - res.pool_size} human-graded for agreement); dropped: {drops}. LLM calls: "
        f"{s.calls} ({s.cache_hits} from the cache, {s.requests} requests, {s.failed} failed).{stopped}"
        + "".join(f" {w}" for w in warnings(res))
    )
