import pytest

from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings


def test_default_dataset_resolves_under_data():
    settings = load_settings()
    dp = paths.resolve_dataset("debian-manuals", settings)
    assert dp.source == paths.DATA_DIR / "debian-manuals"
    assert dp.roots == paths.Roots.of(settings) and dp.root == dp.roots.results / "debian-manuals"
    assert dp.run_file("bm25").name == "bm25.trec"


def test_relative_path_is_taken_from_the_repo_root_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert paths.resolve_dataset("data/debian-manuals", load_settings()).source == paths.DATA_DIR / "debian-manuals"


def test_missing_dataset_says_what_to_provide(tmp_path):
    with pytest.raises(paths.DatasetNotFound, match="queries.jsonl"):
        paths.resolve_dataset(tmp_path / "nope", load_settings())


def test_a_public_collection_that_is_absent_says_where_to_get_it(tmp_path, monkeypatch):
    """A fresh clone without ../shared: `make report DATASET=../shared/data/scifact` names the download."""
    monkeypatch.setattr(paths, "SHARED_DATA_DIR", tmp_path / "shared")
    with pytest.raises(paths.DatasetNotFound, match=r"not shipped.*scifact\.zip.*make report DATASET=scifact"):
        paths.resolve_dataset(tmp_path / "shared" / "scifact", load_settings())
    # issue 35 item 14: "export Cranfield in BEIR format" said not how; now the two commands
    with pytest.raises(
        paths.DatasetNotFound,
        match=r"pip install ir_datasets.*python -m rerankeval\.corpus\.cranfield"
        r".*corpus\.jsonl, queries\.jsonl and qrels/test\.tsv",
    ):
        paths.resolve_dataset("cranfield-missing/cranfield", load_settings())


def test_results_root_moves_with_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path))
    assert paths.resolve_dataset("debian-manuals", load_settings()).root == tmp_path / "debian-manuals"


def test_the_roots_are_the_settings_given_never_the_environments(tmp_path, monkeypatch):
    """Issue 33 item 4: nothing in paths reads the environment; the caller's settings place the outputs."""
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "env-results"))
    monkeypatch.setenv("RERANKEVAL_QDRANT_PATH", str(tmp_path / "env-qdrant"))
    given = Settings(results=tmp_path / "r", cache=tmp_path / "c", qdrant_path=tmp_path / "q")
    dp = paths.resolve_dataset("debian-manuals", given)
    assert dp.roots == paths.Roots(results=tmp_path / "r", cache=tmp_path / "c", qdrant=tmp_path / "q")
    assert dp.root == tmp_path / "r" / "debian-manuals" and dp.qdrant_path == tmp_path / "q" / "debian-manuals"


def test_every_stage_file_is_a_property_under_the_results_folder(tmp_path):
    dp = paths.resolve_dataset("debian-manuals", load_settings())
    outputs = [
        getattr(dp, n)
        for n, v in vars(paths.DatasetPaths).items()
        if isinstance(v, property) and not n.startswith("source") and n != "qdrant_path"
    ]
    outputs += [
        dp.run_file("bm25"),
        dp.chunk_run_file("bm25"),
        dp.variant_record("bm25"),
        dp.figure("01-x"),
        dp.executed_notebook("01-a.ipynb"),
        dp.notebook_html("01-a"),
        dp.stage_dir("other"),
    ]
    assert len(outputs) > 30 and all(p.is_relative_to(dp.root) for p in outputs)
    assert len(set(outputs)) == len(outputs)  # no two files share a path
    assert dp.source_record == dp.root / "source.json" and dp.source_qrels("dev") == dp.source / "qrels" / "dev.tsv"
