"""Sentinel secrets passed in code (Settings built in code, not the environment) never reach an output."""

from __future__ import annotations

import json

import pytest

from fakellm import FakeLLM, make_inputs
from rerank_data import rerank_made
from rerankeval import rerank
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import Settings, load_settings, redact
from rerankeval.evaluate import manifest
from rerankeval.index.qdrant import store as qdrant_store
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params

KEY = "sk-" + "SENTINEL-llm-key-0123456789"
QD_PASSWORD = "SENTINEL-qdrant-password-42"
QD_KEY = "SENTINEL-qdrant-key-77"
QD_TOKEN = "SENTINEL-qdrant-token-99"
SENTINELS = (KEY, QD_PASSWORD, QD_KEY, QD_TOKEN, "SENTINEL")


def _settings(base_url: str) -> Settings:
    return Settings(
        base_url=base_url,
        api_key=KEY,
        model="fake-reranker",
        timeout=2,
        max_retries=0,
        qdrant_url=f"http://admin:{QD_PASSWORD}@qdrant.test:6333/?token={QD_TOKEN}",
        qdrant_api_key=QD_KEY,
    )


def _clean(text: str) -> None:
    assert not [s for s in SENTINELS if s in text], text


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_sentinels_in_code_reach_no_output(tmp_path):
    echo = {"status": 401, "message": f"invalid key {KEY} for {QD_PASSWORD}"}  # an endpoint echoing secrets
    with FakeLLM(rule=lambda n, b: echo) as fake:
        s = _settings(fake.base_url)
        fused, queries, texts = make_inputs(n_queries=2, n_docs=6, gold=(2,))
        result = rerank_made(
            tmp_path / "ds",
            fused,
            queries,
            texts,
            Params(mode="listwise", window=5, step=5, pool_k=5),
            s,
            LLMCache(tmp_path / "llm"),
        )
    dp = resolve_dataset(str(tmp_path / "ds"), load_settings())
    written = rerank.write(dp, result)
    man = manifest.build_manifest(dp, settings=s)
    written["manifest"] = manifest.write_manifest(dp, man, s)
    assert man["qdrant"]["url"] == "http://qdrant.test:6333/?token=[REDACTED]"
    loc = qdrant_store.location(dp, settings=s)
    texts_out = [p.read_text(encoding="utf-8") for p in written.values()]
    texts_out += [repr(s), str(s), loc.describe(), repr(loc), result.ledger.to_csv()]
    texts_out.append(redact(f"an executed notebook echoing {s.qdrant_url}, {KEY}, {QD_KEY}"))
    with pytest.raises(qdrant_store.QdrantUnavailable) as err:
        with qdrant_store.open_client(dp, settings=s, timeout=1):
            pass
    texts_out.append(str(err.value))
    for text in texts_out:
        _clean(text)
    assert "qdrant.test:6333" in str(err.value) and "qdrant.test:6333" in loc.describe()


# -- issue 32 defects 10 and 11: every encoding of a URL password, and replies redacted at the source ---------------
URL_USER, URL_PW = "alice", "SENTINEL-url-pw/42@x"  # a '/' and an '@': percent-encoded in the URL
URL_PW_ENC = "SENTINEL-url-pw%2F42%40x"


def _basic(user: str, password: str) -> str:
    import base64

    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _forms() -> tuple[str, ...]:
    """The URL password as written, decoded, and the Basic token httpx sends (padded and not)."""
    token = _basic(URL_USER, URL_PW)
    return URL_PW, URL_PW_ENC, token, token.rstrip("=")


def test_the_basic_token_and_the_encodings_of_a_url_password_are_redacted():
    """Defect 11: the redactor knew the URL's password, not the base64 Basic token the client sends for it."""
    s = Settings(base_url=f"http://{URL_USER}:{URL_PW_ENC}@127.0.0.1:9/v1", api_key=KEY, model="m")
    text = redact(
        f"echo: Authorization: Basic {_basic(URL_USER, URL_PW)} | {URL_PW} | {URL_PW_ENC} | "
        f"padless {_basic(URL_USER, URL_PW).rstrip('=')}.",
        [s.api_key],
    )
    assert not [f for f in _forms() if f in text], text
    assert "Basic [REDACTED]" in text


