"""Settings are read once, by a program's entry point, and passed in (issue 33 item 4): no hidden ``load_settings()``.

Every module under ``lib/rerankeval`` is scanned (its syntax tree) for a call of ``load_settings``, by name or as an
attribute (``settings.load_settings()``), with the function it is in. A call is allowed only in a function named in
:data:`ENTRY_POINTS` (a program's ``main``, the explorer's door) or in ``core/settings.py``, its home. A library
function takes ``settings`` (or the one value it needs: the roots in ``dp.roots``) from its caller instead; the
progress display is configured once by the entry point (``core.progress.configure``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from rerankeval.core import paths

LIB = paths.ROOT / "lib" / "rerankeval"
HOME = "rerankeval/core/settings.py"  # defines load_settings; its redaction reads the environment's secrets with it
ENTRY_POINTS = {
    ("rerankeval/apps/chain/runner.py", "main"): "the chain: python -m rerankeval.apps.chain, rerankeval-chain",
    ("rerankeval/apps/lab.py", "main"): "JupyterLab: python -m rerankeval.apps.lab (make lab)",
    ("rerankeval/llm/server.py", "main"): "the local LLM server's CLI: python -m rerankeval.llm.server",
    ("rerankeval/apps/explore/session.py", "explorer"): (
        "the explorer's door in a JupyterLab session (explore.show(dp, q), as the README shows), unless settings "
        "are given (notebook 00 gives its own)"
    ),
}


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    """``(the enclosing function's qualified name, line)`` of each ``load_settings`` call; ``<module>`` at top level."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*where, child.name])
                continue
            if isinstance(child, ast.Call) and "load_settings" in (
                getattr(child.func, "id", None),
                getattr(child.func, "attr", None),
            ):
                found.append((".".join(where) or "<module>", child.lineno))
            visit(child, where)

    visit(tree, [])
    return found


def hidden_loads(lib: Path = LIB) -> dict[tuple[str, str], list[int]]:
    """``(module path from lib/, function) -> lines`` of every ``load_settings`` call under ``lib`` but its home."""
    out: dict[tuple[str, str], list[int]] = {}
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib.parent).as_posix()
        if rel == HOME:
            continue
        for where, line in _calls(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            out.setdefault((rel, where), []).append(line)
    return out


def test_no_library_function_reads_the_settings_itself():
    found = hidden_loads()
    hidden = sorted(f"{m}:{lines[0]} ({f})" for (m, f), lines in found.items() if (m, f) not in ENTRY_POINTS)
    assert not hidden, (
        f"load_settings() called in a library function: {hidden}. Take `settings` (or the one value needed) "
        "as an argument; the program's entry point reads them once and passes them down."
    )


def test_each_entry_point_is_a_program_that_reads_the_settings():
    found = hidden_loads()
    gone = sorted(f"{m} {f}" for m, f in ENTRY_POINTS if (m, f) not in found)
    assert not gone, f"no longer calls load_settings(): {gone}; remove it from ENTRY_POINTS"
    for module, function in ENTRY_POINTS:
        assert function == "main" or "explore" in module, (module, function)


def test_the_scan_finds_a_call_in_a_function_a_method_and_at_module_level(tmp_path):
    lib = tmp_path / "rerankeval"
    (lib / "pkg").mkdir(parents=True)
    (lib / "pkg" / "mod.py").write_text(
        "from rerankeval.core import settings\n"
        "from rerankeval.core.settings import load_settings\n"
        "S = load_settings()\n"
        "def run(dp, settings=None):\n"
        "    return settings or load_settings()\n"
        "class Stage:\n"
        "    def go(self):\n"
        "        return settings.load_settings(environ={})\n"
        "def fine(settings):\n"
        "    return settings.model\n",
        encoding="utf-8",
    )
    (lib / "core").mkdir()
    (lib / "core" / "settings.py").write_text("def load_settings():\n    return load_settings()\n", encoding="utf-8")
    assert hidden_loads(lib) == {
        ("rerankeval/pkg/mod.py", "<module>"): [3],
        ("rerankeval/pkg/mod.py", "run"): [5],
        ("rerankeval/pkg/mod.py", "Stage.go"): [8],
    }
