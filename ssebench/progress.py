"""A sweep's progress: runs done, running and left, how the done ones ended, the time left, the model use so far.

The plugin (`pytest_ssebench.progress`) keeps a `Progress` while a sweep runs, shows its `status_line` in
the terminal, and writes its `Snapshot` to `RESULTS/.progress/SESSION.json` whenever a run starts or ends;
`ssebench ps --watch` reads those files, so another terminal shows the same line. The file is the
controller's own, written on the host: nothing a run does reaches it.

The time left is an estimate: each run is expected to take what it took when it last ran (the history
`pytest_ssebench.schedule` keeps in durations.json), a run never timed what the runs of this sweep took on
average (else those of the history); the runs left go longest first to whichever worker frees up first, as
the sweep's own scheduling hands them out.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

# Where a sweep's snapshot goes, under its results directory.
PROGRESS_DIR = ".progress"
# The names a snapshot file may have: a session id (ssebench.reaper.Session: 12 hex digits).
_SESSION = re.compile(r"[0-9A-Za-z_-]{1,64}")
# The most of a snapshot file read (they are a few hundred bytes).
_SNAPSHOT_CAP = 64 * 1024
# The most of the gateway's usage records read at one look: the rest is read at the next.
_USAGE_READ_CAP = 4 << 20

Outcome = Literal["passed", "failed", "error", "skipped"]
UsageSource = Literal["gateway", "finished", "none"]


class Snapshot(BaseModel):
    """Where a sweep stands at `updated_at` (seconds since the epoch)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    session: str
    total: int
    done: int
    running: int
    passed: int = 0
    failed: int = 0
    error: int = 0
    skipped: int = 0
    # Seconds until the last run ends, as estimated at `updated_at`; None until anything is known of a run's
    # length. `untimed`: runs not yet done whose own length was never measured (guessed from the others').
    seconds_left: float | None = None
    untimed: int = 0
    # The model use so far and whose count it is: the gateway's (every call of the sweep's runs, those in
    # flight too), the finished runs' records (the gateway is out of reach: --dispatch ray), or none (no
    # agent of the sweep calls a model).
    tokens: int = 0
    cost: float = 0.0
    usage: UsageSource = "none"
    updated_at: float = 0.0
    host: str = ""
    pid: int = 0

    @property
    def left(self) -> int:
        """Runs not started yet."""
        return max(0, self.total - self.done - self.running)


def clock(seconds: float) -> str:
    """A duration the way a person reads it at a glance: 45s, 2m05s, 1h07m."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def status_line(snap: Snapshot, *, now: float | None = None, label: str = "ssebench", width: int | None = None) -> str:
    """One line: `ssebench: 2/6 done (2 passed, 0 failed, 0 error) | 1 running, 3 left | about 1m40s to go |
    41,230 tokens, $0.1342`. With `now`, the estimate counts down from the snapshot's time (another process
    reads it later); `label` comes first. With `width`, the line is said more briefly until it fits (the
    notes go first, then words are shortened), and cut at `width` as a last resort."""
    since = max(0.0, now - snap.updated_at) if now is not None else 0.0
    line = ""
    for brief in range(4):
        line = " | ".join(_parts(snap, since, label, brief))
        if width is None or len(line) <= width:
            return line
    return line[:width]


def _parts(snap: Snapshot, since: float, label: str, brief: int) -> list[str]:
    """The line's parts; `brief` 0 says everything, 1 drops the notes, 2 shortens the words, 3 the numbers."""
    counts = [(snap.passed, "passed", "pass"), (snap.failed, "failed", "fail"), (snap.error, "error", "err")]
    if snap.skipped:
        counts.append((snap.skipped, "skipped", "skip"))
    outcomes = ", ".join(f"{n} {short if brief >= 2 else word}" for n, word, short in counts)
    parts = [f"{label}: {snap.done}/{snap.total} done ({outcomes})", f"{snap.running} running, {snap.left} left"]
    if snap.done < snap.total:
        if snap.seconds_left is None:
            parts.append("time to go: not known yet" if brief < 2 else "time to go: ?")
        else:
            seconds = snap.seconds_left - since
            untimed = f" ({snap.untimed} never timed)" if snap.untimed and not brief else ""
            # Runs left but no time: they take longer than they did last time.
            said = (
                (f"about {clock(seconds)} to go" if brief < 2 else f"~{clock(seconds)} to go")
                if seconds >= 0.5
                else "due any moment"
            )
            parts.append(said + untimed)
    if snap.usage != "none":
        whose = " (finished runs)" if snap.usage == "finished" and not brief else ""
        tokens = f"{snap.tokens:,} tokens" if brief < 3 else f"{snap.tokens / 1000:,.0f}k tok"
        parts.append(f"{tokens}, ${snap.cost:.4f}{whose}" if brief < 3 else f"{tokens} ${snap.cost:,.2f}")
    return parts


