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

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sse.grading import PatchResult

from ssebench.agent import Agent
from ssebench.archive import extract
from ssebench.backend import Backend, ContainerSpec, Handle, Mount, Network, RunTimeoutError, Volume
from ssebench.errors import ImageBuildError, SSEBenchError
from ssebench.inflight import entrypoint_lines
from ssebench.limits import Limits
from ssebench.logs import last_lines
from ssebench.reaper import Session
from ssebench.result import (
    RunSummary,
    RuntimeResult,
    linked_level,
    make_run_dir,
    memory_limit_failure,
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
from ssebench.runtime.contract import (
    AGENT_TIMEOUT,
    ARCHIVE_CAP,
    ARCHIVE_FILE_CAP,
    ENV,
    GRADING_TIMEOUT,
    MCP_PORT,
    ROLE_LABEL,
    RUN_LABEL,
    RUNNER_DIR,
    RUNTIME_HOME,
    RUNTIME_PYTHON,
    SERVING,
    SIDECAR_AGENT_SOCKET,
    SIDECAR_SOCKETS,
    TIMED_OUT,
    AgentEnd,
    RunLabels,
    RuntimeSettings,
)
from ssebench.runtime.contract import ARCHIVE as ARCHIVE_IN_CONTAINER
from ssebench.runtime.contract import REFERENCE_PATCH as REFERENCE_IN_CONTAINER
from ssebench.runtime.contract import RESULTS as RESULTS_IN_CONTAINER
from ssebench.settings import Settings
from ssebench.task import Task, task_file

# Sidecar mode: beyond the agent's time limit, how long its container has to start (its entrypoint waits for
# the daemon) and to end its agent before the host stops it, and how long telling the task container takes.
AGENT_CONTAINER_SLACK = 120.0
TELL_TIMEOUT = 60.0
# Start-up and the evaluator's own bookkeeping, beyond the agent's and grading's limits.
SLACK_SECONDS = 300.0
# What the host keeps of a run's files: the root-written results, and the agent's archive.
RESULTS_FILE_CAP, RESULTS_CAP = 256 << 20, 1 << 30


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

    @property
    def internal_network(self) -> bool:
        """Whether the run's network is internal: no route out (egress restricted, the default)."""
        return self.egress == "restricted"

    def describe(self) -> dict[str, Any]:
        return {
            "agent": self.agent.name,
            "agent_version": self.agent.config.version,
            "model": self.model,
            "difficulty": self.difficulty,
            "mode": self.mode,
            "trial": self.trial,
            "timeout": self.timeout,
            "grading_timeout": self.grading_timeout,
            "egress": self.egress,
            "reference_run": self.reference_run,
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
    # The Ray node it ran on (`--dispatch ray`: host/node id); None for a run on this machine.
    node: str | None = None
    # The images this run built, and pulled from a registry, before it started (none when all were current).
    images: dict[str, list[str]] = field(default_factory=dict)

    @property
    def patch_result(self) -> PatchResult:
        """The checks of the patch as result.json gives them (all unknown without one)."""
        return patch_result_of((self.result or {}).get("patch_result"))

    @property
    def runtime_result(self) -> RuntimeResult:
        return RuntimeResult.of((self.result or {}).get("runtime_result"))

    def _signal(self, name: str, item: Callable[[object], Any | None]) -> tuple[list[Any], int]:
        """result.json's signals.<name> (a list, each entry read by `item`, None dropping it) and
        signals.<name>_count, which is at least the list's length."""
        signals = (self.result or {}).get("signals")
        if not isinstance(signals, dict):
            return [], 0
        given = [entry for raw in signals.get(name) or [] if (entry := item(raw)) is not None]
        count = signals.get(f"{name}_count")
        return given, count if isinstance(count, int) and count >= len(given) else len(given)

    @property
    def hiding_code(self) -> tuple[list[dict[str, str]], int]:
        """Lines of the graded change that can hide a bug from the checks rather than fix it (result.json's
        signals.hiding_code, at most 50 given) and how many there were."""
        return self._signal(
            "hiding_code",
            lambda h: {"path": str(h.get("path", "")), "line": str(h.get("line", ""))} if isinstance(h, dict) else None,
        )

    @property
    def set_aside(self) -> tuple[list[str], int]:
        """The changed files grading set aside (outside the code under repair; result.json's
        signals.protected_files, at most 200 named) and how many there were."""
        return self._signal("protected_files", lambda p: p if isinstance(p, str) else None)


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


def container_spec(
    config: RunConfig,
    image: str,
    session: Session,
    run_id: str,
    network: str | None,
    model_env: dict[str, str] | None = None,
    command: list[str] | None = None,
    *,
    runtime: str,
) -> ContainerSpec:
    """The container the agent of a run runs in, with the `runtime` volume read-only at /opt/ssebench.

    Only the reference agent ever gets the reference patch.
    """
    task = config.task
    mounts = []
    if config.reference_run and task.config.files.patch:
        mounts.append(
            Mount(task_file(task.path, task.config.files.patch).resolve(), REFERENCE_IN_CONTAINER, read_only=True)
        )
    env = run_env(config)
    if config.model != "none":
        env["SSE_MODEL_NAME"] = config.model
        env.update(model_env or {})
    return ContainerSpec(
        image=image,
        env=env,
        mounts=mounts,
        labels=run_labels(config, session, run_id),
        network=network,
        command=command,
        limits=config.limits,
        dns_options=RESTRICTED_DNS_OPTIONS if config.internal_network else (),
        volumes=[Volume(runtime, RUNTIME_HOME, read_only=True)],
    )


# On an internal network the engine's resolver answers for the network's own names and never for any other:
# each lookup of one would wait out the resolver's timeouts (20 s for getent, 75 s for one of c-ares's tests)
# where a machine without a network fails it at once. One try of one second instead, in the words of glibc,
# musl and Go (timeout, attempts) and of older c-ares (retrans in ms, retry); each ignores the others'.
RESTRICTED_DNS_OPTIONS = ("timeout:1", "attempts:1", "retrans:1000", "retry:1")


def run_env(config: RunConfig) -> dict[str, str]:
    """The runtime settings of a run's containers (`ssebench.runtime.contract.RuntimeSettings`)."""
    settings = RuntimeSettings(
        difficulty=config.difficulty,
        agent_timeout=config.timeout,
        grading_timeout=float(int(config.grading_timeout)),
        file_size=config.limits.file_size,
    )
    return settings.to_env(
        "agent_timeout", "difficulty", "grading_timeout", "file_size", "archive_file_cap", "archive_cap"
    )


def run_labels(config: RunConfig, session: Session, run_id: str) -> dict[str, str]:
    run = RunLabels(
        run=run_id,
        task=config.task.id,
        agent=config.agent.name,
        model=config.model,
        difficulty=str(config.difficulty),
        mode=config.mode,
        trial=str(config.trial),
    )
    return {**session.labels(), **run.to_labels()}


def tree_volume(config: RunConfig, prefix: str) -> Volume:
    """The agent's tree: a volume of the run's own at the task's source path, which the container that holds
    the task fills from its image (the case's tree) and its entrypoint prepares (ssebench.runtime.tree)."""
    return Volume(f"{prefix}-src", config.task.config.source, fill=True)


def sidecar_specs(
    config: RunConfig, agent: ContainerSpec, task_image: str, run_id: str, session: Session
) -> tuple[ContainerSpec, ContainerSpec, list[str]]:
    """Sidecar mode: (task container, agent container, volume names) from the agent's container spec.

    The task container (the tool image) does everything that grades, as
    sandbox mode's one container does but for running the agent: the daemon,
    the MCP server, the evaluator, the tree, the hidden files and the
    results. The agent container (no task in its image) runs the agent
    alone. They share three volumes of the run: the source tree
    (`tree_volume`, prepared by the task container), the agent socket's
    directory and the agent's archive; never the results or the admin
    socket. The agent reaches the daemon through the socket volume and the
    MCP server at the task container's name on the run's network; the
    daemon's HTTP port there serves it, as any peer, the public view only.
    """
    prefix = network_name(session, run_id)
    shared = {"sockets": SIDECAR_SOCKETS, "archive": ARCHIVE_IN_CONTAINER}
    tree = tree_volume(config, prefix)
    # Only the tree comes from an image (the task's); nothing of either image enters the other volumes.
    filled = [tree, *(Volume(f"{prefix}-{key}", path) for key, path in shared.items())]
    volumes = [replace(v, fill=False) for v in filled]
    # Its name is a host name on the run's network: one DNS label (63 characters at most), unique on the engine.
    task_name = "ssebench-task-" + hashlib.sha256(prefix.encode()).hexdigest()[:16]
    sockets = RuntimeSettings(agent_socket=SIDECAR_AGENT_SOCKET, mcp_url=f"http://{task_name}:{MCP_PORT}/mcp").to_env(
        "agent_socket", "mcp_url"
    )
    # The task container gets the runtime's settings and nothing else of the agent's environment (no model
    # access: its bash tool is the agent's, but the key is the agent container's alone).
    settings = {k: v for k, v in agent.env.items() if k in ENV.values()}
    task_env = RuntimeSettings(role="task", mcp_bind="0.0.0.0").to_env("role", "mcp_bind")
    agent_env = RuntimeSettings(role="agent", source=config.task.config.source).to_env("role", "source")
    # The task container (a tool image) keeps the runtime volume; the agent's image holds a runtime of its own.
    task = replace(
        agent,
        image=task_image,
        name=task_name,
        mounts=[],
        command=None,
        volumes=[*agent.volumes, *filled],
        env={**settings, **sockets, **task_env},
        labels={**agent.labels, ROLE_LABEL: "task"},
    )
    agent = replace(
        agent,
        volumes=volumes,
        env={**agent.env, **sockets, **agent_env},
        labels={**agent.labels, ROLE_LABEL: "agent"},
    )
    return task, agent, [v.name for v in volumes]


class ContainerDied(SSEBenchError):
    """Sidecar mode's task container exited while the agent's container still ran."""


# How long the task container may take to prepare the tree and start its servers (the daemon's own start-up
# limit, and the tree's copy, beyond it).
READY_TIMEOUT = 600.0


def await_ready(task: Handle, timeout: float) -> None:
    """Wait until sidecar mode's task container serves, or has exited (its wait then says so, with its log).
    Raises RunTimeoutError when it does neither within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text == SERVING for _, text in entrypoint_lines(task.logs("stderr"))) or task.poll() is not None:
            return
        time.sleep(0.05)
    raise RunTimeoutError(
        f"the task container {task.id[:12]} did not serve within {timeout:.0f} s; its last "
        f"lines:\n{last_lines(task.logs(), 20)}"
    )


@dataclass
class LiveRun:
    """A run's containers on its network, while they exist."""

    handle: Handle  # where the agent runs: sandbox mode's one container, sidecar mode's agent container
    network: Network
    run_id: str
    task: Handle | None = None  # sidecar mode's task container
    config: RunConfig | None = None

    @property
    def grader(self) -> Handle:
        """The container that grades and holds the results: sandbox mode's one, sidecar mode's task container."""
        return self.task or self.handle

    def wait(self, timeout: float) -> int:
        """Wait for the run to end (the container that grades to exit); its status.

        Sidecar mode: first the agent's container, stopped at the agent's time
        limit (and some slack to start); then the task container is told the
        agent phase is over, with its figures, and grades. Raises
        RunTimeoutError after `timeout` seconds in all, and ContainerDied when
        the task container exits while the agent's still runs (with its log's
        last lines).
        """
        if self.task is None:
            return self.handle.wait(timeout)
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        agent_limit = (self.config.timeout if self.config else timeout) + AGENT_CONTAINER_SLACK
        timed_out = False
        while True:
            try:
                status = self.handle.wait(max(0.1, min(2.0, deadline - time.monotonic())))
                break
            except RunTimeoutError:
                ended = self.task.poll()
                if ended is not None:
                    raise ContainerDied(
                        f"the task container exited (status {ended}) during the run; its last "
                        f"lines:\n{last_lines(self.task.logs(), 20)}"
                    ) from None
                if time.monotonic() - started >= agent_limit:
                    self.handle.stop(1)  # past the agent's limit: its container's own timer did not end it
                    status, timed_out = TIMED_OUT, True
                    break
                if time.monotonic() >= deadline:
                    raise RunTimeoutError(
                        f"container {self.handle.id[:12]} still running after {timeout:.0f} s"
                    ) from None
        figures = AgentEnd(status, time.monotonic() - started, timed_out or status == TIMED_OUT).to_figures()
        told, said = self.task.execute(
            [RUNTIME_PYTHON, "-I", "-m", "ssebench.runtime.phase", json.dumps(figures)], TELL_TIMEOUT
        )
        if told != 0:
            raise ContainerDied(
                f"telling the task container the agent's end failed (status {told}): {said.strip()}"
                f"; its last lines:\n{last_lines(self.task.logs(), 20)}"
            )
        return self.task.wait(max(1.0, deadline - time.monotonic()))

    @property
    def handles(self) -> list[tuple[str, Handle]]:
        """(log name, container) of each of the run's containers: `container` is the one that grades."""
        if self.task is None:
            return [("container", self.handle)]
        return [("container", self.task), ("agent-container", self.handle)]


@contextmanager
def running(
    config: RunConfig,
    backend: Backend,
    session: Session,
    run_id: str,
    image: str,
    *,
    command: list[str] | None = None,
    models: ModelLink | None = None,
    usage: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    task_image: str | None = None,
    runtime: str,
) -> Iterator[LiveRun]:
    """Start a run's network and containers; remove all afterwards (unless the run keeps its containers).

    `image` is the agent's image; sidecar mode also starts `task_image` (the
    task's tool image) as the task container, with the volumes they share.
    `runtime` is the runtime volume (`ensure_runtime_volume`) of the task's
    tool image.

    With `models`, the run gets access to its model for as long as it lasts;
    what it used is put into `usage` when it ends. `env` adds runtime
    settings (SSE_*) to the container's environment.
    """
    labels = {**session.labels(), RUN_LABEL: run_id}
    network = backend.create_network(network_name(session, run_id), internal=config.internal_network, labels=labels)
    handles: list[Handle] = []
    volumes: list[str] = []
    opened = False
    failed = True  # until the block ends normally: then a cleanup error is the run's error, else it is not
    try:
        model_env: dict[str, str] = {}
        if models is not None and config.model != "none":
            model_env = models.open(
                run_id, config.model, network, ttl=config.timeout + config.grading_timeout + SLACK_SECONDS
            )
            opened = True
        spec = container_spec(config, image, session, run_id, network.name, model_env, command, runtime=runtime)
        spec.env.update(env or {})
        # Where grading builds is a volume of the run's own in the container that grades (sandbox mode's one,
        # sidecar mode's task container): the task's scripts write to the host's file system, not through the
        # image's storage driver (fuse-overlayfs ran them up to 2.9x slower; docs/performance.md). Nothing of
        # the image enters it; the entrypoint takes it only empty and makes it root's (prepare_runner_area).
        # The agent's tree is one too, filled from the image: no task's image keeps a copy of its own tree for
        # the agent (sidecar_specs makes it for sidecar mode).
        runner = Volume(f"{network_name(session, run_id)}-runner", RUNNER_DIR)
        if config.mode != "sidecar":
            tree = tree_volume(config, network_name(session, run_id))
            spec = replace(spec, volumes=[*spec.volumes, runner, tree])
            names = [runner.name, tree.name]
        else:
            task_spec, agent_spec, names = sidecar_specs(config, spec, task_image or "", run_id, session)
            task_spec = replace(task_spec, volumes=[*task_spec.volumes, runner])
            names = [*names, runner.name]
        for name in names:
            volumes.append(name)  # first: a volume whose creation was interrupted is removed all the same
            backend.create_volume(name, labels=labels)
        if config.mode != "sidecar":
            handles.append(backend.start(spec))
            yield LiveRun(handle=handles[0], network=network, run_id=run_id, config=config)
        else:
            handles.append(backend.start(task_spec))  # first: it fills the source volume from its image
            # The agent's container starts once the task container has prepared what they share (the tree, the
            # socket's directory) and serves: root there walks and writes paths in those volumes while it
            # prepares them, and an agent's own image may run anything as root from its first instant.
            await_ready(handles[0], READY_TIMEOUT)
            handles.append(backend.start(agent_spec))
            yield LiveRun(handle=handles[1], network=network, run_id=run_id, task=handles[0], config=config)
        failed = False
    finally:
        try:
            if opened and models is not None:
                used = models.close(run_id)
                if usage is not None and used is not None:
                    usage.update(used)
        finally:
            if not config.keep_container:
                remove_all(backend, handles, volumes, network.name, quiet=failed)


def remove_all(
    backend: Backend, handles: list[Handle], volumes: list[str], network: str, *, quiet: bool = False
) -> None:
    """Remove a run's containers, then its volumes and its network; every step despite the others failing.

    Raises the first error, unless `quiet` (the run already failed: its own error is the one to report, and
    these are printed; the session's reaper removes what is left by its labels).
    """
    errors: list[SSEBenchError] = []

    def attempt(step: Callable[..., None], *args: str) -> None:
        try:
            step(*args)
        except SSEBenchError as exc:
            errors.append(exc)

    for handle in reversed(handles):
        attempt(handle.remove)
    for name in volumes:
        attempt(backend.remove_volume, name)
    attempt(backend.remove_network, network)
    if errors and quiet:
        for exc in errors:
            print(f"ssebench: cleaning up after a failed run: {exc}", file=sys.stderr)
    elif errors:
        raise errors[0]


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
    record.files = collect(live.grader, run_dir)  # each of these records its own engine errors
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
    from ssebench.build import build_images
    from ssebench.image import image_names

    run_id = new_run_id(config.difficulty, config.mode)
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
        if build:
            outcome = build_images(settings, [config.task], config.agent, modes=(config.mode,))
            record.images = {"built": outcome.report.built, "pulled": outcome.report.pulled}
            if config.task.id in outcome.failures:
                raise outcome.failures[config.task.id]
        record.durations["images"] = round(time.monotonic() - started, 3)
        names = image_names(settings, config.task, config.agent.name, config.mode)
        runtime = backend.runtime_volume(settings, names["runtime"])
        record.network = network_name(session, run_id)
        with running(
            config,
            backend,
            session,
            run_id,
            names["agent"],
            models=models,
            usage=usage,
            command=command,
            task_image=names["tool"],
            runtime=runtime,
        ) as live:
            began = time.monotonic()
            record.timeline["container_started"] = time.time()
            died: ContainerDied | None = None
            try:
                record.exit_code = live.wait(config.timeout + config.grading_timeout + SLACK_SECONDS)
            except ContainerDied as exc:  # judged below: the memory the agent took may be why
                died = exc
            finally:
                record.durations["container"] = round(time.monotonic() - began, 3)
                record.timeline["container_ended"] = time.time()
                salvage(live, run_dir, record)
        record.result = read_result(run_dir)
        # The grading container's memory (not sidecar mode's agent container's, which grades nothing): used up,
        # it ended what could have graded (sidecar mode's task container as a whole, killed with its init).
        memory = [line for line in record.limits_hit if line.startswith("memory")]
        if memory and (record.result is None or recorded_status(record.result.get("patch_result")) == "error"):
            record.result = memory_limit_failure(record.result, memory)
            write_json(run_dir / "result.json", record.result)
        if record.result is None:
            record.infra_error = (
                str(died)
                if died is not None
                else (
                    f"the run ended (exit {record.exit_code}) without a result.json; see {run_dir}/container.log; "
                    f"its last lines:\n{last_lines(read_safely(run_dir, 'container.log') or '', 20)}"
                )
            )
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
        "task": {
            "id": task.id,
            "dataset": task.dataset,
            "dataset_version": task.dataset_version,
            "digest": task.digest,
            "language": task.language,
            "project": task.config.project,
            "advisories": task.advisories(),
            "path": str(task.path),
        },
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
        "node": record.node,
        "images": record.images,
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
            task.id,
            task.dataset_version,
            task.digest,
        ):
            continue
        if any(got.get(key) != want[key] for key in RESUME_IDENTITY) or got.get("trial", 1) != config.trial:
            continue
        result = read_result(run_dir)
        if result is None or recorded_status(result.get("patch_result")) != summary["grade"]:
            continue
        return RunRecord(
            config=config,
            run_id=str(summary.get("run_id") or run_dir.name),
            run_dir=run_dir,
            started_at=str(summary.get("started_at") or ""),
            grade=summary["grade"],
            result=result,
            exit_code=summary.get("exit_code"),
            network=summary.get("network"),
            limits_hit=list(summary.get("limits_hit") or []),
            files=summary.get("files") or {},
            usage=summary.get("usage"),
            durations=summary.get("durations") or {},
            resumed=True,
            session=summary.get("session"),
            timeline=summary.get("timeline") or {},
            node=summary.get("node"),
            images=summary.get("images") or {},
        )
    return None
