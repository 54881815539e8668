"""An agent's layer without a Dockerfile build, when its Dockerfile only puts its program in place.

A sandbox-mode agent image is the agent's Dockerfile on each task's tool
image. The shipped agents' Dockerfiles, and most agents', only `COPY` their
program into /opt/agent and set its `CMD`; with the legacy builder on
fuse-overlayfs each such instruction (and the label appended to it) is a
container and a commit of its own, seconds apiece, for every task. Such a
Dockerfile is made here in one container, never started: its files go in
as one archive, owned by root, with no set-id bit and no write for others,
and its command with the labels in one commit.

Only that narrow form is taken: `ARG SSEBENCH_TOOL`, `FROM
${SSEBENCH_TOOL}`, `COPY` of plain files and folders of the agent's folder
to paths under /opt/agent, and `CMD`, one line each. Anything else (a
`RUN`, an `ENV`, an `ENTRYPOINT`, a continued line, a link as a source, a
`.dockerignore`, a parser directive) is built by Docker as before, and is
the operator's to trust: it runs as root on the task's image
(docs/integrity.md, "An agent's own image").
"""

from __future__ import annotations

import io
import os
import re
import shlex
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Where an agent's program goes (the only place the one-commit way writes).
AGENT_HOME = "/opt/agent"


@dataclass(frozen=True)
class Copy:
    sources: tuple[Path, ...]  # inside the context
    dest: str  # absolute; a folder when it ends in "/"


@dataclass(frozen=True)
class SimpleDockerfile:
    copies: tuple[Copy, ...]
    changes: tuple[str, ...]  # the configuration instructions, as written


def _instructions(text: str) -> list[tuple[str, str]] | None:
    """(INSTRUCTION, rest) of each instruction, comments and blank lines dropped; None when a line is
    continued (Docker's rules for joining them are not reproduced here)."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            return None
        word, _, rest = stripped.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def simple_dockerfile(dockerfile: Path, context: Path) -> SimpleDockerfile | None:
    """The Dockerfile as files to copy and a command to set, or None when it does anything else."""
    try:
        text = dockerfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    # A .dockerignore changes what COPY sees; a parser directive (escape, syntax) changes how lines read.
    if (context / ".dockerignore").exists() or re.match(r"\s*#\s*(escape|syntax|check)\s*=", text, re.I):
        return None
    instructions = _instructions(text)
    if instructions is None or [word for word, _ in instructions[:2]] != ["ARG", "FROM"]:
        return None
    (_, arg), (_, base), *rest = instructions
    if arg != "SSEBENCH_TOOL" or base not in ("${SSEBENCH_TOOL}", "$SSEBENCH_TOOL"):
        return None
    copies: list[Copy] = []
    changes: list[str] = []
    root = context.resolve()
    for word, args in rest:
        if word == "CMD" and not changes and "$" not in args:
            changes.append(f"CMD {args}")
        elif word == "COPY":
            copy = _copy(args, root)
            if copy is None:
                return None
            copies.append(copy)
        else:
            return None
    targets = [PurePosixPath(c.dest) / (s.name if c.dest.endswith("/") else "") for c in copies
               for s in c.sources]
    if any(a != b and a in b.parents for a in targets for b in targets):
        return None  # one copy's file where another puts a folder: Docker's order rules, not reproduced
    return SimpleDockerfile(tuple(copies), tuple(changes))


def _copy(args: str, root: Path) -> Copy | None:
    """A `COPY` of plain files or folders of the context to a path under /opt/agent, or None."""
    parts = args.split()
    if len(parts) < 2 or any(c in args for c in "*?[]\\\"'$") or args.startswith("--"):
        return None
    *sources, dest = parts
    if not dest.startswith(AGENT_HOME + "/") or ".." in dest.split("/") or (
            len(sources) > 1 and not dest.endswith("/")):
        return None
    resolved = []
    for source in sources:
        named = root / source
        path = named.resolve()
        if named.is_symlink() or (path != root and root not in path.parents) or path == root:
            return None
        if path.is_dir():
            if not dest.endswith("/") or not _plain_tree(path) or not any(path.rglob("*")):
                return None
        elif not path.is_file():
            return None
        resolved.append(path)
    return Copy(tuple(resolved), dest)


def _plain_tree(folder: Path) -> bool:
    """Only files, folders and symbolic links under `folder` (a fifo, a socket or a device is left to Docker)."""
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                return False
    return True


def _add(archive: tarfile.TarFile, path: Path, name: str) -> None:
    """One file, link or folder as `COPY` writes it: owned by root, its own mode and time."""
    info = archive.gettarinfo(str(path), arcname=name)
    if info.islnk():  # a second name of a file already in the archive: its own copy
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.stat().st_size
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if not info.issym():
        info.mode &= ~0o6022  # no set-id program and nothing others may write (the tool layer's rules)
    if info.isreg():
        with path.open("rb") as f:
            archive.addfile(info, f)
    elif info.isdir() or info.issym():
        archive.addfile(info)


def archive_of(simple: SimpleDockerfile) -> bytes:
    """The copies as one tar archive to unpack at `/` (folders above each destination are not in it: the
    engine makes the missing ones, root's, 0755, as `COPY` does, and leaves existing ones alone)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for copy in simple.copies:
            for source in copy.sources:
                if source.is_file():
                    target = copy.dest + source.name if copy.dest.endswith("/") else copy.dest
                    _add(archive, source, target.lstrip("/"))
                    continue
                for dirpath, dirnames, filenames in os.walk(source):
                    dirnames.sort()
                    here = Path(dirpath)
                    rel = here.relative_to(source)
                    folder = PurePosixPath(copy.dest.lstrip("/")) / rel.as_posix()
                    if here != source:
                        _add(archive, here, str(folder))
                    for name in sorted(filenames):
                        _add(archive, here / name, str(folder / name))
                    for name in sorted(dirnames):
                        if (here / name).is_symlink():
                            _add(archive, here / name, str(folder / name))
                    dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
    return buffer.getvalue()
