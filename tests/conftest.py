"""Shared fixtures. Every test writes results and the Qdrant store under tmp, never into the repo.

The helper modules the tests import (``from fakellm import FakeLLM``) are in ``tests/support``, on the path by
pyproject's ``pythonpath``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rerankeval.core import paths

SHARED = paths.SHARED_DATA_DIR


@pytest.fixture(autouse=True)
def _isolated_outputs(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("out")
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(root / "results"))
    monkeypatch.setenv("RERANKEVAL_QDRANT_PATH", str(root / "qdrant"))
    yield


@pytest.fixture(autouse=True)
def _progress_unconfigured():
    """No test inherits another's progress display (``progress.configure``: the mode and the stage label)."""
    from rerankeval.core import progress

    progress.configure()
    yield
    progress.configure()


@pytest.fixture
def console(monkeypatch):
    """The chain's terminal in plain mode, caught: a ``builders.Console`` that remembers when each line was written."""
    from builders import Console
    from rerankeval.core import progress

    c = Console()
    monkeypatch.setattr(progress, "terminal", lambda: c)
    progress.configure(mode="plain")
    return c


@pytest.fixture
def tiny_pdf(tmp_path):
    from builders import tiny_pdf_dataset

    return tiny_pdf_dataset(tmp_path / "tiny-pdf")


@pytest.fixture
def tiny_beir(tmp_path):
    from builders import tiny_beir_dataset

    return tiny_beir_dataset(tmp_path / "tiny-beir")


def need_shared(name: str) -> Path:
    """The shared dataset folder, or skip the test with a clear message when ../shared/data is absent."""
    p = SHARED / name
    if not p.is_dir():
        pytest.skip(f"{p} is absent: this test needs the shared evaluation data (../shared/data/{name})")
    return p
