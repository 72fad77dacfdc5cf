"""Issue 32, defect 12 and a weak spot: parameters are read as YAML that cannot hurt or mislead.

A YAML alias bomb in ``params/<dataset>.yaml`` passed ``yaml.safe_load`` and was expanded while the parameters were
hashed (156 s, 4 GB, a raw MemoryError); ``P="final_k=010"`` ran with 8 (YAML 1.1 octal) and ``draft_seed=1:30``
with 90 (base 60). Every reader of parameters goes through :mod:`rerankeval.core.yamlsafe`: the chain's params files
and ``--set``/``P=`` values, and the sweep's grids.
"""

from __future__ import annotations

import time

import pytest
import yaml

from rerankeval.apps.chain import params as chain_params
from rerankeval.core import paths, yamlsafe
from rerankeval.experiments import grid

# Nine levels of nine aliases: 9**9 (387 million) list items once expanded; a few hundred bytes on disk.
ALIAS_BOMB = (
    "\n".join(
        ["pool_k: 30", 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    )
    + "\n"
)


@pytest.fixture
def params_dir(tmp_path, monkeypatch):
    folder = tmp_path / "params"
    folder.mkdir()
    (folder / "default.yaml").write_text("final_k: 10\n", encoding="utf-8")
    monkeypatch.setattr(paths, "PARAMS_DIR", folder)
    return folder


def test_an_alias_bomb_in_a_params_file_is_refused_at_once_naming_the_file_and_line(params_dir):
    bomb = params_dir / "bombed.yaml"
    bomb.write_text(ALIAS_BOMB, encoding="utf-8")
    t0 = time.perf_counter()
    with pytest.raises(chain_params.PreflightError) as err:
        chain_params.load_params("bombed", [])
    assert time.perf_counter() - t0 < 5
    msg = str(err.value)
    assert str(bomb) in msg and "line 2" in msg and "anchor" in msg and "write the value out" in msg


def test_an_alias_in_a_set_value_is_refused():
    with pytest.raises(chain_params.PreflightError, match=r"--set 'ks=\[&a 1, \*a\]'.*anchors and aliases"):
        chain_params.load_params("none", ["ks=[&a 1, *a]"])


@pytest.mark.parametrize(
    "item, read_as, meant",
    [
        ("final_k=010", "octal number 8", "did you mean 10?"),
        ("draft_seed=1:30", "base-60 number 90", "did you mean 130?"),
        ("alpha=1:30.5", "base-60 number 90.5", "quote it ('1:30.5')"),
    ],
)
def test_yaml_1_1_number_forms_in_p_are_refused_with_the_number_meant(item, read_as, meant):
    with pytest.raises(chain_params.PreflightError) as err:
        chain_params.load_params("none", chain_params.split_params(item))
    msg = str(err.value)
    assert repr(item) in msg and read_as in msg and meant in msg


def test_an_octal_number_in_a_params_file_names_its_line(params_dir):
    (params_dir / "octal.yaml").write_text("pool_k: 30\nfinal_k: 010\n", encoding="utf-8")
    with pytest.raises(chain_params.PreflightError, match=r"octal\.yaml, line 2: 010 reads as the octal number 8"):
        chain_params.load_params("octal", [])


def test_ordinary_values_read_as_before(params_dir):
    (params_dir / "fine.yaml").write_text(
        "ks: [1, 3, 5]\nalpha: 0.3\nmode: yesno\nids: ['010', '1:30']\n", encoding="utf-8"
    )
    got = chain_params.load_params("fine", ["pool_k=30", "seed=0x1A", "rrf_k=07", "label='010'", "empty=", "t=1e-3"])
    assert got == {
        "final_k": 10,
        "ks": [1, 3, 5],
        "alpha": 0.3,
        "mode": "yesno",
        "ids": ["010", "1:30"],
        "pool_k": 30,
        "seed": 26,
        "rrf_k": 7,
        "label": "010",
        "empty": None,
        "t": "1e-3",
    }


def test_a_params_file_too_big_is_refused_before_it_is_read(params_dir):
    big = params_dir / "big.yaml"
    big.write_text("pool_k: 30\n" + "# padding\n" * 40_000, encoding="utf-8")
    with pytest.raises(chain_params.PreflightError, match=r"big\.yaml: \d+ bytes, more than the \d+"):
        chain_params.load_params("big", [])


def test_too_many_values_are_refused():
    item = "ks=[" + ",".join(["1"] * (yamlsafe.MAX_NODES + 5)) + "]"
    with pytest.raises(chain_params.PreflightError, match="more than 10000 values"):
        chain_params.load_params("none", [item])
    with pytest.raises(chain_params.PreflightError, match="nested deeper than"):
        chain_params.load_params("none", ["ks=" + "[" * 200 + "]" * 200])


def test_the_sweep_grid_file_is_read_the_same_way(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("base: &b {leg_k: [50]}\nsmall: *b\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"sweep\.yaml, line 1: an anchor &b"):
        grid.load_grid("small", f)
    f.write_text("small:\n  leg_k: [050]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="did you mean 50"):
        grid.load_grid("small", f)
    f.write_text("small:\n  leg_k: [50, 100]\n", encoding="utf-8")
    assert grid.load_grid("small", f).leg_k == [50, 100]


def test_the_shipped_params_files_read_unchanged():
    """Every file under params/ passes the checks (no anchors, no YAML 1.1 number forms)."""
    for f in sorted(paths.PARAMS_DIR.glob("*.yaml")):
        assert yamlsafe.load_file(f) == yaml.safe_load(f.read_text(encoding="utf-8")), f
