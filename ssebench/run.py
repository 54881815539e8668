"""One run's lifecycle: a task, an agent (and model), a difficulty and a mode, from images to grade.

This is the code both the pytest plugin and `ssebench run` go through:
images built or reused, a results directory of its own, the run's
containers started (`ssebench.live`, from `ssebench.runspec`'s specs) and
waited for with the run's timeout plus slack, its files copied out, the
grade decided (`sse.result.grade`) and the record written
(`ssebench.record`). What goes wrong on the way is raised as a
`SSEBenchError` and recorded as the run's infrastructure error.
"""

from __future__ import annotations

import gzip
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sse.result import MEMORY_LIMIT, RunResult, grade

from ssebench.archive import extract
from ssebench.backend import Backend, Handle, RunTimeoutError
from ssebench.errors import SSEBenchError
from ssebench.inflight import entrypoint_lines
from ssebench.live import SLACK_SECONDS, ContainerDied, LiveRun, ModelLink, running
from ssebench.logs import last_lines
from ssebench.reaper import Session
from ssebench.record import RunRecord
from ssebench.result import (
    PREDICTION_FILE,
    REFERENCE_PATCH_FILE,
    SOURCE_CAP,
    SOURCE_FILE,
    make_run_dir,
    new_run_id,
    point_latest,
    read_result,
    read_safely,
    write_json,
    write_text_atomic,
)
from ssebench.runspec import (
    ARCHIVE_CAP,
    ARCHIVE_FILE_CAP,
    ARCHIVE_IN_CONTAINER,
    RESULTS_CAP,
    RESULTS_FILE_CAP,
    RESULTS_IN_CONTAINER,
    RunConfig,
    network_name,
)
from ssebench.settings import Settings
from ssebench.task import Task, task_file


def save_source(handle: Handle, source: str, run_dir: Path) -> dict[str, Any]:
    """The agent's final tree, `source` in the container that grades, as `source.tar.gz` in the run's directory;
    what happened to it.

    The engine writes the tar (no link in the tree is followed) and the host only compresses it, never
    unpacks it; a tree over SOURCE_CAP as a tar is not kept (an agent's build output can be gigabytes).
    """
    final = run_dir / SOURCE_FILE
    partial = run_dir / f".{SOURCE_FILE}.partial"
    size = 0
    chunks: Iterator[bytes] = iter(())
    try:
        chunks = handle.export(source)
        with gzip.open(partial, "wb", compresslevel=6) as out:
            for chunk in chunks:
                size += len(chunk)
                if size > SOURCE_CAP:
                    break
                out.write(chunk)
        if size > SOURCE_CAP:
            partial.unlink()
            return {"dropped": f"over {SOURCE_CAP >> 20} MiB as a tar"}
        partial.replace(final)
        return {"tar_bytes": size, "bytes": final.stat().st_size}
    except (SSEBenchError, OSError) as exc:
        partial.unlink(missing_ok=True)
        return {"error": str(exc)}
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # the engine's stream, when the tree was over the cap


def collect(handle: Handle, run_dir: Path, source: str | None = None) -> dict[str, Any]:
    """Copy the run's results and the agent's archive out of its container, and its final tree when `source`
    (the tree's path) is given; say what was dropped."""
    report: dict[str, Any] = {}
    if source is not None:
        report["source"] = save_source(handle, source, run_dir)
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
        with suppress(ValueError):
            report["archive"]["pruned_in_container"] = json.loads(pruned)
    return report


