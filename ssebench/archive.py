"""Bringing a run's files out of its container: regular files and directories only, capped.

Nothing of a run is bind-mounted from the host: when the container has
exited, its results directory (root's) and the agent's archive come out as a
tar stream from the engine, and only regular files and directories are
written, by the host, under names checked to stay inside the destination.
Links, fifos, devices and hard links are dropped and listed; files over the
per-file cap, and everything past the total cap, are dropped and listed too,
as is everything past the entry cap or deeper than the depth cap: an archive
of 120,000 files or 1,100 nested directories comes home capped, not whole
(the listing itself keeps its first entries and counts the rest).
The host therefore never follows, or even creates, a link of the
container's making.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

# The most entries (files and directories) and the deepest path the host writes of one directory, and the most
# drops it lists one by one.
MAX_ENTRIES, MAX_DEPTH, LISTED_DROPS = 100_000, 64, 1000


@dataclass
class Collected:
    """What came out of one directory of a container."""

    files: int = 0
    bytes: int = 0
    entries: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)
    dropped_count: int = 0
    # Drops by the first component of their path (`archive`, `result.json`...), all of them counted.
    dropped_under: dict[str, int] = field(default_factory=dict)
    truncated: bool = False

    def drop(self, path: str, kind: str, reason: str | None, size: int | None = None) -> None:
        entry: dict[str, Any] = {"path": path, "kind": kind, "reason": reason}
        if size is not None:
            entry["size"] = size
        if len(self.dropped) < LISTED_DROPS:
            self.dropped.append(entry)
        self.dropped_count += 1
        top = path.split("/", 1)[0]
        self.dropped_under[top] = self.dropped_under.get(top, 0) + 1

    def describe(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "dropped": self.dropped[:200],
            "dropped_count": self.dropped_count,
            "truncated": self.truncated,
        }


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


def one_file(archive: bytes, cap: int) -> bytes | None:
    """The content of the one regular file an engine's archive of a file holds (at most `cap` bytes), never
    extracted; None for an archive that is anything else (a link, more than one member, over `cap`, not a
    tar), as when the container's owner replaced the file with a link."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            members = tar.getmembers()
            if len(members) != 1 or not members[0].isreg() or members[0].size > cap:
                return None
            extracted = tar.extractfile(members[0])
            return extracted.read(cap + 1) if extracted is not None else b""
    except (tarfile.TarError, OSError):
        return None


def extract(
    chunks: Iterator[bytes],
    dest: Path,
    *,
    file_cap: int,
    total_cap: int,
    max_entries: int = MAX_ENTRIES,
    max_depth: int = MAX_DEPTH,
) -> Collected:
    """Write the regular files and directories of a tar stream of one directory under `dest`.

    The stream's top directory (the one exported) is dropped from every
    name. `dest` must be a fresh directory of the host's. At most
    `total_cap` bytes of files and `max_entries` files and directories are
    written, none deeper than `max_depth` components, and the stream is read
    no further than a few times the byte cap, so a container cannot make the
    host read, or write, without end.
    """
    collected = Collected()
    reader = _ChunkReader(chunks, budget=4 * total_cap + (64 << 20))
    dest.mkdir(parents=True, exist_ok=True)
    try:
        archive = tarfile.open(fileobj=io.BufferedReader(reader, 1 << 20), mode="r|")  # noqa: SIM115 (closed below)
    except tarfile.TarError:
        return collected
    try:
        for member in archive:
            parts = PurePosixPath(member.name).parts[1:]
            if not parts:
                continue
            relative = "/".join(parts)
            if any(p in ("..", "/", "") for p in parts) or PurePosixPath(member.name).is_absolute():
                collected.drop(member.name, "name", "leaves the directory")
                continue
            kind = "directory" if member.isdir() else "file" if member.isreg() else _kind(member)
            if len(parts) > max_depth:
                collected.drop(relative, kind, f"deeper than {max_depth} levels")
                continue
            if collected.entries >= max_entries:
                collected.drop(relative, kind, f"more than {max_entries} entries")
                continue
            target = dest.joinpath(*parts)
            if member.isdir():
                try:
                    os.makedirs(target, exist_ok=True)  # iterative, unlike Path.mkdir(parents=True)
                    collected.entries += 1
                except OSError as exc:
                    collected.drop(relative, "directory", exc.strerror)
                continue
            if not member.isreg():
                collected.drop(relative, kind, "not a regular file")
                continue
            if member.size > file_cap:
                collected.drop(relative, "file", f"larger than the per-file cap of {file_cap} bytes", member.size)
                continue
            if collected.bytes + member.size > total_cap:
                collected.drop(relative, "file", f"over the cap of {total_cap} bytes for the whole", member.size)
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            try:
                os.makedirs(target.parent, exist_ok=True)
                with target.open("xb") as out:
                    while block := source.read(1 << 20):
                        out.write(block)
            except OSError as exc:
                collected.drop(relative, "file", exc.strerror or str(exc))
                continue
            target.chmod(0o644)
            collected.files += 1
            collected.entries += 1
            collected.bytes += member.size
    except (tarfile.TarError, OSError):
        collected.truncated = True
    finally:
        archive.close()
    if reader.exhausted:
        collected.truncated = True
    return collected
