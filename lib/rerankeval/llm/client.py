"""A thin, thread-safe wrapper over the ``openai`` client for one OpenAI-compatible endpoint.

Transport faults (timeouts, refused connections, 408/409/429/5xx) are retried by the ``openai`` client
itself (``max_retries``): exponential backoff from 0.5 s to 8 s with jitter, and a ``Retry-After`` /
``retry-after-ms`` header of up to 120 s is honoured as the wait (checked in tests/rerank/test_faults.py).
We count the attempts per call with an httpx request hook, so the ledger's ``retries`` is exact even when
the call finally fails.

An endpoint without structured outputs is recognised by what it says, whatever the status code: an error
naming ``response_format`` / ``json_schema`` / ``json_object`` / structured output (llama-cpp-python's
server answers HTTP 500 "Input should be 'text' or 'json_object'", others 400 "response_format ... not
supported") to a request that carried a ``response_format``. Such a 5xx is not retried (the response hook
marks it ``x-should-retry: false``); the client downgrades once, for all later calls too, from
``json_schema`` to ``json_object`` to a plain prompt, and repeats the call; the format used is reported
with each reply.

``openai`` (about 1 s to import) is imported, and its client made, on the first request: a run served entirely
from the reply cache never loads it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2

if TYPE_CHECKING:
    import openai

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.settings import Settings, redact, scrub_url

FORMATS = ("json_schema", "json_object", "none")
NOT_CHAT = "NotChatCompletion"  # error class of a 2xx reply that is not a chat completion (wrong URL, a proxy page)


@dataclass
class Reply:
    content: str
    logprobs: list[dict[str, Any]] | None = None  # [{"token", "logprob", "top": [[token, logprob], ...]}]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    response_format: str = "json_schema"
    # filled per call, not cached:
    retries: int = field(default=0, compare=False)
    latency_s: float = field(default=0.0, compare=False)  # the call's, the client's retries included
    answered_s: float | None = field(default=None, compare=False)  # the answered request's alone (None: unknown)
    cached: bool = field(default=False, compare=False)
    timings: dict[str, float] | None = field(default=None, compare=False)  # llama-server's, see :func:`_timings`

    def to_cache(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("retries", "latency_s", "answered_s", "cached", "timings"):
            d.pop(k)
        return d

    @classmethod
    def from_cache(cls, d: dict[str, Any]) -> Reply:
        keys = (
            "content",
            "logprobs",
            "prompt_tokens",
            "completion_tokens",
            "finish_reason",
            "response_format",
        )
        return cls(**{k: d[k] for k in keys if k in d}, cached=True)


class LLMCallError(ReRankEvalError):
    """A call that failed after the client's retries; ``error_class`` names the last failure."""

    def __init__(self, error_class: str, message: str, retries: int = 0):
        super().__init__(redact(message))
        self.error_class = error_class
        self.retries = retries


_FORMAT_ERROR = re.compile(r"response_format|json_schema|json_object|structured output", re.I)
UNREACHABLE_HINT = (
    "Start that server, or fix OPENAI_BASE_URL in .env or the environment, or leave it empty to use "
    "the local llama-server."
)


def _is_format_error(exc: openai.APIStatusError) -> bool:
    """True when the endpoint's error says the requested response_format is not supported."""
    return bool(_FORMAT_ERROR.search(str(exc)))


def _no_retry_on_format_error(response: httpx2.Response) -> None:
    """httpx response hook: a 5xx that rejects the request's response_format will not get better by
    retrying; tell the openai client not to (it honours ``x-should-retry``)."""
    if response.status_code < 500 or b"response_format" not in (response.request.content or b""):
        return
    response.read()
    if _FORMAT_ERROR.search(response.text):
        response.headers["x-should-retry"] = "false"