def _limits_hit(run_dir: Path, live: LiveRun | None, config: RunConfig) -> list[str]:
    """What the grading container's cgroup counted (limits.json), and OOM kills the engine saw in each of the
    run's containers (sidecar mode's agent container's prefixed `agent container: `)."""
    lines: list[str] = []
    text = read_safely(run_dir, "limits.json", limit=1 << 20, tail=False)
    if text:
        with suppress(ValueError, AttributeError):
            lines = [str(line) for line in json.loads(text).get("hit") or []]
    hit = list(lines)
    for name, handle in live.handles if live else []:
        prefix = "agent container: " if name == "agent-container" else ""
        counted = lines
        if prefix:
            # Its entrypoint says what its cgroup counted on its own stream (the agent's output is the other);
            # what the agent's container says is its own account, never part of a grade.
            said = read_safely(run_dir, "agent-container.log", limit=1 << 20) or ""
            counted = [
                text.removeprefix("limit hit: ") for _, text in entrypoint_lines(said) if text.startswith("limit hit: ")
            ]
            hit += [prefix + line for line in counted]
        if any(line.startswith("memory") for line in counted):
            continue
        try:
            if handle.memory_exhausted():
                hit.append(f"{prefix}memory: the container hit its memory limit of {config.limits.memory} bytes")
        except SSEBenchError:
            pass
    return hit


def salvage(live: LiveRun, run_dir: Path, record: RunRecord) -> None:
    """Copy out what a run left (its logs, results, archive, limits hit), each step despite the others failing.

    Raises the first log's engine error afterwards, so the run is recorded as an infrastructure error.
    """
    error: SSEBenchError | None = None
    for name, handle in live.handles:
        try:
            if name == "agent-container":  # the entrypoint's lines alone; the agent's output is agent.log
                write_text_atomic(run_dir / "agent-container.log", handle.logs("stderr"))
                write_text_atomic(run_dir / "agent.log", handle.logs("stdout"))
            else:
                write_text_atomic(run_dir / f"{name}.log", handle.logs())
        except SSEBenchError as exc:
            error = error or exc
    # Each of these records its own engine errors.
    record.files = collect(live.grader, run_dir, record.config.task.config.source)
    record.limits_hit = _limits_hit(run_dir, live, record.config)
    if error is not None:
        raise error


def execute(
    config: RunConfig,
    settings: Settings,
    backend: Backend,
    session: Session,
    results_root: Path,
    *,
    build: bool = True,
    models: ModelLink | None = None,
    command: list[str] | None = None,
) -> RunRecord:
    """Run once and record it. Infrastructure failures are recorded, not raised.

    `command` replaces the agent image's command (tests give hostile agents this way).
    """
    run_id = config.run_id or new_run_id(config.difficulty, config.mode)
    run_dir = make_run_dir(results_root, config.task.id, config.model, config.agent.name, run_id)
    record = RunRecord(
        config=config,
        run_id=run_id,
        run_dir=run_dir,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        session=session.id,
    )
    started = time.monotonic()
    usage: dict[str, Any] = {}
    try:
        live_run(config, settings, backend, session, record, build=build, models=models, usage=usage, command=command)
    except RunTimeoutError as exc:
        record.judged(grade(infrastructure=f"the whole run timed out: {exc}"))
    except SSEBenchError as exc:  # images, the engine, the results directory
        record.judged(grade(infrastructure=str(exc)))
    finally:
        record.usage = usage or None
        record.durations["total"] = round(time.monotonic() - started, 3)
        agent_time = record.runtime_result.agent_duration
        if agent_time is not None:
            record.durations["agent"] = float(agent_time)
        record.write()
        point_latest(run_dir)
    return record


