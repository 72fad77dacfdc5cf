"""The local server's log in the shared temp dir never follows a link planted there (issue 32, defect 13's sibling)."""

from __future__ import annotations

import os

import pytest

from rerankeval.llm.local_server import LocalServer


def test_a_symlink_planted_at_the_log_path_is_not_followed(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    log = tmp_path / "rerankeval-llama-server-1.log"
    log.symlink_to(target)
    srv = LocalServer.__new__(LocalServer)
    srv.log_path = log
    with pytest.raises(OSError):  # ELOOP from O_NOFOLLOW, before anything is started or written
        srv._start_once(wait=1.0)
    assert target.read_text() == "precious\n"
    assert os.path.islink(log)
