"""Issue 10 point 0: ``make lab`` (``python -m rerankeval.apps.lab``) starts here (as root too, with no display),
prints its URL with the token, serves ``/lab`` and the notebook listing, selects the project kernel, and
stops on Ctrl-C. A configured (dummy) endpoint keeps llama-server from starting."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

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


def _stop(proc: subprocess.Popen) -> int:
    """Ctrl-C to `make lab`'s process, as a user stops it; its exit code."""
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=60)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_lab_starts_serves_the_notebooks_and_stops_on_ctrl_c(tmp_path):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), nbdir / "01-probe.ipynb")
    port = lab.free_port(0)
    env = dict(os.environ, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-dummy-lab", PYTHONUNBUFFERED="1")
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    opened = tmp_path / "my-docs"  # make lab DATASET=...: what 00-explore opens
    opened.mkdir()
    env["RERANKEVAL_RESULTS"] = str(tmp_path / "res")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rerankeval.apps.lab",
            "--port",
            str(port),
            "--notebook-dir",
            str(nbdir),
            "--dataset",
            str(opened),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
        kernel = _Kernel(base, token)  # a kernel of the lab sees the dataset it was opened on
        assert kernel.value("__import__('rerankeval.apps.lab').apps.lab.dataset_of_lab('debian-manuals')") == str(
            opened.resolve()
        )
        kernel.ws.close()
        assert _stop(proc) == 0
    finally:
        _kill(proc)
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


def test_the_lab_config_folder_is_private_and_never_follows_a_planted_symlink(tmp_path, monkeypatch):
    """Issue 32, defect 13: ``$TMPDIR/rerankeval-lab-<uid>/`` was reused without an owner or mode check; a symlink
    planted there by another user made the (root) lab overwrite the link's target."""
    monkeypatch.setattr(lab.tempfile, "tempdir", str(tmp_path))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    planted = tmp_path / f"rerankeval-lab-{os.getuid()}"  # the old fixed name, prepared by someone else
    planted.mkdir(mode=0o777)
    (planted / "jupyter_server_config.py").symlink_to(victim)
    with lab.config_env() as env:
        folder = Path(env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0])
        assert folder != planted and folder.parent == tmp_path
        st = folder.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
        config = folder / "jupyter_server_config.py"
        assert not config.is_symlink() and "quiet_logs()" in config.read_text(encoding="utf-8")
        assert stat.S_IMODE(config.stat().st_mode) & 0o077 == 0
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not folder.exists()  # removed when the lab stops


def test_a_lab_run_as_root_says_what_that_means(monkeypatch, capsys):
    monkeypatch.setattr(lab.os, "geteuid", lambda: 0)
    monkeypatch.setattr(lab, "serve", lambda *a, **k: 0)
    monkeypatch.setattr(lab.signal, "signal", lambda *a: None)  # main installs a SIGTERM handler: not in pytest
    assert lab.main(["--port", "8890", "--no-browser"]) == 0
    err = capsys.readouterr().err
    assert "[lab] running as root" in err and "--allow-root" in err and "root terminal" in err
    monkeypatch.setattr(lab.os, "geteuid", lambda: 1000)
    assert lab.main(["--port", "8890", "--no-browser"]) == 0
    assert "root" not in capsys.readouterr().err


def test_lab_opens_the_explorer_first(tmp_path, capsys):
    assert (lab.paths.NOTEBOOKS_DIR / lab.FIRST_NOTEBOOK).is_file()  # 00-explore ships with the project
    lab._announce("http://127.0.0.1:8890", "tok", lab.paths.NOTEBOOKS_DIR, {})
    assert "http://127.0.0.1:8890/lab/tree/00-explore.ipynb?token=tok" in capsys.readouterr().out
    lab._announce("http://127.0.0.1:8890", "tok", tmp_path, {})  # a folder without it: the plain /lab
    assert "http://127.0.0.1:8890/lab?token=tok" in capsys.readouterr().out


