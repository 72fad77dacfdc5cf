"""Settings from .env and the environment; secret redaction."""

from __future__ import annotations

import pytest

from rerankeval import settings as st


def test_env_file_and_environment(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "OPENAI_BASE_URL=https://example.test/v1\nOPENAI_API_KEY=sk-from-file-0001\nRERANK_MODEL=m1\n"
        "RERANK_TIMEOUT=7.5\n",
        encoding="utf-8",
    )
    s = st.load_settings(environ={}, env_file=env_file)
    assert (s.base_url, s.api_key, s.model, s.timeout, s.max_retries) == (
        "https://example.test/v1",
        "sk-from-file-0001",
        "m1",
        7.5,
        3,
    )
    assert s.configured and s.cache_endpoint == "https://example.test/v1"
    s2 = st.load_settings(environ={"RERANK_MODEL": "m2", "RERANK_MAX_RETRIES": "0"}, env_file=env_file)
    assert s2.model == "m2" and s2.max_retries == 0 and s2.api_key == "sk-from-file-0001"
    assert "sk-from-file" not in repr(s2)  # the key is kept out of repr


def test_unconfigured_and_bad_numbers(tmp_path):
    s = st.load_settings(environ={}, env_file=tmp_path / "absent")
    assert not s.configured and s.base_url is None
    with pytest.raises(ValueError, match="RERANK_TIMEOUT"):
        st.load_settings(environ={"RERANK_TIMEOUT": "soon"}, env_file=tmp_path / "absent")


def test_env_roundtrip(tmp_path):
    s = st.Settings(base_url="http://h/v1", api_key="k" * 8, model="m", endpoint_id="local/x", timeout=3, max_retries=1)
    again = st.load_settings(environ=s.env(), env_file=tmp_path / "absent")
    assert again == s and again.cache_endpoint == "local/x"


def test_redact(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-ABCDEF123456")
    msg = "401: Incorrect API key provided: sk-live-ABCDEF123456 (Authorization: Bearer sk-live-ABCDEF123456)"
    out = st.redact(msg)
    assert "ABCDEF" not in out and out.count(st.REDACTED) == 2
    assert st.redact("token xyz-secret-9", ["xyz-secret-9"]) == f"token {st.REDACTED}"
    assert st.redact("a b", ["a"]) == "a b"  # too short to be a key: left alone
    assert st.redact(ValueError("plain")) == "plain"
