"""Issue 32's target: a canary key, a URL password and its Basic form are in no file after a full run.

A real ``python -m rerankeval.apps.chain`` on a bare folder of PDFs (so 08 drafts the questions, in the dataset folder),
with ``assess=true`` (09 judges) and 07 answering, against the fake LLM as the configured endpoint: its URL holds
``user:password@`` (httpx sends it as ``Authorization: Basic ...``), and every reply echoes the API key, the URL
password (as written and decoded) and the Basic token, inside the drafted questions and the answers themselves, and
as an extra field of every other JSON reply. Then every file under the results folder, the cache
(``RERANKEVAL_CACHE``) and the dataset folder, and the console, are searched for each form.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from builders import TINY_PAGES, write_pdf
from fakellm import FakeLLM, behave

pytestmark = pytest.mark.slow

KEY = "sk-" + "CANARY-" + secrets.token_hex(8)  # made at run time: no key-shaped literal in the repository
USER, PASSWORD = "canary", "CANARY-pw/9@z"  # a '/' and an '@': percent-encoded in the URL
PASSWORD_IN_URL = "CANARY-pw%2F9%40z"
TOKEN = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
FORMS = {
    "api key": KEY,
    "url password": PASSWORD,
    "url password, encoded": PASSWORD_IN_URL,
    "basic token": TOKEN.rstrip("="),
    "canary": "CANARY",
}
ECHO = f"key {KEY} url {PASSWORD} enc {PASSWORD_IN_URL} Authorization: Basic {TOKEN}"
SMALL = ["leg_k=10", "pool_k=5", "final_k=5", "ks=[1,3,5]", "n_questions=4", "draft_min_chars=50", "assess=true", "k=5"]


def echoing(n: int, body: dict) -> dict:
    """Every reply carries the secrets: in the drafted question and the answer text, else as a JSON field."""
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    if name == "draft_question":
        reply = json.loads(behave(body)["content"])
        return {"content": json.dumps({**reply, "question": f"{reply['question']} {ECHO}"})}
    if name == "cited_answer":
        return {"content": json.dumps({"answer": f"The answer: {ECHO}", "citations": [], "not_in_documents": False})}
    if name == "relevance_grade":
        return {"content": json.dumps({"score": 2, "reasoning": ECHO})}
    return {"echo": ECHO}


def _leaks(root: Path) -> list[str]:
    found = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            found += [f"{p} holds the {what}" for what, form in FORMS.items() if form.encode() in data]
    return found


def test_no_form_of_a_secret_is_in_any_file_after_a_full_run(tmp_path):
    folder = tmp_path / "canary-pdfs"
    for name, pages in TINY_PAGES.items():
        write_pdf(folder / name, pages)
    results, cache = tmp_path / "results", tmp_path / "cache"
    with FakeLLM(rule=echoing) as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGE_", "RERANK_", "OPENAI_"))}
        env.update(
            RERANKEVAL_RESULTS=str(results),
            RERANKEVAL_QDRANT_PATH=str(results / "qdrant"),
            RERANKEVAL_CACHE=str(cache),
            PYTHONHASHSEED="0",
            OPENAI_API_KEY=KEY,
            RERANK_MODEL="fake",
            OPENAI_BASE_URL=fake.base_url.replace("http://", f"http://{USER}:{PASSWORD_IN_URL}@"),
        )
        cmd = [sys.executable, "-m", "rerankeval.apps.chain", "--dataset", str(folder), "--kernel", "python3"]
        for s in SMALL:
            cmd += ["--set", s]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
        sent = {a.split()[0] for a in fake.auth if a}
    assert r.returncode == 0, f"the chain failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert "Basic" in sent and fake.count > 0  # the client did send the URL's credentials as a Basic header
    drafts = (folder / "queries.draft.jsonl").read_text(encoding="utf-8")
    assert drafts.count("[REDACTED]") >= 4, drafts  # the echo went through the drafts, redacted
    leaks = _leaks(results) + _leaks(cache) + _leaks(folder)
    leaks += [f"the console holds the {w}" for w, f in FORMS.items() if f in r.stdout + r.stderr]
    assert not leaks, "\n".join(leaks)
