"""The chain's checks before any notebook runs: the settings, parameters that must agree, the dataset's files,
the results folder, and the LLM endpoint (started, probed, then sent one tiny real chat completion of each kind the
run will send: a dead one, or one that answers ``/models`` but 404 on chat, stops the run unless fallbacks were
asked for); after 04, whether every rerank call fell back. Part of :mod:`rerankeval.apps.chain`."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.apps.chain.params import PreflightError, effective_parameters
from rerankeval.core import paths
from rerankeval.rerank.config import MAIN_PASS

if TYPE_CHECKING:
    from rerankeval.core.settings import Settings

ALLOW_FALLBACK = "allow_fallback"  # a chain option, also accepted as --set allow_fallback=true
PROBE_TIMEOUT = 5.0  # seconds for the endpoint check before the run
POSITIVE_INTS = ("leg_k", "pool_k", "final_k")
PROBE_PROMPT = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]


def needs_llm(nb: Path) -> bool:
    """04-rerank and any other ``*rerank*`` notebook call the LLM for every query."""
    return "rerank" in nb.stem


def wants_llm(nb: Path, params: Mapping[str, Any]) -> bool:
    """03 with ``hybrid_reformulate`` listed rewrites queries with the LLM (it falls back when the LLM is down);
    08 drafts questions with it unless ``draft="never"``; 09 grades the unjudged pool with it when ``assess=true``."""
    from rerankeval.core.names import HYBRID_REFORMULATE

    effective = effective_parameters(nb, params)
    if nb.stem.endswith("questions"):
        return effective.get("draft") != "never"
    if nb.stem.endswith("assess"):
        return effective.get("assess") is True
    return HYBRID_REFORMULATE in (effective.get("variants") or [])


def check_writable(dp: paths.DatasetPaths) -> None:
    """The results folder must take new files (it may be read-only, or on a full disk)."""
    for folder in (dp.executed_dir, dp.report_dir):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            where = Path(exc.filename) if exc.filename else folder
            raise PreflightError(
                f"the results folder {where} is not writable ({exc.strerror or exc}). Make it writable, or write "
                f"the results elsewhere: RERANKEVAL_RESULTS=/a/writable/folder in .env or the environment "
                f"(e.g. RERANKEVAL_RESULTS=~/rerankeval-results make report)."
            ) from None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _default_of(nb: Path, key: str) -> Any:
    """The notebook's own default of ``key`` when it is a whole number >= 1 (the fix to suggest), else None."""
    value = effective_parameters(nb, {}).get(key)
    return value if _positive_int(value) else None


def check_parameters(nbs: list[Path], params: Mapping[str, Any]) -> None:
    """Raise :class:`PreflightError` for parameters a notebook would reject late (e.g. ``pool_k < final_k``)."""
    problems: dict[str, list[str]] = {}
    for nb in nbs:
        eff = effective_parameters(nb, params)
        bad = {key for key in POSITIVE_INTS if key in eff and not _positive_int(eff[key])}
        for key in sorted(bad, key=POSITIVE_INTS.index):
            fix = f'; e.g. P="{key}={_default_of(nb, key)}" (the notebook\'s default)' if _default_of(nb, key) else ""
            problems.setdefault(f"{key} = {eff[key]!r} must be a whole number >= 1{fix}", []).append(nb.stem)
        pool, final = eff.get("pool_k"), eff.get("final_k")
        if not bad & {"pool_k", "final_k"} and isinstance(pool, int) and isinstance(final, int) and pool < final:
            problems.setdefault(
                f"pool_k ({pool}) must be >= final_k ({final}): the reranker reorders the top pool_k and the "
                f'headline metric is cut at final_k; e.g. P="pool_k={final}" or P="final_k={pool}"',
                [],
            ).append(nb.stem)
    if problems:
        lines = [f"{msg} (in {', '.join(where)})" for msg, where in problems.items()]
        raise PreflightError("parameters that cannot work, found before running anything:\n  " + "\n  ".join(lines))


def check_baseline(dp: paths.DatasetPaths, nbs: list[Path], params: Mapping[str, Any]) -> None:
    """05's ``baseline`` must name a variant: one of the catalogue's or an external run in ``runs/`` (else
    :class:`PreflightError` with the close names), not fall back to the default baseline without a word. Whether
    it was evaluated in this run is checked by 05 itself (:func:`rerankeval.evaluate.verdict.check_baseline`)."""
    import difflib

    from rerankeval.core import names

    wanted = {str(v) for nb in nbs if (v := effective_parameters(nb, params).get("baseline"))}
    known = [*names.names(), *sorted(p.stem for p in dp.runs_dir.glob("*.trec"))]
    for baseline in sorted(wanted - set(known)):
        close = difflib.get_close_matches(baseline, known, n=2, cutoff=0.6)
        meant = f'did you mean {" or ".join(close)}? e.g. P="baseline={close[0]}"; ' if close else ""
        raise PreflightError(
            f"baseline={baseline!r} names no variant: {meant}the variants are {', '.join(known)} "
            "(an external run counts once it is in runs/); leave baseline empty for the better "
            "single retriever (vector or bm25)"
        )


