"""Where a run's container runs: the seam between a run and the machinery that hosts it.

`Backend` is the interface (docker today, a cluster tomorrow); every backend
must pass the conformance tests in tests/integration/test_backend.py.
`DockerBackend` starts containers through testcontainers. Its Ryuk reaper
needs an image from a registry, so it is disabled: SSEBench reaps by its own
session labels (`ssebench.reaper`).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssebench.errors import SSEBenchError


class RunTimeoutError(SSEBenchError):
    """The whole run did not finish in time."""


@dataclass(frozen=True)
class Mount:
    host: Path
    container: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a backend needs to start one run's container."""

    image: str
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    network: str | None = None
    command: list[str] | None = None


class Handle(ABC):
    """A started container."""

    @property
    @abstractmethod
    def id(self) -> str: ...

    @abstractmethod
    def wait(self, timeout: float) -> int:
        """Wait for the container to exit and return its status.

        Raises RunTimeoutError when it is still running after `timeout` seconds.
        """

    @abstractmethod
    def logs(self) -> str:
        """Its combined output so far."""

    @abstractmethod
    def remove(self) -> None:
        """Stop and delete it; a no-op when it is already gone."""


class Backend(ABC):
    """Starts run containers and the networks they join."""

    @abstractmethod
    def start(self, spec: ContainerSpec) -> Handle:
        """Start a container. Raises SSEBenchError when it cannot start; nothing is left behind then."""

    @abstractmethod
    def ensure_network(self, name: str, *, internal: bool, labels: dict[str, str]) -> str:
        """Create (or reuse) a network; internal ones have no route out. Returns its name."""


class DockerHandle(Handle):
    def __init__(self, container: Any) -> None:
        self._tc = container

    @property
    def id(self) -> str:
        return str(self._tc.get_container_id())

    def wait(self, timeout: float) -> int:
        import requests.exceptions

        from ssebench.engine import docker_errors

        wrapped = self._tc.get_wrapped_container()
        try:
            with docker_errors(f"waiting for container {self.id[:12]}"):
                outcome = wrapped.wait(timeout=timeout)
        except SSEBenchError as exc:
            if isinstance(exc.__cause__, requests.exceptions.ConnectionError | requests.exceptions.ReadTimeout):
                raise RunTimeoutError(f"container {self.id[:12]} still running after {timeout:.0f} s") from exc
            raise
        return int(outcome.get("StatusCode", -1))

    def logs(self) -> str:
        out, err = self._tc.get_logs()
        return bytes(out + err).decode("utf-8", errors="replace")

    def remove(self) -> None:
        import docker.errors

        try:
            self._tc.stop(force=True, delete_volume=True)
        except docker.errors.NotFound:
            pass


class DockerBackend(Backend):
    def __init__(self, lock_dir: Path | None = None) -> None:
        from ssebench.settings import get_settings

        # Docker accepts two networks of one name when they are created at
        # once (xdist workers of one session): creation is serialised here.
        self.lock_dir = lock_dir or get_settings().cache_dir / "locks"
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        from testcontainers.core.config import testcontainers_config

        testcontainers_config.ryuk_disabled = True

    def start(self, spec: ContainerSpec) -> Handle:
        from testcontainers.core.container import DockerContainer

        from ssebench.engine import docker_errors

        tc = DockerContainer(spec.image)
        for key, value in spec.env.items():
            tc.with_env(key, value)
        for mount in spec.mounts:
            tc.with_volume_mapping(str(mount.host), mount.container, "ro" if mount.read_only else "rw")
        if spec.command is not None:
            tc.with_command(spec.command)
        tc.with_kwargs(labels=spec.labels, init=True, network=spec.network or "bridge")
        try:
            with docker_errors(f"starting a container of {spec.image}"):
                tc.start()
        except BaseException:
            handle = DockerHandle(tc)
            if tc._container is not None:  # created but not started: remove it
                handle.remove()
            raise
        return DockerHandle(tc)

    def ensure_network(self, name: str, *, internal: bool, labels: dict[str, str]) -> str:
        from ssebench.engine import client, docker_errors

        from filelock import FileLock

        self.lock_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.lock_dir / f"network-{name}.lock")), docker_errors(f"creating network {name}"):
            if not any(n.name == name for n in client().networks.list(names=[name])):
                client().networks.create(name, driver="bridge", internal=internal, labels=labels,
                                         check_duplicate=True)
        return name
