"""A run's record: what the harness knows of a run, whatever happened; summary.json is its form on disk.

One model for every place a run's record goes: `execute` writes it, a Ray
node ships it home as summary.json's content (`ssebench.dispatch`),
`--resume` reads it back (`finished_run`), and the report's junit-xml
properties come from it (`RunRecord.properties`). A field added to RunRecord
is in all of them.

summary.json without `schema_version` is version 0, written before there
was one: its fields have version 1's names (`node` and `images` may be
missing), so it reads as it is. A newer version than this code's is not
read: it may mean what this code does not know.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from sse.result import GRADES, GradeStatus, PatchResult, RunResult, RuntimeResult, Signals, Verdict, fits

from ssebench.result import linked_level, read_json_object, read_result, runs_parent, write_json
from ssebench.runspec import RunConfig
from ssebench.task import Task

SCHEMA_VERSION = 1

# Fields that are not summary.json's: the run's configuration (summary.json has its description), where the
# record is on this machine, result.json (a file of its own), and whether it was resumed here.
LOCAL = {"summary": False}
# A field summary.json names otherwise.
KEY = "key"


@dataclass
class RunRecord:
    """What a run produced, whatever happened.

    The docstring under each field summary.json keeps is its description in
    summary.json's JSON Schema and in docs/formats.md (`ssebench.formats`).
    """

    config: RunConfig = field(metadata=LOCAL)
    run_id: str
    """The run's id and the name of its directory: start time, difficulty, mode and a random suffix."""
    run_dir: Path = field(metadata=LOCAL)
    started_at: str
    """When the run started (ISO 8601, UTC)."""
    grade: GradeStatus = "error"
    """The run's grade (`sse.result.grade`'s verdict): passed, failed, or error when nothing was graded."""
    result: RunResult | None = field(default=None, metadata=LOCAL)
    infra_error: str | None = field(default=None, metadata={KEY: "error"})
    """Why nothing was graded, when the grade is error; else null."""
    exit_code: int | None = None
    """The run container's exit status; null when the harness did not see it end (an error came first, or the run's
    time limit)."""
    network: str | None = None
    """The Docker network of the run's own."""
    limits_hit: list[str] = field(default_factory=list)
    """The resource limits the run's containers reached (memory, pids, file size), one sentence each."""
    files: dict[str, Any] = field(default_factory=dict)
    """What was brought home from the container (results, the agent's archive): files, bytes, what was dropped."""
    usage: dict[str, Any] | None = None
    """The model gateway's account of the run's calls (calls, tokens, cost, why it stopped), never the agent's
    own; null for a run without a model."""
    durations: dict[str, float] = field(default_factory=dict)
    """Seconds spent on each phase (images, container, agent, total, ...)."""
    # Taken from a finished run in the results directory (--resume), not run now.
    resumed: bool = field(default=False, metadata=LOCAL)
    rerun: str | None = field(default=None, metadata=LOCAL)
    """Why --resume ran it again rather than read it back (`resumable`); None without --resume."""
    session: str | None = None
    """The session (ssebench.reaper) whose labels the run's container and network carried."""
    timeline: dict[str, float] = field(default_factory=dict)
    """When things happened (seconds since the epoch, host clock): the container's start and end, and more."""
    node: str | None = None
    """The Ray node it ran on (`--dispatch ray`: host/node id); null for a run on this machine."""
    images: dict[str, list[str]] = field(default_factory=dict)
    """The images this run built, and pulled from a registry, before it started (none when all were current)."""

    @property
    def patch_result(self) -> PatchResult:
        """The checks of the patch as result.json gives them (all unknown without one)."""
        return self.result.patch_result if self.result else PatchResult()

    @property
    def runtime_result(self) -> RuntimeResult:
        return self.result.runtime_result if self.result else RuntimeResult()

    @property
    def signals(self) -> Signals:
        return self.result.signals if self.result else Signals()

    @property
    def hiding_code(self) -> tuple[list[dict[str, str]], int]:
        """Lines of the graded change that can hide a bug from the checks rather than fix it, and how many."""
        return self.signals.hiding_code, self.signals.hiding_code_count

    @property
    def set_aside(self) -> tuple[list[str], int]:
        """The changed files grading set aside (outside the code under repair), and how many there were."""
        return self.signals.protected_files, self.signals.protected_files_count

    def judged(self, verdict: Verdict) -> None:
        """Take `sse.result.grade`'s verdict: the grade, and its reason as the infrastructure error when
        nothing was graded."""
        self.grade = verdict.status
        self.infra_error = verdict.reason if verdict.status == "error" else None

    @staticmethod
    def summary_keys() -> Iterator[tuple[str, str]]:
        """(field, summary.json's key) of the fields summary.json holds."""
        for f in fields(RunRecord):
            if f.metadata.get("summary", True):
                yield f.name, f.metadata.get(KEY, f.name)

    def to_summary(self) -> dict[str, Any]:
        """summary.json's content: the task, the configuration, and every field of the record but the local."""
        return {
            "schema_version": SCHEMA_VERSION,
            "task": task_summary(self.config.task),
            "config": self.config.describe(),
            **{key: getattr(self, name) for name, key in self.summary_keys()},
        }

    @classmethod
    def from_summary(
        cls, config: RunConfig, run_dir: Path, data: object, *, result: RunResult | None = None, resumed: bool = False
    ) -> RunRecord | None:
        """The record summary.json's content `data` stands for, with this run's `config` (its own task and
        config are what `finished_run` compares); None when it is not a summary this code reads.

        Any version up to this code's reads (migrated: see the module's doc); a field of the wrong JSON type
        makes the whole summary unread, since a resumed grade must stand on a record read whole.
        """
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("task"), dict)
            or not isinstance(data.get("config"), dict)
        ):
            return None
        version = data.get("schema_version", 0)
        if not fits(version, int) or not 0 <= version <= SCHEMA_VERSION or data.get("grade") not in GRADES:
            return None
        hints = get_type_hints(cls)
        kept: dict[str, Any] = {}
        for name, key in cls.summary_keys():
            if key not in data:
                continue  # its default (version 0 may lack node and images)
            if not fits(data[key], hints[name]):
                return None
            kept[name] = data[key]
        if "run_id" not in kept or "started_at" not in kept:
            return None
        return cls(config=config, run_dir=run_dir, result=result, resumed=resumed, **kept)

    def write(self) -> None:
        """Write summary.json into the run's directory."""
        write_json(self.run_dir / "summary.json", self.to_summary())

    def properties(self) -> list[tuple[str, object]]:
        """What the run produced, as (name, value) pairs with one-line values (junit-xml properties): the
        record's own fields of one value, the grade the container recorded (`status`), and the fields of
        result.json's patch and runtime results (logs left out). Lists and mappings are the report's to
        render."""
        props: list[tuple[str, object]] = [
            ("resumed", self.resumed),
            ("rerun", self.rerun),
            ("run_dir", str(self.run_dir)),
        ]
        hints = get_type_hints(RunRecord)
        for name, _ in self.summary_keys():
            if not fits({}, hints[name]) and not fits([], hints[name]):  # of one value, by its type
                props.append((name, getattr(self, name)))
        props.append(("status", self.result.status if self.result else None))
        for part in (self.patch_result, self.runtime_result):
            props += [(f.name, getattr(part, f.name)) for f in fields(part) if f.metadata.get("brief", True)]
        return props


