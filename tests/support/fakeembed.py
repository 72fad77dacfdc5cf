"""A fault-injecting, OpenAI-compatible fake embeddings server for tests (127.0.0.1, threaded, scripted).

``FakeEmbed`` answers ``POST /v1/embeddings`` with a deterministic vector per text (seeded by the text and
``seed``: another ``seed`` is another model behind the same name) and ``GET /v1/models``. Faults are injected per
request, in order, from ``script`` (``None`` = behave), or by ``rule(n, body)`` once the script is used up:

- ``{"status": 503, "headers": {"Retry-After": "0"}}``: an HTTP error with an OpenAI-style error body;
- ``{"delay": 2.0}``: wait before answering (a client timeout); ``{"drop": True}``: close without an answer;
- ``{"fewer": 1}``: answer with that many vectors fewer than texts; ``{"dim": 5}``: vectors of another dimension;
- ``{"nan": True}``: a NaN in the first vector.

Every request's input list is recorded in ``inputs`` under a lock; ``max_in_flight`` is the most requests it was
answering at once.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fakellm import _Handler, _Server

Action = dict[str, Any] | None


def fake_vector(text: str, dim: int, seed: int = 0) -> list[float]:
    """The fake model's (unnormalised) vector of ``text``."""
    h = int(hashlib.sha256(f"{seed}\0{text}".encode()).hexdigest()[:16], 16)
    return np.random.default_rng(h).standard_normal(dim).tolist()


class FakeEmbed:
    def __init__(
        self,
        script: list[Action] | None = None,
        rule: Callable[[int, dict], Action] | None = None,
        *,
        dim: int = 8,
        model: str = "fake-embed",
        seed: int = 0,
        key: str | None = None,
        delay: float = 0.0,
    ):
        self.script, self.rule = list(script or []), rule
        self.dim, self.model, self.seed, self.key, self.delay = dim, model, seed, key, delay
        self.inputs: list[list[str]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None

    def __enter__(self) -> FakeEmbed:
        fake = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if fake.key is not None and self.headers.get("Authorization") != f"Bearer {fake.key}":
                    self._json(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
                elif not self.path.endswith("/embeddings"):
                    self._json(404, {"error": {"message": "not found"}})
                elif body.get("model") != fake.model:
                    self._json(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                else:
                    fake._answer(self, body)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fakeembed", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def texts_sent(self) -> int:
        with self._lock:
            return sum(len(i) for i in self.inputs)

    def _action(self, body: dict) -> Action:
        with self._lock:
            n = len(self.inputs)
            self.inputs.append(list(body.get("input") or []))
            if self.script:
                return self.script.pop(0)
        return self.rule(n, body) if self.rule else None

    def _answer(self, h: Any, body: dict) -> None:
        act = self._action(body) or {}
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(act.get("delay", self.delay))
            if act.get("drop"):
                h.close_connection = True
                h.connection.shutdown(2)
                return
            if "status" in act:
                h._json(act["status"], {"error": {"message": f"injected HTTP {act['status']}"}}, act.get("headers"))
                return
            texts = list(body["input"])[: len(body["input"]) - act.get("fewer", 0)]
            vecs = [fake_vector(t, act.get("dim", self.dim), self.seed) for t in texts]
            if act.get("nan") and vecs:
                vecs[0][0] = float("nan")
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)]
            h._json(
                200,
                {
                    "object": "list",
                    "model": self.model,
                    "data": data[::-1],  # any order: index says which
                    "usage": {"prompt_tokens": 0, "total_tokens": 0},
                },
            )
        finally:
            with self._lock:
                self.in_flight -= 1
