"""Settings from .env and the environment; secret redaction."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from rerankeval.core import settings as st


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
        "sk-" + "from-file-0001",
        "m1",
        7.5,
        3,
    )
    assert s.configured and s.cache_endpoint == "https://example.test/v1"
    s2 = st.load_settings(environ={"RERANK_MODEL": "m2", "RERANK_MAX_RETRIES": "0"}, env_file=env_file)
    assert s2.model == "m2" and s2.max_retries == 0 and s2.api_key == "sk-" + "from-file-0001"
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
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "live-ABCDEF123456")
    msg = "401: Incorrect API key provided: sk-live-ABCDEF123456 (Authorization: Bearer sk-live-ABCDEF123456)"
    out = st.redact(msg)
    assert "ABCDEF" not in out and out.count(st.REDACTED) == 2
    assert st.redact("token xyz-secret-9", ["xyz-secret-9"]) == f"token {st.REDACTED}"
    assert st.redact("a b", ["a"]) == "a b"  # too short to be a key: left alone
    assert st.redact(ValueError("plain")) == "plain"


def test_every_variable_from_env_file_and_environment_wins(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "QDRANT_URL=http://qd.test:6333\nQDRANT_API_KEY=qd-key-0001\nRERANKEVAL_LLAMA_THREADS=1\n"
        "RERANKEVAL_CROSS_ENCODER=/models/ce\nRERANKEVAL_CACHE=/c\nRERANKEVAL_RESULTS=/r\n"
        "RERANKEVAL_QDRANT_PATH=/q\nRERANK_ENDPOINT_ID=\nAPI_KEY=not-ours\nopenai_api_key=lower-case-is-not-ours\n",
        encoding="utf-8",
    )
    s = st.load_settings(
        environ={"QDRANT_URL": "http://env.test:6333", "RERANKEVAL_LLAMA_THREADS": " "}, env_file=env_file
    )
    assert (s.qdrant_url, s.qdrant_api_key, s.llama_threads, s.cross_encoder) == (
        "http://env.test:6333",
        "qd-key-0001",
        1,
        "/models/ce",
    )
    assert s.roots() == {"results": Path("/r"), "cache": Path("/c"), "qdrant": Path("/q")}
    assert s.api_key is None and s.endpoint_id is None  # only our variable names, case-sensitive
    with pytest.raises(ValueError, match="RERANKEVAL_LLAMA_THREADS"):
        st.load_settings(environ={"RERANKEVAL_LLAMA_THREADS": "0"}, env_file=env_file)


def test_local_model_from_env_file_environment_wins_and_unknown_names_are_listed(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("LOCAL_MODEL=qwen2.5-coder-1.5b   # the bigger one\n", encoding="utf-8")
    assert st.load_settings(environ={}, env_file=env_file).local_model == "qwen2.5-coder-1.5b"
    assert st.load_settings(environ={"LOCAL_MODEL": "qwen2.5-coder-0.5b"}, env_file=env_file).local_model == (
        "qwen2.5-coder-0.5b"
    )
    assert st.load_settings(environ={"LOCAL_MODEL": " "}, env_file=tmp_path / "none").local_model == (
        st.DEFAULT_LOCAL_MODEL
    )
    with pytest.raises(ValueError) as err:
        st.load_settings(environ={"LOCAL_MODEL": "qwen2.5-coder-7b"}, env_file=env_file)
    msg = str(err.value)
    assert "LOCAL_MODEL='qwen2.5-coder-7b' (in the environment)" in msg
    assert all(name in msg for name in st.LOCAL_MODELS) and "LOCAL_MODEL" not in st.LLM_ENV_KEYS


def test_settings_in_code_read_nothing_else(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "from-environment-0001")
    monkeypatch.setenv("RERANK_ENDPOINT_ID", "from-env")
    s = st.Settings(base_url="http://h/v1")
    assert s.api_key is None and s.endpoint_id is None and s.cache_endpoint == "http://h/v1"


def test_repr_hides_every_secret():
    s = st.Settings(
        base_url="http://u:pw-0001@h/v1?api_key=qk-0002",
        api_key="sk-code-0003",
        qdrant_url="http://admin:pw-0004@qd:6333",
        qdrant_api_key="qd-0005",
    )
    text = repr(s) + str(s)
    assert not any(x in text for x in ("pw-0001", "qk-0002", "sk-code-0003", "pw-0004", "qd-0005"))
    assert "qd:6333" in text and "h/v1" in text


@pytest.mark.parametrize(
    "text, hidden, kept",
    [
        ("server http://user:password1@host:6333 down", "password1", "http://host:6333"),
        ("GET https://h.test/v1/models?api_key=abc12345&x=1", "abc12345", "x=1"),
        ("see https://h.test/x?token=tok-98765", "tok-98765", "https://h.test/x?token="),
        ("git https://ghp_abcdefghijklmnopqrstuvwxyz@github.com/x", "ghp_abc", "github.com/x"),
        ("Authorization: Bearer abcdefghij123", "abcdefghij123", "Authorization:"),
    ],
)
def test_redact_urls_and_tokens(text, hidden, kept):
    out = st.redact(text)
    assert hidden not in out and kept in out


def test_redact_knows_the_secrets_of_settings_built_in_code():
    st.Settings(
        api_key="sentinel-in-code-0001",
        qdrant_url="http://u:sentinel-pw-0002@q:6333",
        qdrant_api_key="sentinel-qd-0003",
    )
    out = st.redact("echo sentinel-in-code-0001 sentinel-pw-0002 sentinel-qd-0003")
    assert "sentinel" not in out and out.count(st.REDACTED) == 3
    assert st.redact("http://h.test/a?b=1#c") == "http://h.test/a?b=1#c"  # URLs without secrets are untouched


# issue 19: one .env reader (rerankeval.core.envfile) for Python and the Makefile
TRICKY_ENV = [
    "RERANKEVAL_CACHE=/x   # note\n",
    "A=a#b\n",
    "A= # note\n",
    "A=#v\n",
    "export A=1\r\nB='q # r'\r\n",
    'A="x\\ny" # c\n',
    "A='x\\'y'\n",
    'A="multi\nline"\nB=2\n',
    "A=1\nA\n",
    "  A  =  spaced value   \n",
    "'A'=1\n",
    "A=${HOME}/x\nB=${A}/y\nC=${NOPE_UNSET_VAR:-dflt}\n",
    "bad line here\nA=1\n",
    "A='unterminated\nB=2\n",
    "\ufeffA=1\n",
    "A=1\nA=2\n",
    'A="a\\"b"\n',
    "A=é€\n",
    "A\t=\tb\t#c\n",
]


@pytest.mark.parametrize("text", TRICKY_ENV)
def test_env_file_reads_as_python_dotenv_did(tmp_path, text):
    """The reader that replaced pydantic-settings' python-dotenv source gives the same values."""
    import logging
    import warnings

    dotenv = pytest.importorskip("dotenv")
    from rerankeval.core.envfile import read_env_file

    path = tmp_path / ".env"
    path.write_bytes(text.encode("utf-8"))
    logging.disable(logging.CRITICAL)
    try:
        want = {k: v for k, v in dotenv.dotenv_values(path).items() if v is not None}
    finally:
        logging.disable(logging.NOTSET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_env_file(path) == want


def test_env_file_with_comments_quotes_export_and_crlf(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_bytes(
        b"RERANKEVAL_CACHE=/x   # note\r\nexport RERANK_MODEL='m # 1'\r\n"
        b'OPENAI_BASE_URL="http://h.test/v1" # gateway\r\nRERANK_TIMEOUT=7 # seconds\r\n'
    )
    s = st.load_settings(environ={}, env_file=env_file)
    assert (s.cache, s.model, s.base_url, s.timeout) == (Path("/x"), "m # 1", "http://h.test/v1", 7.0)


def test_an_unreadable_env_line_is_named_and_skipped(tmp_path):
    from rerankeval.core.envfile import EnvFileWarning

    env_file = tmp_path / ".env"
    env_file.write_text("RERANK_MODEL=m\n\nthis is not an assignment\nRERANK_TIMEOUT=9\n", encoding="utf-8")
    with pytest.warns(EnvFileWarning, match=r"\.env, line 3: cannot read 'this is not an assignment'"):
        s = st.load_settings(environ={}, env_file=env_file)
    assert (s.model, s.timeout) == ("m", 9.0)
    env_file.write_bytes(b"RERANK_MODEL=caf\xe9\n")
    with pytest.raises(ValueError, match=r"\.env is not UTF-8 text"):
        st.load_settings(environ={}, env_file=env_file)


def test_a_malformed_setting_says_where_it_is_and_what_it_should_be(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("RERANKEVAL_LLAMA_THREADS=many\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"RERANK_TIMEOUT='0' \(in the environment\).*greater than 0.*> 0"):
        st.load_settings(environ={"RERANK_TIMEOUT": "0"}, env_file=tmp_path / "absent")
    with pytest.raises(ValueError, match=rf"RERANKEVAL_LLAMA_THREADS='many' \(in {env_file}\).*whole number >= 1"):
        st.load_settings(environ={}, env_file=env_file)
    with pytest.raises(ValueError, match="RERANKEVAL_LLAMA_BACKEND=.compile.*build.*wheel"):
        st.load_settings(environ={"RERANKEVAL_LLAMA_BACKEND": "compile"}, env_file=tmp_path / "absent")
    assert st.load_settings(environ={}, env_file=tmp_path / "absent").llama_backend == "build"
    with pytest.raises(ValueError, match="RERANKEVAL_DENSE_EXACT='maybe'.*true or false"):
        st.load_settings(environ={"RERANKEVAL_DENSE_EXACT": "maybe"}, env_file=tmp_path / "absent")
    assert st.load_settings(environ={}, env_file=tmp_path / "absent").dense_exact is False
    assert st.load_settings(environ={"RERANKEVAL_DENSE_EXACT": "true"}, env_file=tmp_path / "absent").dense_exact


def test_progress_mode_and_stage_are_settings(tmp_path):
    """RERANKEVAL_PROGRESS and RERANKEVAL_STAGE are read by Settings like every other variable (issue 20)."""
    s = st.load_settings(
        environ={"RERANKEVAL_PROGRESS": " Plain ", "RERANKEVAL_STAGE": "04-rerank"}, env_file=tmp_path / "absent"
    )
    assert (s.progress, s.stage) == ("plain", "04-rerank")
    unset = st.load_settings(environ={"RERANKEVAL_PROGRESS": "", "RERANKEVAL_STAGE": " "}, env_file=tmp_path / "x")
    assert (unset.progress, unset.stage) == (None, None)
    with pytest.raises(ValueError, match=r"RERANKEVAL_PROGRESS='sideways' \(in the environment\).*bar, plain or off"):
        st.load_settings(environ={"RERANKEVAL_PROGRESS": "sideways"}, env_file=tmp_path / "absent")
    assert "RERANKEVAL_STAGE" not in st.LLM_ENV_KEYS and "RERANKEVAL_PROGRESS" not in st.LLM_ENV_KEYS


# -- Settings is the only reader of our variables in the environment (issue 20) --
LIB = Path(__file__).resolve().parents[2] / "lib" / "rerankeval"
READERS = {LIB / "core" / "settings.py", LIB / "core" / "envfile.py"}
OURS = re.compile(r"^(RERANKEVAL_|OPENAI_|QDRANT_|LOCAL_MODEL|RERANK_|JUDGE_|EMBED_)")


def _constants(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Module-level ``NAME = "text"`` constants of the package (a key may be a constant of another module)."""
    out: dict[str, str] = {}
    for tree in trees.values():
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                out[node.targets[0].id] = node.value.value
    return out


def _key(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if name is not None:
        return constants.get(name)
    if isinstance(node, ast.Subscript) and _key(node.value, {}) is None and "FIELDS_ENV" in ast.unparse(node.value):
        field = _key(node.slice, {})
        return st.FIELDS_ENV.get(field or "")
    return None


def _is_environ(node: ast.expr) -> bool:
    return ast.unparse(node) in ("os.environ", "environ")


def env_reads(tree: ast.Module, constants: dict[str, str]) -> list[tuple[int, str]]:
    """(line, variable) of each read of a named environment variable: ``os.environ[K]``, ``os.environ.get(K)``,
    ``os.getenv(K)``, ``K in os.environ``, ``os.environ.setdefault(K)``, ``os.environ.pop(K)``."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            f = node.func
            if (_is_environ(f.value) and f.attr in ("get", "setdefault", "pop")) or ast.unparse(f) == "os.getenv":
                key = node.args[0]
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            key = node.left
        name = _key(key, constants) if key is not None else None
        if name is not None:
            found.append((node.lineno, name))
    return found


def test_the_scan_finds_a_read_of_our_variables():
    """The scan below can fail: every way of reading a variable is found, through a constant too."""
    src = (
        'import os\nfrom rerankeval.core import progress\nMODE = "RERANKEVAL_PROGRESS"\n'
        'a = os.environ.get(MODE)\nb = os.environ["OPENAI_API_KEY"]\nc = os.getenv("QDRANT_URL", "")\n'
        'd = "LOCAL_MODEL" in os.environ\ne = os.environ.get(progress.STAGE_ENV)\n'
        'f = os.environ.get(FIELDS_ENV["cache"])\nos.environ["RERANKEVAL_CACHE"] = "/x"\n'
        'g = {**os.environ, "RERANKEVAL_STAGE": "01"}\nh = os.environ.get("DISPLAY")\n'
    )
    constants = {"MODE": "RERANKEVAL_PROGRESS", "STAGE_ENV": "RERANKEVAL_STAGE"}
    assert env_reads(ast.parse(src), constants) == [
        (4, "RERANKEVAL_PROGRESS"),
        (5, "OPENAI_API_KEY"),
        (6, "QDRANT_URL"),
        (7, "LOCAL_MODEL"),
        (8, "RERANKEVAL_STAGE"),
        (9, "RERANKEVAL_CACHE"),
        (12, "DISPLAY"),
    ]


def test_only_settings_reads_our_variables_from_the_environment():
    """No module under lib/rerankeval but core/settings.py and core/envfile.py reads a RERANKEVAL_*, OPENAI_*,
    QDRANT_*, RERANK_*, JUDGE_*, EMBED_* or LOCAL_MODEL variable from os.environ (writing a child's environment is
    fine)."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(LIB.rglob("*.py"))}
    constants = _constants(trees)
    bad = [
        f"{p.relative_to(LIB)}:{line} reads {name}"
        for p, tree in trees.items()
        if p not in READERS
        for line, name in env_reads(tree, constants)
        if OURS.match(name) or name in st.ENV_KEYS
    ]
    assert not bad, "read it through rerankeval.core.settings (a Settings field) instead: " + "; ".join(bad)


# -- issue 32 defect 9, issue 36 item 3: credentials never in a cache key; the embeddings server's settings --
def test_cache_endpoint_holds_no_password_of_the_url(tmp_path):
    s = st.load_settings(environ={"OPENAI_BASE_URL": "http://u:secretpw@127.0.0.1:9/v1/"}, env_file=tmp_path / "x")
    assert "secretpw" not in s.cache_endpoint and "u:" not in s.cache_endpoint
    assert s.cache_endpoint == "http://127.0.0.1:9/v1"
    assert st.Settings(base_url="http://h/v1?api_key=qk-123456").cache_endpoint == f"http://h/v1?api_key={st.REDACTED}"
    assert st.Settings(base_url="http://u:pw-1234@h/v1", endpoint_id="local/x").cache_endpoint == "local/x"


def test_embeddings_server_settings(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(
        "EMBED_BASE_URL=http://emb:pw-emb-0001@127.0.0.1:7997/v1/\nEMBED_MODEL=minilm\nEMBED_BATCH=16\n",
        encoding="utf-8",
    )
    s = st.load_settings(environ={"EMBED_CONCURRENCY": "2", "EMBED_API_KEY": "ek-0002-secret"}, env_file=env_file)
    assert s.embed_configured and (s.embed_model, s.embed_batch, s.embed_concurrency, s.embed_dim) == (
        "minilm",
        16,
        2,
        None,
    )
    assert (s.embed_timeout, s.embed_max_retries) == (60.0, 3)
    assert s.embed_endpoint == "http://127.0.0.1:7997/v1" and "pw-emb-0001" not in repr(s) + str(s)
    assert "ek-0002-secret" not in repr(s)
    assert not st.load_settings(environ={}, env_file=tmp_path / "none").embed_configured
    for var, bad in (("EMBED_CONCURRENCY", "0"), ("EMBED_BATCH", "many"), ("EMBED_DIM", "-1"), ("EMBED_TIMEOUT", "0")):
        with pytest.raises(ValueError, match=rf"{var}='{bad}' \(in the environment\).*expected"):
            st.load_settings(environ={var: bad}, env_file=tmp_path / "none")
    assert "EMBED_BASE_URL" not in st.LLM_ENV_KEYS  # the LLM endpoint's variables are the first six, unchanged


def test_redact_knows_the_judge_and_embeddings_secrets():
    st.Settings(
        judge_api_key="jk-judge-0001",
        judge_base_url="http://j:jpw-0002@judge.test/v1",
        embed_api_key="ek-embed-0003",
        embed_base_url="http://e:epw-0004@emb.test/v1",
    )
    out = st.redact("keys jk-judge-0001 ek-embed-0003; passwords jpw-0002 epw-0004")
    assert not any(x in out for x in ("jk-judge", "ek-embed", "jpw-0002", "epw-0004")), out
    s = st.Settings(judge_base_url="http://j:jpw-0005@judge.test/v1", judge_api_key="jk-0006")
    assert "jpw-0005" not in repr(s) and "jk-0006" not in repr(s) and "judge.test/v1" in repr(s)
