"""A kept sidecar run (--keep-containers), with an agent that became root in its container: its container
stays up after the run, but nothing in it runs while the task container captures and grades.

Without keep, the agent's container has exited (every process in it with it) before the host tells the task
container the agent phase is over. Kept, it cannot exit: the host freezes it instead (the cgroup's freezer)
before it tells, and thaws it once the run's files are home. The forger of `test_sidecar_root.py` (root there,
marking the shared archive every 20 ms) stands for what would go on writing the tree the two share.
"""

from __future__ import annotations

import time

import pytest

from ssebench.inflight import entrypoint_lines
from tests.integrity.harness import Launcher
from tests.integrity.test_sidecar_root import FORGE

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]


def _seconds_of_day(stamp: str) -> float:
    hours, minutes, seconds = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


@pytest.mark.parametrize("fresh_launcher", ["sidecar"], indirect=True)
def test_nothing_in_a_kept_agent_container_runs_while_the_task_container_grades(fresh_launcher: Launcher) -> None:
    run = fresh_launcher.start("c-demo", level=2, keep=True)
    run.sh("root", FORGE)
    result = run.finish()
    grade = result["patch_result"]
    assert grade["status"] == "failed" and grade["pov_passed"] == 0, grade  # the dummy's grade, as without keep
    assert run.live.task is not None
    # The task container's own line (UTC, to the ms) from when it heard the agent's end and began to grade.
    [graded_at] = [
        _seconds_of_day(stamp)
        for stamp, text in entrypoint_lines(run.live.task.logs("stderr"))
        if text.startswith("agent exited with status")
    ]
    # The marks came home with the archive, copied out before the agent's container was thawed: the forger's
    # last was made before grading began (a run across midnight UTC would need another reading of the clock).
    marks = [float(mark) % 86400 for mark in (run.run_dir / "archive" / "forger-was-here").read_text().split()]
    assert len(marks) >= 5, marks  # the positive control: it ran until the agent phase ended
    assert max(marks) < graded_at, (max(marks), graded_at)
    # Thawed once home: both containers up, and the forger (root's, never the grade's) runs on.
    run.live.release()
    before = run.sh("root", "wc -l < /tmp/sse-archive/forger-was-here", task=True)
    time.sleep(1)
    after = run.sh("root", "wc -l < /tmp/sse-archive/forger-was-here", task=True)
    assert int(after) > int(before) >= len(marks), (before, after)
