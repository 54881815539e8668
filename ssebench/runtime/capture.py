"""Patch capture: the agent's change against a private copy of its base commit.

Before the agent runs, the initial commit is cloned into a private bare
repository. Every capture runs git as the tree's owner (never root) with a
cleared environment: no system or global config, a private HOME, GIT_DIR the
private repository, GIT_WORK_TREE the source tree, a private index, and
command-line overrides for every setting that can run a program. Nothing the
agent does to its `.git` (config, hooks, filters, fsmonitor, rewritten
history) runs or matters: the agent's `.git` is never read.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ssebench.runtime.process import User

# Command-line config wins over every config file; these neutralise the
# settings through which a repository can make git run a program.
_SAFE = [
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.sshCommand=false",
    "-c", "core.pager=cat",
    "-c", "core.editor=false",
    "-c", "core.askPass=false",
    "-c", "diff.external=",
    "-c", "core.attributesFile=/dev/null",
    "-c", "core.excludesFile=/dev/null",
    "-c", "log.showSignature=false",
    "-c", "gpg.program=false",
    "-c", "core.untrackedCache=false",
    "-c", "core.quotePath=false",
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.symlinks=true",
    "-c", "core.fileMode=true",
]


class CaptureError(Exception):
    """git failed while capturing; the message holds its stderr."""


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str
    additions: int | None
    deletions: int | None


class Capture:
    """The agent's change as a patch, immune to anything in the agent's `.git`."""

    def __init__(self, source: Path, private_root: Path, owner: User) -> None:
        self.source = source
        self.owner = owner
        self.private_root = private_root
        # Unguessable, in a directory the owner may traverse but not list.
        self.private = private_root / secrets.token_hex(16)
        self.repo = self.private / "base.git"
        self.home = self.private / "home"
        self.index = self.private / "index"
        self.base: str | None = None

    def _env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_DIR": str(self.repo),
            "GIT_WORK_TREE": str(self.source),
            "GIT_INDEX_FILE": str(self.index),
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "LC_ALL": "C",
        }

    def _git(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
        done = subprocess.run(
            ["git", *_SAFE, *args], cwd=self.private, env=env or self._env(), capture_output=True,
            check=False, timeout=600, **self.owner.popen_kwargs(),  # type: ignore[call-overload]
        )
        if check and done.returncode != 0:
            raise CaptureError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()[-2000:]}")
        return str(done.stdout.decode("utf-8", errors="surrogateescape"))

    def snapshot_base(self) -> str:
        """Clone the initial commit privately. Call before the agent runs."""
        self.private_root.mkdir(parents=True, exist_ok=True)
        os.chown(self.private_root, 0, self.owner.gid)
        os.chmod(self.private_root, 0o710)
        if self.private.exists():
            shutil.rmtree(self.private)
        self.private.mkdir(mode=0o700)
        self.home.mkdir(mode=0o700)
        for p in (self.private, self.home):
            os.chown(p, self.owner.uid, self.owner.gid)
        env = {k: v for k, v in self._env().items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
        self._git("clone", "--quiet", "--bare", "--no-hardlinks", str(self.source / ".git"), str(self.repo), env=env)
        self.base = self._git("rev-parse", "HEAD").strip()
        self._git("read-tree", self.base)
        return self.base

    def _stage_all(self) -> str:
        if self.base is None:
            raise CaptureError("no base commit: snapshot_base() was not called before the agent ran")
        # The private index keeps stat data between captures, so only
        # changed files are hashed again; `add -A` makes it match the tree.
        self._git("add", "--all")
        return self.base

    def diff(self) -> str:
        """Every change against the initial commit, as a binary-safe unified diff."""
        base = self._stage_all()
        return self._git("diff", "--cached", "--binary", "--full-index", "--no-ext-diff", "--no-textconv",
                         "--no-color", "--no-renames", base)

    def files(self) -> list[FileChange]:
        base = self._stage_all()
        statuses = self._git("diff", "--cached", "--name-status", "--no-renames", "-z", base).split("\0")
        numstat = self._git("diff", "--cached", "--numstat", "--no-renames", "-z", base).split("\0")
        counts: dict[str, tuple[int | None, int | None]] = {}
        for row in numstat:
            parts = row.split("\t")
            if len(parts) == 3:
                added, deleted, path = parts
                counts[path] = (int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
        changes = []
        for status, path in zip(statuses[0::2], statuses[1::2]):
            if not path:
                continue
            additions, deletions = counts.get(path, (None, None))
            changes.append(FileChange(path=path, status=status, additions=additions, deletions=deletions))
        return changes

    def commits_log(self, limit: int = 500) -> str:
        """The agent's own commits, read from its `.git` with every program-running setting overridden."""
        env = {k: v for k, v in self._env().items() if k not in ("GIT_WORK_TREE", "GIT_INDEX_FILE")}
        env["GIT_DIR"] = str(self.source / ".git")
        done = self._git("log", "--no-show-signature", "--no-decorate", "--no-color", f"--max-count={limit}",
                         "--format=%H %an <%ae> %ad%n    %s", "--date=iso-strict", "HEAD", env=env, check=False)
        return done
