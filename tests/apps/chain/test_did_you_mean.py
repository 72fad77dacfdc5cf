"""Issue 35 item 14 and issue 32's weak spot: messages that name the fix, with "did you mean" for a typo.

``pool_k=-3`` was told to set ``final_k=-3``; ``pool_kk=3`` was only a warning (its value silently lost);
``DATASET=debian-manual`` got no "did you mean debian-manuals"; an unknown ``baseline=`` fell back to the default
baseline without a word.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from rerankeval.apps import chain
from rerankeval.apps.chain import params as chain_params
from rerankeval.apps.chain import preflight as chain_preflight
from rerankeval.apps.chain.params import unknown_parameters
from rerankeval.apps.chain.preflight import check_baseline
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import verdict
from roots import env_roots


def stand_in(folder: Path, name: str, params: str) -> Path:
    """A notebooks folder holding one notebook ``name`` whose parameters cell is ``params`` (and one cell)."""
    folder.mkdir(parents=True, exist_ok=True)
    cell = new_code_cell(f'dataset: str = ""\n{params}')
    cell.metadata["tags"] = ["parameters"]
    nb = new_notebook(
        cells=[cell, new_code_cell("print('ran')")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def run_main(dataset: Path, *args: str) -> int:
    return chain.main(["--dataset", str(dataset), "--kernel", "python3", *args])


def test_a_negative_pool_k_is_not_told_to_lower_final_k():
    with pytest.raises(chain_params.PreflightError) as err:
        chain_preflight.check_parameters(chain_params.notebooks(), {"pool_k": -3, "final_k": 10})
    msg = str(err.value)
    assert "pool_k = -3 must be a whole number >= 1" in msg
    assert "final_k=-3" not in msg and "pool_k (-3) must be >= final_k" not in msg
    fix = msg.split('e.g. P="pool_k=')[1].split('"')[0]
    assert int(fix) >= 1, msg


def test_a_typo_of_a_parameter_stops_the_run_with_did_you_mean(tmp_path, monkeypatch, tiny_beir, capsys):
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", stand_in(tmp_path / "nbs", "05-analyse", "pool_k: int = 30"))
    rc = run_main(tiny_beir, "--params", "pool_kk=3")
    err = capsys.readouterr().err
    assert rc == chain.EXIT_PREFLIGHT, err[-2000:]
    line = next(ln for ln in err.splitlines() if "pool_kk" in ln)
    assert "did you mean pool_k?" in line and 'P="pool_k=3"' in line
    assert not list((env_roots().results / tiny_beir.name / "executed").glob("*.ipynb"))  # nothing ran


def test_an_unknown_parameter_without_a_close_name_stays_a_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", stand_in(tmp_path / "nbs", "05-analyse", "pool_k: int = 30"))
    unknown_parameters({"no_such_param": 3}, {"no_such_param": "3"})
    unknown_parameters({"pool_kk": 3}, {})  # from a params file: a warning, with the close name
    err = capsys.readouterr().err.splitlines()
    assert "no_such_param" in err[0] and "did you mean" not in err[0]
    assert "pool_kk (did you mean pool_k?)" in err[1] and "ignored" in err[1]


def test_a_dataset_name_typo_gets_did_you_mean(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "debian-manuals").mkdir(parents=True)
    monkeypatch.setattr(paths, "DATA_DIR", data)
    monkeypatch.setattr(paths, "SHARED_DATA_DIR", tmp_path / "no-shared")
    with pytest.raises(
        paths.DatasetNotFound, match="Did you mean debian-manuals\\? e.g. make report DATASET=debian-manuals"
    ):
        paths.resolve_dataset("debian-manual", load_settings())
    with pytest.raises(paths.DatasetNotFound, match=f"Did you mean {data / 'debian-manuals'}\\?"):
        paths.resolve_dataset(str(data / "debian-manual"), load_settings())
    with pytest.raises(paths.DatasetNotFound) as err:
        paths.resolve_dataset("zzzz", load_settings())
    assert "Did you mean" not in str(err.value)


METRICS = pd.DataFrame({"variant": ["bm25", "vector", "hybrid"], "ndcg@10": [0.50, 0.60, 0.66]})


def test_an_unknown_baseline_is_an_error_not_the_default_baseline():
    assert verdict.baseline_of(METRICS, baseline="bm25") == "bm25"
    assert verdict.baseline_of(METRICS) == "vector"
    with pytest.raises(ValueError) as err:
        verdict.baseline_of(METRICS, baseline="hybird")
    msg = str(err.value)
    assert "baseline='hybird'" in msg and "did you mean hybrid?" in msg and "bm25, vector, hybrid" in msg
    with pytest.raises(ValueError, match="variants evaluated are bm25, vector, hybrid"):
        verdict.verdict_lines(METRICS, None, baseline="cross_encoder")  # a real variant, not evaluated


def test_the_chain_refuses_an_unknown_baseline_before_the_run(tmp_path, monkeypatch, tiny_beir, capsys):
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", stand_in(tmp_path / "nbs", "05-analyse", 'baseline: str = ""'))
    rc = run_main(tiny_beir, "--set", "baseline=hybird")
    err = capsys.readouterr().err
    assert rc == chain.EXIT_PREFLIGHT, err[-2000:]
    assert "baseline='hybird' names no variant: did you mean hybrid?" in err and 'P="baseline=hybrid"' in err
    dp = paths.resolve_dataset(str(tiny_beir), load_settings())
    dp.runs_dir.mkdir(parents=True)
    (dp.runs_dir / "my_system.trec").write_text("q1 Q0 d1 1 1.0 x\n", encoding="utf-8")
    check_baseline(dp, chain_params.notebooks(), {"baseline": "my_system"})  # an external run is a variant
