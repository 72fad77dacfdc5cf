import pytest

from rerankeval.core import paths


def test_default_dataset_resolves_under_data():
    dp = paths.resolve_dataset("debian-manuals")
    assert dp.source == paths.DATA_DIR / "debian-manuals"
    assert dp.root == paths.results_dir() / "debian-manuals"
    assert dp.run_file("bm25").name == "bm25.trec"


def test_relative_path_is_taken_from_the_repo_root_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert paths.resolve_dataset("data/debian-manuals").source == paths.DATA_DIR / "debian-manuals"


def test_missing_dataset_says_what_to_provide(tmp_path):
    with pytest.raises(paths.DatasetNotFound, match="queries.jsonl"):
        paths.resolve_dataset(tmp_path / "nope")


def test_a_public_collection_that_is_absent_says_where_to_get_it(tmp_path, monkeypatch):
    """A fresh clone without ../shared: `make report DATASET=../shared/data/scifact` names the download."""
    monkeypatch.setattr(paths, "SHARED_DATA_DIR", tmp_path / "shared")
    with pytest.raises(paths.DatasetNotFound, match=r"not shipped.*scifact\.zip.*make report DATASET=scifact"):
        paths.resolve_dataset(tmp_path / "shared" / "scifact")
    # issue 35 item 14: "export Cranfield in BEIR format" said not how; now the two commands
    with pytest.raises(
        paths.DatasetNotFound,
        match=r"pip install ir_datasets.*python -m rerankeval\.corpus\.cranfield"
        r".*corpus\.jsonl, queries\.jsonl and qrels/test\.tsv",
    ):
        paths.resolve_dataset("cranfield-missing/cranfield")


def test_results_root_moves_with_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path))
    assert paths.resolve_dataset("debian-manuals").root == tmp_path / "debian-manuals"


def test_every_stage_file_is_a_property_under_the_results_folder(tmp_path):
    dp = paths.resolve_dataset("debian-manuals")
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
