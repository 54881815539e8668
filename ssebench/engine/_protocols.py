"""The engine's seams, each as narrow as its callers need: images, one-off containers, clean-up.

A run's own containers go through `ssebench.backend.Backend`; these are for
what builds images, fills the runtime volume, reads a run's log from the
outside and removes what a session left. Every method raises an
`EngineError` leaf (`ssebench.engine`) when the engine fails, never an
engine library's error; the leaf each names under Raises is the one its
callers tell apart.
"""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

# An image's or a container's data as the engine's inspect gives it (Id, Config, State...).
Attrs = dict[str, Any]
# docker-py's `binds`: a volume (or host path) -> {"bind": where, "mode": "ro,nocopy"}.
Binds = dict[str, dict[str, str]]


class Images(Protocol):
    """The engine's images: inspect, name, move to and from registries, make."""

    def inspect(self, ref: str) -> Attrs | None:
        """Its inspect data, or None when there is no such image."""

    def id(self, ref: str) -> str | None:
        """Its id (`sha256:...`), or None when there is no such image."""

    def labels(self, ref: str) -> dict[str, str] | None:
        """Its labels, or None when there is no such image."""

    def tag(self, ref: str, target: str) -> None:
        """Give `ref` the name `target`. Raises NotFoundError when there is no `ref`."""

    def pull(self, ref: str) -> str | None:
        """Pull `ref` from its registry; its id, or None when the registry does not have it or does not answer."""

    def push(self, ref: str) -> None:
        """Push `ref` (a name that starts with its registry's `host:port/`). Raises EngineRefusedError when
        the registry refuses it."""

    def import_tarball(self, tarball: Path, ref: str, changes: Sequence[str]) -> None:
        """Make `ref` from a root file system's tar file (`docker import`)."""

    def build(
        self, context: Path, dockerfile: Path, ref: str, buildargs: dict[str, str], *, nocache: bool
    ) -> Generator[dict[str, Any], None, None]:
        """`docker build`, as the engine's stream of progress (`stream`, `status`, `error` keys).

        The build has a connection of its own; closing the iterator before its
        end drops it, which makes the engine abandon the build untagged.
        """

    def load(self, archive: bytes) -> Iterator[dict[str, Any]]:
        """Load an image archive (`docker load`), as the engine's stream of progress. Raises
        EngineRefusedError when the engine will not load it."""

    def history(self, ref: str) -> list[dict[str, Any]]:
        """Its history, newest step first."""

    def commit(self, container: str, ref: str, changes: Sequence[str]) -> None:
        """Make `ref` from a container's file system, with Dockerfile `changes` to its configuration."""


class Containers(Protocol):
    """Containers that are not a run's: created, started, read and removed by the harness itself."""

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
        """Create (not start) a container of `image` with no network; its id. Raises NotFoundError when
        there is no such image."""

    def start(self, container: str) -> None:
        """Start a created container."""

    def run_to_end(self, container: str, what: str, timeout: float, cancel: threading.Event | None = None) -> int:
        """Start a created container and wait for it to exit; its status.

        Raises SSEBenchError after `timeout` seconds and BuildCancelled as soon
        as `cancel` is set (either way the caller removes the container).
        """

    def state(self, container: str) -> Attrs:
        """Its state (`Running`, `ExitCode`, `OOMKilled`...). Raises NotFoundError when it is gone."""

    def logs(self, container: str, stream: Literal["all", "stderr"] = "all", tail: int | None = None) -> str:
        """Its output so far (the last `tail` lines). Raises NotFoundError when it is gone."""

    def archive(self, container: str, path: str) -> bytes:
        """A tar archive of `path` in it. Raises NotFoundError when the path or the container does not exist."""

    def put(self, container: str, path: str, archive: BinaryIO) -> None:
        """Unpack a tar archive (read as a stream) into the folder `path` of a container, created or running.
        Raises NotFoundError when the container or the folder does not exist."""

    def archive_of_file(self, container: str, path: str, cap: int) -> bytes | None:
        """A tar archive of the file at `path` in it, read no further than `cap` bytes (and a chunk); None
        when the container has no such path. Raises NotFoundError when the container is gone."""

    def first_entry(self, container: str, path: str) -> tarfile.TarInfo | None:
        """The first entry of the archive of `path` (its own owner, mode and type; a link is not followed),
        or None when there is nothing there. Only that entry is read."""

    def remove(self, container: str) -> bool:
        """Remove it by force with its anonymous volumes; False when it was already gone."""

    def run(
        self,
        image: str,
        command: Sequence[str],
        *,
        entrypoint: Sequence[str] | None = None,
        user: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> bytes:
        """Run a container of `image` with no network to its end and remove it; its standard output.
        Raises EngineRefusedError when it exits with a status other than 0."""

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        """Create an empty local volume (the engine's own when one of that name exists)."""


class Cleanup(Protocol):
    """Finding what the harness made, by label, and removing it; every listing is one call to the engine."""

    def containers(self, filters: dict[str, Any] | None = None) -> list[Attrs]:
        """Containers, running or not (Id, Names, Labels, State, Created...)."""

    def networks(self, filters: dict[str, Any] | None = None) -> list[Attrs]:
        """Networks (Name, Id, Labels...)."""

    def volumes(self, filters: dict[str, Any] | None = None) -> list[Attrs]:
        """Volumes (Name, Labels...)."""

    def remove_container(self, container: str) -> bool:
        """Remove a container by force with its anonymous volumes; False when it was already gone."""

    def remove_network(self, name: str) -> bool:
        """Disconnect what is on a network (given by name or id) and remove it; False when it was already
        gone."""

    def remove_volume(self, name: str) -> bool:
        """Remove a volume; False when it was already gone or a container still uses it (it goes with the
        next clean-up)."""
