"""A figure is drawn again only when what it shows changed (report.figcache): the saved PNG is shown again from
equal inputs and the same code, without importing matplotlib; any change, a damaged file or an argument it
cannot key means: draw."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rerankeval.report import figcache, plots


def _table(ndcg: float = 0.5) -> pd.DataFrame:
    return pd.DataFrame({"ndcg@10": [ndcg, 0.25], "recall@10": [0.75, 0.5]}, index=["bm25", "vector"])


def _show(figs: Path, table: pd.DataFrame, title: str = "t") -> bool:
    return figcache.show(figs, "variants", plots.variant_bars, table, title=title, notebook="03")


def test_equal_inputs_show_the_saved_figure_and_any_change_draws_it_again(tmp_path):
    png = tmp_path / "03-variants.png"
    assert _show(tmp_path, _table()) is True  # nothing saved yet: drawn
    drawn, mtime = png.read_bytes(), png.stat().st_mtime_ns
    assert figcache.key_file(png).name == ".03-variants.png.key"  # hidden: not a figure of the report
    assert _show(tmp_path, _table()) is False and png.stat().st_mtime_ns == mtime  # shown again, not rewritten
    assert _show(tmp_path, _table(0.5 + 1e-12)) is True  # one value, however small the change
    assert _show(tmp_path, _table(0.5 + 1e-12), title="another") is True  # a keyword argument
    assert _show(tmp_path, _table()) is True and png.read_bytes() == drawn  # back: drawing is deterministic
    assert _show(tmp_path, _table().rename(columns={"recall@10": "recall@20"})) is True  # a column's name


def test_a_damaged_figure_or_key_file_is_drawn_again(tmp_path):
    png = tmp_path / "03-variants.png"
    _show(tmp_path, _table())
    drawn = png.read_bytes()
    png.write_bytes(drawn[:-10])  # truncated on disk
    assert _show(tmp_path, _table()) is True and png.read_bytes() == drawn
    figcache.key_file(png).write_text("{not json")
    assert _show(tmp_path, _table()) is True
    png.unlink()
    assert _show(tmp_path, _table()) is True and png.read_bytes() == drawn


def test_other_code_or_another_matplotlib_draws_it_again(tmp_path, monkeypatch):
    _show(tmp_path, _table())
    monkeypatch.setattr(figcache, "_file_hash", lambda module: "edited")  # the plotting module's source changed
    assert _show(tmp_path, _table()) is True
    assert _show(tmp_path, _table()) is False
    monkeypatch.setattr(figcache.metadata, "version", lambda name: "0.0")  # another matplotlib
    assert _show(tmp_path, _table()) is True


def test_an_argument_it_cannot_key_is_drawn_every_time(tmp_path):
    assert figcache.show(tmp_path, "x", lambda _: plots.variant_bars(_table()), object(), notebook="03") is True
    assert figcache.show(tmp_path, "x", lambda _: plots.variant_bars(_table()), object(), notebook="03") is True
    assert not figcache.key_file(tmp_path / "03-x.png").exists()
    with pytest.raises(figcache.Uncachable):
        figcache.key(plots.variant_bars, (pd.DataFrame({"a": [[1], [2]]}),), {})  # unhashable cells


def test_showing_a_saved_figure_imports_no_matplotlib(tmp_path):
    _show(tmp_path, _table())
    code = (
        "import json, sys\nimport pandas as pd\nfrom rerankeval.report import figcache, plots\n"
        "t = pd.DataFrame({'ndcg@10': [0.5, 0.25], 'recall@10': [0.75, 0.5]}, index=['bm25', 'vector'])\n"
        f"drawn = figcache.show({str(tmp_path)!r}, 'variants', plots.variant_bars, t, title='t', notebook='03')\n"
        "print(json.dumps([drawn, 'matplotlib' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, False]  # shown again, matplotlib not loaded
