"""Stage 02's face (issue 33): ``from rerankeval import index``; ``index.run(dp, index.Params(...), settings)`` builds,
``index.write(dp, result)`` writes the manifest; the settings passed decide (never the environment); notebook 02
builds its parameters in one line from the one home of their defaults."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hashembed import CHUNKS, HashEmbedder, hash_dataset
from rerankeval import index
from rerankeval.core import paths
from rerankeval.core.settings import Settings
from rerankeval.corpus.contract import StageMissing
from rerankeval.index import build
from rerankeval.index.qdrant import edge as qdrant_edge

FACE = {
    "Params": "build",
    "Result": "build",
    "run": "build",
    "write": "build",
    "IndexInfo": "manifest",
    "load_index_info": "manifest",
    "open_embedder": "encoder",
    "check_embedder": "encoder",
    "EmbedderMismatch": "encoder",
}


@pytest.fixture
def dp(tmp_path):
    return hash_dataset(tmp_path / "src" / "tiny")


def test_the_face_names_each_public_name_once_from_its_home():
    assert sorted(index.__all__) == sorted(FACE)
    for name, home in FACE.items():
        assert getattr(index, name).__module__ == f"rerankeval.index.{home}", name
    with pytest.raises(AttributeError, match="its face is"):
        index.build_indexes  # noqa: B018 - the old entry point is gone, from the face ...
    assert not hasattr(build, "build_indexes") and not hasattr(build, "manifest_path")  # ... and from its module


def test_run_builds_and_write_marks_the_build_complete(dp):
    settings = Settings(qdrant_url=None, qdrant_backend="client", progress="off")
    result = index.run(dp, index.Params(), settings, embedder=HashEmbedder())
    assert result.cold and result.info.n_chunks == len(CHUNKS) and result.info.model_source is None
    assert not dp.index_manifest.exists()  # run writes no manifest: an unwritten build is not a complete one
    with pytest.raises(StageMissing, match="run the 02-build-indexes stage first"):
        index.load_index_info(dp)
    assert index.write(dp, result) == dp.index_manifest
    assert index.load_index_info(dp) == result.info
    assert (dp.root / result.info.bm25_dir).parent == dp.bm25_dir
    warm = index.run(dp, index.Params(), settings, embedder=HashEmbedder())
    assert not warm.cold and warm.info.collection == result.info.collection


def test_the_settings_passed_decide_never_the_environment(dp, monkeypatch):
    """The environment says: a dead server, the client backend, exact dense search in 03. The settings passed say:
    no server, edge, not exact; the build follows them, and its message says what 03 will do with them."""
    monkeypatch.setenv("QDRANT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("RERANKEVAL_QDRANT_BACKEND", "client")
    monkeypatch.setenv("RERANKEVAL_DENSE_EXACT", "true")
    monkeypatch.setattr(qdrant_edge, "INDEXING_THRESHOLD_KB", 1)  # 40 x 16 float32 = 2.5 KB: an HNSW graph
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed")
    settings = Settings(qdrant_url=None, qdrant_backend="edge", dense_exact=False, progress="off")
    result = index.run(dp, index.Params(), settings, embedder=HashEmbedder())
    assert result.info.backend == "edge" and result.info.dense_search["mode"] == "hnsw"
    assert "stage 03 scores every vector instead" not in result.messages()[-1]
    exact = dataclasses.replace(result, dense_exact=True)
    assert "stage 03 scores every vector instead (RERANKEVAL_DENSE_EXACT)" in exact.messages()[-1]
    again = index.run(dp, index.Params(), settings.model_copy(update={"dense_exact": True}), embedder=HashEmbedder())
    assert again.dense_exact and "scores every vector instead" in again.messages()[-1]


def test_params_of_takes_its_fields_and_ignores_the_rest():
    got = index.Params.of({"dataset": "x", "k1": 0.9, "b": 0.4, "dp": object(), "index": index})
    assert got == index.Params(dataset="x", k1=0.9, b=0.4) and index.Params.of(got) is got
    assert index.Params(embedding_model="").model is None and index.Params(embedding_model="/m").model == "/m"


def test_notebook_02_declares_exactly_the_params_and_builds_them_in_one_line():
    nb = json.loads((paths.NOTEBOOKS_DIR / "02-build-indexes.ipynb").read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    namespace: dict = {}
    exec(code[0], namespace)  # the parameters cell: typed literals only
    declared = {k: v for k, v in namespace.items() if not k.startswith("__")}
    assert list(declared) == [f.name for f in dataclasses.fields(index.Params)]
    assert index.Params(**declared) == index.Params()
    rest = "\n".join(code[1:])
    assert rest.count("index.Params.of(globals())") == 1 and "build_indexes" not in rest
    assert "index.run(dp, params, settings)" in rest and "index.write(dp, first)" in rest
