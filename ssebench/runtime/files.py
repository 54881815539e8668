"""Files root touches in places another user can reach: never through a link.

Root writes only into directories it owns and no other user can write, by
temp file and rename (`write_atomic`), or creates files exclusively
(`create_exclusive`). Where it must read or clean up a directory another user
wrote (the agent's archive), it walks it through directory file descriptors
opened with O_NOFOLLOW (`read_no_follow`, `prune_tree`), so a link, a fifo or
a renamed directory leads it nowhere.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def write_atomic(directory: Path, name: str, data: str | bytes, mode: int = 0o644) -> Path:
    """Write `directory/name` by temp file and rename: never half-written, never through a link."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, directory / name)  # replaces a planted link, never follows it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / name


def check_root_path(path: str) -> None:
    """Raise ValueError unless every directory from `/` down to `path`'s parent is a real directory of
    root's that nobody else may write, and `path` itself, if it exists, is a real directory, no link.

    A directory root uses at a fixed path (the runner's area, where a run's volume is mounted) is then
    reached through no link, and no other user could rename it away or plant one in its place.
    """
    parts = Path(path).parts
    for depth in range(1, len(parts)):
        above = str(Path(*parts[:depth]))
        try:
            st = os.lstat(above)
        except FileNotFoundError:
            return  # root makes what is missing
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise ValueError(f"{above} (above {path}) must be a directory of root's that nobody else may write")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{path} must be a directory, not a link or a file")


def create_exclusive(directory_fd: int, name: str, data: bytes, mode: int) -> None:
    """Create `name` in an open directory; fail if anything, a link included, is already there."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                 dir_fd=directory_fd)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)  # exactly `mode`, whatever the umask
        out.write(data)


def read_no_follow(directory: Path, name: str, limit: int) -> bytes | None:
    """Read a regular file without following a link anywhere in `directory/name`; None if absent.

    A file with more than one link is refused too: it may be another name
    for a file its owner could not otherwise show.
    """
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (ENOTDIR/ELOOP with O_NOFOLLOW) or a file
        raise PermissionError(f"{directory} is not a plain directory: {exc.strerror}") from exc
    try:
        try:
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PermissionError(f"{name} is not a regular file: {exc.strerror}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                raise PermissionError(f"{name} is not a regular file with one name")
            chunks, size = [], 0
            while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


@dataclass
class Pruned:
    """What `prune_tree` removed, and why."""

    dropped: list[dict[str, object]] = field(default_factory=list)
    kept_bytes: int = 0
    kept_files: int = 0


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def prune_tree(root: Path, *, file_cap: int, total_cap: int, max_entries: int = 100_000) -> Pruned:
    """Leave only regular files (each at most `file_cap` bytes, `total_cap` in all) and directories.

    Walks through directory descriptors without following links; removes
    links, fifos, sockets and devices, files with several names, files over
    the caps, and anything beyond `max_entries`. Call it only when no process
    of the tree's owner runs any more.
    """
    pruned = Pruned()
    seen = 0
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError:
        return pruned

    def drop(dir_fd: int, relative: str, name: str, kind: str, reason: str, size: int | None, is_dir: bool) -> None:
        entry: dict[str, object] = {"path": relative, "kind": kind, "reason": reason}
        if size is not None:
            entry["size"] = size
        pruned.dropped.append(entry)
        try:
            if is_dir:
                _remove_dir(dir_fd, name)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass

    def walk(dir_fd: int, prefix: str) -> None:
        nonlocal seen
        for name in sorted(os.listdir(dir_fd)):
            relative = f"{prefix}{name}"
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            seen += 1
            is_dir = stat.S_ISDIR(info.st_mode)
            if seen > max_entries:
                drop(dir_fd, relative, name, "directory" if is_dir else "file", f"more than {max_entries} entries",
                     None, is_dir)
                continue
            if is_dir:
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    walk(child, relative + "/")
                finally:
                    os.close(child)
            elif not stat.S_ISREG(info.st_mode):
                drop(dir_fd, relative, name, _kind(info.st_mode), "not a regular file", None, False)
            elif info.st_nlink != 1:
                drop(dir_fd, relative, name, "file", "has several names (a hard link)", info.st_size, False)
            elif info.st_size > file_cap:
                drop(dir_fd, relative, name, "file", f"larger than the per-file cap of {file_cap} bytes",
                     info.st_size, False)
            elif pruned.kept_bytes + info.st_size > total_cap:
                drop(dir_fd, relative, name, "file", f"over the archive cap of {total_cap} bytes", info.st_size,
                     False)
            else:
                pruned.kept_bytes += info.st_size
                pruned.kept_files += 1

    try:
        walk(top, "")
    finally:
        os.close(top)
    return pruned


def _remove_dir(parent_fd: int, name: str) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=parent_fd)
    try:
        for child in os.listdir(fd):
            info = os.stat(child, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                _remove_dir(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)
