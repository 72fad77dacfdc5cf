"""Names that recur are constants in one module (issue 33 item 3): the rerank pass ``"main"`` is
``rerank.config.MAIN_PASS`` (and the sweep's default chunking ``experiments.sweep.DEFAULT_CHUNKING``); every
``n_boot`` default of ``evaluate.stats.N_BOOT`` resamples names it (a record's 0, or a deliberately smaller count
such as ``evaluate.incomplete``'s, is another quantity)."""

import ast

from rerankeval.core import paths
from rerankeval.evaluate.stats import N_BOOT

LIB = paths.ROOT / "lib" / "rerankeval"
# files of other sessions that still hold the literal; the change is requested (empty this when it is applied)
PENDING: set[str] = set()  # files that still hold the literal (none)


def _constant_definitions(tree: ast.Module) -> set[int]:
    """ids of the nodes inside a module-level ``UPPER_CASE = ...`` or ``__all__ = [...]`` assignment."""
    out: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and (t.id.isupper() or t.id == "__all__") for t in targets):
                out |= {id(n) for n in ast.walk(node)}
    return out


def literals(value: str) -> list[str]:
    """``file:line`` of each string literal ``value`` in the library outside a constant's definition."""
    found = []
    for path in sorted(LIB.rglob("*.py")):
        rel = path.relative_to(LIB).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs = _constant_definitions(tree)
        found += [
            f"{rel}:{n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value == value and id(n) not in defs and rel not in PENDING
        ]
    return found


def test_main_is_a_constant_not_a_literal():
    found = literals("main")
    assert not found, (
        f'the literal "main" at {found}: use rerankeval.rerank.config.MAIN_PASS (the rerank pass) '
        "or rerankeval.experiments.sweep.DEFAULT_CHUNKING (the sweep's default chunking)"
    )


def n_boot_literals() -> list[str]:
    """``file:line`` of each ``n_boot`` parameter or field defaulted to the number ``N_BOOT`` instead of the name."""
    found = []
    for path in sorted(LIB.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pairs = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                pos = a.posonlyargs + a.args
                pairs += list(zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True))
                pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
                pairs = [(arg.arg, d) for arg, d in pairs]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                pairs = [(node.target.id, node.value)]
            found += [
                f"{path.relative_to(LIB).as_posix()}:{d.lineno}"
                for name, d in pairs
                if name == "n_boot" and isinstance(d, ast.Constant) and d.value == N_BOOT
            ]
    return found


def test_n_boot_defaults_are_n_boot():
    found = n_boot_literals()
    assert not found, f"n_boot defaulted to a number at {found}: use rerankeval.evaluate.stats.N_BOOT"
