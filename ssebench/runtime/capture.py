"""Patch capture: the agent's change against a copy of its base commit that only root can change.

The base commit lives in a repository owned by root (`make_base`, run
when the tool image is built), which model may read but not change. Each capture works in a fresh scratch directory
that root makes: a private index and an object directory of its own (the
base's objects as alternates). git runs as the tree's owner, never as root,
from that scratch directory, with a cleared environment and every
program-running setting overridden (`ssebench.runtime.git`). Nothing of a
capture survives it, so nothing the agent does during one (it can see its
own processes) lasts into the next, and the agent's `.git` is never used
for the diff.

A change larger than the patch limit fails the capture with a message that
names the limit; the objects git writes are under the same file-size limit.

`change()` also gives the part of the change grading applies (the code
under repair, `ssebench.runtime.protection`), selected by git with the
protection's pathspecs from the same staging, and the changed paths it sets
aside.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssebench.runtime import git
from ssebench.runtime.files import remove_tree
from ssebench.runtime.process import User, confined

if TYPE_CHECKING:  # the tool layer imports capture (make_base); the protection is only a run's
    from ssebench.runtime.protection import Protection

BASE_REPO = "base.git"
BASE_INDEX = "base.index"
SCRATCH = "scratch"
# The index compares sizes and whole-second modification times only: inode
# and device numbers differ between the image build and a container.
_STAT = ("-c", "core.checkStat=minimal", "-c", "core.trustctime=false")


class CaptureError(Exception):
    """git failed while capturing, or the change is over a limit; the message says which."""


# How a capture shows a change: binary-safe, every byte, no program of the repository's (external diff,
# textconv), no renames (each path is its own entry, as the protection reads paths).
_DIFF = ("diff", "--cached", "--binary", "--full-index", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames")


@dataclass(frozen=True)
class Change:
    """The agent's change: all of it, the part grading applies, and the changed paths grading sets aside."""

    patch: bytes
    graded: bytes
    set_aside: tuple[str, ...]


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str
    additions: int | None
    deletions: int | None


# The one commit's author and date: a tree's `buggy commit` is the same commit every build.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "ssebench",
    "GIT_AUTHOR_EMAIL": "ssebench@localhost",
    "GIT_COMMITTER_NAME": "ssebench",
    "GIT_COMMITTER_EMAIL": "ssebench@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


def make_base(source: Path, root: Path) -> None:
    """The tree's one commit, `buggy commit`, in root's repository under `root`, and an index of it.

    Runs as root when the tool image is built, before any agent exists, on the
    case image's tree (which has no `.git` by then). The repository is both
    capture's base and what every run gives the agent as its tree's `.git`
    (`ssebench.runtime.tree`): its objects are one pack, kept once per task.
    Root owns everything here; model may read and traverse, never write. The
    index records the tree as it is now, so that a capture hashes only the
    files the agent changed (it compares sizes and modification times).
    """
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    repo = root / BASE_REPO
    if repo.exists():
        shutil.rmtree(repo)
    environ = git.env("/nonexistent", GIT_DIR=str(repo), GIT_WORK_TREE=str(source), **_IDENTITY)

    def run(*args: str) -> None:
        done = subprocess.run(
            git.argv(*_STAT, *args), cwd="/", env=environ, capture_output=True, timeout=1800, check=False
        )
        if done.returncode != 0:
            raise CaptureError(f"git {args[0]} for capture's base failed: {done.stderr.decode(errors='replace')}")

    run("init", "--quiet", "--initial-branch=main")
    run("config", "--unset", "core.worktree")  # init records the tree's path; a run's copy sits in the tree
    run("add", "--all")
    run("commit", "--quiet", "--allow-empty", "--no-verify", "-m", "buggy commit")
    # One pack, compressed as well as git can: the one copy of the tree's objects in the image.
    run("-c", "pack.compression=9", "repack", "-a", "-d", "-q")
    run("prune-packed")
    shutil.copyfile(repo / "index", root / BASE_INDEX)
    (root / SCRATCH).mkdir(mode=0o711, exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, "."]:
            path = os.path.join(dirpath, name)
            os.lchown(path, 0, 0)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
    os.chmod(root, 0o711)
    os.chmod(root / SCRATCH, 0o711)