def time_left(pending: Iterable[float], running: Iterable[float], workers: int) -> float:
    """Seconds until the last run ends: each of `running` holds a worker for the seconds it has left, and
    `pending` go longest first, each to the worker that frees up first (one worker: they add up)."""
    busy = sorted(running, reverse=True)
    slots = max(1, workers, len(busy))
    free = [*busy, *([0.0] * (slots - len(busy)))]
    heapq.heapify(free)
    for seconds in sorted(pending, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free, default=0.0)


class Progress:
    """A sweep's runs as they start and end, and what they used; `snapshot()` says where it stands.

    `history` is each run's (node id's) last length in seconds; `workers` how many runs go at once;
    `all_at_once`: every run is in flight from the start (--dispatch ray submits them all), so none
    waits for a worker. Fed from pytest's reports on the controller, so it works under xdist.
    """

    def __init__(
        self,
        session: str,
        *,
        history: Mapping[str, float],
        workers: int = 1,
        all_at_once: bool = False,
        metered: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session = session
        self.history = dict(history)
        self.workers = max(1, workers)
        self.all_at_once = all_at_once
        self.metered = metered
        self._clock = clock
        self._began = clock()
        self.planned: list[str] = []
        self.started: dict[str, float] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.took: list[float] = []
        self.finished: set[str] = set()
        self.tokens = 0
        self.cost = 0.0

    def plan(self, nodeids: Iterable[str]) -> None:
        """The runs the sweep will make (once: xdist's workers each report the same collection)."""
        if not self.planned:
            self.planned = list(dict.fromkeys(nodeids))

    def start(self, nodeid: str) -> None:
        self.started.setdefault(nodeid, self._clock())

    def report(self, nodeid: str, when: str, outcome: str, props: Mapping[str, object]) -> None:
        """One of a run's reports (setup, call, teardown): its outcome so far, and its model use when it ran.

        The usage keys are the run's record's (`usage_prompt_tokens`, `usage_completion_tokens`,
        `usage_cost`, with the plugin's prefix stripped)."""
        if outcome == "failed" and when != "call":
            self.outcomes[nodeid] = "error"
        elif outcome == "skipped" and when == "setup":
            self.outcomes[nodeid] = "skipped"
        elif when == "call" and outcome in ("passed", "failed") and self.outcomes.get(nodeid) != "error":
            self.outcomes[nodeid] = "passed" if outcome == "passed" else "failed"
        if when == "call" or (when == "setup" and outcome != "passed"):
            for key in ("usage_prompt_tokens", "usage_completion_tokens"):
                value = props.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    self.tokens += value
            cost = props.get("usage_cost")
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                self.cost += float(cost)

    def finish(self, nodeid: str) -> None:
        if nodeid in self.finished:
            return
        self.finished.add(nodeid)
        began = self.started.get(nodeid)
        if began is not None and not self.all_at_once:
            self.took.append(self._clock() - began)

    def snapshot(self, gateway: tuple[int, float] | None = None) -> Snapshot:
        """Where the sweep stands; `gateway`: the (tokens, cost) the session's gateway counted so far, when
        it can be read here."""
        now = self._clock()
        total = max(len(self.planned), len(self.finished))
        not_done = [n for n in self.planned if n not in self.finished]
        if self.all_at_once:
            running = {n: self._began for n in not_done}
        else:
            running = {n: t for n, t in self.started.items() if n not in self.finished}
        pending = [n for n in not_done if n not in running]
        seconds, untimed = self._estimate(pending, running, now)
        ended = [self.outcomes.get(n) for n in self.finished]
        counts = {o: ended.count(o) for o in ("passed", "failed", "error", "skipped")}
        if not self.metered:
            usage: tuple[int, float, UsageSource] = (0, 0.0, "none")
        elif gateway is not None:
            usage = (gateway[0], gateway[1], "gateway")
        else:
            usage = (self.tokens, self.cost, "finished")
        return Snapshot(
            session=self.session,
            total=total,
            done=len(self.finished),
            running=len(running),
            seconds_left=seconds,
            untimed=untimed,
            tokens=usage[0],
            cost=usage[1],
            usage=usage[2],
            updated_at=time.time(),
            host=socket.gethostname(),
            pid=os.getpid(),
            **counts,
        )

    def _estimate(self, pending: Sequence[str], running: Mapping[str, float], now: float) -> tuple[float | None, int]:
        known = [self.history[n] for n in self.planned if n in self.history]
        fallback = (sum(self.took) / len(self.took)) if self.took else (sum(known) / len(known) if known else None)
        untimed = sum(1 for n in [*pending, *running] if n not in self.history)
        if untimed and fallback is None:
            return None, untimed

        def expected(nodeid: str) -> float:
            value = self.history.get(nodeid, fallback)
            assert value is not None  # every run untimed has the fallback, checked above
            return value

        left = [max(0.0, expected(n) - (now - began)) for n, began in running.items()]
        workers = len(running) + len(pending) if self.all_at_once else self.workers
        return time_left([expected(n) for n in pending], left, workers), untimed


class UsageMeter:
    """The model use the session's gateway recorded (`usage/<run_id>.jsonl` under its state directory, one
    record per call, appended), read as the files grow: every call of the sweep's runs, finished or in
    flight. The gateway is the harness's own process; a record it did not write whole is skipped."""

    def __init__(self, usage_dir: Path) -> None:
        self.usage_dir = usage_dir
        self._read: dict[str, int] = {}
        self.tokens = 0
        self.cost = 0.0

    def totals(self) -> tuple[int, float]:
        budget = _USAGE_READ_CAP
        try:
            files = sorted(p for p in self.usage_dir.iterdir() if p.suffix == ".jsonl")
        except OSError:
            return self.tokens, self.cost
        for path in files:
            if budget <= 0:
                break
            budget -= self._take(path, budget)
        return self.tokens, self.cost

    def _take(self, path: Path, most: int) -> int:
        """Count the whole records written to `path` since the last look; the bytes read."""
        from ssebench.gateway import UsageRecord

        offset = self._read.get(path.name, 0)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return 0
        with os.fdopen(fd, "rb") as file:
            file.seek(offset)
            chunk = file.read(most)
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._read[path.name] = offset + len(whole)
        for line in whole.splitlines():
            try:
                record = UsageRecord.model_validate_json(line)
            except ValidationError:
                continue
            self.tokens += record.prompt_tokens + record.completion_tokens
            self.cost += record.cost
        return len(chunk)


def snapshot_path(results: Path, session: str) -> Path:
    if not _SESSION.fullmatch(session):
        raise ValueError(f"not a session id: {session!r}")
    return results / PROGRESS_DIR / f"{session}.json"


def write_snapshot(results: Path, snap: Snapshot) -> None:
    """Replace the session's snapshot file at once (a reader never sees half of one)."""
    path = snapshot_path(results, snap.session)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(snap.model_dump_json())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_snapshot(results: Path, session: str) -> None:
    """Remove the session's snapshot, and the folder when no other sweep's is left in it."""
    with contextlib.suppress(OSError, ValueError):
        path = snapshot_path(results, session)
        path.unlink(missing_ok=True)
        path.parent.rmdir()  # refused while another sweep's snapshot is there


def read_snapshots(results: Path) -> dict[str, Snapshot]:
    """The snapshots of the sweeps writing to `results`, by session; files that are not one are skipped."""
    found: dict[str, Snapshot] = {}
    try:
        paths = sorted((results / PROGRESS_DIR).glob("*.json"))
    except OSError:
        return found
    for path in paths:
        if not _SESSION.fullmatch(path.stem):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as file:
                snap = Snapshot.model_validate(json.loads(file.read(_SNAPSHOT_CAP)))
        except (OSError, ValueError):  # ValidationError is a ValueError
            continue
        if snap.session == path.stem:
            found[snap.session] = snap
    return found