def live_run(
    config: RunConfig,
    settings: Settings,
    backend: Backend,
    session: Session,
    record: RunRecord,
    *,
    build: bool,
    models: ModelLink | None,
    usage: dict[str, Any],
    command: list[str] | None,
) -> None:
    """Build (or reuse) the run's images, run its containers, copy out what they left and grade it into
    `record`. Raises SSEBenchError (RunTimeoutError for the whole run's limit) when the harness fails."""
    from ssebench.build import build_images
    from ssebench.image import image_names

    started = time.monotonic()
    if build:
        outcome = build_images(settings, [config.task], config.agent, modes=(config.mode,))
        record.images = {"built": outcome.report.built, "pulled": outcome.report.pulled}
        if config.task.id in outcome.failures:
            raise outcome.failures[config.task.id]
    record.durations["images"] = round(time.monotonic() - started, 3)
    names = image_names(settings, config.task, config.agent.name, config.mode)
    runtime = backend.runtime_volume(settings, names["runtime"])
    # Any runtime image fills it (they share the OS image's Python): the task's is at hand in either mode.
    software = backend.agent_volume(settings, config.agent, names["runtime"]) if config.agent.software_digest else None
    record.network = network_name(session, record.run_id)
    prediction = save_prediction(config, record.run_dir)
    with running(
        config,
        backend,
        session,
        record.run_id,
        names["agent"],
        models=models,
        usage=usage,
        command=command,
        task_image=names["tool"],
        runtime=runtime,
        software=software,
        prediction=prediction,
    ) as live:
        began = time.monotonic()
        record.timeline["container_started"] = time.time()
        died: ContainerDied | None = None
        try:
            record.exit_code = live.wait(config.timeout + config.grading_timeout + SLACK_SECONDS)
        except ContainerDied as exc:  # graded below: the memory the agent took may be why
            died = exc
        finally:
            record.durations["container"] = round(time.monotonic() - began, 3)
            record.timeline["container_ended"] = time.time()
            salvage(live, record.run_dir, record)
    said = read_result(record.run_dir)
    no_result = (
        str(died)
        if died is not None
        else (
            f"the run ended (exit {record.exit_code}) without a result.json; see {record.run_dir}/container.log; "
            f"its last lines:\n{last_lines(read_safely(record.run_dir, 'container.log') or '', 20)}"
        )
    )
    if record.limits_hit:
        no_result += "; limits hit: " + "; ".join(record.limits_hit)
    # The grading container's memory (not sidecar mode's agent container's, which grades nothing): used up,
    # it ended what could have graded (sidecar mode's task container as a whole, killed with its init).
    verdict = grade(
        infrastructure=_model_broken(usage), recorded=said, memory_hit=record.limits_hit, no_result=no_result
    )
    if verdict.rule == MEMORY_LIMIT or said is None:
        # An override of the host's graded, or the container wrote no result (upstream's "No result" text):
        # result.json says so, as the run's consumers read it.
        said = RunResult.by_host(verdict, said)
    # The run's settings, as the host ran it, and the requests its gateway refused (a signal): added here,
    # never the container's to write.
    said = replace(said, config=config.describe(), signals=said.signals.with_requests(*_gateway_refusals(usage)))
    write_json(record.run_dir / "result.json", said.to_json())
    save_reference_patch(config.task, record.run_dir)
    record.result = said
    record.judged(verdict)


def save_prediction(config: RunConfig, run_dir: Path) -> Path | None:
    """A predictions run's patch as `prediction.patch` in its directory, before the run: the file its container
    mounts read-only for the predictions agent, and the record of what the run was given. None for any other
    run."""
    if config.prediction is None or not config.agent.grades_predictions:
        return None
    path = run_dir / PREDICTION_FILE
    # Bytes as the file gave them (no newline translation); readable by the agent's user in the container.
    path.write_bytes(config.prediction.patch.encode("utf-8", errors="surrogateescape"))
    path.chmod(0o644)
    return path


def save_reference_patch(task: Task, run_dir: Path) -> None:
    """The task's reference patch (the upstream fix) as `reference.patch` in the run's directory, once the run
    is over: what reports and viewers show beside the agent's patch, read from the task folder on the host
    (inside the container only root's daemon serves it)."""
    inside = task.config.files.patch
    if not inside:
        return
    source = task_file(task.path, inside)
    if source.is_file() and not source.is_symlink():
        shutil.copyfile(source, run_dir / REFERENCE_PATCH_FILE)


def _model_broken(usage: dict[str, Any]) -> str | None:
    """Why the run's model is the infrastructure that failed (every call failed upstream, by the gateway's
    account), or None: a run with one answer, or with no call, is graded."""
    if not usage:
        return None
    from ssebench.gateway import Usage

    return Usage.from_summary(usage).upstream_broken()


def _gateway_refusals(usage: dict[str, Any]) -> tuple[list[dict[str, str]], int]:
    """The requests of the run's key that the gateway refused as out of its network (the first few, and how
    many), by its account in `usage`; none for a run without a model."""
    if not usage:
        return [], 0
    from ssebench.gateway import Usage

    read = Usage.from_summary(usage)
    return read.network_refusals, read.network_refused