class Capture:
    """The agent's change as a patch, immune to anything in the agent's `.git`."""

    def __init__(self, source: Path, root: Path, owner: User, *, patch_limit: int, time_limit: float = 300.0) -> None:
        self.source = source
        self.owner = owner
        self.root = root
        self.repo = root / BASE_REPO
        self.patch_limit = patch_limit
        self.time_limit = time_limit
        self.base: str | None = None

    def prepare(self) -> str:
        """Read the base's commit. The base is made when the tool image is built, never here: the agent
        starts while the daemon does, so the tree may already be the agent's."""
        if not (self.repo / "HEAD").is_file():
            raise CaptureError(f"the tool image has no capture base at {self.repo}: rebuild its images")
        done = subprocess.run(
            git.argv("rev-parse", "HEAD"),
            cwd="/",
            capture_output=True,
            check=True,
            timeout=60,
            env=git.env("/nonexistent", GIT_DIR=str(self.repo)),
        )
        self.base = done.stdout.decode().strip()
        return self.base

    @contextmanager
    def _scratch(self) -> Iterator[Path]:
        """A fresh directory of the owner's for one capture: its index and objects; removed afterwards."""
        scratch = self.root / SCRATCH / secrets.token_hex(16)
        scratch.mkdir(mode=0o700)
        try:
            (scratch / "objects").mkdir(mode=0o700)
            shutil.copyfile(self.root / BASE_INDEX, scratch / "index")
            # The directory last: until it is the owner's, nothing in it can be swapped for a link.
            for path in (scratch / "objects", scratch / "index", scratch):
                os.chown(path, self.owner.uid, self.owner.gid, follow_symlinks=False)
            yield scratch
        finally:
            remove_tree(scratch)  # model's, and may be as deep as model made it during the capture

    def _env(self, scratch: Path) -> dict[str, str]:
        return git.env(
            str(scratch),
            GIT_DIR=str(self.repo),
            GIT_WORK_TREE=str(self.source),
            GIT_INDEX_FILE=str(scratch / "index"),
            GIT_OBJECT_DIRECTORY=str(scratch / "objects"),
            GIT_ALTERNATE_OBJECT_DIRECTORIES=str(self.repo / "objects"),
        )

    def _git(self, scratch: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> bytes:
        """Run git as the owner; its output is capped at the patch limit, its time at the time limit.

        The output stays bytes: a change may hold any bytes, and the graded
        patch must be exactly the change.
        """
        # stderr goes to an unnamed file: a pipe left unread while stdout is
        # read could fill up and stall git.
        with tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(
                confined(git.argv(*_STAT, *args), self.patch_limit),
                cwd=scratch,
                env=env or self._env(scratch),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                **self.owner.popen_kwargs(),
            )
            assert process.stdout is not None
            # A fifo the agent left where git reads (.gitignore, .git/HEAD) would block it for good.
            timer = threading.Timer(self.time_limit, process.kill)
            timer.start()
            chunks: list[bytes] = []
            size = 0
            over = False
            while chunk := process.stdout.read(1 << 20):
                size += len(chunk)
                if size > self.patch_limit:
                    over = True
                    process.kill()
                    break
                chunks.append(chunk)
            process.wait()
            late = not timer.is_alive() and process.returncode == -9 and not over
            timer.cancel()
            process.stdout.close()
            errors.seek(0)
            err = errors.read()[-8192:]
        if over:
            raise CaptureError(f"the change is larger than the patch limit of {self.patch_limit} bytes")
        if late:
            raise CaptureError(
                f"git {args[0]} did not finish within {self.time_limit:.0f} s (limit: capture time); "
                "is there a fifo or a file that never ends in the tree?"
            )
        if check and process.returncode != 0:
            message = err.decode(errors="replace").strip()[-2000:]
            if process.returncode in (-25, 153):  # SIGXFSZ: git wrote an object over the file-size limit
                message = f"a changed file is larger than the patch limit of {self.patch_limit} bytes"
            raise CaptureError(f"git {args[0]} failed: {message}")
        return b"".join(chunks)

    def _stage_all(self, scratch: Path) -> str:
        if self.base is None:
            raise CaptureError("no base commit: prepare() was not called before the agent ran")
        # The index starts as the base's, so `add -A` hashes only what changed.
        self._git(scratch, "add", "--all")
        return self.base

    def patch(self) -> bytes:
        """Every change against the initial commit, as a binary-safe unified diff, byte for byte."""
        with self._scratch() as scratch:
            base = self._stage_all(scratch)
            return self._git(scratch, *_DIFF, base)

    def change(self, protection: Protection) -> Change:
        """The whole change, and the part of it grading applies (each pathspec set of `protection` selects
        paths apart from the others, so their diffs join into one patch)."""
        with self._scratch() as scratch:
            base = self._stage_all(scratch)
            patch = self._git(scratch, *_DIFF, base)
            changed = self._names(scratch, base)
            parts, graded = [], set()
            for pathspecs in protection.graded():
                parts.append(self._git(scratch, *_DIFF, base, "--", *pathspecs))
                graded |= self._names(scratch, base, pathspecs)
        return Change(patch=patch, graded=b"".join(parts), set_aside=tuple(sorted(changed - graded)))

    def _names(self, scratch: Path, base: str, pathspecs: list[str] | None = None) -> set[str]:
        listed = self._git(
            scratch,
            "diff",
            "--cached",
            "--name-only",
            "--no-renames",
            "-z",
            base,
            *(["--", *pathspecs] if pathspecs else []),
        )
        return {name for name in _text(listed).split("\0") if name}

    def diff(self) -> str:
        """The patch, for reading (bytes that are not UTF-8 shown as replacement characters)."""
        return self.patch().decode("utf-8", errors="replace")

    def files(self) -> list[FileChange]:
        with self._scratch() as scratch:
            base = self._stage_all(scratch)
            statuses = _text(self._git(scratch, "diff", "--cached", "--name-status", "--no-renames", "-z", base)).split(
                "\0"
            )
            numstat = _text(self._git(scratch, "diff", "--cached", "--numstat", "--no-renames", "-z", base)).split("\0")
        counts: dict[str, tuple[int | None, int | None]] = {}
        for row in numstat:
            parts = row.split("\t")
            if len(parts) == 3:
                added, deleted, path = parts
                counts[path] = (int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
        changes = []
        for status, path in zip(statuses[0::2], statuses[1::2], strict=False):
            if not path:
                continue
            additions, deletions = counts.get(path, (None, None))
            changes.append(FileChange(path=path, status=status, additions=additions, deletions=deletions))
        return changes

    def commits_log(self, limit: int = 500) -> str:
        """The agent's own commits, read from its `.git` with every program-running setting overridden."""
        with self._scratch() as scratch:
            env = git.env(str(scratch), GIT_DIR=str(self.source / ".git"))
            return _text(
                self._git(
                    scratch,
                    "log",
                    "--no-show-signature",
                    "--no-decorate",
                    "--no-color",
                    f"--max-count={limit}",
                    "--format=%H %an <%ae> %ad%n    %s",
                    "--date=iso-strict",
                    "HEAD",
                    env=env,
                    check=False,
                )
            )


def _text(data: bytes) -> str:
    """git's output for reading: names and messages may hold any bytes."""
    return data.decode("utf-8", errors="replace")
