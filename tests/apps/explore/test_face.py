"""Issue 33 item 5 for the explorer: ``rerankeval.apps.explore`` is a sub-package whose ``__init__`` is its one
face (the calls the README, the guide and notebook 00 make), each name behind it has one home, and the settings
come in at one door (:func:`rerankeval.apps.explore.session.explorer`) and are handed down from there."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import testfiles
from explore_data import _dataset
from rerankeval.apps import explore
from rerankeval.apps.explore import session
from rerankeval.apps.explore.engine import Explorer
from rerankeval.core import paths
from rerankeval.core.settings import Settings

one_home = testfiles.load("project/test_one_home.py")  # its checks, run on the explorer
PACKAGE = "apps.explore"
DOCS = [paths.ROOT / "README.md", paths.ROOT / "docs" / "guide.md"]


@pytest.fixture(autouse=True)
def _no_kept_explorers():
    yield
    for ex in session._EXPLORERS.values():
        ex.close()
    session._EXPLORERS.clear()


def test_the_face_is_every_explore_call_the_docs_show_and_each_has_its_home_behind_it():
    shown = {m for doc in DOCS for m in re.findall(r"\bexplore\.([a-z_]+)\(", doc.read_text(encoding="utf-8"))}
    assert shown, f"no explore.<call>( in {DOCS}: the check would mean nothing"
    assert shown <= set(explore.__all__), f"calls the docs show that the face lacks: {shown - set(explore.__all__)}"
    for name in explore.__all__:
        home = getattr(explore, name).__module__
        assert home.startswith("rerankeval.apps.explore.") and name in one_home.homes(PACKAGE)[home], name
    with pytest.raises(AttributeError, match="import them from their module under rerankeval.apps.explore"):
        explore.Explorer  # noqa: B018 - not on the face: engine is its home


def test_behind_the_face_no_module_re_exports_and_every_name_is_imported_from_its_home(monkeypatch):
    monkeypatch.setattr(one_home, "ENFORCED", [*one_home.ENFORCED, PACKAGE])
    assert [m.name for m in one_home.modules(PACKAGE)][0] == "__init__.py"
    assert [r for m in one_home.modules(PACKAGE) if m.name != "__init__.py" for r in one_home.reexports(m)] == []
    assert one_home.second_doors(PACKAGE) == []


def _calls_of_load_settings(path: Path) -> list[str]:
    """The functions of ``path`` that call ``load_settings()``."""
    return [
        f.name
        for f in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(f, ast.FunctionDef)
        for n in ast.walk(f)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "load_settings"
    ]


def test_the_settings_are_read_at_one_door_only():
    found = {m.name: _calls_of_load_settings(m) for m in one_home.modules(PACKAGE)}
    assert {m: f for m, f in found.items() if f} == {"session.py": ["explorer"]}
    assert sum(len(one_home.hidden_settings(m)) for m in one_home.modules(PACKAGE)) == 1


def test_settings_given_at_the_door_reach_the_live_search_and_say_a_chain_run(tmp_path, monkeypatch):
    monkeypatch.delenv("RERANKEVAL_STAGE", raising=False)
    dp = _dataset(tmp_path)
    given = Settings(stage="00-explore")
    seen = []

    class Retriever:  # stage 03's retriever, as the live search opens it
        def __init__(self, dp, settings, progress):
            seen.append(settings)

        def close(self):
            pass

    monkeypatch.setattr("rerankeval.retrieve.retriever.Retriever", Retriever)
    ex = explore.explorer(dp, settings=given)
    assert ex.settings is given and ex.live().settings is given and seen == [given]
    got = explore.widget(dp)  # the environment says no chain run; the settings given say one
    assert "make lab" in getattr(got, "data", "")
    with pytest.raises(TypeError):
        Explorer(dp)  # no hidden default below the door


def test_a_module_behind_the_face_loads_without_the_rest():
    code = (
        "import sys, rerankeval.apps.explore.view as v; "
        "print(sorted(m for m in sys.modules if m.startswith('rerankeval.apps.explore')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(paths.ROOT / "lib")},
    ).stdout
    assert out.strip() == "['rerankeval.apps.explore', 'rerankeval.apps.explore.view']"
