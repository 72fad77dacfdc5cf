"""Progress of long stages on the user's terminal, also from inside a notebook kernel run by the chain.

``track(items, desc="embedding", unit="text")`` wraps an iterable; ``Progress(total, desc=..., unit=...)``
is the same bar driven by hand, with counters shown beside it::

    with Progress(len(qids), desc="rerank", unit="query") as bar:
        for q in qids:
            ...
            bar.update(1, calls=n_calls, cache_hits=n_hits)

Where it writes: the process's original standard error. A Jupyter kernel replaces ``sys.stderr`` with a
stream that goes into the notebook; its ``fileno()`` is a copy of the stderr the kernel inherited from
``python -m rerankeval.apps.chain`` (papermill does not redirect it), so the bar reaches the chain's terminal
and stays out of the executed notebook. How it writes: ``bar`` on a terminal (a tqdm bar with items done, rate and
ETA), ``plain`` in logs and CI (one line per 10% of the total, or at 1, 2, 4, 8 ... items when the total is unknown),
``off`` for nothing; a ``mode`` given to a display wins, else the mode :func:`configure` set, else it is chosen from
that stream. Either says nothing for the first ``quiet_s`` seconds (default :data:`QUIET_S`): a stage answered from
its caches in a moment prints no line, so a warm chain says one line per notebook.

The mode and the stage label are this process's display, set once by its entry point with :func:`configure`
(``RERANKEVAL_PROGRESS`` and ``RERANKEVAL_STAGE``, ``Settings.progress`` and ``Settings.stage``; nothing here reads
the settings): the chain's ``main`` for itself, and for each notebook kernel it runs a start-up line
(:func:`configure_line`) with the chain's mode and the notebook's name, which prefixes every line (``[04-rerank]
rerank: ...``). Unconfigured: the mode follows the stream, no prefix.

A bar moves when an item finishes; one item can wait on a slow endpoint for a long time (a rerank query
makes up to ``pool_k`` calls, each up to ``RERANK_TIMEOUT`` x (1 + ``RERANK_MAX_RETRIES``) seconds).
:class:`Heartbeat` fills that silence: while a call is in flight it prints, every ``interval`` seconds
(default :data:`HEARTBEAT_S`), what is awaited, e.g. ``waiting for the endpoint: 120 s on call 3 of 10
(query q12)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

from tqdm import tqdm

from rerankeval.core.settings import FIELDS_ENV, Settings

MODE_ENV = FIELDS_ENV["progress"]  # RERANKEVAL_PROGRESS
STAGE_ENV = FIELDS_ENV["stage"]  # RERANKEVAL_STAGE, what the chain sets for its kernels
MODES = ("bar", "plain", "off")
PLAIN_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
PLAIN_FORMAT_NO_TOTAL = "{desc}: {n_fmt} {unit} [{elapsed}, {rate_fmt}{postfix}]"
HEARTBEAT_S = 60.0  # at most this long without a line while a call is in flight
QUIET_S = 2.0  # a display starts only once its stage has taken this long
EVERY_S = 60.0  # plain mode: a line at least this often while items finish, however slowly (a 10% step can take 20 min)

T = TypeVar("T")


def _stderr_fd() -> int | None:
    """The file descriptor of the stderr this process started with (a kernel's capture bypassed)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            return stream.fileno() if stream is not None else None
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            continue
    return None


@functools.lru_cache(maxsize=1)
def terminal() -> TextIO | None:
    """A line-buffered text stream on the original stderr, or None when there is none."""
    fd = _stderr_fd()
    if fd is None:
        return None
    return open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


@dataclasses.dataclass
class Display:
    """This process's display configuration (:func:`configure`): a mode (None: chosen from the stream) and the
    stage whose name prefixes every line (None: no prefix)."""

    mode: str | None = None
    stage: str | None = None


DISPLAY = Display()


def configure(settings: Settings | None = None, *, mode: str | None = None, stage: str | None = None) -> None:
    """Set this process's progress mode and stage label: ``settings.progress`` and ``settings.stage``
    (``RERANKEVAL_PROGRESS``, ``RERANKEVAL_STAGE``), or ``mode`` and ``stage`` as given; an entry point calls it once.
    ``configure()`` forgets both (the mode follows the stream, no prefix)."""
    if settings is not None:
        mode, stage = mode or settings.progress, stage or settings.stage
    if mode is not None and mode not in MODES:
        raise ValueError(f"progress mode {mode!r} ({MODE_ENV}): use one of {', '.join(MODES)}")
    DISPLAY.mode, DISPLAY.stage = mode, stage or None


def configure_line(mode: str | None, stage: str | None) -> str:
    """The Python line that calls :func:`configure` with ``mode`` and ``stage`` (a kernel's start-up line)."""
    return f"__import__('rerankeval.core.progress', fromlist=['_']).configure(mode={mode!r}, stage={stage!r})"


def default_mode(stream: TextIO | None, settings: Settings | None = None) -> str:
    """``settings.progress`` (``RERANKEVAL_PROGRESS``) when settings are given and set it, else the mode
    :func:`configure` set, if any (bar/plain/off); else ``bar`` on a terminal and ``plain`` otherwise."""
    wanted = (settings.progress if settings is not None else None) or DISPLAY.mode
    if wanted:
        return wanted
    if stream is None:
        return "off"
    try:
        return "bar" if stream.isatty() else "plain"
    except (OSError, ValueError):
        return "plain"


def _label(desc: str) -> str:
    stage = DISPLAY.stage
    return f"[{stage}] {desc}" if stage else desc


def say(text: str, *, file: TextIO | None = None, mode: str | None = None) -> None:
    """One line on the user's terminal (prefixed with the stage, as the bars are), e.g. the cost plan printed
    before an LLM stage spends; nothing in ``off`` mode."""
    stream = file if file is not None else terminal()
    if stream is None or (mode or default_mode(stream)) == "off":
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(_label(text) + "\n")
        stream.flush()


class Progress:
    """A progress display for ``total`` items (None: unknown); ``update(n, **counters)`` as items finish."""

    def __init__(
        self,
        total: int | None = None,
        *,
        desc: str,
        unit: str = "it",
        file: TextIO | None = None,
        mode: str | None = None,
        quiet_s: float = QUIET_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.file = file if file is not None else terminal()
        self.quiet_s, self.clock = float(quiet_s), clock
        self.mode = mode or default_mode(self.file)
        if self.mode not in MODES:
            raise ValueError(f"progress mode {self.mode!r}: use one of {', '.join(MODES)}")
        self.total, self.desc, self.unit = total, _label(desc), unit
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self._t0 = clock()
        self._printed_at: int | None = None
        self._printed_t = self._t0
        self._bar = (
            tqdm(
                total=total,
                desc=self.desc,
                unit=unit,
                file=self.file,
                dynamic_ncols=True,
                mininterval=0.5,
                leave=True,
                delay=self.quiet_s,
            )
            if self.mode == "bar"
            else None
        )

    def update(self, n: int = 1, **postfix: Any) -> None:
        """``n`` more items done; keyword counters (e.g. ``calls=12, cache_hits=5``) are shown beside."""
        self.n += n
        self.postfix.update(postfix)
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(self.postfix, refresh=False)
            self._bar.update(n)
        elif self.mode == "plain" and self._due():
            self._line()

    def _due(self) -> bool:
        now = self.clock()
        if now - self._t0 < self.quiet_s:
            return False
        if now - self._printed_t >= EVERY_S and self.n != self._printed_at:
            return True
        if self.total:
            step = max(1, -(-self.total // 10))  # a line per 10% of the total
            last = self._printed_at or 0
            return self.n >= self.total or self.n // step > last // step
        return self.n >= 2 * (self._printed_at or 0) or self._printed_at is None

    def _line(self) -> None:
        fmt = PLAIN_FORMAT if self.total else PLAIN_FORMAT_NO_TOTAL
        post = ", ".join(f"{k}={v}" for k, v in self.postfix.items())
        line = tqdm.format_meter(
            self.n, self.total, self.clock() - self._t0, prefix=self.desc, unit=self.unit, postfix=post, bar_format=fmt
        )
        print(line, file=self.file, flush=True)
        self._printed_at, self._printed_t = self.n, self.clock()

    def close(self) -> None:
        """Finish the display (a last plain line unless the final count was already printed)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif (
            self.mode == "plain"
            and self._printed_at != self.n
            and (self._printed_at is not None or self.clock() - self._t0 >= self.quiet_s)
        ):
            self._line()
        self.mode = "off"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def track(
    iterable: Iterable[T],
    *,
    total: int | None = None,
    desc: str,
    unit: str = "it",
    file: TextIO | None = None,
    mode: str | None = None,
    quiet_s: float = QUIET_S,
) -> Iterator[T]:
    """Yield from ``iterable`` while showing its progress (``total`` defaults to ``len(iterable)``)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc=desc, unit=unit, file=file, mode=mode, quiet_s=quiet_s) as bar:
        for item in iterable:
            yield item
            bar.update(1)


class Heartbeat:
    """Lines saying what is awaited while calls are in flight, one every ``interval`` seconds at most.

    ``with hb.waiting("query q12"): client.chat(...)`` marks one call (thread-safe, numbered in the order they
    start, ``total`` the calls expected). :meth:`beat` prints the line when it is due; as a context manager
    a daemon thread calls it every few seconds. ``clock`` and a direct :meth:`beat` are for tests.
    """

    def __init__(
        self,
        *,
        total: int | None = None,
        what: str = "the endpoint",
        unit: str = "call",
        interval: float = HEARTBEAT_S,
        file: TextIO | None = None,
        mode: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.mode = mode or default_mode(file if file is not None else terminal())
        self.file = file if file is not None or self.mode == "off" else terminal()
        self.total, self.what, self.unit, self.interval, self.clock = total, what, unit, float(interval), clock
        self._lock = threading.Lock()
        self._numbers, self._tokens = itertools.count(1), itertools.count()
        self._by_label: dict[str, int] = {}  # the last number of a label: a re-ask of that call keeps it
        self._flight: dict[int, tuple[float, str, int, bool]] = {}  # token -> (start, label, number, asked again)
        self._last: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def waiting(self, label: str = "", *, again: bool = False) -> Iterator[int]:
        """Mark one call as in flight for the duration of the block; yields its number. A call asked ``again``
        (after an unusable or cut-off reply) keeps the number its label last had: 07's question 3 asked again
        is still answer 3 of 8."""
        with self._lock:
            again = again and label in self._by_label
            n = self._by_label[label] if again else next(self._numbers)
            if label:
                self._by_label[label] = n
            token = next(self._tokens)
            self._flight[token] = (self.clock(), label, n, again)
        try:
            yield n
        finally:
            with self._lock:
                self._flight.pop(token, None)

    def line(self, now: float | None = None) -> str | None:
        """The line for the longest-waiting call when it is due (None otherwise); marks it printed."""
        now = self.clock() if now is None else now
        with self._lock:
            if not self._flight:
                return None
            start, label, n, again = min(self._flight.values(), key=lambda v: v[0])
            if now - start < self.interval or (self._last is not None and now - self._last < self.interval):
                return None
            self._last = now
            others = len(self._flight) - 1
        # an unlabelled re-ask is numbered past the total: say so rather than "answer 6 of 5"
        of = ""
        if self.total:
            of = f" of {self.total}" if n <= self.total else f", a re-ask beyond the {self.total} planned"
        more = f", {others} more in flight" if others else ""
        where = f" ({label}{', asked again' if again else ''}{more})" if label or more else ""
        return _label(f"waiting for {self.what}: {now - start:.0f} s on {self.unit} {n}{of}{where}")

    def beat(self, now: float | None = None) -> str | None:
        """Print the line if it is due; returns it."""
        text = self.line(now) if self.mode != "off" else None
        if text is not None and self.file is not None:
            if self.mode == "bar":
                tqdm.write(text, file=self.file)
            else:
                print(text, file=self.file, flush=True)
        return text

    def _run(self) -> None:
        poll = max(0.05, min(self.interval / 4, 5.0))
        while not self._stop.wait(poll):
            self.beat()

    def __enter__(self) -> Heartbeat:
        if self.mode != "off" and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


QUIET = Heartbeat(mode="off")  # the heartbeat of runs that show no progress
