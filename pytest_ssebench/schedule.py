"""Longest runs first under xdist, one run ahead per worker.

Runs of one sweep differ a hundredfold (a small C library's tests against
c-ares compiling its own twice). pytest-xdist's load scheduling hands items
out in collection order and in chunks, so a long run collected last, or a
worker holding several queued, keeps one worker busy after the others ran
dry: the demo's six runs gave 1.5x on two workers where their lengths allowed
1.9x. So the controller keeps each item's last duration (its setup, where
the run happens, and its call) in the cache directory, and the next sweep's
load scheduling sends items longest first, the ones never timed before ahead
of all (they may be the long ones), and gives each worker one item beyond the
one it runs (xdist's --maxschedchunk 1), so whichever worker frees up first
takes the next. Only the order changes: every item runs, and a sweep without
a history keeps collection order.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ssebench.scores import PREFIX

HISTORY = "durations.json"
# Items kept in the history (the newest); a sweep of the whole pilot with a few agents is a few hundred.
HISTORY_CAP = 20000


def read_history(cache_dir: Path) -> dict[str, float]:
    """Seconds each item (by node id) took when it last ran; empty when unknown or unreadable."""
    try:
        data = json.loads((cache_dir / HISTORY).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def write_history(cache_dir: Path, durations: dict[str, float]) -> None:
    """Merge `durations` into the history, the newest last, atomically (another sweep may be writing it)."""
    if not durations:
        return
    merged = read_history(cache_dir)
    for nodeid, seconds in durations.items():
        merged.pop(nodeid, None)
        merged[nodeid] = round(seconds, 3)
    kept = dict(list(merged.items())[-HISTORY_CAP:])
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".durations-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(kept, out)
        os.replace(tmp, cache_dir / HISTORY)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class DurationHooks:
    """The controller's record of how long each run's item took, written to the history at the end."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.took: dict[str, float] = {}
        self.ours: set[str] = set()
        self.resumed: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = dict(report.user_properties)
        if any(str(key).startswith(PREFIX) for key in properties):
            self.ours.add(report.nodeid)
        if properties.get(PREFIX + "resumed") is True:
            self.resumed.add(report.nodeid)
        self.took[report.nodeid] = self.took.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        with contextlib.suppress(OSError):  # only a hint for the next sweep's order
            write_history(self.cache_dir, {n: s for n, s in self.took.items() if n in self.ours - self.resumed})


def make_scheduler(config: pytest.Config, log: Any, history: dict[str, float]) -> Any:
    """xdist's load scheduling, longest first and one item ahead per worker; None (xdist's own) for any
    other --dist, or an xdist whose load scheduler lacks what this relies on."""
    if config.getoption("dist", "no") != "load":
        return None
    from xdist.scheduler import LoadScheduling

    if not all(hasattr(LoadScheduling, name) for name in ("_send_tests", "schedule", "check_schedule")):
        return None

    class LongestFirst(LoadScheduling):  # type: ignore[misc]
        maxschedchunk: int | None

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            if self.maxschedchunk is None:
                self.maxschedchunk = 1
            self._ordered = False

        def _send_tests(self, node: Any, num: int) -> None:
            if not self._ordered:
                self._ordered = True
                unknown = max(history.values(), default=0.0) + 1.0
                self.pending.sort(key=lambda index: -history.get(self.collection[index], unknown))
            super()._send_tests(node, num)

    return LongestFirst(config, log)
