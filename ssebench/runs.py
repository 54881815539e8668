"""The runs of a results directory, read back for looking at them: `ssebench view` and `ssebench results export`.

    RESULTS/<task>/<model>/<agent>/<run-id>/summary.json (`ssebench.result` says the layout)

Every level is a real directory: a link anywhere (`latest`, or one planted
in a copied tree) is skipped, never followed, and files are read with
`read_safely`. What summary.json and result.json say is read by type, field
by field: a value of the wrong type is unknown, never an error, since part of
a run's files came out of a container an agent ran in.

Unlike `ssebench.record.read_record`, this needs no task folder: a results
directory is looked at on a machine that may not have the datasets.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sse.result import GRADES, PatchResult, RunResult, RuntimeResult

from ssebench.result import name_of, read_json_object, read_result
from ssebench.scores import Scored, ScoreTable

# The most runs one look reads: a results directory is a person's, but never an unbounded walk.
MAX_RUNS = 100_000


def _str(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class StoredRun:
    """One run of a results directory: where it is, its summary.json and its result.json as read."""

    root: Path
    # The run's folder below the root: task, model, agent, run id (each a path component as on disk).
    parts: tuple[str, str, str, str]
    summary: Mapping[str, Any]
    result: RunResult | None

    @property
    def run_dir(self) -> Path:
        return self.root.joinpath(*self.parts)

    @property
    def path(self) -> str:
        """The run's folder relative to the results directory, with `/`: its name in the viewer's URLs."""
        return "/".join(self.parts)

    @property
    def _task(self) -> Mapping[str, Any]:
        task = self.summary.get("task")
        return task if isinstance(task, dict) else {}

    @property
    def _config(self) -> Mapping[str, Any]:
        config = self.summary.get("config")
        return config if isinstance(config, dict) else {}

    @property
    def usage(self) -> Mapping[str, Any]:
        usage = self.summary.get("usage")
        return usage if isinstance(usage, dict) else {}

    @property
    def task(self) -> str:
        return _str(self._task.get("id"), name_of(self.parts[0]))

    @property
    def model(self) -> str:
        return _str(self._config.get("model"), name_of(self.parts[1]))

    @property
    def agent(self) -> str:
        return _str(self._config.get("agent"), name_of(self.parts[2]))

    @property
    def run_id(self) -> str:
        return _str(self.summary.get("run_id"), name_of(self.parts[3]))

    @property
    def language(self) -> str:
        return _str(self._task.get("language"))

    @property
    def dataset(self) -> str:
        return _str(self._task.get("dataset"))

    @property
    def project(self) -> str:
        return _str(self._task.get("project"))

    @property
    def advisories(self) -> list[str]:
        found = self._task.get("advisories")
        return [a for a in found if isinstance(a, str)] if isinstance(found, list) else []

    @property
    def quarantined(self) -> bool:
        """Its task was quarantined in dataset.yaml when it ran (summary.json's task.quarantined)."""
        return bool(self._task.get("quarantined"))

    @property
    def difficulty(self) -> int:
        return _int(self._config.get("difficulty")) or 0

    @property
    def mode(self) -> str:
        return _str(self._config.get("mode"), "sandbox")

    @property
    def trial(self) -> int:
        return _int(self._config.get("trial")) or 1

    @property
    def grade(self) -> str:
        grade = self.summary.get("grade")
        return grade if grade in GRADES else "error"

    @property
    def error(self) -> str:
        return _str(self.summary.get("error"))

    @property
    def session(self) -> str:
        return _str(self.summary.get("session"))

    @property
    def started_at(self) -> str:
        return _str(self.summary.get("started_at"))

    @property
    def durations(self) -> dict[str, float]:
        found = self.summary.get("durations")
        if not isinstance(found, dict):
            return {}
        return {str(k): v for k, value in found.items() if (v := _num(value)) is not None}

    @property
    def timeline(self) -> dict[str, float]:
        found = self.summary.get("timeline")
        if not isinstance(found, dict):
            return {}
        return {str(k): v for k, value in found.items() if (v := _num(value)) is not None}

    @property
    def limits_hit(self) -> list[str]:
        found = self.summary.get("limits_hit")
        return [x for x in found if isinstance(x, str)] if isinstance(found, list) else []

    @property
    def patch(self) -> PatchResult:
        return self.result.patch_result if self.result else PatchResult()

    @property
    def runtime(self) -> RuntimeResult:
        return self.result.runtime_result if self.result else RuntimeResult()

    @property
    def tokens(self) -> tuple[int | None, int | None]:
        """The gateway's input and output tokens (None for a run without a model)."""
        return _int(self.usage.get("prompt_tokens")), _int(self.usage.get("completion_tokens"))

    @property
    def total_tokens(self) -> int | None:
        counted = [t for t in self.tokens if t is not None]
        return sum(counted) if counted else None

    @property
    def cost(self) -> float | None:
        return _num(self.usage.get("cost"))

    def scored(self) -> Scored:
        """The run as the score table counts it."""
        agent_time = self.runtime.agent_duration
        return Scored(
            agent=self.agent,
            model=self.model,
            difficulty=self.difficulty,
            mode=self.mode,
            task=self.task,
            outcome=self.grade,
            patch=self.patch,
            agent_time=None if agent_time is None else float(agent_time),
            tokens=self.total_tokens,
            cost=self.cost,
            signals=tuple(self.result.signals.fired()) if self.result else (),
            quarantined=self.quarantined,
        )

    def row(self) -> dict[str, Any]:
        """The run as one row of `ssebench results export` (RUN_COLUMNS, in that order)."""
        patch, runtime = self.patch, self.runtime
        prompt, completion = self.tokens
        return {
            "task": self.task,
            "dataset": self.dataset,
            "language": self.language,
            "project": self.project,
            "advisories": " ".join(self.advisories),
            "agent": self.agent,
            "model": self.model,
            "difficulty": self.difficulty,
            "mode": self.mode,
            "trial": self.trial,
            "grade": self.grade,
            "error": self.error or None,
            "build": patch.build_success,
            "pocs_fixed": patch.pov_passed,
            "pocs": patch.pov_total,
            "variants_fixed": patch.variants_passed,
            "variants": patch.variants_total,
            "function_test": patch.func_test_success,
            "intent_test": patch.intent_test_success,
            "first_failure": patch.error_msg,
            "agent_seconds": runtime.agent_duration,
            "agent_timed_out": runtime.agent_timeout,
            "total_seconds": self.durations.get("total"),
            "calls": _int(self.usage.get("calls")),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "cost_usd": self.cost,
            "stopped": _str(self.usage.get("stopped")) or None,
            "limits_hit": "; ".join(self.limits_hit) or None,
            "started_at": self.started_at,
            "session": self.session or None,
            "run_id": self.run_id,
            "path": self.path,
        }


# The columns of `ssebench results export --table runs`, described (docs/viewer.md has this table, tested).
RUN_COLUMNS: dict[str, str] = {
    "task": "The task's id.",
    "dataset": "The dataset's name.",
    "language": "The task's language: c, go or rust.",
    "project": "The upstream project.",
    "advisories": "The advisory ids the task names, separated by spaces.",
    "agent": "The agent.",
    "model": "The model (`none` for an agent without one).",
    "difficulty": "The difficulty level the run was given (0-3).",
    "mode": "sandbox or sidecar.",
    "trial": "Which trial of the same run (from 1).",
    "grade": "passed, failed, or error (nothing was graded: not counted in pass rates).",
    "error": "Why nothing was graded, for an error; else empty.",
    "build": "Whether the patched tree built; empty when the step did not run.",
    "pocs_fixed": "How many proofs of concept no longer trigger the bug.",
    "pocs": "How many proofs of concept ran.",
    "variants_fixed": "How many hidden variant inputs no longer trigger the bug.",
    "variants": "How many variant inputs ran (empty: the task has none).",
    "function_test": "Whether the project's function tests passed; empty when not run.",
    "intent_test": "Whether the fix's intent test passed; empty when not run.",
    "first_failure": "The first check that failed, in a line.",
    "agent_seconds": "How long the agent ran.",
    "agent_timed_out": "Whether the agent was stopped at its time limit.",
    "total_seconds": "The whole run's time on the host, images to results.",
    "calls": "Model calls the gateway forwarded.",
    "prompt_tokens": "Input tokens, as the gateway counted them (cached ones included).",
    "completion_tokens": "Output tokens, as the gateway counted them.",
    "cost_usd": "What the calls cost at the model file's prices, in US dollars.",
    "stopped": "Why the gateway stopped the run's calls (its budget), if it did.",
    "limits_hit": "The resource limits the run's containers reached, separated by `; `.",
    "started_at": "When the run started (ISO 8601, UTC).",
    "session": "The session (one pytest or ssebench run invocation) it ran in.",
    "run_id": "The run's id.",
    "path": "The run's folder, relative to the results directory.",
}


def _real_dirs(folder: Path) -> Iterator[Path]:
    """The directories right under `folder`, links and hidden entries (.gateway, .latest-*) left out."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        yield entry


def read_runs(root: Path) -> list[StoredRun]:
    """Every run under `root` with a summary.json, oldest first; folders without one are left out."""
    if root.is_symlink() or not root.is_dir():
        raise NotADirectoryError(f"{root}: not a results directory (give the folder a run's --results wrote)")
    found: list[StoredRun] = []
    for task in _real_dirs(root):
        for model in _real_dirs(task):
            for agent in _real_dirs(model):
                for run in _real_dirs(agent):
                    summary = read_json_object(run, "summary.json")
                    if summary is None:
                        continue
                    parts = (task.name, model.name, agent.name, run.name)
                    found.append(StoredRun(root, parts, summary, read_result(run)))
                    if len(found) >= MAX_RUNS:
                        return sorted(found, key=lambda r: (r.started_at, r.path))
    return sorted(found, key=lambda r: (r.started_at, r.path))


# What the runs can be filtered by, and how each run says it (the viewer's filters; the export's options).
FILTERS: dict[str, str] = {
    "task": "task",
    "language": "language",
    "agent": "agent",
    "model": "model",
    "difficulty": "difficulty",
    "mode": "mode",
    "grade": "grade",
    "session": "session",
}


# What a spreadsheet reads as the start of a formula in a cell of text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value  # a model name is anyone's to choose (a predictions file): text, never a formula
    return value


def export_csv(rows: list[dict[str, Any]], out: IO[str], header: Iterable[str] = ()) -> None:
    """Rows as CSV, the header first (`header` when there is no row): true/false for booleans, an empty cell
    for unknown (None), a quote before text a spreadsheet would take for a formula."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(rows[0]) if rows else list(header))
    for row in rows:
        writer.writerow([_cell(v) for v in row.values()])


def matching(runs: Iterable[StoredRun], wanted: Mapping[str, Iterable[str]]) -> list[StoredRun]:
    """The runs whose every filtered field is one of its wanted values (a filter with no value keeps all)."""
    sets = {name: set(values) for name, values in wanted.items() if name in FILTERS and values}
    return [run for run in runs if all(str(getattr(run, FILTERS[n])) in values for n, values in sets.items())]


def score_table(runs: Iterable[StoredRun]) -> ScoreTable:
    """The score table of these runs; pass@k up to the most trials any run had."""
    runs = list(runs)
    table = ScoreTable(trials=max((run.trial for run in runs), default=1))
    for run in runs:
        table.add_run(run.scored())
    return table
