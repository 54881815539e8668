"""One run: a task, an agent (and model), a difficulty and a mode, from images to grade.

This is the code both the pytest plugin and `ssebench run` go through:
images built or reused, a results directory of its own, the container
started with the run's settings, waited for with the run's timeout plus
slack, the results collected, the container removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ssebench.agent import Agent
from ssebench.backend import Backend, ContainerSpec, Handle, Mount, RunTimeoutError
from ssebench.errors import ImageBuildError, SSEBenchError
from ssebench.reaper import Session
from ssebench.result import make_run_dir, new_run_id, point_latest, read_result, write_json
from ssebench.settings import Settings
from ssebench.task import Task, task_file

MODES = ("sandbox",)
EGRESS = ("restricted", "open")
RESULTS_IN_CONTAINER = "/var/lib/ssebench/results"
ARCHIVE_IN_CONTAINER = "/tmp/sse-archive"
REFERENCE_IN_CONTAINER = "/reference/patch.diff"
# Start-up and the evaluator's own bookkeeping, beyond the agent's and grading's limits.
SLACK_SECONDS = 300.0


@dataclass(frozen=True)
class RunConfig:
    task: Task
    agent: Agent
    model: str = "none"
    difficulty: int = 2
    mode: str = "sandbox"
    timeout: float = 3600.0
    grading_timeout: float = 3600.0
    egress: str = "restricted"
    keep_container: bool = False

    @property
    def reference_run(self) -> bool:
        return self.agent.gets_reference_patch

    def describe(self) -> dict[str, Any]:
        return {
            "agent": self.agent.name, "agent_version": self.agent.config.version, "model": self.model,
            "difficulty": self.difficulty, "mode": self.mode, "timeout": self.timeout,
            "grading_timeout": self.grading_timeout, "egress": self.egress, "reference_run": self.reference_run,
        }


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
    durations: dict[str, float] = field(default_factory=dict)

    @property
    def patch_result(self) -> dict[str, Any]:
        return (self.result or {}).get("patch_result") or {}


def _network(backend: Backend, config: RunConfig, session: Session) -> str:
    if config.egress == "open":
        return backend.ensure_network(f"ssebench-{session.id}-open", internal=False, labels=session.labels())
    return backend.ensure_network(f"ssebench-{session.id}-agents", internal=True, labels=session.labels())


def container_spec(config: RunConfig, image: str, run_dir: Path, session: Session, run_id: str,
                   network: str | None, model_env: dict[str, str] | None = None) -> ContainerSpec:
    """The container of a run. Only the reference agent ever gets the reference patch."""
    task = config.task
    mounts = [Mount(run_dir, RESULTS_IN_CONTAINER), Mount(run_dir / "archive", ARCHIVE_IN_CONTAINER)]
    if config.reference_run and task.config.files.patch:
        mounts.append(Mount(task_file(task.path, task.config.files.patch).resolve(), REFERENCE_IN_CONTAINER,
                            read_only=True))
    env = {"TIMEOUT": str(int(config.timeout)), "SSE_DIFFICULTY": str(config.difficulty),
           "SSE_GRADING_TIMEOUT": str(int(config.grading_timeout))}
    if config.model != "none":
        env["SSE_MODEL_NAME"] = config.model
        env.update(model_env or {})
    labels = {**session.labels(), "ssebench.run": run_id, "ssebench.task": task.id,
              "ssebench.agent": config.agent.name}
    return ContainerSpec(image=image, env=env, mounts=mounts, labels=labels, network=network)


def execute(config: RunConfig, settings: Settings, backend: Backend, session: Session, results_root: Path,
            *, build: bool = True, model_env: dict[str, str] | None = None) -> RunRecord:
    """Run once and record it. Infrastructure failures are recorded, not raised."""
    from ssebench.build import build_images
    from ssebench.image import image_names

    run_id = new_run_id(config.difficulty, config.mode)
    run_dir = make_run_dir(results_root, config.task.id, config.model, config.agent.name, run_id)
    record = RunRecord(config=config, run_id=run_id, run_dir=run_dir,
                       started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    started = time.monotonic()
    handle: Handle | None = None
    try:
        if build:
            outcome = build_images(settings, [config.task], config.agent)
            if config.task.id in outcome.failures:
                raise outcome.failures[config.task.id]
        record.durations["images"] = round(time.monotonic() - started, 3)
        image = image_names(settings, config.task, config.agent.name)["agent"]
        network = _network(backend, config, session)
        handle = backend.start(container_spec(config, image, run_dir, session, run_id, network, model_env))
        began = time.monotonic()
        try:
            record.exit_code = handle.wait(config.timeout + config.grading_timeout + SLACK_SECONDS)
        finally:
            record.durations["container"] = round(time.monotonic() - began, 3)
            (run_dir / "container.log").write_text(handle.logs(), encoding="utf-8")
        record.result = read_result(run_dir)
        if record.result is None:
            record.infra_error = f"the run ended (exit {record.exit_code}) without a result.json; see {run_dir}/container.log"
        else:
            record.grade = str(record.patch_result.get("status", "error"))
            if record.grade == "error":
                record.infra_error = f"grading did not run: {record.patch_result.get('error_msg')}"
    except ImageBuildError as exc:
        record.infra_error = str(exc)
    except RunTimeoutError as exc:
        record.infra_error = f"the whole run timed out: {exc}"
    except SSEBenchError as exc:
        record.infra_error = str(exc)
    finally:
        if handle is not None and not config.keep_container:
            handle.remove()
        record.durations["total"] = round(time.monotonic() - started, 3)
        agent_time = ((record.result or {}).get("runtime_result") or {}).get("agent_duration")
        if agent_time is not None:
            record.durations["agent"] = float(agent_time)
        write_summary(record)
        point_latest(run_dir)
    return record


def write_summary(record: RunRecord) -> None:
    task = record.config.task
    write_json(record.run_dir / "summary.json", {
        "task": {"id": task.id, "dataset": task.dataset, "language": task.language, "project": task.config.project,
                 "path": str(task.path)},
        "config": record.config.describe(),
        "grade": record.grade,
        "error": record.infra_error,
        "run_id": record.run_id,
        "started_at": record.started_at,
        "durations": record.durations,
        "exit_code": record.exit_code,
    })
