"""The stage layers are enforced: import-linter's contracts (``.importlinter``) hold on the tree, every sub-package
is in the layers, and a deliberately wrong import breaks them (so the check is not vacuous)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rerankeval.core.paths import ROOT

CONFIG = ROOT / ".importlinter"
# import-linter has no ``python -m`` entry point: call its CLI function with this interpreter
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]


def _contracts(config: Path = CONFIG) -> dict[str, configparser.SectionProxy]:
    """contract id -> its section of ``.importlinter``."""
    cp = configparser.ConfigParser()
    cp.read(config, encoding="utf-8")
    prefix = "importlinter:contract:"
    return {s[len(prefix) :]: cp[s] for s in cp.sections() if s.startswith(prefix)}


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` run from ``root`` (its ``.importlinter``) over the package in ``root/lib``."""
    env = {**os.environ, "PYTHONPATH": str(root / "lib"), "COLUMNS": "400"}  # one summary line per contract
    return subprocess.run(
        [*LINT, "--no-cache", "--config", str(root / ".importlinter")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _status(output: str, name: str) -> str:
    """``KEPT`` or ``BROKEN``: what the summary says of the contract ``name``."""
    for line in output.splitlines():
        if line.startswith(name + " ") and line.rsplit(" ", 1)[-1] in ("KEPT", "BROKEN"):
            return line.rsplit(" ", 1)[-1]
    raise AssertionError(f"contract {name!r} is not in lint-imports' summary:\n{output}")


def test_every_contract_is_kept_on_the_tree():
    """0 imports against the layers, 0 cycles, core a leaf, retrieve and rerank independent, nobody imports apps."""
    got = _lint(ROOT)
    out = got.stdout + got.stderr
    broken = [c["name"] for c in _contracts().values() if _status(out, c["name"]) != "KEPT"]
    assert got.returncode == 0 and not broken, f"broken contracts {broken}:\n{out}"


def test_every_sub_package_is_a_layer():
    """A new sub-package must be placed in the layers (else nothing checks what it imports)."""
    layers = {name.strip() for line in _contracts()["layers"]["layers"].splitlines() for name in line.split("|")}
    packages = {p.parent.name for p in (ROOT / "lib" / "rerankeval").glob("*/__init__.py")}
    assert packages == layers - {""}, (
        f"in lib/ but not in the layers: {packages - layers}; in the layers but not in lib/: {layers - packages - {''}}"
    )


@pytest.mark.parametrize(
    "module, line, contracts",
    [
        ("core/paths.py", "import rerankeval.apps.explore", ["core-is-a-leaf", "nothing-imports-apps", "layers"]),
        ("retrieve/fusion.py", "from rerankeval.rerank import ledger", ["retrieve-rerank-independent", "layers"]),
        ("corpus/snippets.py", "from rerankeval.evaluate import metrics", ["layers", "no-cycles"]),
        ("evaluate/metrics.py", "from rerankeval.llm import client", ["evaluate-reads-records"]),
    ],
    ids=["core-imports-apps", "retrieve-imports-rerank", "corpus-imports-evaluate", "evaluate-calls-the-llm"],
)
def test_a_wrong_import_breaks_the_contracts(tmp_path, module, line, contracts):
    """A copy of lib/ with one import against the layers: lint-imports fails, naming the contract and the import."""
    shutil.copytree(ROOT / "lib", tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    target = tmp_path / "lib" / "rerankeval" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # deliberately wrong\n", encoding="utf-8")
    got = _lint(tmp_path)
    out = got.stdout + got.stderr
    assert got.returncode != 0, out
    importer = "rerankeval." + module.removesuffix(".py").replace("/", ".")
    imported = line.split()[1]  # the module imported (or its package, for `from a.b import c`)
    assert f"{importer} -> {imported}" in out, out
    names = {i: c["name"] for i, c in _contracts().items()}
    for cid in contracts:
        assert _status(out, names[cid]) == "BROKEN", f"{cid} should be broken by {line!r} in {module}:\n{out}"
