"""Ctrl-C (SIGINT) and SIGTERM in the chain: :class:`Interrupt` stops the running notebook's kernel (or, outside a
notebook, raises :class:`Stopped`), and the kernel manager that tells it which kernel runs. Part of
:mod:`rerankeval.apps.chain`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM
SIGNALS = {
    signal.SIGINT: ("interrupted", "Ctrl-C", EXIT_INTERRUPTED),
    signal.SIGTERM: ("terminated", "SIGTERM", EXIT_TERMINATED),
}  # what stops the run cleanly


def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the kernel's process group (a kernel leads its own session), if it still runs."""
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


class Stopped(KeyboardInterrupt):
    """Raised by :class:`Interrupt` outside a notebook: the chain was asked to stop by ``signum``."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


QUIT_AFTER = 3  # the signal that stops the chain at once, without the report index


def _say_and_quit(line: str, status: int) -> None:
    """Print ``line`` and end the process with ``status`` at once (no Python clean-up, no exception to land in a
    half-done import or a C extension: what made the third Ctrl-C a segfault or a traceback)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"\n{line}\n".encode())
    os._exit(status)


class Interrupt:
    """Ctrl-C (SIGINT) and SIGTERM handling of the chain: stop the running notebook, remember it, stop the run.

    A Python exception raised from a signal handler can land anywhere: where it is swallowed (a weakref callback
    inside nbclient: "Exception ignored"), or inside a module being imported (numpy then half-initialised: a
    traceback or a segfault at the next use). So it raises at most once, and never inside a notebook or a
    :meth:`deferred` section (the imports the end of the run needs, and writing the index):

    - the first signal during a notebook terminates its kernel (papermill keeps the cells done so far and
      returns); outside a notebook it raises :class:`Stopped` (a KeyboardInterrupt), at once or, in a deferred
      section, when the section ends;
    - the second kills the kernel (SIGKILL: it did not stop) and raises nothing;
    - the third (:data:`QUIT_AFTER`) prints one line and ends the process with 130 (143 for SIGTERM) at once,
      unless the index is being written (a second or two), which it lets finish.

    :attr:`hit` tells the chain to stop; :attr:`signum` which signal asked first.
    """

    def __init__(self) -> None:
        self.hit = False
        self.signum = signal.SIGINT
        self.in_notebook = False
        self.kernel_pid: int | None = None
        self.count = 0  # signals received
        self.raised = False  # Stopped was raised (or is due at the end of a deferred section)
        self.deferring = 0  # inside deferred(): record signals, raise nothing
        self.finishing = False  # writing the index: even the third signal waits for it

    @property
    def how(self) -> tuple[str, str, int]:
        """``("interrupted", "Ctrl-C", 130)`` or ``("terminated", "SIGTERM", 143)``."""
        return SIGNALS.get(self.signum, SIGNALS[signal.SIGINT])

    def handler(self, signum: int, frame: object) -> None:  # noqa: ARG002
        self.count += 1
        first, self.hit = not self.hit, True
        if first:
            self.signum = signum
        if self.kernel_pid is not None:
            _signal_group(self.kernel_pid, signal.SIGTERM if first else signal.SIGKILL)
        if self.count >= QUIT_AFTER and not self.finishing:
            verb, what, status = self.how
            _say_and_quit(
                f"[chain] {verb} ({what}, {self.count} times): stopped at once; the report index was "
                "not updated; re-run the same command to resume (finished stages are cached)",
                status,
            )
        if first and not self.in_notebook and not self.deferring:
            self.raised = True
            raise Stopped(signum)

    @contextlib.contextmanager
    def deferred(self, finishing: bool = False) -> Iterator[None]:
        """A section no signal interrupts (imports, the index): a signal received inside is acted on at its end
        (:class:`Stopped` raised, unless one was already). ``finishing``: the end of the run, raise nothing."""
        self.deferring += 1
        was_finishing, self.finishing = self.finishing, self.finishing or finishing
        try:
            yield
        finally:
            self.deferring -= 1
            self.finishing = was_finishing
        if self.hit and not self.raised and not self.deferring and not finishing and not self.in_notebook:
            self.raised = True
            raise Stopped(self.signum)

    def reclaim(self) -> None:
        """Handle SIGINT and SIGTERM again (main thread only): a context entered later (the local LLM server's
        SIGTERM handler) may have replaced the chain's, so SIGTERM would skip the partial report's line."""
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, self.handler)

    def kernel_started(self, pid: int) -> None:
        """Called by the kernel manager; a kernel started after Ctrl-C is stopped at once."""
        self.kernel_pid = pid
        if self.hit:
            _signal_group(pid, signal.SIGTERM if self.count < 2 else signal.SIGKILL)

    def kernel_done(self) -> None:
        self.kernel_pid = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupt]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {sig: signal.signal(sig, self.handler) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def quiet_exit(log: str) -> None:
    """Inside a notebook's kernel: from its shutdown request on, what the kernel writes to its standard error and
    output (file descriptors 2 and 1, shared with the chain's terminal) goes to ``log`` instead.

    The notebook has finished and been saved by then. What ipykernel 7.4 prints while it exits is its own race
    between the control thread and the closing I/O thread (a libzmq ``Assertion failed: pfd.revents & POLLIN`` and
    a ``ZMQError: Socket operation on non-socket`` traceback, seen once in CI after a clean run): noise on the
    user's terminal, kept in ``log`` for whoever wants it."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return
    shut_down = kernel.do_shutdown

    def do_shutdown(restart: bool) -> Any:
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:  # its folder went away: the terminal it is
            return shut_down(restart)
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return shut_down(restart)

    kernel.do_shutdown = do_shutdown


def quiet_exit_line(log: Path) -> str:
    """The kernel's start-up line that installs :func:`quiet_exit` (an ``IPKernelApp.exec_lines`` item)."""
    return f"__import__('rerankeval.apps.chain.signals', fromlist=['_']).quiet_exit({str(log)!r})"


def kernel_manager_class(
    env: Mapping[str, str],
    interrupt: Interrupt | None = None,
    exec_lines: Sequence[str] = (),
    exit_log: Path | None = None,
) -> type:
    """A kernel manager whose kernels start with ``env`` added to this process's environment (and, for an
    ipykernel kernel, run ``exec_lines`` before the notebook: the chain's read trace; with ``exit_log``, what the
    kernel prints once asked to shut down goes there, not to the terminal: :func:`quiet_exit`).

    The kernel talks to the chain over IPC (Unix sockets in a private temporary folder) rather than TCP on
    localhost: nothing else on the machine can connect to it, and ipykernel has no reason to print its "running
    over TCP without encryption" warning on every notebook."""
    from jupyter_client.manager import AsyncKernelManager

    extra = dict(env)

    class ChainKernelManager(AsyncKernelManager):
        def __init__(self, **kw: Any) -> None:
            if os.name == "posix":
                kw.setdefault("transport", "ipc")
                kw.setdefault("ip", os.path.join(tempfile.mkdtemp(prefix="rerankeval-kernel-"), "k"))
            super().__init__(**kw)

        async def _async_interrupt_kernel(self) -> None:
            """No SIGINT on the way out: jupyter_client interrupts a kernel before its shutdown request, and an
            idle ipykernel caught in a message handler then logs "KeyboardInterrupt caught in kernel" on the
            terminal. The chain's own Ctrl-C handling signals the kernel itself (:class:`Interrupt`)."""
            if not getattr(self, "shutting_down", False):
                await super()._async_interrupt_kernel()

        async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:  # type: ignore[override]
            await super().shutdown_kernel(now=now, restart=restart)
            if self.transport == "ipc" and not restart:  # the sockets' folder goes with the kernel
                shutil.rmtree(os.path.dirname(self.ip), ignore_errors=True)

        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            kw["env"] = {**(kw.get("env") or os.environ), **extra}
            lines = [*exec_lines, *([quiet_exit_line(exit_log)] if exit_log else [])]
            if lines and any("ipykernel" in str(a) for a in (self.kernel_spec.argv if self.kernel_spec else [])):
                kw["extra_arguments"] = [
                    *(kw.get("extra_arguments") or []),
                    *(f"--IPKernelApp.exec_lines={line}" for line in lines),
                ]
            await super().start_kernel(**kw)
            pid = getattr(self.provisioner, "pid", None)
            if interrupt is not None and pid:
                interrupt.kernel_started(pid)

    return ChainKernelManager
