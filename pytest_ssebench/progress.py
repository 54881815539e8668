"""Live progress of a sweep in the terminal, beside pytest's own output.

The controller (the only process with every report: under xdist the workers
print nothing) keeps a `ssebench.progress.Progress` from pytest's reports and
shows its status line in one of three ways (`--sweep-progress`, default auto):

- live: on a terminal, a line under pytest's own, redrawn every second while
  runs go on. pytest's current line (its dots, or the run's name with -v) is
  left as pytest wrote it: the status line is drawn on the row below, and
  taken away (the cursor put back at the end of pytest's text) before any hook
  where pytest writes, then drawn again after it. It is written to a copy of
  the terminal's file descriptor taken before any run, since pytest's output
  capture redirects descriptor 1 while a run's setup (where the run happens)
  goes on.
- lines: a plain line now and then (when a run ends, at most every 30 s, not
  after the last), no cursor movement: for CI (`CI` or `BUILD_NUMBER` set, as
  pytest itself judges), output that is not a terminal, and a terminal where
  something else writes during runs (`-s`, live logging).
- off: with `-q`, on xdist's workers, and with --collect-only.

Under xdist the controller draws the line: pytest's terminal is its own, and
it gets every run's start and reports from the workers, so it knows what is
done, running (started, not finished) and left; a worker's output never
reaches the terminal. Where pytest's line ends is its terminal writer's
`width_of_current_line` (the reporter's `_tw`: pytest has no public way to
it); a pytest without it gets plain lines.

Whatever is shown, the controller writes the same snapshot to
`RESULTS/.progress/SESSION.json` when a run starts or ends, for `ssebench ps
--watch`, and removes it when the sweep ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_ssebench.options import ProgressMode
from ssebench.progress import Progress, Snapshot, UsageMeter, remove_snapshot, status_line, write_snapshot
from ssebench.scores import PREFIX

# How often the live line is redrawn, and the least time between two plain lines.
REDRAW_EVERY = 1.0
LINES_EVERY = 30.0
# Variables whose presence means a CI system (pytest's own test for it).
CI_VARIABLES = ("CI", "BUILD_NUMBER")
# Erase the line the cursor is on; the cursor up one row; right N columns.
_ERASE, _UP, _RIGHT = "\x1b[K", "\x1b[1A", "\x1b[{}C"


def choose_mode(
    asked: ProgressMode,
    *,
    verbosity: int,
    worker: bool,
    collect_only: bool,
    tty: bool,
    environ: dict[str, str] | os._Environ[str],
    capture: str,
    log_cli: bool,
) -> Literal["live", "lines", "off"]:
    """How progress is shown; `asked` (the option) wins but on a worker or when collecting only."""
    if worker or collect_only:
        return "off"
    if asked != "auto":
        return asked
    if verbosity < 0:
        return "off"
    if not tty or any(environ.get(name) for name in CI_VARIABLES) or environ.get("TERM") == "dumb":
        return "lines"
    if capture == "no" or log_cli:
        return "lines"  # the runs' own output, or pytest's live log, reaches the terminal between our redraws
    return "live"


class LiveLine:
    """The status line on the row under pytest's current line of a terminal (`fd`).

    `text(room)` gives the line, as it fits in `room` columns; `column()` and `width()` where pytest's own
    line ends and how wide the terminal is. `hold()` takes the line away
    (pytest is about to write), `release()` draws it again and lets the
    redrawing thread go on; `stop()` takes it away for good.
    """

    def __init__(
        self,
        fd: int,
        text: Callable[[int], str],
        column: Callable[[], int],
        width: Callable[[], int],
        every: float = REDRAW_EVERY,
    ) -> None:
        self.fd = fd
        self.text = text
        self.column = column
        self.width = width
        self.every = every
        self._lock = threading.Lock()
        self._shown = False  # the line is on the screen
        self._may_draw = False  # pytest is not writing
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._redraw, name="ssebench-progress", daemon=True)
        self._thread.start()

    def _write(self, data: str) -> None:
        if not data:
            return
        with contextlib.suppress(OSError):  # a terminal gone away: nothing to show it on
            os.write(self.fd, data.encode("utf-8", "replace"))

    def _erase(self) -> str:
        """What takes the line away and puts the cursor back at the end of pytest's text."""
        if not self._shown:
            return ""
        self._shown = False
        col = self.column() % max(1, self.width())
        return "\r" + _ERASE + _UP + (_RIGHT.format(col) if col else "")

    def _draw(self) -> str:
        width, column = self.width(), self.column()
        if column and column % width == 0:
            return ""  # pytest's text ends at the very edge: where the terminal puts the cursor differs
        self._shown = True
        room = max(0, width - 1)
        return "\n" + self.text(room)[:room] + _ERASE

    def _redraw(self) -> None:
        while not self._stopped.wait(self.every):
            with self._lock:
                if self._may_draw:
                    self._write(self._erase() + self._draw())

    def hold(self) -> None:
        with self._lock:
            self._may_draw = False
            self._write(self._erase())

    def release(self) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            self._may_draw = True
            self._write(self._erase() + self._draw())

    def stop(self) -> None:
        self._stopped.set()
        self.hold()
        self._thread.join(timeout=5)


