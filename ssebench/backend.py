"""Where a run's container runs: the seam between a run and the machinery that hosts it.

`Backend` is the interface (docker today, a cluster tomorrow); every backend
must pass the conformance tests in tests/integration/test_backend.py.
`DockerBackend` starts containers through testcontainers. Its Ryuk reaper
needs an image from a registry, so it is disabled: SSEBench reaps by its own
session labels (`ssebench.reaper`).
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ssebench.errors import SSEBenchError
from ssebench.limits import Limits
from ssebench.settings import Settings

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


@dataclass(frozen=True)
class Network:
    """A run's network: its name, and the address of the host's end (where a host service can listen)."""

    name: str
    gateway: str | None


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

    def poll(self) -> int | None:
        from ssebench.engine import client, docker_errors

        with docker_errors(f"inspecting container {self.id[:12]}"):
            state = client().api.inspect_container(self.id).get("State") or {}
        return None if state.get("Running") or state.get("Status") == "created" else int(state.get("ExitCode", -1))

    def stop(self, grace: float) -> None:
        from ssebench.engine import client, docker_errors

        with docker_errors(f"stopping container {self.id[:12]}"):
            client().api.stop(self.id, timeout=max(1, round(grace)))

    def logs(self, stream: LogStream = "all") -> str:
        from ssebench.engine import docker_errors

        with docker_errors(f"reading the log of container {self.id[:12]}"):
            out, err = self._tc.get_logs()
        chosen = {"all": out + err, "stdout": out, "stderr": err}[stream]
        return bytes(chosen).decode("utf-8", errors="replace")

    def export(self, path: str) -> Iterator[bytes]:
        from ssebench.engine import client, docker_errors

        with docker_errors(f"copying {path} out of container {self.id[:12]}"):
            stream, _ = client().api.get_archive(self.id, path, chunk_size=1 << 20)
            yield from stream

    def memory_exhausted(self) -> bool:
        from ssebench.engine import client, docker_errors

        with docker_errors(f"inspecting container {self.id[:12]}"):
            state = client().api.inspect_container(self.id).get("State") or {}
        return bool(state.get("OOMKilled"))

    def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:

        from ssebench.engine import client, docker_errors

        api = client().api
        with docker_errors(f"running {argv[:3]} in container {self.id[:12]}"):
            exec_id = api.exec_create(self.id, argv, user="root", stdout=True, stderr=True)["Id"]
            stream = api.exec_start(exec_id, socket=True)
            sock = getattr(stream, "_sock", stream)  # the raw socket under docker-py's wrapper
            sock.settimeout(timeout)
            output = _Demuxed(1 << 16)
            try:
                while chunk := sock.recv(1 << 16):
                    output.feed(chunk)
            except TimeoutError:
                raise RunTimeoutError(
                    f"{argv[:3]} in container {self.id[:12]} still running after {timeout:.0f} s"
                ) from None
            finally:
                stream.close()
            status = api.exec_inspect(exec_id).get("ExitCode")
        return (-1 if status is None else int(status)), output.text()

    def remove(self) -> None:
        from ssebench.engine import remove_container

        try:
            if self._tc._container is not None:
                remove_container(self.id)
        finally:
            self._tc.get_docker_client().client.close()  # its own connection pool, one per container


LOG_FILE_SIZE, LOG_FILES = "32m", "2"


class _Demuxed:
    """The payload of an attached exec's multiplexed stream (frames of an 8-byte header: stream, 0, 0, 0,
    length), kept up to `cap` bytes however the stream is cut into chunks and however much more comes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.pending = b""  # an unfinished header
        self.left = 0  # payload bytes still to come of the current frame

    def feed(self, data: bytes) -> None:
        while data:
            if self.left:
                take, data = data[: self.left], data[self.left :]
                self.left -= len(take)
                self.kept += take[: max(0, self.cap - len(self.kept))]
                continue
            header = self.pending + data[: 8 - len(self.pending)]
            data = data[8 - len(self.pending) :]
            if len(header) < 8:
                self.pending = header
                return
            self.pending, self.left = b"", int.from_bytes(header[4:8], "big")

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", errors="replace")


def _docker_limits(limits: Limits) -> dict[str, Any]:
    return {
        "pids_limit": limits.pids,
        "mem_limit": limits.memory,
        "memswap_limit": limits.memory,  # no swap beyond the limit
        "nano_cpus": int(limits.cpus * 1e9),
    }


class DockerBackend(Backend):
    def __init__(self) -> None:
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
        for volume in spec.volumes:
            access = "ro" if volume.read_only else "rw"
            tc.with_volume_mapping(volume.name, volume.container, access if volume.fill else f"{access},nocopy")
        if spec.name is not None:
            tc.with_name(spec.name)
        if spec.command is not None:
            tc.with_command(spec.command)
        kwargs: dict[str, Any] = {"labels": spec.labels, "init": True, "network": spec.network or "bridge"}
        if spec.dns_options:
            kwargs["dns_opt"] = list(spec.dns_options)
        if spec.limits is not None:
            kwargs.update(_docker_limits(spec.limits))
            # What the engine keeps of a run container's output (sidecar mode's agent container writes the
            # agent's there): its last LOG_FILES x LOG_FILE_SIZE, never all an agent can print.
            kwargs["log_config"] = {"type": "json-file", "config": {"max-size": LOG_FILE_SIZE, "max-file": LOG_FILES}}
        if spec.capabilities is not None:
            kwargs.update(cap_drop=["ALL"], cap_add=list(spec.capabilities), security_opt=["no-new-privileges"])
        tc.with_kwargs(**kwargs)
        try:
            with docker_errors(f"starting a container of {spec.image}"):
                tc.start()
        except BaseException:
            # Created but not started: remove it (and close its client); the start's own error is the one to report.
            with contextlib.suppress(SSEBenchError):
                DockerHandle(tc).remove()
            raise
        return DockerHandle(tc)

    def create_network(self, name: str, *, internal: bool, labels: dict[str, str]) -> Network:
        from ssebench.engine import client, docker_errors

        with docker_errors(f"creating network {name}"):
            network = client().networks.create(
                name, driver="bridge", internal=internal, labels=labels, check_duplicate=True
            )
            network.reload()
        config = (network.attrs.get("IPAM") or {}).get("Config") or [{}]
        return Network(name=name, gateway=config[0].get("Gateway"))

    def remove_network(self, name: str) -> None:
        import docker.errors

        from ssebench.engine import client, docker_errors

        try:
            with docker_errors(f"removing network {name}"):
                network = client().networks.get(name)
                for attached in network.containers:
                    network.disconnect(attached, force=True)
                network.remove()
        except SSEBenchError as exc:
            if not isinstance(exc.__cause__, docker.errors.NotFound):
                raise

    def create_volume(self, name: str, *, labels: dict[str, str]) -> None:
        from ssebench.engine import client, docker_errors

        with docker_errors(f"creating volume {name}"):
            client().volumes.create(name, driver="local", labels=labels)

    def remove_volume(self, name: str) -> None:
        from ssebench.engine import remove_volume

        remove_volume(name)

    def runtime_volume(self, settings: Settings, image: str) -> str:
        from ssebench.image import ensure_runtime_volume

        return ensure_runtime_volume(settings, image)
