"""The Docker implementation of the engine's seams, over docker-py: the one place its client is made.

docker-py and requests are imported where they are used, so that importing
the engine costs nothing until it is asked for something.
"""

from __future__ import annotations

import tarfile
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from ssebench.engine._errors import (
    ConflictError,
    EngineError,
    EngineRefusedError,
    NotFoundError,
    engine_errors,
    translate,
)
from ssebench.engine._protocols import Attrs, Binds, Cleanup, Containers, Images
from ssebench.errors import BuildCancelled, SSEBenchError

if TYPE_CHECKING:
    import docker

# How long one call may take: a build's or a pull's stream can be silent for long.
CLIENT_TIMEOUT = 600


@lru_cache(maxsize=1)
def client() -> docker.DockerClient:
    """A client of the local engine, checked once per process (the engine's own modules, and tests)."""
    import docker

    failed: EngineError | None = None
    try:
        c = docker.from_env(timeout=CLIENT_TIMEOUT)
        try:
            c.ping()
        except BaseException:
            c.close()
            raise
    except Exception as exc:
        failed = translate(exc, "connecting")
        if failed is None:
            raise
    if failed is not None:
        # Raised once the library's error is gone: it holds the half-made client's connection pool, whose
        # socket the garbage collector would close whenever, with a ResourceWarning a test session prints
        # as a page of traceback. Closed here, quietly, instead.
        _collect_quietly()
        raise failed
    return c


def _collect_quietly() -> None:
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def version() -> str:
    """The engine's version. Raises DockerUnavailableError when no engine answers."""
    with engine_errors("asking the engine its version"):
        return str(client().version().get("Version", "unknown"))


def info() -> dict[str, Any]:
    """The engine's `docker info` (Driver, DockerRootDir...)."""
    with engine_errors("asking the engine about itself"):
        return dict(client().info())


def split_ref(ref: str) -> tuple[str, str]:
    """`repo/name:tag` -> (`repo/name`, `tag`); a registry's `host:port/` is not a tag."""
    repository, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        return ref, "latest"
    return repository, tag


def _absent(call: Any, doing: str) -> bool:
    """Run `call()`; False when what it acts on was not there (NotFoundError), True when it acted."""
    try:
        with engine_errors(doing):
            call()
    except NotFoundError:
        return False
    return True


class DockerImages(Images):
    def inspect(self, ref: str) -> Attrs | None:
        try:
            with engine_errors(f"inspecting image {ref}"):
                return dict(client().api.inspect_image(ref))
        except NotFoundError:
            return None

    def id(self, ref: str) -> str | None:
        attrs = self.inspect(ref)
        return None if attrs is None else str(attrs["Id"])

    def labels(self, ref: str) -> dict[str, str] | None:
        attrs = self.inspect(ref)
        return None if attrs is None else dict((attrs.get("Config") or {}).get("Labels") or {})

    def tag(self, ref: str, target: str) -> None:
        repository, tag = split_ref(target)
        with engine_errors(f"tagging {ref} as {target}"):
            client().api.tag(ref, repository, tag)

    def pull(self, ref: str) -> str | None:
        repository, tag = split_ref(ref)
        try:
            with engine_errors(f"pulling {ref}"):
                client().api.pull(repository, tag=tag)
        except EngineRefusedError:
            return None  # the registry has no such image, or is not there (the engine says so)
        return self.id(ref)

    def push(self, ref: str) -> None:
        repository, tag = split_ref(ref)
        with engine_errors(f"pushing {ref}"):
            for chunk in client().api.push(repository, tag=tag, stream=True, decode=True):
                if "error" in chunk:
                    raise EngineRefusedError(f"pushing {ref} failed: {chunk['error']}", doing=f"pushing {ref}")

    def import_tarball(self, tarball: Path, ref: str, changes: Sequence[str]) -> None:
        repository, tag = split_ref(ref)
        with engine_errors(f"importing {ref}"):
            client().api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=list(changes))

    def build(
        self, context: Path, dockerfile: Path, ref: str, buildargs: dict[str, str], *, nocache: bool
    ) -> Generator[dict[str, Any], None, None]:
        import docker

        # A connection of its own: closing it is what tells the engine to stop.
        with engine_errors(f"connecting to build {ref}"):
            api = docker.from_env(timeout=CLIENT_TIMEOUT).api
        try:
            with engine_errors(f"building {ref}"):
                yield from api.build(
                    path=str(context),
                    dockerfile=str(dockerfile),
                    tag=ref,
                    buildargs=buildargs,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    nocache=nocache,
                    decode=True,
                )
        finally:
            api.close()

    def load(self, archive: bytes) -> Iterator[dict[str, Any]]:
        with engine_errors("loading an image"):
            yield from client().api.load_image(archive)

    def history(self, ref: str) -> list[dict[str, Any]]:
        with engine_errors(f"reading the history of {ref}"):
            return list(client().api.history(ref))

    def commit(self, container: str, ref: str, changes: Sequence[str]) -> None:
        repository, tag = split_ref(ref)
        with engine_errors(f"committing container {container[:12]} as {ref}"):
            client().api.commit(container, repository=repository, tag=tag, changes=list(changes))