class LLMClient:
    """One endpoint, one model; ``chat`` is safe to call from several threads."""

    def __init__(
        self,
        settings: Settings,
        *,
        timeout: float | None = None,
        max_retries: int | None = None,
        max_connections: int = 16,
    ):
        if not settings.base_url:
            raise ValueError(
                "no LLM endpoint configured: set OPENAI_BASE_URL (and OPENAI_API_KEY, RERANK_MODEL) in .env "
                "or the environment, or run inside rerankeval.llm.server.ensure_endpoint()"
            )
        self.settings = settings
        self._local = threading.local()
        self._lock = threading.Lock()
        self._format_level = 0
        self._options = {
            "timeout": settings.timeout if timeout is None else timeout,
            "max_retries": settings.max_retries if max_retries is None else max_retries,
            "max_connections": max_connections,
        }
        self._made: tuple[openai.OpenAI, httpx2.Client] | None = None
        self.model = settings.model or self._discover_model()

    @property
    def _client(self) -> openai.OpenAI:
        """The openai client, made (and openai imported) on first use; one per :class:`LLMClient`."""
        with self._lock:
            if self._made is None:
                import openai

                o = self._options
                http = openai.DefaultHttpxClient(
                    event_hooks={"request": [self._count_attempt], "response": [_no_retry_on_format_error]},
                    limits=_limits(o["max_connections"]),
                )
                client = openai.OpenAI(
                    base_url=self.settings.base_url,
                    api_key=self.settings.api_key or "sk-no-key",
                    timeout=o["timeout"],
                    max_retries=o["max_retries"],
                    http_client=http,
                )
                self._made = (client, http)
            return self._made[0]

    # -- lifecycle --
    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, None
        if made is not None:
            made[0].close()
            made[1].close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --
    def _count_attempt(self, request: Any) -> None:
        self._local.attempts = getattr(self._local, "attempts", 0) + 1
        self._local.started = time.perf_counter()  # the last request's start: a retry's lost time is before it

    def _discover_model(self) -> str:
        import openai

        try:
            models = self._client.models.list()
            first = next(iter(models), None)
        except openai.OpenAIError as exc:
            raise LLMCallError(type(exc).__name__, f"RERANK_MODEL is not set and /models failed: {exc}") from None
        if first is None:
            raise LLMCallError("NoModel", "RERANK_MODEL is not set and the endpoint lists no model")
        return first.id

    def _downgrade(self, level_seen: int) -> bool:
        with self._lock:
            if self._format_level == level_seen and self._format_level < len(FORMATS) - 1:
                self._format_level += 1
            return self._format_level > level_seen

    # -- the call --
    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        response_format: dict[str, Any] | None,
        max_tokens: int,
        seed: int | None = 0,
        top_logprobs: int = 0,
    ) -> Reply:
        """One chat completion at temperature 0; raises :class:`LLMCallError` after retries."""
        client = self._client  # imports openai
        import openai

        self._local.attempts = 0
        t0 = self._local.started = time.perf_counter()
        while True:
            level = self._format_level if response_format is not None else len(FORMATS) - 1
            kwargs = self._request(messages, response_format, level, max_tokens, seed, top_logprobs)
            try:
                raw = client.chat.completions.with_raw_response.create(**kwargs)
            except openai.APIStatusError as exc:
                if level < len(FORMATS) - 1 and _is_format_error(exc):
                    self._downgrade(level)
                    continue
                raise self._error(exc) from None
            except Exception as exc:  # transport errors etc.
                raise self._error(exc) from None
            break
        reply = self._reply(raw, FORMATS[level], time.perf_counter() - t0)
        reply.answered_s = time.perf_counter() - self._local.started
        return reply

    def _reply(self, raw: Any, response_format: str, latency: float) -> Reply:
        """The :class:`Reply` of a raw HTTP 2xx response; :class:`LLMCallError` when it is not a chat completion."""
        try:
            completion = raw.parse()
        except Exception:  # e.g. a JSON content type on a body that is not JSON
            raise self._not_chat(raw) from None
        choices = getattr(completion, "choices", None)
        if isinstance(choices, list) and not choices:
            raise LLMCallError("EmptyChoices", "reply has no choices", self._retries())
        try:
            choice = choices[0]  # type: ignore[index]
            content = choice.message.content
            if content is not None and not isinstance(content, str):
                raise TypeError(type(content).__name__)
            finish = choice.finish_reason
            logprobs = _logprobs(choice)
        except (AttributeError, TypeError, IndexError, KeyError):
            raise self._not_chat(raw) from None
        usage = getattr(completion, "usage", None)
        return Reply(
            content=content or "",
            logprobs=logprobs,
            prompt_tokens=_int(getattr(usage, "prompt_tokens", 0)),
            completion_tokens=_int(getattr(usage, "completion_tokens", 0)),
            finish_reason=finish if isinstance(finish, str) else None,
            response_format=response_format,
            retries=self._retries(),
            latency_s=latency,
            timings=_timings(completion),
        )

    def _not_chat(self, raw: Any) -> LLMCallError:
        """The error for an HTTP 2xx whose body is not a chat completion (an HTML page, an SSE stream, ...)."""
        try:
            body, status = raw.text, raw.status_code
        except Exception:  # noqa: BLE001 - the body could not even be decoded
            body, status = "", getattr(raw, "status_code", 200)
        head = " ".join(str(body).split())[:60]
        url = scrub_url(self.settings.base_url or "")
        msg = (
            f"the endpoint at {url} answered HTTP {status} but not with an OpenAI chat completion (body starts "
            f"{head!r}): is OPENAI_BASE_URL the /v1 root of an OpenAI-compatible server?"
        )
        return LLMCallError(NOT_CHAT, redact(msg, [self.settings.api_key]), self._retries())

    def _request(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any] | None,
        level: int,
        max_tokens: int,
        seed: int | None,
        top_logprobs: int,
    ) -> dict[str, Any]:
        """The create() arguments at temperature 0, with the response format of ``level``."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
        if seed is not None:
            kwargs["seed"] = seed
        if top_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = top_logprobs
        if level == 0:
            kwargs["response_format"] = response_format
        elif level == 1:
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    def _retries(self) -> int:
        return max(0, getattr(self._local, "attempts", 1) - 1)

    def _error(self, exc: BaseException) -> LLMCallError:
        import openai

        msg = str(exc)
        if isinstance(exc, openai.APIStatusError):
            msg = f"HTTP {exc.status_code}: {msg}"
        elif isinstance(exc, openai.APIConnectionError):  # APITimeoutError too
            url = scrub_url(self.settings.base_url or "")
            msg = f"the LLM endpoint {url} did not answer ({msg}). {UNREACHABLE_HINT}"
        return LLMCallError(type(exc).__name__, redact(msg, [self.settings.api_key])[:500], self._retries())


def _limits(max_connections: int) -> httpx2.Limits:
    n = max(1, int(max_connections))
    return httpx2.Limits(max_connections=n, max_keepalive_connections=n)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _logprobs(choice: Any) -> list[dict[str, Any]] | None:
    lp = getattr(choice, "logprobs", None)
    content = getattr(lp, "content", None) if lp is not None else None
    if not content:
        return None
    out = []
    for t in content:
        top = [[x.token, float(x.logprob)] for x in (t.top_logprobs or [])]
        out.append({"token": t.token, "logprob": float(t.logprob), "top": top})
    return out


TIMINGS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms")


def _timings(completion: Any) -> dict[str, float] | None:
    """llama-server's ``timings`` of a reply (prompt tokens processed after its prefix cache and their
    milliseconds, tokens generated and theirs), or None from a server that sends none (the OpenAI API, vLLM)."""
    raw = (getattr(completion, "model_extra", None) or {}).get("timings")
    if not isinstance(raw, dict):
        return None
    try:
        got = {k: float(raw[k]) for k in TIMINGS}
    except (KeyError, TypeError, ValueError):
        return None
    return got if all(v >= 0 for v in got.values()) else None
