"""The sweep's progress through the plugin, as a terminal gets it: pytest runs in a pseudo-terminal of its own,
its runs faked by a conftest.py (each a second or so, no container), so the line shows on a terminal and not
with -q or CI=true, and under xdist only the controller draws it."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import DEMO, FAKE_RUNS

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]

# How long each faked run takes.
RUN_SECONDS = 1.6
# What only a redrawn line writes: the cursor up a row.
UP = "\x1b[1A"


@pytest.fixture
def sweep(pytester: pytest.Pytester) -> Path:
    shutil.copytree(DEMO / "c-demo", pytester.path / "datasets" / "demo" / "c-demo")
    shutil.copy(DEMO / "dataset.yaml", pytester.path / "datasets" / "demo" / "dataset.yaml")
    (pytester.path / "conftest.py").write_text(FAKE_RUNS.format(seconds=RUN_SECONDS))
    return pytester.path


def on_a_terminal(where: Path, *args: str, **environ: str) -> str:
    """What pytest writes to a terminal (a pseudo-terminal 100 columns wide), CI's variables unset unless
    given. Its cache (and so the history of run times) is the folder's own: the first sweep has none."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER", "PYTEST_ADDOPTS")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "sdk")]),
        COLUMNS="100",
        TERM="xterm",
        SSEBENCH_CACHE_DIR=str(where / "cache"),  # the history of run times: this sweep's own
        **environ,
    )
    main, terminal = os.openpty()
    command = [sys.executable, "-m", "pytest", "datasets/demo", "--agent", "reference", "--agent", "dummy"]
    process = subprocess.Popen(
        [*command, "--results", "out", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=where,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    shown = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([main], [], [], 1)[0]:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the terminal's other end closed: pytest is done
                    break
                if not chunk:
                    break
                shown += chunk
    finally:
        process.kill() if process.poll() is None else None
        process.wait()
        os.close(main)
    return shown.decode("utf-8", "replace")


def test_on_a_terminal_the_line_is_drawn_under_pytest_s_and_gone_at_the_end(sweep: Path) -> None:
    shown = on_a_terminal(sweep)
    assert "1 failed, 1 passed" in shown, shown
    assert UP in shown
    assert "ssebench: 0/2 done (0 passed, 0 failed, 0 error) | 1 running, 1 left | time to go: not known yet" in shown
    assert "ssebench: 1/2 done (1 passed, 0 failed, 0 error) | 1 running, 0 left | about " in shown
    # Taken away before pytest's last words: nothing drawn after its last progress.
    assert shown.rindex(UP) < shown.index("[100%]")
    # The sweep's snapshot for `ssebench ps --watch` is gone with it.
    assert (sweep / "out").is_dir() and not (sweep / "out" / ".progress").exists()


@pytest.mark.parametrize(("args", "environ"), [(["-q"], {}), (["-q"], {"CI": "true"})])
def test_with_q_nothing_is_shown(sweep: Path, args: list[str], environ: dict[str, str]) -> None:
    shown = on_a_terminal(sweep, *args, **environ)
    assert "1 passed" in shown and "1 failed" in shown, shown
    assert UP not in shown and "ssebench: 1/2 done" not in shown


@pytest.mark.parametrize("environ", [{"CI": "true"}, {"BUILD_NUMBER": "12"}])
def test_in_ci_plain_lines_and_no_redrawing(sweep: Path, environ: dict[str, str]) -> None:
    shown = on_a_terminal(sweep, **environ)
    assert "1 failed, 1 passed" in shown, shown
    assert UP not in shown and "\x1b[K" not in shown
    lines = [line for line in shown.splitlines() if line.startswith("ssebench: ") and " done " in line]
    # The dummy's run was never timed: it is expected to take what the reference's took. After the last run,
    # pytest's summary says the rest.
    assert len(lines) == 1, shown
    assert re.fullmatch(
        r"ssebench: 1/2 done \(1 passed, 0 failed, 0 error\) \| 0 running, 1 left \| about \ds to go \(1 never timed\)",
        lines[0],
    )


def test_under_xdist_the_controller_draws_the_line(sweep: Path) -> None:
    shown = on_a_terminal(sweep, "-n", "2")
    assert "1 failed, 1 passed" in shown, shown
    assert UP in shown
    assert "ssebench: 0/2 done (0 passed, 0 failed, 0 error) | 2 running, 0 left" in shown


def test_the_option_turns_it_off_and_says_what_it_takes(
    sweep: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = on_a_terminal(sweep, "--sweep-progress", "off")
    assert "1 failed, 1 passed" in shown and UP not in shown
    shown = on_a_terminal(sweep, SSEBENCH_PROGRESS="off")
    assert "1 failed, 1 passed" in shown and UP not in shown
    result = pytester.runpytest("datasets/demo", "--agent", "dummy", "--sweep-progress", "loud", "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --sweep-progress: 'loud': give one of auto, live, lines, off"])
    monkeypatch.setenv("SSEBENCH_PROGRESS", "loud")
    result = pytester.runpytest("datasets/demo", "--agent", "dummy", "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*SSEBENCH_PROGRESS: 'loud': give one of auto, live, lines, off (or give --sweep-*"])
