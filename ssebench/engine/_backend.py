"""`DockerBackend`: the run backend (`ssebench.backend.Backend`) on the local Docker engine, over testcontainers.

testcontainers' Ryuk reaper needs an image from a registry, so it is
disabled: SSEBench reaps by its own session labels (`ssebench.reaper`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from ssebench.backend import Backend, ContainerSpec, Handle, LogStream, Network, RunTimeoutError
from ssebench.engine._docker import DockerCleanup, client
from ssebench.engine._errors import DockerUnavailableError, EngineError, EngineTimeoutError, engine_errors
from ssebench.limits import Limits
from ssebench.settings import Settings

if TYPE_CHECKING:
    from ssebench.agent import Agent

# What the engine keeps of a run container's output (sidecar mode's agent container writes the agent's
# there): its last LOG_FILES x LOG_FILE_SIZE, never all an agent can print.
LOG_FILE_SIZE, LOG_FILES = "32m", "2"


class DockerHandle(Handle):
    def __init__(self, container: Any) -> None:
        self._tc = container

    @property
    def id(self) -> str:
        return str(self._tc.get_container_id())

    def wait(self, timeout: float) -> int:
        wrapped = self._tc.get_wrapped_container()
        started = time.monotonic()
        try:
            with engine_errors(f"waiting for container {self.id[:12]}"):
                outcome = wrapped.wait(timeout=timeout)
        except (EngineTimeoutError, DockerUnavailableError) as exc:
            # docker-py ends a wait that outlasts its timeout as a read timeout or a dropped connection; an
            # engine lost before the time was up is that, and not a run still running.
            if isinstance(exc, DockerUnavailableError) and time.monotonic() - started < timeout:
                raise
            raise RunTimeoutError(f"container {self.id[:12]} still running after {timeout:.0f} s") from exc
        return int(outcome.get("StatusCode", -1))

    def _state(self) -> dict[str, Any]:
        with engine_errors(f"inspecting container {self.id[:12]}"):
            return dict(client().api.inspect_container(self.id).get("State") or {})

    def poll(self) -> int | None:
        state = self._state()
        return None if state.get("Running") or state.get("Status") == "created" else int(state.get("ExitCode", -1))

    def stop(self, grace: float) -> None:
        with engine_errors(f"stopping container {self.id[:12]}"):
            client().api.stop(self.id, timeout=max(1, round(grace)))

    def logs(self, stream: LogStream = "all") -> str:
        with engine_errors(f"reading the log of container {self.id[:12]}"):
            out, err = self._tc.get_logs()
        chosen = {"all": out + err, "stdout": out, "stderr": err}[stream]
        return bytes(chosen).decode("utf-8", errors="replace")

    def export(self, path: str) -> Iterator[bytes]:
        with engine_errors(f"copying {path} out of container {self.id[:12]}"):
            stream, _ = client().api.get_archive(self.id, path, chunk_size=1 << 20)
            yield from stream

    def memory_exhausted(self) -> bool:
        return bool(self._state().get("OOMKilled"))

    def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:
        api = client().api
        with engine_errors(f"running {argv[:3]} in container {self.id[:12]}"):
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
        try:
            if self._tc._container is not None:
                DockerCleanup().remove_container(self.id)
        finally:
            self._tc.get_docker_client().client.close()  # its own connection pool, one per container


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
            kwargs["log_config"] = {"type": "json-file", "config": {"max-size": LOG_FILE_SIZE, "max-file": LOG_FILES}}
        if spec.capabilities is not None:
            kwargs.update(cap_drop=["ALL"], cap_add=list(spec.capabilities), security_opt=["no-new-privileges"])
        tc.with_kwargs(**kwargs)
        try:
            with engine_errors(f"starting a container of {spec.image}"):
                tc.start()
        except BaseException:
            with suppress(EngineError):  # the start's own error is the one to report
                DockerHandle(tc).remove()  # created but not started: remove it (and close its client)
            raise
        return DockerHandle(tc)

    def create_network(self, name: str, *, internal: bool, labels: dict[str, str]) -> Network:
        with engine_errors(f"creating network {name}"):
            network = client().networks.create(
                name, driver="bridge", internal=internal, labels=labels, check_duplicate=True
            )
            network.reload()
        config = (network.attrs.get("IPAM") or {}).get("Config") or [{}]
        return Network(name=name, gateway=config[0].get("Gateway"))

    def remove_network(self, name: str) -> None:
        DockerCleanup().remove_network(name)

    def create_volume(self, name: str, *, labels: dict[str, str]) -> None:
        from ssebench.engine._docker import DockerContainers

        DockerContainers().create_volume(name, labels)

    def remove_volume(self, name: str) -> None:
        DockerCleanup().remove_volume(name)

    def runtime_volume(self, settings: Settings, image: str) -> str:
        from ssebench.runtimevolume import ensure_runtime_volume

        return ensure_runtime_volume(settings, image)

    def agent_volume(self, settings: Settings, agent: Agent, image: str) -> str:
        from ssebench.agentvolume import ensure_agent_volume

        return ensure_agent_volume(settings, agent, image)
