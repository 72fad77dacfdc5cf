import pytest

from rerankeval import paths


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


def test_results_root_moves_with_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path))
    assert paths.resolve_dataset("debian-manuals").root == tmp_path / "debian-manuals"