class DockerContainers(Containers):
    def create(
        self,
        image: str,
        *,
        command: Sequence[str] | None = None,
        entrypoint: Sequence[str] | None = None,
        user: str | None = None,
        labels: dict[str, str] | None = None,
        binds: Binds | None = None,
    ) -> str:
        api = client().api
        with engine_errors(f"creating a container of {image}"):
            made = api.create_container(
                image,
                command=None if command is None else list(command),
                entrypoint=None if entrypoint is None else list(entrypoint),
                user=user,
                labels=labels or {},
                network_disabled=True,
                host_config=api.create_host_config(binds=binds) if binds else None,
            )
        return str(made["Id"])

    def start(self, container: str) -> None:
        with engine_errors(f"starting container {container[:12]}"):
            client().api.start(container)

    def run_to_end(self, container: str, what: str, timeout: float, cancel: threading.Event | None = None) -> int:
        self.start(container)
        deadline = time.monotonic() + timeout
        while True:
            if cancel is not None and cancel.is_set():
                raise BuildCancelled(f"{what} was cancelled")
            state = self.state(container)
            if not state.get("Running"):
                return int(state.get("ExitCode", -1))
            if time.monotonic() > deadline:
                raise SSEBenchError(f"{what} did not end within {timeout:.0f} s")
            time.sleep(0.1)

    def state(self, container: str) -> Attrs:
        with engine_errors(f"inspecting container {container[:12]}"):
            return dict(client().api.inspect_container(container).get("State") or {})

    def logs(self, container: str, stream: Literal["all", "stderr"] = "all", tail: int | None = None) -> str:
        with engine_errors(f"reading the log of container {container[:12]}"):
            data = client().api.logs(container, stdout=stream == "all", stderr=True, tail=tail or "all")
        return bytes(data).decode("utf-8", errors="replace")

    def archive(self, container: str, path: str) -> bytes:
        with engine_errors(f"copying {path} out of container {container[:12]}"):
            stream, _ = client().api.get_archive(container, path)
            return b"".join(stream)

    def put(self, container: str, path: str, archive: BinaryIO) -> None:
        with engine_errors(f"copying an archive into {path} of container {container[:12]}"):
            client().api.put_archive(container, path, archive)

    def archive_of_file(self, container: str, path: str, cap: int) -> bytes | None:
        try:
            with engine_errors(f"copying {path} out of container {container[:12]}"):
                stream, _ = client().api.get_archive(container, path, chunk_size=cap + 1)
                data = bytearray()
                try:
                    for chunk in stream:
                        data += chunk
                        if len(data) > cap:
                            break
                finally:
                    stream.close()
                return bytes(data)
        except NotFoundError:
            self.state(container)  # the container itself gone: NotFoundError again, from its inspection
            return None

    def first_entry(self, container: str, path: str) -> tarfile.TarInfo | None:
        api = client().api
        with engine_errors(f"reading {path} in container {container[:12]}"):
            # docker-py's get_archive reads the whole archive; this stops after the first header.
            response = api._get(
                api._url("/containers/{0}/archive", container),
                params={"path": path},
                headers={"Accept-Encoding": "identity"},
                stream=True,
            )
            try:
                if response.status_code == 404:
                    return None
                api._raise_for_status(response)
                with tarfile.open(fileobj=response.raw, mode="r|*") as archive:
                    return archive.next()
            finally:
                response.close()

    def remove(self, container: str) -> bool:
        return _absent(
            lambda: client().api.remove_container(container, force=True, v=True),
            f"removing container {container[:12]}",
        )

    def run(
        self,
        image: str,
        command: Sequence[str],
        *,
        entrypoint: Sequence[str] | None = None,
        user: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> bytes:
        options: dict[str, Any] = {"labels": labels or {}}
        if entrypoint is not None:
            options["entrypoint"] = list(entrypoint)
        if user is not None:
            options["user"] = user
        with engine_errors(f"running {list(command)[:3]} in a container of {image}"):
            out = client().containers.run(
                image, list(command), network_disabled=True, remove=True, stdout=True, stderr=False, **options
            )
        return bytes(out)

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        with engine_errors(f"creating volume {name}"):
            client().api.create_volume(name, driver="local", labels=labels)


class DockerCleanup(Cleanup):
    def containers(self, filters: dict[str, Any] | None = None) -> list[Attrs]:
        # docker-py's `containers.list()` inspects each container after listing them, and fails with 404
        # on one removed in between; one call to the API never does.
        with engine_errors("listing containers"):
            return list(client().api.containers(all=True, filters=filters or {}))

    def networks(self, filters: dict[str, Any] | None = None) -> list[Attrs]:
        with engine_errors("listing networks"):
            return list(client().api.networks(filters=filters or {}))

    def volumes(self, filters: dict[str, Any] | None = None) -> list[Attrs]:
        with engine_errors("listing volumes"):
            return list(client().api.volumes(filters=filters or {}).get("Volumes") or [])

    def remove_container(self, container: str) -> bool:
        return DockerContainers().remove(container)

    def remove_network(self, name: str) -> bool:
        api = client().api

        def remove() -> None:
            attached = (api.inspect_network(name).get("Containers") or {}).keys()
            for container in attached:
                try:
                    with engine_errors(f"disconnecting {container[:12]} from network {name}"):
                        api.disconnect_container_from_network(container, name, force=True)
                except NotFoundError:
                    pass  # removed meanwhile
            api.remove_network(name)

        return _absent(remove, f"removing network {name}")

    def remove_volume(self, name: str) -> bool:
        try:
            return _absent(lambda: client().api.remove_volume(name, force=True), f"removing volume {name}")
        except ConflictError:
            return False  # a container still uses it (its removal failed): it goes with the next clean-up


@lru_cache(maxsize=1)
def images() -> Images:
    """The engine's images."""
    return DockerImages()


@lru_cache(maxsize=1)
def containers() -> Containers:
    """The engine's one-off containers."""
    return DockerContainers()


@lru_cache(maxsize=1)
def cleanup() -> Cleanup:
    """Finding and removing what the harness made."""
    return DockerCleanup()
