"""One run: a task, an agent (and model), a difficulty and a mode, from images to grade.

This is the code both the pytest plugin and `ssebench run` go through:
images built or reused, a results directory of its own, a network of its
own, the container started with the run's settings and limits, waited for
with the run's timeout plus slack, its files copied out, the container and
the network removed.

Each run has a network of its own (internal unless egress is open), so no
run can reach another's container. Nothing of the host is bind-mounted but
the reference patch for the reference agent: results come out by copy when
the run is over (`ssebench.archive`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from sse.grading import PatchResult

from ssebench.agent import Agent
from ssebench.archive import extract
from ssebench.backend import Backend, ContainerSpec, Handle, Mount, Network, RunTimeoutError
from ssebench.defaults import AGENT_TIMEOUT, GRADING_TIMEOUT
from ssebench.errors import ImageBuildError, SSEBenchError
from ssebench.limits import Limits
from ssebench.reaper import Session
from ssebench.result import (
    RunSummary,
    RuntimeResult,
    linked_level,
    make_run_dir,
    new_run_id,
    patch_result_of,
    point_latest,
    read_result,
    read_safely,
    read_summary,
    recorded_status,
    runs_parent,
    write_json,
    write_text_atomic,
)
from ssebench.settings import Settings
from ssebench.task import Task, task_file

RESULTS_IN_CONTAINER = "/var/lib/ssebench/results"
ARCHIVE_IN_CONTAINER = "/tmp/sse-archive"
REFERENCE_IN_CONTAINER = "/reference/patch.diff"
# Start-up and the evaluator's own bookkeeping, beyond the agent's and grading's limits.
SLACK_SECONDS = 300.0
# What the host keeps of a run's files: the root-written results, and the agent's archive.
RESULTS_FILE_CAP, RESULTS_CAP = 256 << 20, 1 << 30
ARCHIVE_FILE_CAP, ARCHIVE_CAP = 64 << 20, 256 << 20


@dataclass(frozen=True)
class RunConfig:
    task: Task
    agent: Agent
    model: str = "none"
    difficulty: int = 2
    mode: str = "sandbox"
    timeout: float = AGENT_TIMEOUT
    grading_timeout: float = GRADING_TIMEOUT
    egress: str = "restricted"
    keep_container: bool = False
    limits: Limits = field(default_factory=Limits)
    # Which of the repeated trials of the same task x agent x model x difficulty x mode this is (from 1).
    trial: int = 1

    @property
    def reference_run(self) -> bool:
        return self.agent.gets_reference_patch

    def describe(self) -> dict[str, Any]:
        return {
            "agent": self.agent.name, "agent_version": self.agent.config.version, "model": self.model,
            "difficulty": self.difficulty, "mode": self.mode, "trial": self.trial, "timeout": self.timeout,
            "grading_timeout": self.grading_timeout, "egress": self.egress, "reference_run": self.reference_run,
            "limits": self.limits.describe(),
        }


class ModelLink(Protocol):
    """How a run's agent reaches its model (the model gateway): per-run access, and its accounting."""

    def open(self, run_id: str, model: str, network: Network, ttl: float) -> dict[str, str]:
        """Grant the run access; return the environment its agent needs (SSE_BASE_URL, SSE_API_KEY)."""

    def close(self, run_id: str) -> dict[str, Any] | None:
        """Revoke the run's access; return what it used (tokens, cost, calls), for summary.json."""