@dataclass(frozen=True)
class TaskSummary:
    """summary.json's `task`: who the task is, and the version of its files that ran."""

    id: str
    """The task's id."""
    dataset: str
    """The dataset's name (its folder's)."""
    dataset_version: str | None
    """The dataset's version (dataset.yaml); null for a task outside a dataset."""
    digest: str
    """A digest of the task folder's files: the results belong to this version of the task."""
    language: str
    """The task's language: c, go or rust."""
    project: str
    """The upstream project."""
    advisories: list[str]
    """The advisory ids (CVE, RUSTSEC, GHSA) the task names in its id and references."""
    path: str
    """The task folder, as the run was given it."""
    quarantined: str | None = None
    """Why dataset.yaml quarantines the task (its results are noise; score tables leave the run out); null when
    it does not."""


def task_summary(task: Task) -> dict[str, Any]:
    """summary.json's `task`."""
    return asdict(
        TaskSummary(
            id=task.id,
            dataset=task.dataset,
            dataset_version=task.dataset_version,
            digest=task.digest,
            language=task.language,
            project=task.config.project,
            advisories=task.advisories(),
            path=str(task.path),
            quarantined=task.quarantined,
        )
    )


def read_record(config: RunConfig, run_dir: Path, *, resumed: bool = False) -> RunRecord | None:
    """The record of the run in `run_dir` (summary.json, and result.json when there is one) taken for
    `config`; None when summary.json is missing or not one this code reads."""
    return RunRecord.from_summary(
        config, run_dir, read_json_object(run_dir, "summary.json"), result=read_result(run_dir), resumed=resumed
    )