# -- the explorer's widget in a real JupyterLab (issue 23 item 3) ------------------------------------------------
class _Kernel:
    """A kernel of a running JupyterLab, driven as a browser does: over the server's websocket (JSON protocol)."""

    def __init__(self, base: str, token: str) -> None:
        import uuid

        import websocket

        req = urllib.request.Request(
            f"{base}/api/kernels?token={token}",
            method="POST",
            data=json.dumps({"name": lab.kernel_name()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            self.id = json.loads(r.read())["id"]
        self.session, self.uuid = uuid.uuid4().hex, uuid.uuid4
        ws_base = base.replace("http://", "ws://")
        self.ws = websocket.create_connection(
            f"{ws_base}/api/kernels/{self.id}/channels?token={token}&session_id={self.session}", timeout=60
        )

    def send(self, msg_type: str, content: dict) -> list[dict]:
        """Send one shell message; every iopub message it caused, until the kernel is idle again."""
        mid = self.uuid().hex
        self.ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": mid,
                        "username": "test",
                        "session": self.session,
                        "msg_type": msg_type,
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": content,
                    "channel": "shell",
                }
            )
        )
        got: list[dict] = []
        while True:
            m = json.loads(self.ws.recv())
            if m.get("parent_header", {}).get("msg_id") != mid or m["channel"] != "iopub":
                continue
            if m["msg_type"] == "error":
                pytest.fail("kernel error:\n" + "\n".join(m["content"]["traceback"]))
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return got
            got.append(m)

    def run(self, code: str) -> list[dict]:
        return self.send(
            "execute_request",
            {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False},
        )

    def value(self, expr: str) -> str:
        out = self.run(f"print({expr})")
        return "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream").strip()

    def comm(self, comm_id: str, data: dict) -> list[dict]:
        """What the browser sends when a widget is used: a state update or a button's click."""
        return self.send("comm_msg", {"comm_id": comm_id, "data": {"buffer_paths": [], **data}})


def _html(msgs: list[dict]) -> str:
    return "".join(
        m["content"].get("data", {}).get("text/html", "")
        for m in msgs
        if m["msg_type"] in ("display_data", "execute_result")
    )


def _states(msgs: list[dict]) -> str:
    """The widgets' states a message set or opened (a redrawn view opens new widgets)."""
    return json.dumps(
        [m["content"]["data"].get("state", {}) for m in msgs if m["msg_type"] in ("comm_msg", "comm_open")]
    )


