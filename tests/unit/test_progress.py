"""A sweep's progress without Docker: the estimate, the status line, the snapshot file, the gateway's records,
how the plugin chooses to show it, the live line's drawing, and `ssebench ps --watch`."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ssebench.progress import LiveLine, choose_mode
from ssebench import inflight
from ssebench.cli import main
from ssebench.progress import (
    Progress,
    Snapshot,
    UsageMeter,
    clock,
    read_snapshots,
    remove_snapshot,
    snapshot_path,
    status_line,
    time_left,
    write_snapshot,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_at_a_glance() -> None:
    assert [clock(s) for s in (0, 0.4, 45, 59.6, 60, 125, 3599, 3600, 4020, -3)] == [
        "0s",
        "0s",
        "45s",
        "1m00s",
        "1m00s",
        "2m05s",
        "59m59s",
        "1h00m",
        "1h07m",
        "0s",
    ]


def test_time_left_adds_up_on_one_worker_and_packs_longest_first_on_several() -> None:
    assert time_left([10, 20, 30], [], workers=1) == 60
    # Two workers: 30 on one, 20 then 10 on the other.
    assert time_left([10, 20, 30], [], workers=2) == 30
    # A run in flight holds its worker for what it has left; the next goes to whichever frees first.
    assert time_left([10], [25, 5], workers=2) == 25
    assert time_left([10, 10], [25, 5], workers=2) == 25
    assert time_left([30], [25, 5], workers=2) == 35
    # More runs in flight than workers (every run submitted at once): none waits for another.
    assert time_left([], [7, 3, 9], workers=1) == 9
    assert time_left([], [], workers=4) == 0


def _sweep(clock: Clock, **kwargs: object) -> Progress:
    history = {"a": 10.0, "b": 20.0, "c": 30.0}
    progress = Progress("s1", history=history, clock=clock, **kwargs)  # type: ignore[arg-type]
    progress.plan(["a", "b", "c"])
    return progress


def test_a_sweep_counts_done_running_left_and_outcomes_of_finished_runs_only() -> None:
    now = Clock()
    progress = _sweep(now)
    first = progress.snapshot()
    assert (first.total, first.done, first.running, first.left) == (3, 0, 0, 3)
    assert first.seconds_left == 60 and first.untimed == 0
    progress.start("a")
    now.now += 4
    progress.report("a", "setup", "passed", {})
    progress.report("a", "call", "passed", {})
    snap = progress.snapshot()
    # Reported but not finished (teardown to come): not done, and not counted as passed yet.
    assert (snap.done, snap.running, snap.left, snap.passed) == (0, 1, 2, 0)
    assert snap.seconds_left == 6 + 20 + 30
    progress.finish("a")
    progress.start("b")
    progress.report("b", "setup", "failed", {})
    progress.finish("b")
    progress.start("c")
    progress.report("c", "call", "failed", {})
    snap = progress.snapshot()
    assert (snap.done, snap.running, snap.left) == (2, 1, 0)
    assert (snap.passed, snap.failed, snap.error) == (1, 0, 1)
    progress.finish("c")
    progress.finish("c")  # a report twice (xdist's crash handling) is one run
    snap = progress.snapshot()
    assert (snap.done, snap.passed, snap.failed, snap.error, snap.seconds_left) == (3, 1, 1, 1, 0)
    assert status_line(snap) == "ssebench: 3/3 done (1 passed, 1 failed, 1 error) | 0 running, 0 left"


def test_a_teardown_error_after_a_pass_is_an_error_and_a_skip_is_said() -> None:
    progress = _sweep(Clock())
    for nodeid, reports in {
        "a": [("setup", "passed"), ("call", "passed"), ("teardown", "failed")],
        "b": [("setup", "skipped")],
    }.items():
        progress.start(nodeid)
        for when, outcome in reports:
            progress.report(nodeid, when, outcome, {})
        progress.finish(nodeid)
    snap = progress.snapshot()
    assert (snap.passed, snap.error, snap.skipped) == (0, 1, 1)
    assert "(0 passed, 0 failed, 1 error, 1 skipped)" in status_line(snap)


def test_runs_never_timed_take_what_this_sweep_s_runs_took_else_the_history_s_mean() -> None:
    now = Clock()
    progress = Progress("s1", history={"a": 10.0}, clock=now)
    progress.plan(["a", "x", "y"])
    snap = progress.snapshot()
    assert snap.seconds_left == 30 and snap.untimed == 2  # the history's mean, 10 s, for x and y
    assert status_line(snap).endswith("| about 30s to go (2 never timed)")
    progress.start("a")
    now.now += 4
    progress.finish("a")
    assert progress.snapshot().seconds_left == 8  # a took 4 s this time: x and y are guessed at 4 s each
    nothing = Progress("s2", history={}, clock=now)
    nothing.plan(["x", "y"])
    unknown = nothing.snapshot()
    assert unknown.seconds_left is None
    assert status_line(unknown).endswith("| time to go: not known yet")


def test_workers_share_the_runs_left_and_ray_has_every_run_in_flight_at_once() -> None:
    now = Clock()
    assert _sweep(now, workers=2).snapshot().seconds_left == 30
    ray = _sweep(now, all_at_once=True)
    now.now += 12
    snap = ray.snapshot()
    assert (snap.running, snap.left, snap.seconds_left) == (3, 0, 18)


def test_model_use_is_the_gateway_s_count_else_the_finished_runs_else_not_shown() -> None:
    progress = _sweep(Clock(), metered=True)
    progress.start("a")
    usage = {"usage_prompt_tokens": 1200, "usage_completion_tokens": 34, "usage_cost": 0.0125}
    progress.report("a", "setup", "passed", usage)  # the call's report counts, not the setup's too
    progress.report("a", "call", "passed", usage)
    progress.finish("a")
    mine = progress.snapshot()
    assert (mine.tokens, mine.cost, mine.usage) == (1234, 0.0125, "finished")
    assert status_line(mine).endswith("| 1,234 tokens, $0.0125 (finished runs)")
    theirs = progress.snapshot(gateway=(5000, 0.5))
    assert status_line(theirs).endswith("| 5,000 tokens, $0.5000")
    quiet = _sweep(Clock())
    quiet.report("a", "call", "passed", usage)
    assert quiet.snapshot().usage == "none" and "tokens" not in status_line(quiet.snapshot())
    # Values of the wrong type (a bool is an int to Python) are not counted.
    odd = _sweep(Clock(), metered=True)
    odd.report("a", "call", "passed", {"usage_prompt_tokens": True, "usage_cost": "1"})
    assert (odd.tokens, odd.cost) == (0, 0.0)


def _record(tokens: int, cost: float) -> str:
    return json.dumps(
        {
            "ts": 1.0,
            "run": "r1",
            "model": "m",
            "status": 200,
            "prompt_tokens": tokens,
            "completion_tokens": 1,
            "cost": cost,
        }
    )


def test_the_gateway_s_records_are_read_as_they_grow(tmp_path: Path) -> None:
    meter = UsageMeter(tmp_path)
    assert meter.totals() == (0, 0.0)  # no file yet
    one = tmp_path / "run-1.jsonl"
    # A whole record, a line that is not one, and half of the next (the gateway is writing it).
    one.write_text(_record(100, 0.5) + "\nnot json\n" + _record(7, 0.25)[:10])
    assert meter.totals() == (101, 0.5)
    with one.open("a") as out:
        out.write(_record(7, 0.25)[10:] + "\n")
    (tmp_path / "run-2.jsonl").write_text(_record(10, 1.0) + "\n")
    (tmp_path / "notes.txt").write_text(_record(10**6, 100.0) + "\n")
    assert meter.totals() == (101 + 8 + 11, 1.75)
    assert meter.totals() == (120, 1.75)  # read once
    (tmp_path / "run-3.jsonl").symlink_to(one)
    assert meter.totals() == (120, 1.75)  # a link is not followed


def test_snapshots_round_trip_and_anything_else_in_their_folder_is_skipped(tmp_path: Path) -> None:
    snap = _sweep(Clock()).snapshot()
    write_snapshot(tmp_path, snap)
    assert read_snapshots(tmp_path) == {"s1": snap}
    folder = snapshot_path(tmp_path, "s1").parent
    (folder / "s2.json").write_text("{not json")
    (folder / "s3.json").write_text(json.dumps({**snap.model_dump(), "session": "s4"}))  # names another
    (folder / "s5.json").write_text(json.dumps({"session": "s5", "total": "many"}))
    (folder / "s6.json").symlink_to(folder / "s1.json")
    assert list(read_snapshots(tmp_path)) == ["s1"]
    with pytest.raises(ValueError, match="not a session id"):
        snapshot_path(tmp_path, "../x")
    remove_snapshot(tmp_path, "s1")
    remove_snapshot(tmp_path, "s1")  # gone already: nothing to do
    assert "s1" not in read_snapshots(tmp_path)
    assert folder.is_dir()  # the other files keep it
    for other in folder.iterdir():
        other.unlink()
    write_snapshot(tmp_path, snap)
    remove_snapshot(tmp_path, "s1")
    assert not folder.exists()  # the last sweep's gone: no empty folder left among the results
    assert read_snapshots(tmp_path / "nowhere") == {}


def test_a_line_too_wide_says_less_until_it_fits() -> None:
    snap = Snapshot(
        session="s",
        total=480,
        done=120,
        running=3,
        passed=100,
        failed=15,
        error=5,
        seconds_left=7500,
        untimed=357,
        tokens=12_345_678,
        cost=123.45678,
        usage="finished",
    )
    full = status_line(snap)
    assert full == (
        "ssebench: 120/480 done (100 passed, 15 failed, 5 error) | 3 running, 357 left | about 2h05m to go "
        "(357 never timed) | 12,345,678 tokens, $123.4568 (finished runs)"
    )
    assert status_line(snap, width=len(full)) == full
    assert status_line(snap, width=128) == (
        "ssebench: 120/480 done (100 passed, 15 failed, 5 error) | 3 running, 357 left | about 2h05m to go | "
        "12,345,678 tokens, $123.4568"
    )
    assert status_line(snap, width=127) == (
        "ssebench: 120/480 done (100 pass, 15 fail, 5 err) | 3 running, 357 left | ~2h05m to go | "
        "12,345,678 tokens, $123.4568"
    )
    assert status_line(snap, width=116) == (
        "ssebench: 120/480 done (100 pass, 15 fail, 5 err) | 3 running, 357 left | ~2h05m to go | 12,346k tok $123.46"
    )
    assert status_line(snap, width=40) == "ssebench: 120/480 done (100 pass, 15 fai"


def test_another_terminal_s_estimate_counts_down_from_the_snapshot_s_time() -> None:
    snap = Snapshot(session="s", total=4, done=1, running=1, seconds_left=100, updated_at=50.0)
    assert "about 1m40s to go" in status_line(snap)
    assert "about 1m10s to go" in status_line(snap, now=80.0)
    # Past the estimate with runs left: they take longer than last time.
    assert status_line(snap, now=500.0).endswith("| 1 running, 2 left | due any moment")


@pytest.mark.parametrize(
    ("asked", "verbosity", "tty", "environ", "capture", "log_cli", "mode"),
    [
        ("auto", 0, True, {}, "fd", False, "live"),
        ("auto", 1, True, {"TERM": "xterm"}, "sys", False, "live"),
        ("auto", -1, True, {}, "fd", False, "off"),
        ("auto", 0, True, {"CI": "true"}, "fd", False, "lines"),
        ("auto", 0, True, {"BUILD_NUMBER": "7"}, "fd", False, "lines"),
        ("auto", 0, True, {"CI": ""}, "fd", False, "live"),
        ("auto", 0, False, {}, "fd", False, "lines"),
        ("auto", 0, True, {"TERM": "dumb"}, "fd", False, "lines"),
        ("auto", 0, True, {}, "no", False, "lines"),
        ("auto", 0, True, {}, "fd", True, "lines"),
        ("off", 0, True, {}, "fd", False, "off"),
        ("live", -1, False, {"CI": "true"}, "fd", False, "live"),
        ("lines", 0, True, {}, "fd", False, "lines"),
    ],
)
def test_how_progress_shows(
    asked: str, verbosity: int, tty: bool, environ: dict[str, str], capture: str, log_cli: bool, mode: str
) -> None:
    given = {"verbosity": verbosity, "tty": tty, "environ": environ, "capture": capture, "log_cli": log_cli}
    assert choose_mode(asked, worker=False, collect_only=False, **given) == mode  # type: ignore[arg-type]
    # An xdist worker, or pytest --collect-only, shows nothing, whatever is asked.
    assert choose_mode(asked, worker=True, collect_only=False, **given) == "off"  # type: ignore[arg-type]
    assert choose_mode(asked, worker=False, collect_only=True, **given) == "off"  # type: ignore[arg-type]


def _drawn(fd: int) -> str:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536).decode()
    except BlockingIOError:
        return ""


def test_the_live_line_is_drawn_under_pytest_s_line_and_taken_away_before_pytest_writes() -> None:
    read, write = os.pipe()
    column = [38]
    line = LiveLine(write, lambda room: "ssebench: 1/6 done" + "x" * 100, lambda: column[0], lambda: 80, every=3600)
    try:
        assert _drawn(read) == ""  # nothing until pytest's first hook lets it draw
        line.release()
        # The row under pytest's, cut to the terminal's width less one.
        assert _drawn(read) == "\nssebench: 1/6 done" + "x" * 61 + "\x1b[K"
        line.hold()
        # Erased, the cursor up one row and right to where pytest's text ends.
        assert _drawn(read) == "\r\x1b[K\x1b[1A\x1b[38C"
        line.hold()
        assert _drawn(read) == ""  # taken away once
        column[0] = 80 + 5  # pytest's line wrapped: its end is on the row above the status line
        line.release()
        line.hold()
        assert _drawn(read).endswith("\x1b[1A\x1b[5C")
        column[0] = 160  # at the very edge: where the cursor is differs between terminals
        line.release()
        assert _drawn(read) == ""
        column[0] = 0
        line.release()
    finally:
        line.stop()
    assert _drawn(read) == "\nssebench: 1/6 done" + "x" * 61 + "\x1b[K\r\x1b[K\x1b[1A"
    line.release()  # stopped: never drawn again
    assert _drawn(read) == ""
    os.close(read)
    os.close(write)


def test_the_live_line_redraws_itself_while_a_run_goes_on() -> None:
    read, write = os.pipe()
    count = [0]

    def text(room: int) -> str:
        count[0] += 1
        return f"look {count[0]}"

    line = LiveLine(write, text, lambda: 0, lambda: 80, every=0.05)
    try:
        line.release()
        deadline = time.monotonic() + 5
        while count[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        line.hold()
        held = count[0]
        time.sleep(0.3)
        assert held >= 3 and count[0] == held  # held: the thread draws nothing while pytest writes
    finally:
        line.stop()
    assert "look 3\x1b[K" in _drawn(read)
    os.close(read)
    os.close(write)


class Drawn:
    """A stand-in for the live line: what the hooks asked of it."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def hold(self) -> None:
        self.said.append("hold")

    def release(self) -> None:
        self.said.append("release")


