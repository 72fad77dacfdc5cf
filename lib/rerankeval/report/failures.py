"""The index's red banners for a stage that fell back or failed (issue 35 item 7): which stage, the HTTP status the
endpoint answered with (when it answered), and why, from the chain's per-page record (``llm_problem``, set by
:func:`rerankeval.apps.chain.preflight.llm_fell_back`, and the page's status) and the rerank ledger
(:func:`rerankeval.rerank.ledger.fallback_cause`). A run whose LLM calls fell back must never look successful."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from rerankeval.core.paths import DatasetPaths
from rerankeval.rerank import ledger as ledger_mod

RERANK_STAGE = "04-rerank"
# The HTTP status each error class of the OpenAI client stands for (the ledger records the class name)
HTTP_STATUS = {
    "BadRequestError": 400,
    "AuthenticationError": 401,
    "PermissionDeniedError": 403,
    "NotFoundError": 404,
    "ConflictError": 409,
    "UnprocessableEntityError": 422,
    "RateLimitError": 429,
    "InternalServerError": 500,
}
_CODE = re.compile(r"\b(?:HTTP|[Ee]rror code:?|status(?: code)?:?)\s*([1-5]\d\d)\b")


def http_statuses(errors: Sequence[str]) -> list[int]:
    """The HTTP statuses named by ledger error entries (class names such as ``NotFoundError``, or a message with
    ``Error code: 404``), each once, in the order seen."""
    out: list[int] = []
    for err in errors:
        for part in str(err).split(";"):
            name = part.strip().split("(")[0].split(":")[0].strip()
            codes = [HTTP_STATUS[name]] if name in HTTP_STATUS else []
            codes += [int(c) for c in _CODE.findall(part)]
            out += [c for c in codes if c not in out]
    return out


def _status_words(codes: Sequence[int]) -> str:
    if not codes:
        return "no HTTP status (the endpoint did not answer, or answered 200 with an unusable reply)"
    return "HTTP " + ", ".join(str(c) for c in codes)


def rerank_banner(ledger: pd.DataFrame | None, stage: str = RERANK_STAGE) -> dict[str, Any] | None:
    """The banner for the rerank stage when any of its queries fell back (None when none did)."""
    cause = ledger_mod.fallback_cause(ledger)
    if cause is None or ledger is None:
        return None
    rows = ledger[ledger["pass"] == ledger_mod.MAIN_PASS] if "pass" in ledger else ledger
    fell = rows[rows["status"].map(ledger_mod.is_fallback)]
    codes = http_statuses(fell["error"].dropna().astype(str).tolist() if "error" in fell else [])
    every = len(fell) == len(rows)
    head = (
        f"{stage} {'failed: every query fell back' if every else 'fell back on some queries'} \u2014 "
        + _status_words(codes)
    )
    return {
        "stage": stage,
        "status": codes,
        "head": head,
        "text": f"{cause.text} Its rows measure the fused order where it fell back, not the LLM; fix the "
        "endpoint (OPENAI_BASE_URL, RERANK_MODEL) and re-run make report.",
    }


def banners(dp: DatasetPaths, pages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every red banner of the index: a stage whose LLM calls fell back (the rerank ledger; the chain's
    ``llm_problem`` of a page names its stage), then each failed notebook with its first error line."""
    problem = {str(p.get("name", "")): p["llm_problem"] for p in pages if isinstance(p.get("llm_problem"), Mapping)}
    stage = next((name for name in problem if name.startswith("04")), RERANK_STAGE)
    out = []
    ledger = ledger_mod.read_ledger(dp.ledger, missing_ok=True)
    got = rerank_banner(ledger, stage)
    if got:
        out.append(got)
    for name, prob in problem.items():
        if got is None or name != stage:
            text = str(prob.get("text", ""))
            out.append(
                {
                    "stage": name,
                    "status": http_statuses([text]),
                    "head": f"{name} fell back \u2014 {_status_words(http_statuses([text]))}",
                    "text": text,
                }
            )
    for p in pages:
        if str(p.get("status", "")).lower() == "failed":
            err = str(p.get("error") or "").strip().splitlines()
            line = err[-1][:300] if err else "see its page"
            codes = http_statuses([line])
            out.append(
                {
                    "stage": str(p.get("name", "?")),
                    "status": codes,
                    "head": f"{p.get('name', '?')} failed" + (f" \u2014 {_status_words(codes)}" if codes else ""),
                    "text": line,
                }
            )
    return out
