"""Task folders collected as nodes, and one item per run.

    datasets/demo/c-demo/sse/config.yaml::reference[none-d2-sandbox]

A run is an item of its task's file, `sse/config.yaml`, so its node id names
a file: pytest takes it back as an argument (`pytest ID` reruns that one
run), where a folder with `::` after it is refused.

A run's heavy work happens in the item's setup, so an infrastructure
failure (image build, Docker, the whole run timing out) is an *error*; the
call phase only reads the grade, so a failed grade is a *failure*.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest
from sse.result import PatchResult

from pytest_ssebench.report import RECORD, identity, outcome, variants_text
from ssebench.errors import ConfigError, ConfigErrors
from ssebench.logs import for_terminal, last_lines
from ssebench.record import RunRecord
from ssebench.result import read_safely
from ssebench.runspec import RunConfig
from ssebench.task import Task

if TYPE_CHECKING:
    from ssebench.session import RunSession

CONFIG = pytest.StashKey[RunConfig]()


class TaskSource(Protocol):
    """What a task folder asks of the sweep it belongs to (`pytest_ssebench.sweep.Sweep`)."""

    lifecycle: RunSession

    def load_task(self, path: Path) -> Task: ...

    def runs_of(self, task: Task) -> list[RunConfig]: ...

    def item_name(self, run: RunConfig) -> str: ...


# What error_msg says first -> a sentence about it.
_SENTENCES = [
    ("Patch apply failed: ", "The patch was not applied: {rest}."),
    ("Patch apply failed", "The agent's patch does not apply to the original tree."),
    ("Patch capture failed", "The agent's change could not be captured from its tree."),
    ("Build failed", "The build failed with the agent's patch."),
    ("PoC failed: ", "A proof of concept still reproduces: {rest}."),
    ("Function test failed", "The project's own tests fail with the agent's patch."),
    ("Intent test failed", "The hidden upstream tests of the fix fail with the agent's patch."),
]
LOG_LINES = 40


def dataset_marker(name: str) -> str:
    return "dataset_" + re.sub(r"\W", "_", name.lower())


class GradeFailed(Exception):
    """The run was graded `failed`."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(for_terminal(record.patch_result.error_msg or "failed"))
        self.record = record


def _mark(value: Any) -> str:
    return {True: "passed", False: "FAILED", None: "not run"}.get(value, str(value))


def checks_line(patch: PatchResult) -> str:
    pocs = "not run" if patch.pov_total is None else f"{patch.pov_passed}/{patch.pov_total} fixed"
    variants = "" if patch.variants_total is None else f"; variants {variants_text(patch)}"
    return (
        f"build {_mark(patch.build_success)}; PoCs {pocs}{variants}; function test "
        f"{_mark(patch.func_test_success)}; intent test {_mark(patch.intent_test_success)}"
    )


def set_aside_list(named: list[str], count: int, shown: int = 10) -> str:
    """`count` file(s): the first of `named`, and how many more."""
    more = count - min(len(named), shown)
    return f"{count} changed file(s): " + ", ".join(named[:shown]) + (f" and {more} more" if more else "")


def failure_text(record: RunRecord) -> str:
    """A sentence naming the first failed check, the checks, then the tail of its log; for a terminal."""
    patch = record.patch_result
    message = patch.error_msg or "The run was graded failed."
    sentence = message
    for prefix, template in _SENTENCES:
        if message.startswith(prefix):
            sentence = template.format(rest=message[len(prefix) :])
            break
    # Written out before it is split, so that a carriage return shows as one, not as a line break.
    log = last_lines(for_terminal(patch.error_log or ""), LOG_LINES).splitlines()
    lines = [sentence, f"Checks: {checks_line(patch)}."]
    set_aside, count = record.set_aside
    if count:
        lines.append(f"Set aside by grading (outside the code under repair): {set_aside_list(set_aside, count)}.")
    hiding, hidden = record.hiding_code
    if hidden:
        first = hiding[0] if hiding else {"path": "?", "line": ""}
        lines.append(
            f"Lines that can hide a bug from the checks: {hidden} (first, {first['path']}: "
            f"{first['line'].strip()[:100]})."
        )
    if record.limits_hit:
        lines.append(f"Limits hit: {'; '.join(record.limits_hit)}.")
    if record.usage and record.usage.get("stopped"):
        lines.append(f"Model calls stopped by the gateway: {record.usage['stopped']}.")
    lines.append(f"Run directory: {record.run_dir}")
    if log:
        lines += ["", f"Last {len(log)} lines of its log:", *log]
    return for_terminal("\n".join(lines))


