"""A fault-injecting, OpenAI-compatible fake LLM server for tests (127.0.0.1, threaded, scripted).

``FakeLLM`` answers ``POST /v1/chat/completions`` like a reranking model would and ``GET /v1/models`` /
``/health``. By default it behaves: passages containing ``GOLD`` are relevant (ranked first, graded 9,
p(yes) = 0.9), the others are not (in text order, graded 2, p(yes) = 0.2). Faults are injected per
request, in order, from ``script`` (a list of actions; ``None`` = behave), or by ``rule(n, body)`` for
each request ``n`` (0-based) once the script is used up. An action is a dict:

- ``{"status": 429, "headers": {"Retry-After": "1"}}``: an HTTP error with an OpenAI-style error body;
- ``{"delay": 2.0}``: wait before answering (a client timeout);
- ``{"drop": True}``: close the connection without an answer;
- ``{"content": "..."}``: answer 200 with this message content (prose, broken JSON, wrong ids ...);
- ``{"ranking": [...]}`` / ``{"scores": [...]}``: answer 200 with this JSON;
- ``{"no_logprobs": True}``: behave, but without logprobs;
- ``{"body": "<html>...", "content_type": "text/html"}``: answer 200 with this body as it is (an HTML page, an
  SSE stream, ...; ``content_type`` defaults to ``text/html``);
- ``{"json": {...}}``: answer 200 with this JSON as the whole body (not a chat completion: a wrong shape);
- a ``draft_question`` request (the questions stage) gets a question made of its passage's words and a quote
  of the passage's first six words;
- ``{"echo": "..."}``: behave, with this text added to the message content (after a JSON reply, inside it
  as an extra ``"note"`` field, so the reply still reads), e.g. a key the model was shown.

:func:`no_json_schema` is a rule for an endpoint without structured outputs (by default llama-cpp-python's
server: HTTP 500 with the pydantic message). ``key="..."``: every request without ``Authorization: Bearer
<key>`` is answered 401. Every request is recorded in ``requests`` (time, path, parsed body) under a lock,
its Authorization header in ``auth``.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Action = dict[str, Any] | None

_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.M)


def _passages(text: str) -> list[str]:
    found = _PASSAGE.findall(text)
    if found:
        return [p for _, p in found]
    m = re.search(r"Passage: (.*?)\n\n", text, re.S)
    return [m.group(1)] if m else []


def _relevant(passage: str) -> bool:
    return "GOLD" in passage


def behave(body: dict[str, Any]) -> dict[str, Any]:
    """The default answer: (content, logprobs) for the request's mode."""
    user = next((m["content"] for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
    passages = _passages(user)
    rf = body.get("response_format") or {}
    name = (rf.get("json_schema") or {}).get("name", "")
    if name == "draft_question":  # the questions stage: a question of the passage's words, quoting its start
        words = user.split("Passage:\n", 1)[-1].split()
        return {
            "content": json.dumps(
                {"question": f"what does the text say about {' '.join(words[1:5])}", "quote": " ".join(words[:6])}
            )
        }
    if name == "listwise_ranking" or "Rank the" in user:
        order = sorted(range(len(passages)), key=lambda i: (not _relevant(passages[i]), passages[i]))
        return {"content": json.dumps({"ranking": [i + 1 for i in order]})}
    if name == "pointwise_grades" or "from 0 (unrelated) to 10" in user:
        grades = [9 if _relevant(p) else 2 for p in passages]
        if len(passages) == 1 and "Grade every passage" not in user:
            return {"content": json.dumps({"score": grades[0]})}
        return {"content": json.dumps({"scores": [{"id": i + 1, "score": g} for i, g in enumerate(grades)]})}
    # yes/no
    p = 0.9 if passages and _relevant(passages[0]) else 0.2
    ans = "yes" if p >= 0.5 else "no"
    top = [{"token": "yes", "logprob": math.log(p)}, {"token": "no", "logprob": math.log(1 - p)}]
    if rf.get("type") == "json_schema":
        toks = ['{"', "relevant", '":', ' "', ans, '"}']
        content = json.dumps({"relevant": ans})
    else:
        toks = [ans]
        content = ans
    lp = [
        {
            "token": t,
            "logprob": (top[0 if ans == "yes" else 1]["logprob"] if t == ans else 0.0),
            "bytes": None,
            "top_logprobs": (top if t == ans else [{"token": t, "logprob": 0.0}]),
        }
        for t in toks
    ]
    return {"content": content, "logprobs": lp if body.get("logprobs") else None}


class FakeLLM:
    def __init__(
        self,
        script: list[Action] | None = None,
        rule: Callable[[int, dict[str, Any]], Action] | None = None,
        model: str = "fake-reranker",
        key: str | None = None,
    ):
        self.script = list(script or [])
        self.key = key
        self.auth: list[str | None] = []
        self.rule = rule
        self.model = model
        self.requests: list[tuple[float, str, Any]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --
    def __enter__(self) -> FakeLLM:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        fake = self

        class Handler(_Handler):
            def _authorized(self) -> bool:
                got = self.headers.get("Authorization")
                with fake._lock:
                    fake.auth.append(got)
                if fake.key is None or got == f"Bearer {fake.key}":
                    return True
                self._json(
                    401,
                    {
                        "error": {
                            "message": "Incorrect API key provided",
                            "type": "invalid_request_error",
                            "code": "invalid_api_key",
                        }
                    },
                )
                return False

            def do_GET(self) -> None:
                if self.path != "/health" and not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
                elif self.path == "/health":
                    self._json(200, {"status": "ok"})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = None
                n = fake._record(self.path, body)
                if not self._authorized():
                    return
                if not self.path.endswith("/chat/completions") or not isinstance(body, dict):
                    self._json(404, {"error": {"message": "not found"}})
                    return
                fake._answer(self, n, body)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakellm", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return sum(1 for _, p, _ in self.requests if p.endswith("/chat/completions"))

    # -- behaviour --
    def _record(self, path: str, body: Any) -> int:
        with self._lock:
            n = sum(1 for _, p, _ in self.requests if p.endswith("/chat/completions"))
            self.requests.append((time.monotonic(), path, body))
            return n

    def _action(self, n: int, body: dict[str, Any]) -> Action:
        with self._lock:
            if self.script:
                return self.script.pop(0)
        return self.rule(n, body) if self.rule else None

    def _answer(self, h: Any, n: int, body: dict[str, Any]) -> None:
        act = self._action(n, body) or {}
        if "delay" in act:
            time.sleep(act["delay"])
        if act.get("drop"):
            h.close_connection = True
            try:
                h.connection.shutdown(2)
            except OSError:
                pass
            return
        if "body" in act or "json" in act:
            raw = act["body"] if "body" in act else json.dumps(act["json"])
            h._raw(200, raw.encode(), act.get("content_type", "text/html" if "body" in act else "application/json"))
            return
        if "status" in act:
            msg = act.get("message", f"injected HTTP {act['status']}")
            h._json(
                act["status"],
                {"error": {"message": msg, "type": "injected", "code": None}},
                act.get("headers"),
            )
            return
        if "content" in act:
            ans: dict[str, Any] = {"content": act["content"], "logprobs": None}
        elif "ranking" in act or "scores" in act:
            key = "ranking" if "ranking" in act else "scores"
            ans = {"content": json.dumps({key: act[key]}), "logprobs": None}
        else:
            ans = behave(body)
            if act.get("no_logprobs"):
                ans["logprobs"] = None
            if "echo" in act:
                ans["content"] = _with_echo(ans["content"], act["echo"])
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": ans["content"]},
            "finish_reason": act.get("finish_reason", "stop"),
            "logprobs": {"content": ans["logprobs"]} if ans.get("logprobs") else None,
        }
        prompt_tokens = sum(len(m.get("content", "").split()) for m in body.get("messages", []))
        completion_tokens = max(1, len(ans["content"]) // 4)
        h._json(
            200,
            {
                "id": f"fake-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", self.model),
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )


def _with_echo(content: str, text: str) -> str:
    """``content`` with ``text`` added: as a ``"note"`` field of a JSON object reply, else after it."""
    try:
        obj = json.loads(content)
    except json.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        return json.dumps({**obj, "note": text})
    return f"{content} {text}"


# what llama-cpp-python's server (0.3.36) answers a json_schema response_format with: HTTP 500 and this message
LLAMA_CPP_PY_NO_SCHEMA = (
    "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be 'text' or "
    "'json_object' [type=literal_error, input_value='json_schema', input_type=str]"
)


def no_json_schema(status: int = 500, message: str = LLAMA_CPP_PY_NO_SCHEMA) -> Callable[[int, dict[str, Any]], Action]:
    """A rule: requests asking for a json_schema response_format get ``status`` with ``message``."""

    def rule(n: int, body: dict[str, Any]) -> Action:
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return {"status": status, "message": message}
        return None

    return rule


class _Handler(BaseHTTPRequestHandler):
    """What the fake servers' handlers share: HTTP/1.1, no log lines, and answers (JSON or a body as it is) written
    whether or not the client is still there."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(obj).encode(), "application/json", headers)

    def _raw(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(ThreadingHTTPServer):
    """A listen queue longer than the socketserver default of 5: with more concurrent clients than that, the kernel
    dropped the surplus connections, whose client timed out connecting (0.5 s in the load test) on a request the
    fake never saw; a real server's queue is longer too (uvicorn 2048)."""

    request_queue_size = 128


def make_inputs(n_queries: int = 3, n_docs: int = 30, gold: tuple[int, ...] = (4, 11)):
    """(fused run, queries, texts) for tests: doc ``d{i}`` at fused rank i; docs in ``gold`` say GOLD."""
    fused = {f"q{q:04d}": {f"d{i:02d}": 1.0 / (60 + i) for i in range(n_docs)} for q in range(n_queries)}
    queries = {q: f"query {q}" for q in fused}
    texts = {q: {d: f"passage {d}" + (" GOLD" if int(d[1:]) in gold else "") for d in fused[q]} for q in fused}
    return fused, queries, texts