def test_after_a_worker_crash_the_line_waits_for_the_next_run_to_start(tmp_path: Path) -> None:
    """xdist writes that it replaces a crashed worker outside any hook of a run: the line must not be on the
    row it writes to."""
    from types import SimpleNamespace

    from pytest_ssebench.progress import ProgressHooks

    config: Any = SimpleNamespace()
    hooks = ProgressHooks(config, _sweep(Clock()), asked="auto", results=tmp_path, usage_dir=None)
    drawn = Drawn()
    hooks.live, hooks.reporter = drawn, SimpleNamespace(flush=lambda: None)  # type: ignore[assignment]
    report = SimpleNamespace(nodeid="a", when="setup", outcome="failed", user_properties=[])

    def through(hook: object, *args: object) -> None:
        step = hook(*args)  # type: ignore[operator]
        next(step)
        with pytest.raises(StopIteration):
            step.send(None)

    hooks.pytest_testnodedown(node=None, error=None)  # a worker done with its runs: nothing to do
    through(hooks.pytest_runtest_logreport, report)
    assert drawn.said == ["hold", "release"]
    drawn.said.clear()
    hooks.pytest_testnodedown(node=None, error="worker 'gw0' crashed while running 'a'")
    through(hooks.pytest_runtest_logreport, report)  # the crashed run's report
    assert drawn.said == ["hold", "hold"]
    through(hooks.pytest_runtest_logstart, "b", None)
    assert drawn.said == ["hold", "hold", "hold", "release"]


