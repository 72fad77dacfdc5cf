"""A quiet console in normal use (issue 23): a plain script that opens the embedded store and exits prints
nothing, also when it never closed what it opened (the two ``QdrantClient.__del__`` tracebacks of old)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hashembed import HashEmbedder, hash_dataset
from indexing import build_index

SUPPORT = Path(__file__).resolve().parents[2] / "support"  # tests/support, for the child script

# a retriever in a reference cycle, never closed, and a with-block abandoned half-way; gc off so that both are
# left to the interpreter's teardown, where qdrant-client's close fails (what a notebook-less script hits)
SCRIPT = """
import gc, sys
sys.path.insert(0, {support!r})
from hashembed import HashEmbedder
from rerankeval.core import paths
from rerankeval.index.qdrant import store
from rerankeval.core.settings import load_settings
from rerankeval.retrieve.retriever import Retriever

dp = paths.resolve_dataset({dataset!r}, load_settings())

def leak():
    r = Retriever(dp, load_settings(), embedder=HashEmbedder(), progress=False)
    r.cycle = r
    print(len(r.search("hybrid", {{"q": "topic1 word2"}}, leg_k=100, pool_k=10, rrf_k=60).run["q"]))
    if {client!r}:
        class Holder:
            pass
        h = Holder()
        h.cm = store.open_client(dp, path={other!r}, url="")
        h.client, h.me = h.cm.__enter__(), h

gc.disable()
leak()
"""


def _dataset(root: Path, backend: str, env: dict[str, str], monkeypatch) -> Path:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    dp = hash_dataset(root / "src" / "tiny")
    build_index(dp, embedder=HashEmbedder())  # the backend: RERANKEVAL_QDRANT_BACKEND set above
    return root / "src" / "tiny"


@pytest.mark.parametrize("backend", ["client", "edge"])
def test_a_script_that_leaves_the_store_open_exits_without_a_traceback(tmp_path, monkeypatch, backend):
    if backend == "edge":
        pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed")
    monkeypatch.delenv("QDRANT_URL", raising=False)
    env = {
        "RERANKEVAL_RESULTS": str(tmp_path / "res"),
        "RERANKEVAL_QDRANT_PATH": str(tmp_path / "qdrant"),
        "RERANKEVAL_QDRANT_BACKEND": backend,
    }
    dataset = _dataset(tmp_path, backend, env, monkeypatch)
    script = tmp_path / "leak.py"
    script.write_text(
        textwrap.dedent(
            SCRIPT.format(
                support=str(SUPPORT), dataset=str(dataset), client=backend == "client", other=str(tmp_path / "other")
            )
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "40"
    assert done.stderr == ""
