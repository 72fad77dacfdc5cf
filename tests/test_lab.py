"""Issue 10 point 0: ``make lab`` (``python -m rerankeval.apps.lab``) starts here (as root too, with no display),
prints its URL with the token, serves ``/lab`` and the notebook listing, selects the project kernel, and
stops on Ctrl-C. A configured (dummy) endpoint keeps llama-server from starting."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import nbformat
import pytest

from rerankeval.apps import lab


def _lines(proc: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _url(q: queue.Queue, proc: subprocess.Popen, timeout: float = 240) -> str:
    seen = []
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        try:
            line = q.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            pytest.fail(f"lab exited (rc {proc.wait()}) before printing its URL:\n{''.join(seen)[-3000:]}")
        seen.append(line)
        if line.startswith("[lab] JupyterLab: "):
            return line.split(": ", 1)[1].strip()
    proc.kill()
    pytest.fail(f"no URL within {timeout:.0f} s:\n{''.join(seen)[-3000:]}")


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read()


def test_lab_starts_serves_the_notebooks_and_stops_on_ctrl_c(tmp_path):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), nbdir / "01-probe.ipynb")
    port = lab.free_port(0)
    env = dict(os.environ, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-dummy-lab",
               PYTHONUNBUFFERED="1")
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    proc = subprocess.Popen([sys.executable, "-m", "rerankeval.apps.lab", "--port", str(port), "--notebook-dir",
                             str(nbdir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = _url(_lines(proc), proc)
        base, _, token = url.partition("/lab?token=")
        assert base == f"http://127.0.0.1:{port}" and len(token) >= 32, url
        status, page = _get(url)
        assert status == 200 and b"JupyterLab" in page
        status, listing = _get(f"{base}/api/contents?token={token}")
        assert "01-probe.ipynb" in {item["name"] for item in json.loads(listing)["content"]}
        status, specs = _get(f"{base}/api/kernelspecs?token={token}")
        assert json.loads(specs)["default"] == lab.kernel_name()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with socket.socket() as s, pytest.raises(OSError):  # nothing listens any more: JupyterLab stopped too
        s.settimeout(5)
        s.connect(("127.0.0.1", port))


def test_the_command_allows_root_and_opens_no_browser_without_a_display(tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0)
    cmd = lab.lab_command(8890, "tok", tmp_path, "127.0.0.1", browser=lab.has_display())
    assert "--allow-root" in cmd and "--no-browser" in cmd
    assert "--ServerApp.port=8890" in cmd and "--IdentityProvider.token=tok" in cmd
    monkeypatch.setattr(lab.os, "geteuid", lambda: 1000)
    assert "--allow-root" not in lab.lab_command(8890, "tok", tmp_path, "127.0.0.1", browser=False)


def test_lab_opens_the_explorer_first(tmp_path, capsys):
    assert (lab.paths.NOTEBOOKS_DIR / lab.FIRST_NOTEBOOK).is_file()  # 00-explore ships with the project
    lab._announce("http://127.0.0.1:8890", "tok", lab.paths.NOTEBOOKS_DIR, {})
    assert "http://127.0.0.1:8890/lab/tree/00-explore.ipynb?token=tok" in capsys.readouterr().out
    lab._announce("http://127.0.0.1:8890", "tok", tmp_path, {})  # a folder without it: the plain /lab
    assert "http://127.0.0.1:8890/lab?token=tok" in capsys.readouterr().out
