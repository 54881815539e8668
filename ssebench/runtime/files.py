"""Files root touches in places another user can reach: never through a link.

Root writes only into directories it owns and no other user can write, by
temp file and rename (`write_atomic`), or creates files exclusively
(`create_exclusive`). Where it must read or clean up a directory another user
wrote (the agent's archive), it walks it through directory file descriptors
opened with O_NOFOLLOW (`read_no_follow`, `prune_tree`), so a link, a fifo or
a renamed directory leads it nowhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ssebench.runtime.process import NEUTRAL_CWD, ROOT_PATH

_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
REMOVE_TIMEOUT = 600.0

log = logging.getLogger("ssebench.runtime.files")


def remove_tree(path: Path | str, timeout: float = REMOVE_TIMEOUT) -> bool:
    """Remove a tree another user may have filled (any depth, any names, links never followed); whether it is
    gone. Never raises: a tree left behind is logged, and changes no outcome.

    The tree may be deeper than Python's recursion (shutil.rmtree recurses, and a directory 1,100 levels deep
    raised RecursionError, which no `ignore_errors` catches). GNU rm walks iteratively, through directory
    descriptors, never following a link and never leaving the file system; a time limit bounds a tree of
    millions of entries.
    """
    if not os.path.lexists(path):
        return True
    try:
        done = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            cwd=NEUTRAL_CWD,
            env={"PATH": ROOT_PATH, "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("removing %s failed: %s", path, exc)
        return False
    if done.returncode != 0 or os.path.lexists(path):
        log.warning(
            "removing %s failed (rm exit %d): %s",
            path,
            done.returncode,
            done.stderr.decode(errors="replace").strip()[-500:],
        )
        return False
    return True


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
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory_fd)
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
    """What `prune_tree` removed, and why (the first LISTED drops, and how many in all)."""

    dropped: list[dict[str, object]] = field(default_factory=list)
    dropped_count: int = 0
    kept_bytes: int = 0
    kept_files: int = 0
    # The walk ran out of time: what it had not reached is left as it was (the host keeps regular files only,
    # under its caps, whatever is there).
    unfinished: bool = False

    LISTED = 1000

    def drop(self, entry: dict[str, object], count: int = 1) -> None:
        if len(self.dropped) < self.LISTED:
            self.dropped.append(entry)
        self.dropped_count += count


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def remove_at(dir_fd: int, names: list[str], timeout: float = REMOVE_TIMEOUT) -> bool:
    """Remove `names` (trees, any depth) in an open directory, as `remove_tree` does, in as few `rm` as the
    command line allows: the directory is reached through its descriptor (rm inherits it), never through a
    path another user could change."""
    done_all = True
    for at in range(0, len(names), 512):
        batch = [f"/proc/self/fd/{dir_fd}/{name}" for name in names[at : at + 512]]
        try:
            done = subprocess.run(
                ["rm", "-rf", "--one-file-system", "--", *batch],
                cwd=NEUTRAL_CWD,
                env={"PATH": ROOT_PATH, "LC_ALL": "C"},
                pass_fds=(dir_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("removing %d entries failed: %s", len(batch), exc)
            done_all = False
            continue
        if done.returncode != 0:
            log.warning(
                "removing %d entries failed (rm exit %d): %s",
                len(batch),
                done.returncode,
                done.stderr.decode(errors="replace").strip()[-500:],
            )
            done_all = False
    return done_all


PRUNE_TIME = 120.0


def prune_tree(
    root: Path,
    *,
    file_cap: int,
    total_cap: int,
    max_entries: int = 100_000,
    max_depth: int = 64,
    time_limit: float = PRUNE_TIME,
) -> Pruned:
    """Leave only regular files (each at most `file_cap` bytes, `total_cap` in all) and directories.

    Walks through directory descriptors without following links, iteratively (one descriptor per level,
    at most `max_depth` levels: a directory deeper than that goes whole); removes links, fifos, sockets
    and devices, files with several names, files over the caps, and everything past `max_entries` (without
    looking at it: a directory's rest goes in a few `rm`). What it has not reached within `time_limit`
    seconds it leaves (`unfinished`). Call it only when no process of the tree's owner runs any more.
    """
    pruned = Pruned()
    seen = 0
    deadline = time.monotonic() + time_limit
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError:
        return pruned

    # One frame per open directory: its descriptor, its path, the names left to look at, and the names to
    # remove whole (directories) once it is done.
    stack: list[tuple[int, str, list[str], list[str]]] = []

    def enter(fd: int, prefix: str) -> None:
        try:
            names = sorted(os.listdir(fd), reverse=True)
        except OSError:
            names = []
        stack.append((fd, prefix, names, []))

    def leave() -> None:
        fd, _, _, doomed = stack.pop()
        if doomed:
            remove_at(fd, doomed)
        os.close(fd)

    def drop(
        dir_fd: int, doomed: list[str], relative: str, name: str, kind: str, reason: str, size: int | None, is_dir: bool
    ) -> None:
        entry: dict[str, object] = {"path": relative, "kind": kind, "reason": reason}
        if size is not None:
            entry["size"] = size
        pruned.drop(entry)
        if is_dir:
            doomed.append(name)
        else:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)

    enter(top, "")
    try:
        while stack:
            dir_fd, prefix, names, doomed = stack[-1]
            if time.monotonic() > deadline:
                pruned.unfinished = True
                break
            if not names:
                leave()
                continue
            if seen >= max_entries:  # the rest of this directory, unseen: counted and removed whole
                pruned.drop(
                    {
                        "path": f"{prefix}*",
                        "kind": "entries",
                        "reason": f"more than {max_entries} entries",
                        "count": len(names),
                    },
                    count=len(names),
                )
                doomed.extend(names)
                names.clear()
                continue
            name = names.pop()
            relative = f"{prefix}{name}"
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            seen += 1
            is_dir = stat.S_ISDIR(info.st_mode)
            if is_dir and len(stack) >= max_depth:
                drop(dir_fd, doomed, relative, name, "directory", f"deeper than {max_depth} levels", None, True)
            elif is_dir:
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=dir_fd)
                except OSError:
                    continue
                enter(child, relative + "/")
            elif not stat.S_ISREG(info.st_mode):
                drop(dir_fd, doomed, relative, name, _kind(info.st_mode), "not a regular file", None, False)
            elif info.st_nlink != 1:
                drop(dir_fd, doomed, relative, name, "file", "has several names (a hard link)", info.st_size, False)
            elif info.st_size > file_cap:
                drop(
                    dir_fd,
                    doomed,
                    relative,
                    name,
                    "file",
                    f"larger than the per-file cap of {file_cap} bytes",
                    info.st_size,
                    False,
                )
            elif pruned.kept_bytes + info.st_size > total_cap:
                drop(
                    dir_fd,
                    doomed,
                    relative,
                    name,
                    "file",
                    f"over the archive cap of {total_cap} bytes",
                    info.st_size,
                    False,
                )
            else:
                pruned.kept_bytes += info.st_size
                pruned.kept_files += 1
    finally:
        while stack:
            if pruned.unfinished:
                os.close(stack.pop()[0])
            else:
                leave()
    return pruned
