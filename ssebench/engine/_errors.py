"""The engine's errors: one hierarchy, and the one table that maps the engine library's errors onto it.

    SSEBenchError
     └─ EngineError               the engine failed; `doing` says at what
         ├─ DockerUnavailableError  no engine answers (not running, wrong DOCKER_HOST, connection lost)
         ├─ EngineTimeoutError      it did not answer in time
         └─ EngineRefusedError      it answered no
             ├─ NotFoundError         no such image, container, network or volume (404)
             └─ ConflictError         in use, or the name is taken (409)

Callers tell the cases apart by the class they catch, never by the
library's error under `__cause__`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from ssebench.errors import SSEBenchError


def hint() -> str:
    """What to do when no engine answers, naming where it was looked for (DOCKER_HOST's value)."""
    host = os.environ.get("DOCKER_HOST")
    where = f"DOCKER_HOST={host}" if host else "unix:///var/run/docker.sock (DOCKER_HOST is not set)"
    return (
        f"no engine answers at {where}: start the Docker engine (systemctl start docker) or point DOCKER_HOST "
        "at one, then run `ssebench doctor`"
    )


class EngineError(SSEBenchError):
    """The container engine failed while doing something; `doing` names it (`removing volume x`)."""

    def __init__(self, message: str, *, doing: str = "") -> None:
        super().__init__(message)
        self.doing = doing


class DockerUnavailableError(EngineError):
    """The Docker engine cannot be reached."""


class EngineTimeoutError(EngineError):
    """The engine did not answer within the client's time limit."""


class EngineRefusedError(EngineError):
    """The engine answered, and refused."""


class NotFoundError(EngineRefusedError):
    """What was asked for does not exist (any more)."""


class ConflictError(EngineRefusedError):
    """What was asked for conflicts with the engine's state: a volume still in use, a name already taken."""


@dataclass(frozen=True)
class Mapping:
    """One row of the table: errors of `library` (with HTTP `status`, when given) become `leaf`."""

    library: type[BaseException]
    leaf: type[EngineError]
    status: int | None = None
    hint: bool = False

    def matches(self, exc: BaseException) -> bool:
        return isinstance(exc, self.library) and (
            self.status is None or getattr(exc, "status_code", None) == self.status
        )


@lru_cache(maxsize=1)
def table() -> tuple[Mapping, ...]:
    """The mapping, most specific first (the first row that matches wins). Built on first use, so that
    importing the engine loads no client library."""
    import docker.errors
    import requests.exceptions

    return (
        Mapping(docker.errors.NotFound, NotFoundError),  # ImageNotFound, and every 404 the API raises
        Mapping(docker.errors.APIError, ConflictError, status=409),
        Mapping(docker.errors.APIError, EngineRefusedError),
        # A one-off container whose command failed (`Containers.run`): the engine worked, the answer is no.
        Mapping(docker.errors.ContainerError, EngineRefusedError),
        # A connect timeout is both a connection error and a timeout: the engine is not there.
        Mapping(requests.exceptions.ConnectionError, DockerUnavailableError, hint=True),
        Mapping(requests.exceptions.Timeout, EngineTimeoutError),
        Mapping(ConnectionError, DockerUnavailableError, hint=True),
        Mapping(docker.errors.DockerException, DockerUnavailableError, hint=True),
    )


def translate(exc: BaseException, doing: str) -> EngineError | None:
    """The engine error `exc` (raised while `doing` something) stands for, or None when it is not the
    engine's (the caller's own errors pass through)."""
    for row in table():
        if row.matches(exc):
            return row.leaf(_message(row.leaf, exc, doing) + (f"; {hint()}" if row.hint else ""), doing=doing)
    return None


def _message(leaf: type[EngineError], exc: BaseException, doing: str) -> str:
    said = getattr(exc, "explanation", None) or exc
    if issubclass(leaf, EngineRefusedError):
        return f"Docker refused {doing}: {said}"
    if issubclass(leaf, EngineTimeoutError):
        return f"the Docker engine did not answer in time while {doing}: {said}"
    if isinstance(exc, ConnectionError) or type(exc).__module__.startswith("requests"):
        return f"cannot reach the Docker engine while {doing}: {said}"
    return f"Docker failed while {doing}: {said}"


@contextmanager
def engine_errors(doing: str) -> Iterator[None]:
    """The one boundary: the engine library's errors raised while `doing` something leave as EngineErrors
    (`raise ... from` the original); every other exception passes unchanged."""
    try:
        yield
    except EngineError:
        raise
    except Exception as exc:
        mapped = translate(exc, doing)
        if mapped is None:
            raise
        raise mapped from exc
