"""The Docker engine: the one place where the docker client is made and its errors translated.

Everything else in the harness asks this module for a client and gets
`SSEBenchError`s, never `docker.errors.*`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ssebench.errors import DockerUnavailableError, SSEBenchError

if TYPE_CHECKING:
    import docker

_HINT = "start the Docker engine (systemctl start docker) or point DOCKER_HOST at one, then run `ssebench doctor`"


@contextmanager
def docker_errors(doing: str) -> Iterator[None]:
    """Translate docker SDK errors raised while `doing` something into SSEBenchErrors."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except (requests.exceptions.ConnectionError, ConnectionError) as exc:
        raise DockerUnavailableError(f"cannot reach the Docker engine while {doing}: {exc}; {_HINT}") from exc
    except docker.errors.APIError as exc:
        raise SSEBenchError(f"Docker refused {doing}: {exc.explanation or exc}") from exc
    except docker.errors.DockerException as exc:
        raise DockerUnavailableError(f"Docker failed while {doing}: {exc}; {_HINT}") from exc


@lru_cache(maxsize=1)
def client() -> docker.DockerClient:
    """A client of the local engine, checked once per process."""
    import docker

    with docker_errors("connecting"):
        c = docker.from_env(timeout=600)
        c.ping()
    return c


def image_attrs(ref: str) -> dict[str, Any] | None:
    """The engine's inspect data of an image, or None when there is no such image."""
    import docker.errors

    try:
        with docker_errors(f"inspecting image {ref}"):
            return client().api.inspect_image(ref)  # type: ignore[no-any-return]
    except SSEBenchError as exc:
        if isinstance(exc.__cause__, docker.errors.ImageNotFound):
            return None
        raise


def image_labels(ref: str) -> dict[str, str] | None:
    attrs = image_attrs(ref)
    if attrs is None:
        return None
    return dict((attrs.get("Config") or {}).get("Labels") or {})


def image_id(ref: str) -> str | None:
    attrs = image_attrs(ref)
    return None if attrs is None else str(attrs["Id"])


def tag_image(ref: str, target: str) -> None:
    repository, tag = split_ref(target)
    with docker_errors(f"tagging {ref} as {target}"):
        client().api.tag(ref, repository, tag)


def engine_version() -> str:
    with docker_errors("asking the engine its version"):
        return str(client().version().get("Version", "unknown"))


def list_containers(filters: dict[str, Any] | None = None, *, all: bool = True) -> list[dict[str, Any]]:
    """The engine's list of containers (Id, Names, Labels, Command, State...), in one call.

    docker-py's `containers.list()` inspects each container after listing
    them, and fails with 404 on one removed in between; this never does.
    """
    with docker_errors("listing containers"):
        return list(client().api.containers(all=all, filters=filters or {}))


def remove_container(container_id: str) -> bool:
    """Remove a container (and its anonymous volumes) by force; False when it was already gone."""
    import docker.errors

    try:
        with docker_errors(f"removing container {container_id[:12]}"):
            client().api.remove_container(container_id, force=True, v=True)
    except SSEBenchError as exc:
        if isinstance(exc.__cause__, docker.errors.NotFound):
            return False
        raise
    return True


def list_volumes(filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The engine's list of volumes (Name, Labels...), in one call."""
    with docker_errors("listing volumes"):
        return list(client().api.volumes(filters=filters or {}).get("Volumes") or [])


def remove_volume(name: str) -> bool:
    """Remove a volume by force; False when it was already gone, or is still used by a container (whose
    removal failed: the volume goes with the next reaping)."""
    import docker.errors

    try:
        with docker_errors(f"removing volume {name}"):
            client().api.remove_volume(name, force=True)
    except SSEBenchError as exc:
        cause = exc.__cause__
        if isinstance(cause, docker.errors.NotFound) or (
            isinstance(cause, docker.errors.APIError) and cause.status_code == 409
        ):
            return False
        raise
    return True


def split_ref(ref: str) -> tuple[str, str]:
    """`repo/name:tag` -> (`repo/name`, `tag`); a registry's `host:port/` is not a tag."""
    repository, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        return ref, "latest"
    return repository, tag


def pull_image(ref: str) -> str | None:
    """Pull `ref` from its registry; its id, or None when the registry does not have it or does not answer."""
    repository, tag = split_ref(ref)
    try:
        with docker_errors(f"pulling {ref}"):
            client().api.pull(repository, tag=tag)
    except SSEBenchError:
        return None
    return image_id(ref)


def push_image(ref: str) -> None:
    """Push `ref` (a name that starts with its registry's `host:port/`); SSEBenchError when refused."""
    repository, tag = split_ref(ref)
    with docker_errors(f"pushing {ref}"):
        for chunk in client().api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise SSEBenchError(f"pushing {ref} failed: {chunk['error']}")
