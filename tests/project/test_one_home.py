"""One home per name, settings passed at the face (issue 33), checked on the syntax trees of the package.

For each package of :data:`ENFORCED` (a stage package under ``lib/rerankeval``, or a sub-package named with dots,
``apps.ask``):

- no module but the package's face (``__init__.py``) re-exports a name it imports from another rerankeval module
  (an import used only to re-export it: listed in ``__all__``, marked ``noqa: F401``, or written ``X as X`` and
  used nowhere else in the module);
- no module calls ``load_settings()``: the settings are passed down from the stage's ``run``;
- nobody (lib, tests, bench) imports one of its names from a module that is not the name's home (where it is
  defined), except the names of the package's face from the face.

Run with ``-s`` to see the counts in the packages not enforced yet; extend :data:`ENFORCED` as each one is done.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from rerankeval.core import paths

ENFORCED = [
    "retrieve",
    "apps.ask",
    "index",
    "corpus",
    "apps.explore",
    "evaluate",
    "questions",
    "rerank",
    "experiments",
    "report",
    "apps.chain",
]  # not yet: apps (the lab), llm, core; every load_settings() in lib: tests/project/test_settings_passed.py
# an app may read the settings at its one door (the explorer opens per dataset from a notebook, as the README shows;
# the chain's main reads them once and passes them down)
DOORS = {"rerankeval/apps/explore/session.py", "rerankeval/apps/chain/runner.py"}
LIB = paths.ROOT / "lib" / "rerankeval"
CALLERS = [paths.ROOT / "lib", paths.ROOT / "tests", paths.ROOT / "bench"]


def packages() -> list[str]:
    """Every sub-package of the library (a folder with an ``__init__.py``, at the first level)."""
    return sorted(p.parent.name for p in LIB.glob("*/__init__.py"))


def folder(package: str) -> Path:
    """The folder of ``package`` (``apps.ask``: ``lib/rerankeval/apps/ask``)."""
    return LIB.joinpath(*package.split("."))


def modules(package: str) -> Iterator[Path]:
    """The modules of ``package``, without those of a sub-package enforced on its own (counted there)."""
    nested = [folder(p) for p in ENFORCED if p.startswith(f"{package}.")]
    yield from sorted(m for m in folder(package).rglob("*.py") if not any(n in m.parents for n in nested))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _dunder_all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return set()


def reexports(path: Path) -> list[str]:
    """``module:line name`` for each name ``path`` imports from a rerankeval module only to re-export it."""
    text = path.read_text(encoding="utf-8")
    lines, tree = text.splitlines(), _tree(path)
    exported = _dunder_all(tree)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("rerankeval")):
            continue
        noqa = any("noqa: F401" in lines[i - 1] for i in range(node.lineno, (node.end_lineno or node.lineno) + 1))
        for alias in node.names:
            local = alias.asname or alias.name
            declared = local in exported or noqa or alias.asname == alias.name
            if declared and local not in used:
                out.append(f"{path.relative_to(LIB.parent)}:{node.lineno} {local}")
    return out


def hidden_settings(path: Path) -> list[str]:
    """``module:line`` of each call of ``load_settings()`` in ``path``."""
    return [
        f"{path.relative_to(LIB.parent)}:{n.lineno}"
        for n in ast.walk(_tree(path))
        if isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == "load_settings" or getattr(n.func, "attr", None) == "load_settings")
    ]


def homes(package: str) -> dict[str, set[str]]:
    """module name -> the names it defines (functions, classes, assignments at its top level)."""
    out: dict[str, set[str]] = {}
    for path in modules(package):
        rel = path.relative_to(LIB.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        defined: set[str] = set()
        for node in _tree(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined |= {t.id for t in targets if isinstance(t, ast.Name)}
        out[name] = defined
    return out


def second_doors(package: str) -> list[str]:
    """``file:line module.name`` for each import of a name of ``package`` from a module that is not its home."""
    home, face = homes(package), f"rerankeval.{package}"
    face_names = _dunder_all(_tree(folder(package) / "__init__.py"))
    out = []
    for root in CALLERS:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(_tree(path)):
                if not isinstance(node, ast.ImportFrom) or node.module not in home:
                    continue
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in home or alias.name in home[node.module]:
                        continue  # a sub-module, or a name defined there
                    if node.module == face and alias.name in face_names:
                        continue
                    out.append(f"{path.relative_to(paths.ROOT)}:{node.lineno} {node.module}.{alias.name}")
    return out


def _count_others(check, what: str) -> None:
    counts = {p: sum(len(check(m)) for m in modules(p)) for p in packages() if p not in ENFORCED}
    print(f"\n{what} in the packages not enforced: {counts} (total {sum(counts.values())})")


@pytest.mark.parametrize("package", ENFORCED)
def test_no_module_behind_a_face_re_exports_a_name(package):
    assert (folder(package) / "__init__.py").is_file(), (
        f"{package} is not a package under {LIB}: create its folder with an __init__.py face, or fix ENFORCED"
    )
    found = [r for m in modules(package) if m.name != "__init__.py" for r in reexports(m)]
    assert not found, (
        f"{package}: names re-exported by a module that is not the face: {found}. Import each name "
        "from its home module instead (or put it in the package's __init__ face, __all__)."
    )
    _count_others(lambda m: reexports(m) if m.name != "__init__.py" else [], "re-exports")


@pytest.mark.parametrize("package", ENFORCED)
def test_no_hidden_load_settings(package):
    found = [r for m in modules(package) for r in hidden_settings(m) if r.rsplit(":", 1)[0] not in DOORS]
    assert not found, (
        f"{package}: load_settings() called at {found}. Take the settings as an argument and let "
        "the stage's run(dp, params, settings) pass them down."
    )
    _count_others(hidden_settings, "load_settings() calls")


@pytest.mark.parametrize("package", ENFORCED)
def test_names_are_imported_from_their_home(package):
    found = second_doors(package)
    assert not found, (
        f"{package}: names imported from a module that only passes them on: {found}. Import them "
        "from the module that defines them."
    )


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """Each check finds its violation in a module written for it (so an empty result means something)."""
    monkeypatch.setitem(globals(), "LIB", tmp_path / "rerankeval")
    mod = tmp_path / "rerankeval" / "pkg" / "mod.py"
    mod.parent.mkdir(parents=True)
    (mod.parent / "__init__.py").write_text("", encoding="utf-8")
    mod.write_text(
        "from rerankeval.core.names import HYBRID as HYBRID\n"
        "from rerankeval.core.paths import ROOT  # noqa: F401\n"
        "from rerankeval.core.runs import Run\n"
        "from rerankeval.core.settings import load_settings\n"
        "x: Run = {}\n"
        "s = load_settings()\n",
        encoding="utf-8",
    )
    assert [r.split()[1] for r in reexports(mod)] == ["HYBRID", "ROOT"]
    assert hidden_settings(mod) == ["rerankeval/pkg/mod.py:6"]
    assert homes("pkg") == {"rerankeval.pkg": set(), "rerankeval.pkg.mod": {"x", "s"}}


def test_a_sub_package_is_checked_on_its_own(tmp_path, monkeypatch):
    """A sub-package named with dots (``apps.ask``) is found by its folder, its names have their dotted home, and
    its parent package's count leaves it out (so each module is counted once)."""
    monkeypatch.setitem(globals(), "LIB", tmp_path / "rerankeval")
    monkeypatch.setitem(globals(), "ENFORCED", ["pkg.sub"])
    sub = tmp_path / "rerankeval" / "pkg" / "sub"
    sub.mkdir(parents=True)
    for init in (sub.parent / "__init__.py", sub / "__init__.py"):
        init.write_text("", encoding="utf-8")
    (sub / "mod.py").write_text("from rerankeval.core.paths import ROOT  # noqa: F401\nY = 1\n", encoding="utf-8")
    (sub.parent / "top.py").write_text("Z = 2\n", encoding="utf-8")
    assert [m.name for m in modules("pkg.sub")] == ["__init__.py", "mod.py"]
    assert homes("pkg.sub") == {"rerankeval.pkg.sub": set(), "rerankeval.pkg.sub.mod": {"Y"}}
    assert [r.split()[1] for r in reexports(sub / "mod.py")] == ["ROOT"]
    assert [m.name for m in modules("pkg")] == ["__init__.py", "top.py"]
