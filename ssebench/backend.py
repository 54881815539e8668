"""Where a run's container runs: the seam between a run and the machinery that hosts it.

`Backend` is the interface (docker today, a cluster tomorrow); every backend
must pass the conformance tests in tests/integration/test_backend.py. The
Docker one is `ssebench.engine.DockerBackend`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ssebench.errors import SSEBenchError
from ssebench.limits import Limits
from ssebench.settings import Settings

if TYPE_CHECKING:
    from ssebench.agent import Agent

LogStream = Literal["all", "stdout", "stderr"]


class RunTimeoutError(SSEBenchError):
    """The whole run did not finish in time."""


@dataclass(frozen=True)
class Mount:
    host: Path
    container: str
    read_only: bool = False


@dataclass(frozen=True)
class Volume:
    """A volume at `container`: one of the run's own (Backend.create_volume), or the runtime's (read-only).

    A run's own is empty at first. With `fill`, the container's image fills it from that
    path (sidecar mode's source tree, from the task container's image);
    without, nothing of the image enters it, whichever container mounts it
    first.
    """

    name: str
    container: str
    # Fill it from the image at `container` when it is empty (Docker's default); else mount it as it is.
    fill: bool = False
    read_only: bool = False


# What the entrypoint needs as root: switch to model and sse-runner (SETUID,
# SETGID), hand them directories (CHOWN, FOWNER), clean up what they wrote
# (DAC_OVERRIDE) and stop their processes (KILL). Nothing else: no raw
# sockets, no device nodes, no binding of low ports, no chroot.
RUN_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a backend needs to start one run's container."""

    image: str
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    volumes: list[Volume] = field(default_factory=list)
    # A name others on its network can reach it by (None: the engine picks one, reachable by address only).
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    network: str | None = None
    # resolv.conf's options (`timeout:1`); () leaves the engine's.
    dns_options: tuple[str, ...] = ()
    command: list[str] | None = None
    # None: the engine's defaults (only for helper containers that are not runs).
    limits: Limits | None = None
    capabilities: tuple[str, ...] | None = RUN_CAPABILITIES


class Handle(ABC):
    """A started container; as a context manager, removed on leaving.

    Every method raises SSEBenchError (never an engine library's error) when
    the engine fails.
    """

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    @property
    @abstractmethod
    def id(self) -> str: ...

    @abstractmethod
    def wait(self, timeout: float) -> int:
        """Wait for the container to exit and return its status.

        Raises RunTimeoutError when it is still running after `timeout` seconds.
        """

    @abstractmethod
    def poll(self) -> int | None:
        """Its exit status if it has exited, else None; does not wait."""

    @abstractmethod
    def stop(self, grace: float) -> None:
        """Ask it to stop (SIGTERM), kill it after `grace` seconds; a no-op when it has exited."""

    @abstractmethod
    def logs(self, stream: LogStream = "all") -> str:
        """Its output so far: both streams (stdout's, then stderr's), or one of them."""

    @abstractmethod
    def export(self, path: str) -> Iterator[bytes]:
        """A tar stream of `path` in the container (running or stopped), as chunks.

        Raises SSEBenchError when the path does not exist or the container is gone.
        """

    @abstractmethod
    def memory_exhausted(self) -> bool:
        """Whether the container's memory limit made the kernel kill a process in it."""

    @abstractmethod
    def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:
        """Run `argv` as root in the running container; (exit status, its output, at most 64 kB).

        Raises SSEBenchError when the container is not running or the engine fails, and RunTimeoutError
        when the command has not ended within `timeout` seconds.
        """

    @abstractmethod
    def remove(self) -> None:
        """Stop and delete it; a no-op when it is already gone."""


class Backend(ABC):
    """Starts run containers and the networks they join."""

    @abstractmethod
    def start(self, spec: ContainerSpec) -> Handle:
        """Start a container. Raises SSEBenchError when it cannot start; nothing is left behind then."""

    @abstractmethod
    def create_network(self, name: str, *, internal: bool, labels: dict[str, str]) -> Network:
        """Create a network of one run; internal ones have no route out. Raises SSEBenchError."""

    @abstractmethod
    def remove_network(self, name: str) -> None:
        """Remove a network (disconnecting what is left on it); a no-op when it is gone."""

    @abstractmethod
    def create_volume(self, name: str, *, labels: dict[str, str]) -> None:
        """Create an empty volume of one run. Raises SSEBenchError."""

    @abstractmethod
    def remove_volume(self, name: str) -> None:
        """Remove a volume no container uses any more; a no-op when it is gone."""

    @abstractmethod
    def runtime_volume(self, settings: Settings, image: str) -> str:
        """The volume holding the runtime of `image` (a runtime image), made from it if missing; runs mount
        it read-only. Raises SSEBenchError."""

    def agent_volume(self, settings: Settings, agent: Agent, image: str) -> str:
        """The volume holding `agent`'s software (agent.yaml `software`), made with a container of `image` (a
        runtime image) if missing; runs of the agent mount it read-only at /opt/agents/<name>. Raises
        SSEBenchError, and so does a backend that cannot make one."""
        raise SSEBenchError(f"this backend cannot give agent {agent.name} its software (/opt/agents/{agent.name})")


@dataclass(frozen=True)
class Network:
    """A run's network: its name, and the address of the host's end (where a host service can listen)."""

    name: str
    gateway: str | None
