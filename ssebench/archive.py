"""Bringing a run's files out of its container: regular files and directories only, capped.

Nothing of a run is bind-mounted from the host: when the container has
exited, its results directory (root's) and the agent's archive come out as a
tar stream from the engine, and only regular files and directories are
written, by the host, under names checked to stay inside the destination.
Links, fifos, devices and hard links are dropped and listed; files over the
per-file cap, and everything past the total cap, are dropped and listed too.
The host therefore never follows, or even creates, a link of the
container's making.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any


@dataclass
class Collected:
    """What came out of one directory of a container."""

    files: int = 0
    bytes: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False

    def describe(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "dropped": self.dropped[:200],
                "dropped_count": len(self.dropped), "truncated": self.truncated}


class _OverBudget(OSError):
    """The stream went on past what the host reads of it."""


class _ChunkReader(io.RawIOBase):
    """A file over an iterator of byte chunks that fails after `budget` bytes.

    It fails rather than ending: tarfile skips a member it does not extract
    by reading on, block by block, for as long as the member's header says,
    whatever the reads return.
    """

    def __init__(self, chunks: Iterator[bytes], budget: int) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")
        self.budget = budget
        self.exhausted = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.budget <= 0:
            self.exhausted = True
            raise _OverBudget("the stream is longer than the host reads")
        if not self._pending:
            self._pending = memoryview(next(self._chunks, b""))
            if not self._pending:
                return 0
        size = min(len(buffer), len(self._pending), self.budget)
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        self.budget -= size
        return size


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hard link"
    if member.isfifo():
        return "fifo"
    if member.ischr() or member.isblk():
        return "device"
    return "special file"


def extract(chunks: Iterator[bytes], dest: Path, *, file_cap: int, total_cap: int) -> Collected:
    """Write the regular files and directories of a tar stream of one directory under `dest`.

    The stream's top directory (the one exported) is dropped from every
    name. `dest` must be a fresh directory of the host's. At most
    `total_cap` bytes of files are written, and the stream is read no
    further than a few times that, so a container cannot make the host read
    without end.
    """
    collected = Collected()
    reader = _ChunkReader(chunks, budget=4 * total_cap + (64 << 20))
    dest.mkdir(parents=True, exist_ok=True)
    try:
        archive = tarfile.open(fileobj=io.BufferedReader(reader, 1 << 20), mode="r|")
    except tarfile.TarError:
        return collected
    try:
        for member in archive:
            parts = PurePosixPath(member.name).parts[1:]
            if not parts:
                continue
            relative = "/".join(parts)
            if any(p in ("..", "/", "") for p in parts) or PurePosixPath(member.name).is_absolute():
                collected.dropped.append({"path": member.name, "kind": "name", "reason": "leaves the directory"})
                continue
            target = dest.joinpath(*parts)
            if member.isdir():
                try:
                    target.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    collected.dropped.append({"path": relative, "kind": "directory", "reason": exc.strerror})
                continue
            if not member.isreg():
                collected.dropped.append({"path": relative, "kind": _kind(member), "reason": "not a regular file"})
                continue
            if member.size > file_cap:
                collected.dropped.append({"path": relative, "kind": "file", "size": member.size,
                                          "reason": f"larger than the per-file cap of {file_cap} bytes"})
                continue
            if collected.bytes + member.size > total_cap:
                collected.dropped.append({"path": relative, "kind": "file", "size": member.size,
                                          "reason": f"over the cap of {total_cap} bytes for the whole"})
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("xb") as out:
                    while block := source.read(1 << 20):
                        out.write(block)
            except OSError as exc:
                collected.dropped.append({"path": relative, "kind": "file", "reason": exc.strerror or str(exc)})
                continue
            target.chmod(0o644)
            collected.files += 1
            collected.bytes += member.size
    except (tarfile.TarError, OSError):
        collected.truncated = True
    finally:
        archive.close()
    if reader.exhausted:
        collected.truncated = True
    return collected