def test_an_unknown_basic_token_is_redacted_and_plain_words_are_not():
    text = redact(f"Authorization: Basic {_basic('bob', 'hunter2-other')} and basic information, Basic usage")
    assert _basic("bob", "hunter2-other") not in text
    assert "basic information, Basic usage" in text


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_the_redactor_knows_the_header_httpx_really_sends(tmp_path):
    """What the client puts on the wire for OPENAI_BASE_URL=http://user:password@... is a form the redactor knows."""
    from rerankeval.llm.client import LLMClient

    with FakeLLM() as fake:
        base = fake.base_url.replace("http://", f"http://{URL_USER}:{URL_PW_ENC}@")
        with LLMClient(Settings(base_url=base, api_key=KEY, model="fake", timeout=2, max_retries=0)) as client:
            client.chat([{"role": "user", "content": "Passage: x\n\n"}], response_format=None, max_tokens=1)
    sent = fake.auth[-1] or ""
    assert sent.startswith("Basic ") and _basic(URL_USER, URL_PW) in sent  # what httpx does with URL credentials
    assert redact(sent) == "Basic [REDACTED]"


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_a_reply_echoing_secrets_is_redacted_before_anybody_reads_it(tmp_path):
    """Defect 10: a key echoed by the model reached drafts, the ledger and later prompts, because only the writers
    of some files redacted. The one cached call redacts the reply first: what ``read`` gets, the value the caller
    keeps and the cached entry hold none of the three forms."""
    from rerankeval.llm.cache import LLMCache
    from rerankeval.llm.call import CachedLLM, Call, CallStats

    echo = f"key {KEY}, Authorization: Basic {_basic(URL_USER, URL_PW)}, password {URL_PW}"
    seen: list[str] = []
    with FakeLLM(script=[{"content": f"question about {echo}"}]) as fake:
        base = fake.base_url.replace("http://", f"http://{URL_USER}:{URL_PW_ENC}@")
        s = Settings(base_url=base, api_key=KEY, model="fake", timeout=2, max_retries=0)
        llm = CachedLLM.open(s, LLMCache(tmp_path / "llm"))
        call = Call([{"role": "user", "content": "draft a question"}], {"q": "draft"}, max_tokens=50)
        got = llm.call(call, lambda r: seen.append(r.content) or r.content, CallStats())
        again = llm.call(call, lambda r: r.content, CallStats())  # from the cache
        llm.close()
    assert got.ok and again.cached and got.value.startswith("question about key [REDACTED]")
    cached = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "llm").rglob("*.json"))
    for text in (*seen, got.value, again.value, cached):
        assert not [f for f in (KEY, *_forms()) if f in text], text


def test_an_entry_cached_before_the_fix_is_redacted_when_read(tmp_path):
    from rerankeval.llm.cache import LLMCache
    from rerankeval.llm.call import CachedLLM, Call, CallStats
    from rerankeval.llm.client import LLMClient

    s = Settings(base_url=f"http://{URL_USER}:{URL_PW_ENC}@127.0.0.1:9/v1", api_key=KEY, model="fake")
    cache = LLMCache(tmp_path / "llm")
    call = Call([{"role": "user", "content": "q"}], {"q": 1}, max_tokens=5)
    key = cache.key(call.material)
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_text(
        json.dumps({"key": key, "reply": {"content": f"old {KEY} Basic {_basic(URL_USER, URL_PW)}"}})
    )
    with LLMClient(s) as client:
        got = CachedLLM(client, cache).call(call, lambda r: r.content, CallStats())
    assert got.cached and not [f for f in (KEY, *_forms()) if f in got.value], got.value


def test_the_endpoint_identity_holds_no_form_of_the_url_password():
    """Defect 9's source: what names the endpoint in keys, rates and (through the chain) the fingerprints."""
    from rerankeval.llm.scrub import endpoint_identity

    s = Settings(base_url=f"http://{URL_USER}:{URL_PW_ENC}@127.0.0.1:9/v1/", api_key=KEY, model="m")
    ident = endpoint_identity(s)
    assert ident == "http://127.0.0.1:9/v1" and not [f for f in _forms() if f in ident]


def test_a_lone_user_token_in_a_url_is_known_in_its_basic_form_too():
    """``http://TOKEN@host``: httpx sends ``Basic base64(TOKEN:)``; the token alone counts as the secret."""
    from urllib.parse import urlsplit

    from rerankeval.core.credentials import url_credential_forms

    forms = url_credential_forms(urlsplit("https://tok-SENTINEL-5678@api.test/v1"))
    assert "tok-SENTINEL-5678" in forms and _basic("tok-SENTINEL-5678", "") in forms
    assert url_credential_forms(urlsplit("https://api.test/v1?x=1")) == []