def check_dataset(dp: paths.DatasetPaths, nbs: list[Path], params: Mapping[str, Any]) -> None:
    """When the corpus notebook runs: a corpus, ``queries.jsonl`` and ``qrels/<split>.tsv`` must exist."""
    first = next((nb for nb in nbs if nb.name.startswith("01")), None)
    if first is None:
        return
    from rerankeval.corpus.beir import InputError
    from rerankeval.corpus.extract import check_inputs

    try:
        check_inputs(dp, effective_parameters(first, params).get("split", "test"))
    except InputError as exc:
        raise PreflightError(str(exc)) from None


def endpoint_fix(configured: bool) -> str:
    where = (
        "start the server, or fix OPENAI_BASE_URL / OPENAI_API_KEY in .env or the environment "
        "(unset OPENAI_BASE_URL to use the local llama-server)"
        if configured
        else "see the llama-server log above; `make llama` rebuilds it"
    )
    return (
        f"Fix: {where}. To run anyway with every rerank call falling back to the fused order: "
        f'make report P="{ALLOW_FALLBACK}=true" (or python -m rerankeval.apps.chain --allow-fallback).'
    )


@dataclass(frozen=True, order=True)
class RequestKind:
    """One kind of chat completion a run sends: with a JSON schema (``response_format``) or not, with
    ``top_logprobs`` alternatives (04's yes/no mode) or none."""

    schema: bool
    top_logprobs: int = 0

    def label(self) -> str:
        logprobs = f", top {self.top_logprobs} logprobs" if self.top_logprobs else ""
        return ("a JSON schema" if self.schema else "no schema") + logprobs


def _rerank_kind(params: Mapping[str, Any]) -> RequestKind:
    """What 04 sends in its ``mode``: yes/no reads logprobs (with a schema when ``yesno_json``), the others a schema."""
    import dataclasses

    from rerankeval.rerank.config import RerankConfig

    if params.get("mode", "yesno") != "yesno":
        return RequestKind(schema=True)
    top = next(f.default for f in dataclasses.fields(RerankConfig) if f.name == "top_logprobs")
    return RequestKind(schema=bool(params.get("yesno_json")), top_logprobs=int(top))


def request_kinds(nbs: Sequence[Path], params: Mapping[str, Any]) -> list[RequestKind]:
    """The kinds of chat completion ``nbs`` will send with ``params``: 04's per its mode; 03's rewrite, 08's drafts
    and 09's grades each a JSON schema (09's judge on its own ``JUDGE_BASE_URL`` is checked by 09 itself)."""
    kinds = {
        _rerank_kind(effective_parameters(nb, params)) if needs_llm(nb) else RequestKind(schema=True)
        for nb in nbs
        if needs_llm(nb) or wants_llm(nb, params)
    }
    return sorted(kinds)


def _probe_fix(status: int | None) -> str:
    if status == 404:
        return (
            "is OPENAI_BASE_URL the API's /v1 root (not .../chat/completions), and RERANK_MODEL a model this "
            "endpoint serves?"
        )
    if status in (401, 403):
        return "fix OPENAI_API_KEY (and the model's access rights) in .env or the environment."
    if status in (400, 422):
        return (
            "is RERANK_MODEL a model this endpoint serves? A request with logprobs needs an endpoint that "
            'returns them; else rerank without: P="mode=pointwise" (or mode=listwise).'
        )
    return "see the endpoint's log; the run would get the same answer for every call."


def probe_chat(settings: Settings, kinds: Sequence[RequestKind]) -> str | None:
    """None when one tiny real chat completion (``max_tokens=1``) of each of ``kinds`` succeeds; else the problem:
    the HTTP status, the endpoint's words and the fix. An endpoint may answer ``/models`` and 404 on chat."""
    import re

    from rerankeval.core.settings import scrub_url
    from rerankeval.llm import schemas
    from rerankeval.llm.client import LLMCallError, LLMClient

    if not kinds:
        return None
    fmt = schemas.response_format(schemas.YesNoStrict, "relevance_answer")
    kind = kinds[0]
    try:
        with LLMClient(settings, max_retries=min(settings.max_retries, 1)) as client:
            for kind in kinds:
                client.chat(
                    PROBE_PROMPT,
                    response_format=fmt if kind.schema else None,
                    max_tokens=1,
                    top_logprobs=kind.top_logprobs,
                )
    except LLMCallError as exc:
        found = re.search(r"HTTP (\d{3})", str(exc))
        status = int(found.group(1)) if found else None
        return (
            f"The LLM endpoint {scrub_url(settings.base_url or '')} answers, but a tiny chat completion of a kind "
            f"the run sends ({kind.label()}) failed: {exc}. Check: {_probe_fix(status)}"
        )
    return None


