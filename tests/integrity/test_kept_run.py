"""Kept runs (--keep-containers) against a hostile agent.

A kept sidecar run, with an agent that became root in its container: its container stays up after the
run, but nothing in it runs while the task container captures and grades.

Without keep, the agent's container has exited (every process in it with it) before the host tells the task
container the agent phase is over. Kept, it cannot exit: the host freezes it instead (the cgroup's freezer)
before it tells, and thaws it once the run's files are home. The forger of `test_sidecar_root.py` (root there,
marking the shared archive every 20 ms) stands for what would go on writing the tree the two share.

A kept sandbox run whose agent image brings its own phase file saying `kept`: the host reads the phase
from the container's start, before the entrypoint replaces that file; a run's end is a `kept` phase with
the token made for that run, which no image can know.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from ssebench.inflight import entrypoint_lines
from ssebench.result import read_result
from ssebench.run import collect
from ssebench.runtime.contract import PHASE_FILE, Phase, phase_record
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import Launcher, launching
from tests.integrity.test_runner_area import _agent_image_after
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


@pytest.mark.parametrize("forged", [False, True])
def test_a_kept_phase_an_agent_image_brings_is_not_the_runs_end(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, forged: bool
) -> None:
    record = phase_record(Phase.KEPT, time.time(), status=0, token="").decode().strip()
    plant = f"mkdir -p -m 0700 /run/ssebench && printf '%s\\n' {shlex.quote(record)} > {PHASE_FILE}"
    with launching(settings, integrity_images, tmp_path, "sandbox") as launcher:
        task = launcher.task("c-demo")
        with _agent_image_after(settings, task, plant if forged else "true") as image:
            run = launcher.start(command=["true"], hold=False, image=image, keep=True)
            run.live.wait(300)
            collect(run.live.grader, run.run_dir)
            result = read_result(run.run_dir)
            assert result is not None and result.status == "failed", (result, run.logs()[-3000:])  # graded
            # It was the run's own end the host waited for: the entrypoint's, after grading.
            assert "SSE_KEEP_ALIVE=1: the container stays up" in run.live.handle.logs("stderr")
            run.close()