def test_the_explorer_widget_works_in_a_real_jupyterlab(tmp_path):
    pytest.importorskip("jupyter_server", reason="jupyter-server is not installed: pip install -r requirements.txt")
    from explore_data import UNITS, _dataset
    from rerankeval.core.paths import NOTEBOOKS_DIR
    from rerankeval.evaluate import judgments

    dp = _dataset(tmp_path)
    cells = [c for c in nbformat.read(NOTEBOOKS_DIR / "00-explore.ipynb", as_version=4).cells if c.cell_type == "code"]
    params, setup = cells[0].source, cells[1].source
    widget_cell = next(c.source for c in cells if "explore.widget(" in c.source)
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "RERANKEVAL_STAGE")}
    env.update(OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-dummy-lab", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rerankeval.apps.lab", "--port", str(lab.free_port(0)), "--notebook-dir", str(nbdir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _lines(proc)
        base, _, token = _url(lines, proc, timeout=60).partition("/lab?token=")
        assert b"@jupyter-widgets/jupyterlab-manager" in _get(f"{base}/lab?token={token}")[1]  # the widget's JS
        k = _Kernel(base, token)
        k.run(f"{params}\ndataset = {str(dp.source)!r}\nk = 3\n{setup}")
        shown = k.run(widget_cell)
        assert any("application/vnd.jupyter.widget-view+json" in m["content"].get("data", {}) for m in shown)
        k.run("ui = _.ui")
        ids = {n: k.value(f"ui.{n}.model_id") for n in ("text", "pick", "status")}
        out = k.comm(ids["text"], {"method": "update", "state": {"value": "q2"}})  # typed, then Enter
        assert ".rre-x" in _states(out) and "how do beta upgrades run" in _states(out)  # the view's widgets
        index = k.value("[o[1] for o in ui.pick.options].index('q3')")
        out = k.comm(ids["pick"], {"method": "update", "state": {"index": int(index)}})  # a query picked
        assert "what rotates weekly" in _states(out)
        grade = k.value(f"ui.rows[{UNITS[3]!r}][0].buttons[2].model_id")  # the "2" under the unit's first hit
        out = k.comm(grade, {"method": "custom", "content": {"event": "click"}})  # "2" pressed
        assert "recorded: q3 / m.pdf#p4 = 2" in _states(out)
        assert judgments.read_judgments(dp.judgments("test")) == [("q3", UNITS[3], 2, 2)]
        k.ws.close()
        assert _stop(proc) == 0
    finally:
        _kill(proc)
    log = "".join(iter(lines.get, None))
    assert "Traceback" not in log and "IPKernelApp" not in log, log  # the console of make lab stays clean
    assert "extension was successfully" not in log and "websocket_ping_timeout" not in log, log


def test_the_lab_log_filter_turns_the_kernel_ws_protocol_traceback_into_one_line():
    import logging

    try:
        raise AttributeError("'NoneType' object has no attribute 'kernel_ws_protocol'")
    except AttributeError:
        rec = logging.LogRecord(
            "ServerApp", logging.ERROR, __file__, 1, "Uncaught exception GET %s", ("/x",), sys.exc_info()
        )
    assert lab.QuietFilter().filter(rec) and rec.exc_info is None and rec.getMessage() == lab.WS_REATTACH
    ping = logging.LogRecord(
        "tornado.general", logging.WARNING, __file__, 1, "The websocket_ping_timeout (90000) cannot be longer", (), None
    )
    other = logging.LogRecord("ServerApp", logging.WARNING, __file__, 1, "a real warning", (), None)
    assert not lab.QuietFilter().filter(ping) and lab.QuietFilter().filter(other)
    cmd = lab.lab_command(8890, "tok", lab.paths.NOTEBOOKS_DIR, "127.0.0.1", browser=False)
    assert "--ServerApp.log_level=WARN" in cmd and "--KernelManager.transport=ipc" in cmd
    with lab.config_env() as env:
        first = env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0]
        assert "quiet_logs()" in open(os.path.join(first, "jupyter_server_config.py"), encoding="utf-8").read()


# -- issue 35 item 6: the explorer leaves the repository clean; make lab DATASET=...; the project kernel ---------------
def _dirty(model: dict) -> None:
    """What a JupyterLab session adds to a notebook before it autosaves it."""
    nb = model["content"]
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"line {i}\n" * 472}]
        cell["execution_count"] = i + 1
        cell["metadata"].update(scrolled=True, execution={"iopub.status.idle": "2026-12-06T10:01:00Z"})
    nb["metadata"]["language_info"] = {
        "name": "python",
        "version": "3.12.3",
        "mimetype": "text/x-python",
        "file_extension": ".py",
        "codemirror_mode": {"name": "ipython", "version": 3},
    }
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}


def test_saving_a_notebook_of_the_repository_strips_what_a_session_added(tmp_path, monkeypatch):
    """JupyterLab's autosave wrote 472 output lines into the tracked 00-explore.ipynb; through the pre_save_hook the
    saved file is byte for byte the stored one. A notebook outside notebooks/ keeps its outputs."""
    import shutil

    from jupyter_server.services.contents.filemanager import FileContentsManager

    stored = lab.paths.NOTEBOOKS_DIR / lab.FIRST_NOTEBOOK
    (tmp_path / "notebooks").mkdir()
    shutil.copy(stored, tmp_path / "notebooks" / lab.FIRST_NOTEBOOK)
    shutil.copy(stored, tmp_path / "scratch.ipynb")
    monkeypatch.setattr(lab.paths, "NOTEBOOKS_DIR", tmp_path / "notebooks")
    cm = FileContentsManager(root_dir=str(tmp_path))
    cm.pre_save_hook = lab.strip_outputs  # what the lab's config sets (test_the_lab_config_installs_the_hook)
    for path in (f"notebooks/{lab.FIRST_NOTEBOOK}", "scratch.ipynb"):
        model = cm.get(path)
        _dirty(model)
        cm.save({"type": "notebook", "content": model["content"]}, path)
    assert (tmp_path / "notebooks" / lab.FIRST_NOTEBOOK).read_bytes() == stored.read_bytes()
    kept = nbformat.read(tmp_path / "scratch.ipynb", as_version=4)
    assert any(c.get("outputs") for c in kept.cells) and kept.metadata.language_info.get("version") == "3.12.3"


