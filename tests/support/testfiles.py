"""A test file's module by its path under ``tests/``, for a check one test file borrows from another (test modules
are not importable by name: pytest imports them with ``--import-mode=importlib``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[1]


def load(relative: str) -> ModuleType:
    """``tests/<relative>`` (``"project/test_one_home.py"``) imported once, under the name pytest's importlib mode
    gives it (``tests.project.test_one_home``): the module pytest collected, when it did, else a first import."""
    name = "tests." + relative.removesuffix(".py").replace("/", ".")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / relative)
        if spec is None or spec.loader is None:
            raise ImportError(f"no test file {TESTS / relative}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
