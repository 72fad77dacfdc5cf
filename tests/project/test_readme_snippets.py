"""Issue 23: the README's explorer snippets run as written. Every ```python block of README.md with the line
``<!-- explorer-snippet -->`` just above it is executed, in README order and in one namespace (as a reader pastes
them into one notebook), on a copy of the default dataset: its folder, its saved results and its Qdrant shard are
copied under tmp, so what the snippets write (a grade, a question) never reaches data/ or results/.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from rerankeval.core import paths

MARKER = "<!-- explorer-snippet -->"
README = paths.ROOT / "README.md"
_BLOCK = re.compile(r"^" + re.escape(MARKER) + r"[ \t]*\n```python[ \t]*\n(.*?)^```", re.M | re.S)


def snippets(text: str) -> list[str]:
    """The code of every ```python block right below a marker line."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def test_the_marked_blocks_are_found_and_only_those():
    text = f"```python\nnot_me()\n```\n{MARKER}\n```python\nexplore.show(dp, 'x')\n```\n{MARKER}\n```bash\nls\n```\n"
    assert snippets(text) == ["explore.show(dp, 'x')\n"]


def test_the_readme_has_marked_explorer_snippets():
    found = snippets(README.read_text(encoding="utf-8"))
    assert found, (
        f"no ```python block of {README} has the line {MARKER!r} just above it: mark the explorer "
        "examples (they are run by test_readme_snippets_run_as_written)"
    )
    assert all("explore." in s for s in found), "a marked snippet does not call explore."


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def default_copy(tmp_path, monkeypatch):
    """A copy of the default dataset's folder, saved results and Qdrant shard; paths resolve to the copies."""
    name = paths.DEFAULT_DATASET
    src, results, shard = paths.DATA_DIR / name, paths.ROOT / "results" / name, paths.DATA_DIR / ".qdrant" / name
    if not (results / "corpus" / "stats.json").is_file() or not (results / "runs").is_dir():
        pytest.skip(f"{results} has no saved runs: the snippets read them (run make report first)")
    data = tmp_path / "data"
    shutil.copytree(src, data / name)
    shutil.copytree(
        results, tmp_path / "results" / name, ignore=shutil.ignore_patterns("executed", "report", "figures", "sweep")
    )
    (tmp_path / "results" / name / "source.json").write_text(json.dumps({"source": str(data / name)}))
    if shard.is_dir():
        shutil.copytree(shard, tmp_path / "qdrant" / name)
    monkeypatch.setattr(paths, "DATA_DIR", data)
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("RERANKEVAL_QDRANT_PATH", str(tmp_path / "qdrant"))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)  # no LLM: the live rerank column says so, the rest runs
    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    return src, data / name


@pytest.mark.slow
def test_readme_snippets_run_as_written(default_copy):
    from rerankeval.apps import explore

    real, copy = default_copy
    before = _tree_hash(real)
    blocks = snippets(README.read_text(encoding="utf-8"))
    assert blocks, f"no marked explorer snippet in {README} (see test_the_readme_has_marked_explorer_snippets)"
    namespace: dict = {}
    try:
        for i, code in enumerate(blocks, start=1):
            try:
                exec(compile(code, f"README.md explorer snippet {i}", "exec"), namespace)
            except Exception as exc:  # noqa: BLE001 - the message names the snippet
                pytest.fail(f"README explorer snippet {i} fails as written: {type(exc).__name__}: {exc}\n{code}")
    finally:
        explore.close_all()
    assert _tree_hash(real) == before, f"a README snippet wrote into {real}: it must only touch the copy"
    assert str(namespace["dp"].source) == str(copy)
