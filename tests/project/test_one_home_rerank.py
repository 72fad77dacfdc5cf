"""One home per name in stage 04 (issue 33): ``rerankeval.rerank``'s face publishes only its own names, no module
behind it re-exports another module's names, nothing calls ``load_settings()`` (settings are passed from
``rerank.run``), and ``pool_k`` has its default only in ``rerank.Params``.

Checked on the source (AST), so a re-export cannot hide behind a lazy table or a ``noqa``. The checks take the
package's folder as an argument: the tests below run them on deliberately wrong copies too, so they can fail.
"""

from __future__ import annotations

import ast
import dataclasses
import shutil
from pathlib import Path

import pytest

import rerankeval.rerank
from rerankeval import rerank

PACKAGE = Path(rerankeval.rerank.__file__).parent
FACE = "__init__.py"


def _modules(folder: Path) -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.py"))}


def _used_names(tree: ast.Module) -> set[str]:
    """Every name the module reads (a bare name, or the base of an attribute)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def reexports(folder: Path) -> list[str]:
    """``module: name`` for each name a module behind the face imports and never uses (it is there to be imported
    from it), each ``__all__`` of such a module, each second name bound to an imported or module-level function
    (``old = new``), and each name the face takes from outside its own package."""
    found: list[str] = []
    for name, tree in _modules(folder).items():
        if name == FACE:
            found += _face_strays(tree)
            continue
        used = _used_names(tree)
        defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [f"{name}: {a.asname or a.name}" for a in node.names if (a.asname or a.name) not in used]
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in defs:
                found += [f"{name}: {t.id} = {node.value.id}" for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                found.append(f"{name}: __all__ (only the face has one)")
    return found


def _face_strays(tree: ast.Module) -> list[str]:
    """Names the face imports, or maps in a table, from a module outside ``rerankeval.rerank``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            if not node.module.startswith("rerankeval.rerank") and node.module not in (
                "importlib",
                "typing",
                "rerankeval.core.face",
            ):  # the machinery, not a name
                out += [f"{FACE}: {a.name} from {node.module}" for a in node.names]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("rerankeval.")
            and not node.value.startswith("rerankeval.rerank")
        ):
            out.append(f"{FACE}: a name mapped to {node.value}")
    return out


def hidden_settings(folder: Path) -> list[str]:
    """``module:line`` of each ``load_settings`` call or import (settings come from the caller)."""
    out = []
    for name, tree in _modules(folder).items():
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            call = "load_settings" in (getattr(func, "id", None), getattr(func, "attr", None))
            imported = isinstance(node, ast.ImportFrom) and any(a.name == "load_settings" for a in node.names)
            if call or imported:
                out.append(f"{name}:{node.lineno}")
    return out


def pool_k_defaults(folder: Path) -> list[str]:
    """``module:line`` of each default given to a ``pool_k`` (an argument or a field)."""
    out = []
    for name, tree in _modules(folder).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "pool_k" and node.value:
                out.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.arguments):
                pos = node.posonlyargs + node.args
                pairs = list(zip(pos[len(pos) - len(node.defaults) :], node.defaults, strict=True))
                pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
                out += [f"{name}:{a.lineno}" for a, _ in pairs if a.arg == "pool_k"]
    return out


def test_no_module_reexports_and_the_face_is_its_own():
    assert reexports(PACKAGE) == []
    assert set(rerank.__all__) == {"Params", "Result", "run", "write", "read_ledger", "read_shown"}
    for name in rerank.__all__:  # each published name resolves, and has its home in the package
        assert getattr(rerank, name).__module__.startswith("rerankeval.rerank."), name


def test_no_hidden_load_settings():
    assert hidden_settings(PACKAGE) == []


def test_pool_k_is_defaulted_once():
    assert pool_k_defaults(PACKAGE) == ["config.py:" + str(_line_of_pool_k())]


def _line_of_pool_k() -> int:
    tree = ast.parse((PACKAGE / "config.py").read_text(encoding="utf-8"))
    params = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Params")
    return next(n.lineno for n in params.body if isinstance(n, ast.AnnAssign) and n.target.id == "pool_k")


def test_the_reranker_config_takes_its_shared_defaults_from_params():
    """RerankConfig has no default of its own for a field Params has: it is built from Params (no second source)."""
    from rerankeval.rerank.config import Params, RerankConfig

    shared = {f.name for f in dataclasses.fields(Params)} & {f.name for f in dataclasses.fields(RerankConfig)}
    assert len(shared) == 14
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(RerankConfig) if f.name in shared)
    assert Params().config().yesno_json is Params.yesno_json is False  # the chain's value (notebook 04, the yaml)


@pytest.mark.parametrize(
    ("module", "line", "check"),
    [
        ("stage.py", "from rerankeval.llm.cache import LLMCache as Cache  # noqa: F401", reexports),
        ("stage.py", "load_inputs = load", reexports),
        ("reranker.py", "__all__ = ['Reranker']", reexports),
        ("stage.py", "from rerankeval.core.settings import load_settings", hidden_settings),
        ("expand.py", "def f(pool_k: int = 20) -> int:\n    return pool_k", pool_k_defaults),
    ],
)
def test_the_checks_catch_a_planted_fault(tmp_path, module, line, check):
    copy = tmp_path / "rerank"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = check(copy)
    (copy / module).write_text((copy / module).read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    assert len(check(copy)) > len(before)


def test_the_face_check_catches_a_foreign_name(tmp_path):
    copy = tmp_path / "rerank"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    face = copy / FACE
    face.write_text(
        face.read_text(encoding="utf-8").replace('"rerankeval.rerank.ledger"', '"rerankeval.llm.cache"', 1),
        encoding="utf-8",
    )
    assert any("rerankeval.llm.cache" in r for r in reexports(copy))
