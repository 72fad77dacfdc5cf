"""Nothing secret on disk: the endpoint's identity in cache keys, and every text the LLM stages write.

:func:`endpoint_identity` is what names an endpoint in reply-cache keys and in ``llm.rates.json``: the
configured ``RERANK_ENDPOINT_ID`` or base URL without ``user:password@``, without secret-looking query
values and without any known secret (:func:`rerankeval.core.settings.redact`). A URL that holds no credential
is returned unchanged, so the cache keys of such endpoints are the same as before.

:func:`redact_tree` and :func:`redact_frame` pass every string of a JSON-like object or of a table's text
columns through :func:`~rerankeval.core.settings.redact` (an LLM may echo a key it was shown, or a user may paste
one into a query): everything the LLM stages write under ``results/`` and into the reply cache goes
through them. Both are :func:`~rerankeval.core.settings.redact`, the one redactor: it knows a URL's password in
every form the client sends (as written, decoded, and the ``Authorization: Basic`` token:
:mod:`rerankeval.core.credentials`). Every LLM reply is redacted at the source, in
:meth:`rerankeval.llm.call.CachedLLM.call`, before anything reads it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rerankeval.core.settings import Settings, redact

_SEP = "\n\x00\n"  # joins the strings of one object for a single redact() call (no secret holds a NUL)


def endpoint_identity(settings: Settings) -> str:
    """The endpoint's identity for cache keys and rates, without any credential (see the module docstring)."""
    return redact(settings.cache_endpoint, [settings.api_key])


def _strings(obj: Any, out: list[str]) -> None:
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _strings(v, out)


def _rebuild(obj: Any, clean: Any) -> Any:
    if isinstance(obj, str):
        return next(clean)
    if isinstance(obj, dict):
        return {k: _rebuild(v, clean) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_rebuild(v, clean) for v in obj)
    if isinstance(obj, list):
        return [_rebuild(v, clean) for v in obj]
    return obj


def redact_strings(strings: list[str]) -> list[str]:
    """Each string redacted; one :func:`redact` call for all of them when that is safe (it reads the settings)."""
    if not strings:
        return []
    if not any("\x00" in s for s in strings):
        parts = redact(_SEP.join(strings)).split(_SEP)
        if len(parts) == len(strings):
            return parts
    return [redact(s) for s in strings]


def redact_tree(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, scalars) with every string value redacted; keys are kept."""
    found: list[str] = []
    _strings(obj, found)
    return _rebuild(obj, iter(redact_strings(found)))


def redact_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with every string cell redacted."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            values = out[col].tolist()
            idx = [i for i, v in enumerate(values) if isinstance(v, str)]
            for i, v in zip(idx, redact_strings([values[i] for i in idx]), strict=True):
                values[i] = v
            out[col] = pd.Series(values, index=out.index, dtype=out[col].dtype)
    return out