@dataclass
class RunRecord:
    """What a run produced, whatever happened."""

    config: RunConfig
    run_id: str
    run_dir: Path
    started_at: str
    grade: str = "error"
    result: dict[str, Any] | None = None
    infra_error: str | None = None
    exit_code: int | None = None
    network: str | None = None
    limits_hit: list[str] = field(default_factory=list)
    files: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    durations: dict[str, float] = field(default_factory=dict)
    # Taken from a finished run in the results directory (--resume), not run now.
    resumed: bool = False
    # The session (ssebench.reaper) whose labels its container and network carried.
    session: str | None = None
    # When things happened (seconds since the epoch, host clock): the container's start and end.
    timeline: dict[str, float] = field(default_factory=dict)

    @property
    def patch_result(self) -> PatchResult:
        """The checks of the patch as result.json gives them (all unknown without one)."""
        return patch_result_of((self.result or {}).get("patch_result"))

    @property
    def runtime_result(self) -> RuntimeResult:
        return RuntimeResult.of((self.result or {}).get("runtime_result"))


def limits_for(settings: Settings, task: Task, overrides: dict[str, str] | None = None) -> Limits:
    """A run's limits: the settings' defaults, then the task's config.yaml, then the run's own option."""
    limits = settings.default_limits()
    if task.config.limits is not None:
        limits = limits.merged(task.config.limits.overrides(), f"{task.config_path}: limits")
    if overrides:
        limits = limits.merged(overrides, "--run-limits")
    return limits


def network_name(session: Session, run_id: str) -> str:
    return f"ssebench-{session.id}-{run_id}"


def container_spec(config: RunConfig, image: str, session: Session, run_id: str, network: str | None,
                   model_env: dict[str, str] | None = None, command: list[str] | None = None) -> ContainerSpec:
    """The container of a run. Only the reference agent ever gets the reference patch."""
    task = config.task
    mounts = []
    if config.reference_run and task.config.files.patch:
        mounts.append(Mount(task_file(task.path, task.config.files.patch).resolve(), REFERENCE_IN_CONTAINER,
                            read_only=True))
    env = {"TIMEOUT": str(int(config.timeout)), "SSE_DIFFICULTY": str(config.difficulty),
           "SSE_GRADING_TIMEOUT": str(int(config.grading_timeout)),
           "SSE_FILE_SIZE_LIMIT": str(config.limits.file_size),
           "SSE_ARCHIVE_FILE_CAP": str(ARCHIVE_FILE_CAP), "SSE_ARCHIVE_CAP": str(ARCHIVE_CAP)}
    if config.model != "none":
        env["SSE_MODEL_NAME"] = config.model
        env.update(model_env or {})
    labels = {**session.labels(), "ssebench.run": run_id, "ssebench.task": task.id,
              "ssebench.agent": config.agent.name, "ssebench.model": config.model,
              "ssebench.difficulty": str(config.difficulty), "ssebench.mode": config.mode,
              "ssebench.trial": str(config.trial)}
    return ContainerSpec(image=image, env=env, mounts=mounts, labels=labels, network=network, command=command,
                         limits=config.limits)


@dataclass
class LiveRun:
    """A run's container on its network, while it exists."""

    handle: Handle
    network: Network
    run_id: str


