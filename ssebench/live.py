"""A run's containers while they exist: started on the run's network, waited for, removed.

Sandbox mode has one container; sidecar mode a task container that grades
and an agent container that runs the agent alone (`ssebench.runspec`
says what each gets).

A kept run's containers (--keep-containers) stay up when the run is over,
for `docker exec`: the host waits for each to say so in its phase
(`contract.kept_status`) instead of its exit, brings the run's files home
as from an exited one, and leaves them (`ssebench rm` removes them).
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ssebench.backend import Backend, Handle, Network, RunTimeoutError, Volume
from ssebench.errors import SSEBenchError
from ssebench.inflight import entrypoint_lines, phase_text
from ssebench.logs import last_lines
from ssebench.reaper import Session
from ssebench.runspec import RunConfig, container_spec, kept_labels, network_name, sidecar_specs, tree_volume
from ssebench.runtime.contract import (
    RUN_LABEL,
    RUNNER_DIR,
    RUNTIME_PYTHON,
    SERVING,
    TIMED_OUT,
    AgentEnd,
    RuntimeSettings,
    kept_status,
)

# Sidecar mode: beyond the agent's time limit, how long its container has to start (its entrypoint waits for
# the daemon) and to end its agent before the host stops it, and how long telling the task container takes.
AGENT_CONTAINER_SLACK = 120.0
TELL_TIMEOUT = 60.0
# Start-up and the evaluator's own bookkeeping, beyond the agent's and grading's limits.
SLACK_SECONDS = 300.0
# A kept run's containers never exit of themselves: how often the host reads their phase.
KEPT_POLL = 0.5


class ModelLink(Protocol):
    """How a run's agent reaches its model (the model gateway): per-run access, and its accounting."""

    def open(self, run_id: str, model: str, network: Network, ttl: float) -> dict[str, str]:
        """Grant the run access; return the environment its agent needs (SSE_BASE_URL, SSE_API_KEY)."""

    def close(self, run_id: str) -> dict[str, Any] | None:
        """Revoke the run's access; return what it used (tokens, cost, calls), for summary.json."""


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
    paused: list[Handle] = field(default_factory=list)  # a kept run's, until its files are home (`release`)
    kept_token: str = ""  # a kept run's, given to its containers (SSE_KEEP_TOKEN): its `kept` phase names it

    @property
    def kept(self) -> bool:
        """Whether its containers stay up when the run is over (--keep-containers)."""
        return self.config is not None and self.config.keep_container

    def _ended(self, handle: Handle, timeout: float) -> int:
        """The status `handle` ended with: its exit's, or a kept container's, once its phase says it is kept
        (the status it would have exited with). Raises RunTimeoutError after `timeout` seconds.

        A kept container's phase file is root's, in root's directory of 0700 (sidecar mode's agent container:
        the agent's end is the agent's to say, as its container's exit is); a phase that never says kept
        leaves the run to its time limit, as a container that never exits does, and so does one the engine
        will not copy (root in sidecar mode's agent container may make it anything: that is no
        infrastructure error of the run's; the engine's own failure shows in `poll`)."""
        if not self.kept:
            return handle.wait(timeout)
        deadline = time.monotonic() + timeout
        while True:
            status = handle.poll()
            if status is None:
                try:
                    archive = handle.phase_file()
                except SSEBenchError:
                    archive = None
                text = phase_text(archive) if archive is not None else None
                status = kept_status(text, self.kept_token) if text is not None else None
            if status is not None:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunTimeoutError(f"container {handle.id[:12]} still running after {timeout:.0f} s")
            time.sleep(min(KEPT_POLL, left))

    def _freeze(self, handle: Handle) -> None:
        """Sidecar mode, kept: freeze the agent's container (every process in it, whoever runs it) before the
        task container captures and grades the tree they share, as its exit does when it is not kept."""
        try:
            handle.pause()
        except SSEBenchError:
            if handle.poll() is None:
                raise
            return  # it exited meanwhile: nothing in it runs
        self.paused.append(handle)

    def release(self) -> None:
        """A kept run whose files are home: let what was frozen run again, so that both containers can be
        entered. Raises SSEBenchError."""
        while self.paused:
            self.paused[-1].unpause()
            self.paused.pop()

    @property
    def grader(self) -> Handle:
        """The container that grades and holds the results: sandbox mode's one, sidecar mode's task container."""
        return self.task or self.handle

    def wait(self, timeout: float) -> int:
        """Wait for the run to end (the container that grades to exit, or say it is kept); its status.

        Sidecar mode: first the agent's container, stopped at the agent's time
        limit (and some slack to start); then the task container is told the
        agent phase is over, with its figures, and grades (kept: the agent's
        container is frozen first). Raises RunTimeoutError after `timeout`
        seconds in all, and ContainerDied when the task container exits while
        the agent's still runs (with its log's last lines).
        """
        if self.task is None:
            return self._ended(self.handle, timeout)
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        agent_limit = (self.config.timeout if self.config else timeout) + AGENT_CONTAINER_SLACK
        timed_out = False
        while True:
            try:
                status = self._ended(self.handle, max(0.1, min(2.0, deadline - time.monotonic())))
                if self.kept:
                    self._freeze(self.handle)
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
        return self._ended(self.task, max(1.0, deadline - time.monotonic()))

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
    software: str | None = None,
    prediction: Path | None = None,
) -> Iterator[LiveRun]:
    """Start a run's network and containers; remove all afterwards (unless the run keeps its containers: they
    stay up, labelled kept, sidecar mode's agent container unfrozen).

    `image` is the agent's image; sidecar mode also starts `task_image` (the
    task's tool image) as the task container, with the volumes they share.
    `runtime` is the runtime volume (`ensure_runtime_volume`) of the task's
    tool image; `software` the agent's software volume (`ensure_agent_volume`), if it has one; `prediction`
    the file of the patch a predictions run applies.

    With `models`, the run gets access to its model for as long as it lasts;
    what it used is put into `usage` when it ends. `env` adds runtime
    settings (SSE_*) to the container's environment.
    """
    labels = {**session.labels(), RUN_LABEL: run_id, **kept_labels(config)}
    network = backend.create_network(network_name(session, run_id), internal=config.internal_network, labels=labels)
    handles: list[Handle] = []
    volumes: list[str] = []
    live: LiveRun | None = None
    opened = False
    failed = True  # until the block ends normally: then a cleanup error is the run's error, else it is not
    try:
        model_env: dict[str, str] = {}
        if models is not None and config.model != "none":
            model_env = models.open(
                run_id, config.model, network, ttl=config.timeout + config.grading_timeout + SLACK_SECONDS
            )
            opened = True
        spec = container_spec(
            config,
            image,
            session,
            run_id,
            network.name,
            model_env,
            command,
            runtime=runtime,
            software=software,
            prediction=prediction,
        )
        spec.env.update(env or {})
        # A kept run's own token, in each of its containers' environment (sidecar_specs passes it to both).
        token = secrets.token_hex(16) if config.keep_container else ""
        spec.env.update(RuntimeSettings(keep_token=token).to_env("keep_token") if token else {})
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
            live = LiveRun(handle=handles[0], network=network, run_id=run_id, config=config, kept_token=token)
            yield live
        else:
            handles.append(backend.start(task_spec))  # first: it fills the source volume from its image
            # The agent's container starts once the task container has prepared what they share (the tree, the
            # socket's directory) and serves: root there walks and writes paths in those volumes while it
            # prepares them, and an agent's own image may run anything as root from its first instant.
            await_ready(handles[0], READY_TIMEOUT)
            handles.append(backend.start(agent_spec))
            live = LiveRun(
                handle=handles[1], network=network, run_id=run_id, task=handles[0], config=config, kept_token=token
            )
            yield live
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
            elif live is not None and live.paused:
                try:
                    live.release()
                except SSEBenchError as exc:  # the grade is home; the container stays frozen for `docker unpause`
                    print(f"ssebench: a kept run's container stays paused: {exc}", file=sys.stderr)


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
