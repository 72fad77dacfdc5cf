"""The chain's console: what its kernels and its Makefile print on a normal run (issue 23, "clean console")."""

from __future__ import annotations

import glob
import os
import subprocess
import tempfile

import nbformat
import pytest

from rerankeval.apps.chain.signals import kernel_manager_class
from rerankeval.core import paths

TCP_WARNING = "running over TCP without encryption"


@pytest.mark.skipif(os.name != "posix", reason="IPC transport needs Unix sockets")
def test_kernels_talk_over_ipc_so_ipykernel_prints_no_tcp_warning(tmp_path, capfd) -> None:
    import papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    src, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "rerankeval-kernel-*")))
    papermill.execute_notebook(
        str(src),
        str(out),
        kernel_name="python3",
        progress_bar=False,
        kernel_manager_class=kernel_manager_class({"RERANKEVAL_X": "1"}),
    )
    assert nbformat.read(out, as_version=4).cells[0].outputs[0]["text"] == "42\n"
    assert TCP_WARNING not in capfd.readouterr().err  # the kernel's stderr is this process's fd 2
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "rerankeval-kernel-*")))
    assert after <= before  # the sockets' folder went with the kernel


def test_make_help_expands_its_variables() -> None:
    got = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=paths.ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "make report" in got and "$(" not in got


def test_a_kernel_is_not_interrupted_on_its_way_out(monkeypatch) -> None:
    """jupyter_client sends SIGINT before every shutdown request; an ipykernel caught inside a message handler then
    logs "KeyboardInterrupt caught in kernel." on the terminal (seen after 09-assess in a warm make report). The
    chain's kernels skip that interrupt while shutting down, and only then."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    sent: list[bool] = []

    async def recorder(self) -> None:
        sent.append(self.shutting_down)

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", recorder)
    km = kernel_manager_class({})(kernel_name="python3")
    km.shutting_down = False
    asyncio.run(km._async_interrupt_kernel())  # a user's Ctrl-C: passed on
    km.shutting_down = True
    asyncio.run(km._async_interrupt_kernel())  # on the way out: not sent
    assert sent == [False]


@pytest.mark.parametrize("quiet", [True, False])
def test_what_a_kernel_prints_while_it_exits_goes_to_its_exit_log(tmp_path, capfd, quiet) -> None:
    """ipykernel 7.4 can race its own I/O thread on the way out and print a libzmq assertion and a ZMQError
    traceback on the terminal after a clean run (CI, stop 27). From its shutdown request on, a chain kernel writes
    to ``<stem>.kernel-exit.log`` instead; without the log (``quiet=False``) the same words reach the terminal."""
    import papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import atexit, os\nprint('during the run')\natexit.register(os.write, 2, b'said on the way out\\n')"
        )
    ]
    src, out, log = tmp_path / "in.ipynb", tmp_path / "out.ipynb", tmp_path / "in.kernel-exit.log"
    nbformat.write(nb, src)
    papermill.execute_notebook(
        str(src),
        str(out),
        kernel_name="python3",
        progress_bar=False,
        kernel_manager_class=kernel_manager_class({}, exit_log=log if quiet else None),
    )
    assert nbformat.read(out, as_version=4).cells[0].outputs[0]["text"] == "during the run\n"
    err = capfd.readouterr().err
    assert ("said on the way out" in err) is not quiet
    assert (log.is_file() and "said on the way out" in log.read_text()) is quiet
