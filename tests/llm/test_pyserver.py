"""A second real OpenAI-compatible server: llama-cpp-python's own (``python -m llama_cpp.server``), built from
the same sdist as llama-server by ``scripts/llama_setup.sh pyserver`` (``make test`` runs it, once, cached).

It has no ``json_schema`` response format and answers one with HTTP 500 "Input should be 'text' or
'json_object'": the client must recognise that by the message, downgrade once to ``json_object`` and not
retry. ``pytest -m llm``; skipped when llama_cpp.server is not importable or the GGUF model is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from rerank_data import rerank_made
from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.llm import local_server
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import LLMClient
from rerankeval.rerank.config import Params

pytestmark = [pytest.mark.llm, pytest.mark.slow]

SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "relevance_answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"relevant": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["relevant"],
            "additionalProperties": False,
        },
    },
}
MESSAGES = [{"role": "user", "content": 'Is "Paris" the capital of France? Answer as JSON {"relevant": "yes"|"no"}.'}]


def _model() -> str:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: run `bash scripts/llama_setup.sh pyserver` (make test does)")
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"llama_cpp.server is not importable ({exc}): run `bash scripts/llama_setup.sh pyserver`")
    folder = paths.Roots.of(load_settings()).cache / "models"
    models = sorted(folder.glob("*.gguf"))
    if not models:
        pytest.skip(f"no GGUF model under {folder}: run `make llama`")
    return str(models[0])


def _wait(base: str, proc: subprocess.Popen, log, wait: float = 300.0) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log.read()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(f"llama_cpp.server did not answer within {wait:.0f} s")


@pytest.fixture(scope="module")
def pyserver(tmp_path_factory):
    model = _model()
    port = local_server.free_port()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        model,
        "--model_alias",
        "qwen-pyserver",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        "2",
        "--verbose",
        "False",
    ]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "")}  # its settings read the env
    log = open(tmp_path_factory.mktemp("pyserver") / "server.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait(f"http://127.0.0.1:{port}", proc, log)
        yield Settings(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-none", model="qwen-pyserver", timeout=300, max_retries=2
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_server_rejects_json_schema_with_500(pyserver):
    """The premise: this server says 500 "Input should be 'text' or 'json_object'" to a json_schema request."""
    body = json.dumps({"model": pyserver.model, "messages": MESSAGES, "max_tokens": 4, "response_format": SCHEMA})
    req = urllib.request.Request(
        f"{pyserver.base_url}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=120)
    assert err.value.code == 500 and "json_object" in err.value.read().decode()


def test_client_downgrades_once_without_retries(pyserver):
    with LLMClient(pyserver) as client:
        first = client.chat(MESSAGES, response_format=SCHEMA, max_tokens=16)
        second = client.chat(MESSAGES, response_format=SCHEMA, max_tokens=16)
    # the rejected json_schema request was sent once (not max_retries more times), then json_object
    assert (first.response_format, first.retries) == ("json_object", 1)
    assert (second.response_format, second.retries) == ("json_object", 0)
    assert isinstance(json.loads(first.content), dict)


def test_rerank_run_on_pyserver(pyserver, tmp_path):
    passages = {"p1": "Paris is the capital and largest city of France.", "p2": "Bananas are rich in potassium."}
    res = rerank_made(
        tmp_path / "ds",
        {"q1": {"p2": 0.5, "p1": 0.4}},
        {"q1": "What is the capital of France?"},
        {"q1": passages},
        Params(mode="yesno", yesno_json=True, alpha=1.0, pool_k=2),
        pyserver,
        LLMCache(tmp_path / "llm"),
    )
    row = res.ledger.iloc[0]
    assert row.status in ("ok", "repaired"), row.to_dict()
    assert row.response_format == "json_object" and "InternalServerError" not in str(row.error)
    assert row.requests == 3  # one rejected json_schema request, then one call per candidate