def error_text(record: RunRecord) -> str:
    """The infrastructure error, then the tail of the container's log; for a terminal."""
    lines = [f"Infrastructure error, not a grade: {record.infra_error}", f"Run directory: {record.run_dir}"]
    tail = read_safely(record.run_dir, "container.log", limit=8 * 1024)
    if tail:
        lines += ["", "Last lines of the container's log:", *last_lines(for_terminal(tail), LOG_LINES).splitlines()]
    return for_terminal("\n".join(lines))


class RunItem(pytest.Item):
    """One run: task x agent x model x difficulty x mode (x trial)."""

    def __init__(self, *, run: RunConfig, runner: RunSession, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stash[CONFIG] = run
        self.runner = runner
        task = run.task
        for marker in (task.language, run.mode, "ssebench", dataset_marker(task.dataset)):
            self.add_marker(marker)
        if task.long:
            self.add_marker("long")

    @property
    def run(self) -> RunConfig:
        return self.stash[CONFIG]

    def setup(self) -> None:
        # Who the run is, first: should anything below raise, the score table still counts it as an error.
        self.user_properties.extend(identity(self.run))
        record = self.runner.run(
            self.run, lambda attempt: self.ihook.pytest_ssebench_run_finished(item=self, record=attempt)
        )
        self.stash[RECORD] = record
        self.user_properties.extend(outcome(record))
        if record.infra_error is not None:
            pytest.fail(error_text(record), pytrace=False)

    def runtest(self) -> None:
        record = self.stash[RECORD]
        if record.grade != "passed":
            raise GradeFailed(record)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, GradeFailed):
            return failure_text(excinfo.value.record)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.run.task.config_path, None, f"{self.run.task.id}::{self.name}"


class CollectError(Exception):
    """A task that cannot be collected: its message is the whole report."""


class TaskDirectory(pytest.Directory):
    """A task folder: only its `sse/config.yaml` is collected, as the file its runs belong to."""

    def __init__(self, *, sweep: TaskSource, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep = sweep

    def collect(self) -> Iterator[pytest.Collector]:
        yield _SseFolder.from_parent(self, path=self.path / "sse", sweep=self.sweep)


class _SseFolder(pytest.Directory):
    """The task's `sse/` folder: the step between the task's folder and its file, so that pytest finds a
    run's node id (which walks the path part by part) and collects nothing else in it."""

    def __init__(self, *, sweep: TaskSource, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep = sweep

    def collect(self) -> Iterator[pytest.Collector]:
        yield TaskFile.from_parent(self, path=self.path / "config.yaml", sweep=self.sweep)


class TaskFile(pytest.File):
    """A task's `sse/config.yaml`: its runs are its items."""

    def __init__(self, *, sweep: TaskSource, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep = sweep

    def _task(self) -> Task:
        folder = self.path.parent.parent
        try:
            return self.sweep.load_task(folder)
        except ConfigErrors as exc:
            raise CollectError("\n".join(str(e) for e in exc.errors)) from None
        except ConfigError as exc:
            raise CollectError(str(exc)) from None

    def collect(self) -> Iterator[pytest.Item]:
        task = self._task()
        plugin = self.sweep
        for run in plugin.runs_of(task):
            yield RunItem.from_parent(self, name=plugin.item_name(run), run=run, runner=plugin.lifecycle)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, CollectError):
            return for_terminal(str(excinfo.value))
        return super().repr_failure(excinfo)
