"""An agent's layer without a Dockerfile build, when its Dockerfile only copies files and configures.

A sandbox-mode agent image is the agent's Dockerfile on each task's tool
image. The shipped agents' Dockerfiles, and most agents', only `COPY` their
program in and set its `CMD`; with the legacy builder on fuse-overlayfs each
such instruction (and the label appended to it) is a container and a commit
of its own, seconds apiece, for every task. Such a Dockerfile is made here
in one container, never started: its files go in as one archive, owned by
root with their own modes (as `COPY` does), and its configuration with the
labels in one commit. Any other Dockerfile (a `RUN`, a `WORKDIR` to create,
a flag, a wildcard, a `$`) is built by Docker as before.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Configuration a commit can set exactly as the Dockerfile instruction would (no file system change).
_CONFIG = {"CMD", "ENTRYPOINT", "ENV", "LABEL", "USER"}
_BASE = re.compile(r"^\$\{?SSEBENCH_TOOL\}?$")


@dataclass(frozen=True)
class Copy:
    sources: tuple[Path, ...]  # inside the context
    dest: str  # absolute; a folder when it ends in "/"


@dataclass(frozen=True)
class SimpleDockerfile:
    copies: tuple[Copy, ...]
    changes: tuple[str, ...]  # the configuration instructions, as written


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) of each instruction: comments and blank lines dropped, continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            out.append((word.upper(), rest.strip()))
    if pending.strip():
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def simple_dockerfile(dockerfile: Path, context: Path) -> SimpleDockerfile | None:
    """The Dockerfile as files to copy and configuration to set, or None when it does anything else."""
    try:
        text = dockerfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    copies: list[Copy] = []
    changes: list[str] = []
    seen_from = False
    root = context.resolve()
    for word, rest in _instructions(text):
        if "$" in rest and word != "FROM":
            return None
        if word == "ARG":
            if rest != "SSEBENCH_TOOL" or seen_from:
                return None
        elif word == "FROM":
            if seen_from or not _BASE.match(rest):
                return None
            seen_from = True
        elif not seen_from:
            return None
        elif word == "COPY":
            if rest.startswith("[") or "--" in rest:
                return None
            try:
                parts = shlex.split(rest)
            except ValueError:
                return None
            if len(parts) < 2 or any(c in p for p in parts for c in "*?[\\"):
                return None
            *sources, dest = parts
            if not dest.startswith("/") or (len(sources) > 1 and not dest.endswith("/")):
                return None
            resolved = []
            for source in sources:
                path = (root / source).resolve()
                if (path != root and root not in path.parents) or not (path.is_file() or path.is_dir()):
                    return None
                if path.is_dir() and not dest.endswith("/"):
                    return None
                resolved.append(path)
            copies.append(Copy(tuple(resolved), dest))
        elif word in _CONFIG:
            changes.append(f"{word} {rest}")
        else:
            return None
    return SimpleDockerfile(tuple(copies), tuple(changes)) if seen_from else None


def _add(archive: tarfile.TarFile, path: Path, name: str) -> None:
    """One file, link or folder as `COPY` writes it: owned by root, its own mode and time."""
    info = archive.gettarinfo(str(path), arcname=name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
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