@contextmanager
def running(config: RunConfig, backend: Backend, session: Session, run_id: str, image: str, *,
            command: list[str] | None = None, models: ModelLink | None = None,
            usage: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Iterator[LiveRun]:
    """Start a run's network and container; remove both afterwards (unless the run keeps its container).

    With `models`, the run gets access to its model for as long as it lasts;
    what it used is put into `usage` when it ends. `env` adds runtime
    settings (SSE_*) to the container's environment.
    """
    labels = {**session.labels(), "ssebench.run": run_id}
    network = backend.create_network(network_name(session, run_id), internal=config.egress == "restricted",
                                      labels=labels)
    handle: Handle | None = None
    opened = False
    try:
        model_env: dict[str, str] = {}
        if models is not None and config.model != "none":
            model_env = models.open(run_id, config.model, network,
                                    ttl=config.timeout + config.grading_timeout + SLACK_SECONDS)
            opened = True
        spec = container_spec(config, image, session, run_id, network.name, model_env, command)
        spec.env.update(env or {})
        handle = backend.start(spec)
        yield LiveRun(handle=handle, network=network, run_id=run_id)
    finally:
        try:
            if opened and models is not None:
                used = models.close(run_id)
                if usage is not None and used is not None:
                    usage.update(used)
        finally:
            if not config.keep_container:
                try:
                    if handle is not None:
                        handle.remove()
                finally:
                    backend.remove_network(network.name)


def collect(handle: Handle, run_dir: Path) -> dict[str, Any]:
    """Copy the run's results and the agent's archive out of its container; say what was dropped."""
    report: dict[str, Any] = {}
    for name, path, dest, file_cap, total_cap in (
        ("results", RESULTS_IN_CONTAINER, run_dir, RESULTS_FILE_CAP, RESULTS_CAP),
        ("archive", ARCHIVE_IN_CONTAINER, run_dir / "archive", ARCHIVE_FILE_CAP, ARCHIVE_CAP),
    ):
        try:
            report[name] = extract(handle.export(path), dest, file_cap=file_cap, total_cap=total_cap).describe()
        except SSEBenchError as exc:
            report[name] = {"error": str(exc)}
    pruned = read_safely(run_dir, "archive.json", limit=4 << 20, tail=False)
    if pruned:
        try:
            report["archive"]["pruned_in_container"] = json.loads(pruned)
        except ValueError:
            pass
    return report


def _limits_hit(run_dir: Path, handle: Handle | None, config: RunConfig) -> list[str]:
    hit: list[str] = []
    text = read_safely(run_dir, "limits.json", limit=1 << 20, tail=False)
    if text:
        try:
            hit += [str(line) for line in json.loads(text).get("hit") or []]
        except (ValueError, AttributeError):
            pass
    if handle is not None and not any(line.startswith("memory") for line in hit):
        try:
            if handle.memory_exhausted():
                hit.append(f"memory: the container hit its memory limit of {config.limits.memory} bytes")
        except SSEBenchError:
            pass
    return hit


def salvage(handle: Handle, run_dir: Path, record: RunRecord) -> None:
    """Copy out what a run left (its log, results, archive, limits hit), each step despite the others failing.

    Raises the log's engine error afterwards, so the run is recorded as an infrastructure error.
    """
    error: SSEBenchError | None = None
    try:
        write_text_atomic(run_dir / "container.log", handle.logs())
    except SSEBenchError as exc:
        error = exc
    record.files = collect(handle, run_dir)  # each of these records its own engine errors
    record.limits_hit = _limits_hit(run_dir, handle, record.config)
    if error is not None:
        raise error


def execute(config: RunConfig, settings: Settings, backend: Backend, session: Session, results_root: Path,
            *, build: bool = True, models: ModelLink | None = None, command: list[str] | None = None) -> RunRecord:
    """Run once and record it. Infrastructure failures are recorded, not raised.

    `command` replaces the agent image's command (tests give hostile agents this way).
    """
    from ssebench.build import build_images
    from ssebench.image import image_names

    run_id = new_run_id(config.difficulty, config.mode)
    run_dir = make_run_dir(results_root, config.task.id, config.model, config.agent.name, run_id)
    record = RunRecord(config=config, run_id=run_id, run_dir=run_dir,
                       started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), session=session.id)
    started = time.monotonic()
    usage: dict[str, Any] = {}
    try:
        if build:
            outcome = build_images(settings, [config.task], config.agent)
            if config.task.id in outcome.failures:
                raise outcome.failures[config.task.id]
        record.durations["images"] = round(time.monotonic() - started, 3)
        image = image_names(settings, config.task, config.agent.name)["agent"]
        record.network = network_name(session, run_id)
        with running(config, backend, session, run_id, image, models=models, usage=usage,
                     command=command) as live:
            began = time.monotonic()
            record.timeline["container_started"] = time.time()
            try:
                record.exit_code = live.handle.wait(config.timeout + config.grading_timeout + SLACK_SECONDS)
            finally:
                record.durations["container"] = round(time.monotonic() - began, 3)
                record.timeline["container_ended"] = time.time()
                salvage(live.handle, run_dir, record)
        record.result = read_result(run_dir)
        if record.result is None:
            record.infra_error = f"the run ended (exit {record.exit_code}) without a result.json; see {run_dir}/container.log"
            if record.limits_hit:
                record.infra_error += "; limits hit: " + "; ".join(record.limits_hit)
        else:
            record.grade = recorded_status(record.result.get("patch_result"))
            if record.grade == "error":
                record.infra_error = f"grading did not run: {record.patch_result.error_msg}"
    except ImageBuildError as exc:
        record.infra_error = str(exc)
    except RunTimeoutError as exc:
        record.infra_error = f"the whole run timed out: {exc}"
    except SSEBenchError as exc:
        record.infra_error = str(exc)
    finally:
        record.usage = usage or None
        record.durations["total"] = round(time.monotonic() - started, 3)
        agent_time = record.runtime_result.agent_duration
        if agent_time is not None:
            record.durations["agent"] = float(agent_time)
        write_summary(record)
        point_latest(run_dir)
    return record