def start_endpoint(
    stack: contextlib.ExitStack, settings: Settings, allow_fallback: bool, kinds: Sequence[RequestKind] = ()
) -> dict[str, str]:
    """The LLM endpoint's variables for the kernels (``settings``' endpoint, else the local server, started here),
    checked: the endpoint answers, and one tiny chat completion of each of ``kinds`` (:func:`request_kinds`)
    succeeds."""
    from rerankeval.core.settings import redact
    from rerankeval.llm import server
    from rerankeval.llm.local_server import EndpointError

    configured = settings.configured
    env: dict[str, str] = {}
    try:
        served = stack.enter_context(server.endpoint(settings))
        env = server.endpoint_env(served)
        problem = server.check_endpoint(served, timeout=PROBE_TIMEOUT) or probe_chat(served, kinds)
    except EndpointError as exc:
        problem = redact(f"the local LLM server could not be started: {exc}")
    if problem is None:
        return env
    if not allow_fallback:
        raise PreflightError(f"{problem.rstrip('.')}.\n{endpoint_fix(configured)}")
    print(
        f"[chain] WARNING: {problem}; continuing because {ALLOW_FALLBACK} is set: every rerank call will "
        "fall back to the fused order, and the report will say so.",
        file=sys.stderr,
        flush=True,
    )
    return env


def llm_fell_back(dp: paths.DatasetPaths) -> dict[str, Any] | None:
    """Why, when the rerank ledger shows that every reranked query fell back entirely (else None):
    ``{"text": sentence, "endpoint": whether fixing the endpoint settings is the fix}``. A run where some queries
    fell back only partly is not a failed run (the page says what happened)."""
    from rerankeval.rerank.ledger import fallback_cause, read_ledger

    ledger = read_ledger(dp.ledger, missing_ok=True)
    if ledger is None or "status" not in ledger:
        return None
    main = ledger[ledger["pass"] == MAIN_PASS] if "pass" in ledger else ledger
    if not len(main) or not main["status"].astype(str).str.strip().str.lower().eq("fallback").all():
        return None
    cause = fallback_cause(ledger)
    text = (
        cause.text.rstrip(".")
        if cause
        else (
            f"every one of the {len(main)} reranked queries fell back to the fused order (see the ledger in 04-rerank)"
        )
    )
    return {"text": text, "endpoint": bool(cause is None or cause.endpoint)}


def _written_since(path: Path, since_ns: int) -> bool:
    try:
        return path.stat().st_mtime_ns >= since_ns
    except OSError:
        return False


def llm_fallbacks(dp: paths.DatasetPaths, nb: Path, since_ns: int) -> str | None:
    """What fell back among ``nb``'s LLM calls of this run (None: nothing), from the record it wrote since
    ``since_ns`` (a record left by an earlier run does not count): the rerank ledger's rows with a fallback, partial
    or entire (04); the rewrite ledger's calls without a usable reply (03 with ``hybrid_reformulate``); the failed
    calls of 08's and 09's summaries. Such a run is not recorded as up to date, so the next one asks those calls
    again (after the endpoint is fixed, say); the usable replies are cached, so only those are sent."""
    stem = nb.stem
    if needs_llm(nb) and _written_since(dp.ledger, since_ns):
        from rerankeval.rerank.ledger import is_fallback, read_ledger

        ledger = read_ledger(dp.ledger, missing_ok=True)
        if ledger is not None and "status" in ledger and (n := int(ledger["status"].map(is_fallback).sum())):
            return f"{n} of the {len(ledger)} rerank ledger rows fell back (partly or entirely) to the fused order"
    if stem.endswith("retrieve"):
        from rerankeval.retrieve import reformulate

        if _written_since(path := dp.stage_dir("retrieve") / reformulate.LEDGER, since_ns):
            ledger = reformulate.read_ledger(dp)
            if ledger is not None and len(ledger) and (n := int(reformulate.failed_calls(ledger).sum())):
                return f"{n} query rewrite(s) got no usable LLM reply (see {path.name})"
    summary = {"questions": dp.questions_dir, "assess": dp.stage_dir("assess")}.get(stem.split("-", 1)[-1])
    if summary is not None and _written_since(summary / "summary.json", since_ns):
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            failed = int(json.loads((summary / "summary.json").read_text(encoding="utf-8"))["calls"]["failed"])
            if failed:
                return f"{failed} LLM call(s) got no usable reply (see {summary.name}/summary.json)"
    return None