# What must be the same for a finished run to stand for a run (RunConfig.describe()'s keys; trial apart).
RESUME_IDENTITY = (
    "agent",
    "agent_version",
    "agent_software",
    "model",
    "difficulty",
    "mode",
    "timeout",
    "egress",
    "limits",
    # A predictions run's patch (its sha256); absent from every other run's.
    "prediction",
)


def finished_run(config: RunConfig, results_root: Path) -> RunRecord | None:
    """The newest graded run of exactly this run's identity in `results_root`, as a record; None if none.

    Identity: the task (id, dataset version and the digest of its files), the
    agent, its version and its software's digest, the model (and a prediction's
    patch), difficulty, mode, trial, and the conditions it ran under (agent time limit, egress, resource limits). A
    run that ended in an infrastructure error is not finished: it runs again,
    and so does one whose result.json does not bear its summary's grade out.
    """
    return resumable(config, results_root)[0]


def resumable(config: RunConfig, results_root: Path) -> tuple[RunRecord | None, str]:
    """`finished_run`'s record, or None and why the run must run again (said of the newest run of its
    task, agent and model there, when there is one)."""
    parent = runs_parent(results_root, config.task.id, config.model, config.agent.name)
    if linked_level(results_root, parent) is not None:
        return None, "its runs' folder is reached through a link, which is never read"
    if not parent.is_dir():
        return None, "no earlier run"
    want = config.describe()
    task = config.task
    why: str | None = None
    for run_dir in sorted((p for p in parent.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True):
        summary = read_json_object(run_dir, "summary.json")
        record = RunRecord.from_summary(config, run_dir, summary, result=read_result(run_dir), resumed=True)
        if summary is None or record is None:
            why = why or f"{run_dir.name} has no summary this version reads"
            continue
        if record.grade not in ("passed", "failed"):
            why = why or f"{run_dir.name} ended in an error"
            continue
        got, got_task = summary["config"], summary["task"]
        if (got_task.get("id"), got_task.get("dataset_version"), got_task.get("digest")) != (
            task.id,
            task.dataset_version,
            task.digest,
        ):
            why = why or f"the task changed since {run_dir.name}"
            continue
        other = [key for key in RESUME_IDENTITY if got.get(key) != want.get(key)]
        if other or got.get("trial", 1) != config.trial:
            if not other:
                continue  # another trial of the same run: not a reason
            shown = ", ".join(f"{key} {got.get(key)!r} -> {want[key]!r}" for key in other)
            why = why or f"{run_dir.name} ran under other conditions ({shown})"
            continue
        if record.result is None or record.result.status != record.grade:
            why = why or f"{run_dir.name}'s result.json does not bear out its grade"
            continue
        return record, ""
    return None, why or "no earlier run of this trial"
    want = config.describe()
    task = config.task
    for run_dir in sorted((p for p in parent.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True):
        summary = read_json_object(run_dir, "summary.json")
        record = RunRecord.from_summary(config, run_dir, summary, result=read_result(run_dir), resumed=True)
        if summary is None or record is None or record.grade not in ("passed", "failed"):
            continue
        got, got_task = summary["config"], summary["task"]
        if (got_task.get("id"), got_task.get("dataset_version"), got_task.get("digest")) != (
            task.id,
            task.dataset_version,
            task.digest,
        ):
            continue
        if any(got.get(key) != want[key] for key in RESUME_IDENTITY) or got.get("trial", 1) != config.trial:
            continue
        if record.result is None or record.result.status != record.grade:
            continue
        return record
    return None