class ProgressHooks:
    """The controller's progress: fed by pytest's reports, shown as `mode` says, written for `ssebench ps`."""

    def __init__(
        self,
        config: pytest.Config,
        progress: Progress,
        *,
        asked: ProgressMode,
        results: Path,
        usage_dir: Path | None,
    ) -> None:
        self.config = config
        self.progress = progress
        self.asked = asked
        self.results = results
        self.meter = UsageMeter(usage_dir) if usage_dir is not None else None
        self.mode: Literal["live", "lines", "off"] = "off"
        self.live: LiveLine | None = None
        self.reporter: Any = None
        self._last_line = time.monotonic()
        self._fd: int | None = None
        self._paused = False

    # -- what is shown ----------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self.progress.snapshot(self.meter.totals() if self.meter is not None else None)

    def line(self, width: int | None = None) -> str:
        return status_line(self.snapshot(), width=width)

    def _publish(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # a hint for another terminal, never the sweep's failure
            write_snapshot(self.results, self.snapshot())

    # -- the sweep's start and end ----------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        config = self.config
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        writer = getattr(self.reporter, "_tw", None)
        tty = bool(self.reporter is not None and self.reporter.isatty and sys.stdout.isatty())
        self.mode = choose_mode(
            self.asked,
            verbosity=config.get_verbosity(),
            worker=hasattr(config, "workerinput"),
            collect_only=bool(config.option.collectonly),
            tty=tty,
            environ=os.environ,
            capture=str(config.getoption("capture", "fd")),
            log_cli=bool(config.getoption("log_cli_level", None) or config.getini("log_cli")),
        )
        if self.reporter is None:
            self.mode = "off"
        if self.mode != "live":
            return
        if writer is None or not hasattr(writer, "width_of_current_line"):
            self.mode = "lines"  # a pytest whose writer does not say where its line ends
            return
        try:
            # Taken now, while pytest's capture is suspended: descriptor 1 is the terminal.
            self._fd = os.dup(sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            self.mode = "lines"
            return

        def width() -> int:
            return max(20, int(writer.fullwidth))

        self.live = LiveLine(self._fd, self.line, lambda: int(writer.width_of_current_line), width)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.progress.plan(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.progress.plan(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """A worker crashed: xdist says so, and that it replaces it, outside any hook of a run. The line
        stays away until a run starts again."""
        if error is not None and self.live is not None:
            self._paused = True
            self.live.hold()

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """The line goes when the runs are over: pytest then writes its last progress (inner to its own wrapper,
        this ends first)."""
        try:
            return (yield)
        finally:
            self._stop()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, object, object]:
        self._stop()
        remove_snapshot(self.results, self.progress.session)
        return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self._stop()

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        self._stop()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._stop()

    def _stop(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.stop()
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- runs as they go: pytest writes inside each of these hooks --------

    def _hold(self) -> None:
        if self.live is not None:
            self.live.hold()

    def _release(self) -> None:
        if self.live is not None and not self._paused:
            self.reporter.flush()  # what pytest wrote reaches the terminal before the line under it
            self.live.release()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> Generator[None, object, object]:
        self._hold()
        self._paused = False
        try:
            return (yield)
        finally:
            self.progress.start(nodeid)
            self._publish()
            self._release()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, object, object]:
        self._hold()
        try:
            return (yield)
        finally:
            props = {str(k).removeprefix(PREFIX): v for k, v in report.user_properties if str(k).startswith(PREFIX)}
            self.progress.report(report.nodeid, report.when or "", report.outcome, props)
            self._release()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> Generator[None, object, object]:
        self._hold()
        try:
            return (yield)
        finally:
            self.progress.finish(nodeid)
            self._publish()
            # Not after the last run: pytest's summary says the rest, and its last progress follows.
            last = len(self.progress.finished) >= len(self.progress.planned)
            if self.mode == "lines" and not last and time.monotonic() - self._last_line >= LINES_EVERY:
                self._last_line = time.monotonic()
                self.reporter.write_line(self.line())
            self._release()