# -- ssebench ps --watch ------------------------------------------------------------------------------------


def _in_flight(session: str, task: str = "c-demo") -> inflight.InFlight:
    return inflight.InFlight(
        run=f"r-{session}",
        task=task,
        agent="dummy",
        model="none",
        difficulty="2",
        mode="sandbox",
        trial="1",
        phase="agent",
        elapsed=5.0,
        session=session,
        state="running",
    )


def test_watch_groups_runs_by_session_under_each_sweep_s_progress(tmp_path: Path) -> None:
    here = socket.gethostname()
    snaps = {
        "aaa": Snapshot(session="aaa", total=6, done=2, running=1, passed=2, seconds_left=30, updated_at=100),
        # Between runs, its controller alive (this process): shown without runs.
        "bbb": Snapshot(session="bbb", total=2, done=0, running=0, host=here, pid=os.getpid(), updated_at=100),
        # Its controller on this machine is gone: a crashed sweep's file, left out.
        "ccc": Snapshot(session="ccc", total=2, done=1, running=0, host=here, pid=2**22 + 7, updated_at=100),
    }
    lines = inflight.as_watch([_in_flight("aaa"), _in_flight("zzz", "go-demo")], snaps, now=110, results=tmp_path)
    text = "\n".join(lines)
    assert lines[0] == "session aaa: 2/6 done (2 passed, 0 failed, 0 error) | 1 running, 3 left | about 20s to go"
    assert "c-demo" in lines[2] and "go-demo" not in lines[2]
    assert f"session zzz: done and left unknown: its sweep wrote no {tmp_path}/.progress/zzz.json" in text
    assert "session bbb: 0/2 done" in text and "(no run in flight: between runs, or building images)" in text
    assert "ccc" not in text
    assert inflight.as_watch([], {}, now=0, results=tmp_path) == ["no runs in flight"]