def test_a_new_notebook_under_notebooks_is_saved_without_outputs_or_run_details(tmp_path, monkeypatch):
    monkeypatch.setattr(lab.paths, "NOTEBOOKS_DIR", tmp_path)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    model = {"type": "notebook", "content": json.loads(nbformat.writes(nb))}
    _dirty(model)

    class Manager:
        root_dir = str(tmp_path)

    lab.strip_outputs(model=model, path="/new.ipynb", contents_manager=Manager())
    cell = model["content"]["cells"][0]
    assert cell["outputs"] == [] and cell["execution_count"] is None
    assert "scrolled" not in cell["metadata"] and "execution" not in cell["metadata"]
    assert model["content"]["metadata"]["language_info"] == {"name": "python"}
    assert "widgets" not in model["content"]["metadata"]
    text = {"type": "file", "content": "x", "format": "text"}
    lab.strip_outputs(model=text, path="notes.txt", contents_manager=Manager())  # not a notebook: untouched
    assert text == {"type": "file", "content": "x", "format": "text"}


def test_the_lab_config_installs_the_hook(tmp_path):
    from jupyter_server.services.contents.filemanager import AsyncFileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    with lab.config_env() as env:
        folder = env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0]
        config = PyFileConfigLoader("jupyter_server_config.py", path=folder).load_config()
    assert config.ContentsManager.pre_save_hook == "rerankeval.apps.lab.strip_outputs"
    cm = AsyncFileContentsManager(config=config, root_dir=str(tmp_path))  # the lab's (a subclass) takes it too
    assert cm.pre_save_hook is lab.strip_outputs


def test_make_lab_opens_the_dataset_it_is_given(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "my-docs"
    folder.mkdir()
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "res"))
    monkeypatch.delenv(lab.DATASET_ENV, raising=False)
    assert lab.dataset_of_lab("debian-manuals") == "debian-manuals"
    monkeypatch.setenv(lab.DATASET_ENV, str(folder))  # what the lab gives its kernels
    assert lab.dataset_of_lab("debian-manuals") == str(folder)  # 00's parameter left at its default
    assert lab.dataset_of_lab("scifact") == "scifact"  # given (an edit, or papermill's): it wins
    seen = {}
    monkeypatch.setattr(lab, "serve", lambda *a: seen.update(dataset=a[-1]) or 0)
    monkeypatch.setattr(lab.signal, "signal", lambda *a: None)
    assert lab.main(["--port", "8890", "--no-browser", "--dataset", str(folder)]) == 0
    assert seen["dataset"].source == folder.resolve()
    assert lab.main(["--port", "8890", "--no-browser", "--dataset", "debian-manual"]) == 2
    assert "did you mean" in capsys.readouterr().err.lower()
    makefile = (lab.paths.ROOT / "Makefile").read_text(encoding="utf-8")
    target = makefile.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert '-m rerankeval.apps.lab --dataset "$(DATASET_ARG)"' in target


def test_the_explorer_opens_on_the_project_kernel():
    nb = nbformat.read(lab.paths.NOTEBOOKS_DIR / lab.FIRST_NOTEBOOK, as_version=4)
    assert nb.metadata.kernelspec.name == lab.KERNEL
    assert "lab.dataset_of_lab(dataset)" in "".join(c.source for c in nb.cells)
    assert f"--MappingKernelManager.default_kernel_name={lab.kernel_name()}" in lab.lab_command(
        8890, "tok", lab.paths.NOTEBOOKS_DIR, "127.0.0.1", browser=False
    )