def write_summary(record: RunRecord) -> None:
    task = record.config.task
    summary: RunSummary = {
        "task": {"id": task.id, "dataset": task.dataset, "dataset_version": task.dataset_version,
                 "digest": task.digest, "language": task.language, "project": task.config.project,
                 "advisories": task.advisories(), "path": str(task.path)},
        "config": record.config.describe(),
        "grade": record.grade,
        "error": record.infra_error,
        "run_id": record.run_id,
        "session": record.session,
        "started_at": record.started_at,
        "network": record.network,
        "limits_hit": record.limits_hit,
        "files": record.files,
        "usage": record.usage,
        "durations": record.durations,
        "timeline": record.timeline,
        "exit_code": record.exit_code,
    }
    write_json(record.run_dir / "summary.json", summary)


# What must be the same for a finished run to stand for a run (RunConfig.describe()'s keys; trial apart).
RESUME_IDENTITY = ("agent", "agent_version", "model", "difficulty", "mode", "timeout", "egress", "limits")


def finished_run(config: RunConfig, results_root: Path) -> RunRecord | None:
    """The newest graded run of exactly this run's identity in `results_root`, as a record; None if none.

    Identity: the task (id, dataset version and the digest of its files), the
    agent and its version, the model, difficulty, mode, trial, and the
    conditions it ran under (agent time limit, egress, resource limits). A
    run that ended in an infrastructure error is not finished: it runs again.
    """
    parent = runs_parent(results_root, config.task.id, config.model, config.agent.name)
    if linked_level(results_root, parent) is not None or not parent.is_dir():
        return None
    want = config.describe()
    task = config.task
    for run_dir in sorted((p for p in parent.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True):
        summary = read_summary(run_dir)
        if summary is None or summary["grade"] not in ("passed", "failed"):
            continue
        got, got_task = summary["config"], summary["task"]
        if (got_task.get("id"), got_task.get("dataset_version"), got_task.get("digest")) != (
                task.id, task.dataset_version, task.digest):
            continue
        if any(got.get(key) != want[key] for key in RESUME_IDENTITY) or got.get("trial", 1) != config.trial:
            continue
        result = read_result(run_dir)
        if result is None or recorded_status(result.get("patch_result")) != summary["grade"]:
            continue
        return RunRecord(config=config, run_id=str(summary.get("run_id") or run_dir.name), run_dir=run_dir,
                         started_at=str(summary.get("started_at") or ""), grade=summary["grade"], result=result,
                         exit_code=summary.get("exit_code"), network=summary.get("network"),
                         limits_hit=list(summary.get("limits_hit") or []), files=summary.get("files") or {},
                         usage=summary.get("usage"), durations=summary.get("durations") or {}, resumed=True,
                         session=summary.get("session"), timeline=summary.get("timeline") or {})
    return None