def test_ps_watch_looks_again_each_interval_and_ctrl_c_ends_it_with_status_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write_snapshot(
        tmp_path, Snapshot(session="aaa", total=3, done=1, running=1, seconds_left=5, updated_at=time.time())
    )
    looks = [[_in_flight("aaa", "c-demo\x1b]0;pwned\x07")], []]
    monkeypatch.setattr(inflight, "runs_in_flight", lambda: looks.pop(0))
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if not looks:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)
    assert main(["ps", "--watch", "--interval", "0.5", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert slept == [0.5, 0.5]
    first, second = out.split("\n\n", 1)
    assert "every 0.5 s, Ctrl-C to stop" in first
    assert "session aaa: 1/3 done" in first and "c-demo\\x1b]0;pwned\\x07" in first
    assert "session aaa: 1/3 done" in second and "(no run in flight" in second
    assert "\x1b" not in out  # not a terminal: plain text, one look after another


def test_ps_watch_on_a_terminal_draws_each_look_over_the_last(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(inflight, "runs_in_flight", lambda: [_in_flight("aaa")])
    monkeypatch.setattr(time, "sleep", lambda seconds: (_ for _ in ()).throw(KeyboardInterrupt))
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main(["ps", "--watch", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("\x1b[Hssebench ps --watch:") and out.endswith("\x1b[K\n\x1b[J")
    assert "session aaa: done and left unknown" in out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--watch", "--json"], "argument --json: not allowed with argument --watch"),
        (["--watch", "--interval", "0"], "argument --interval: '0': give a time in seconds above zero"),
    ],
)
def test_ps_watch_bad_flags_are_one_line(args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ps", *args])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
