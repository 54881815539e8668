"""A layer made without Docker's builder, when its Dockerfile only copies files and configures.

With the legacy builder on fuse-overlayfs every instruction is a container
and a commit of its own, and every commit walks the whole image: about 5 s
on a 1 GB image, for a `COPY` of one small file. A task's Dockerfile that
only copies its tree and scripts onto its base, and an agent's that only
copies its program onto the tool image, are instead assembled here: the
files as one layer archive, the configuration as the parent's with the
Dockerfile's changes and the harness's labels, and the two loaded into the
engine (`docker load`) as a child of the parent image, whose layers the
engine already holds, so it reads only the new one. That takes well under
a second.

Two forms are taken (`AGENT`, `CASE`), each narrow, one instruction a line:

- an agent's: `ARG SSEBENCH_TOOL`, `FROM ${SSEBENCH_TOOL}`, `COPY` of plain
  files and folders of its folder to paths under /opt/agent, one exec-form
  `CMD`. Its files are root's, with no set-id bit and no write for others.
- a task's: `ARG SSEBENCH_REGISTRY[=default]`, `FROM
  ${SSEBENCH_REGISTRY}/base-generic-<lang>:<version>`, `COPY` to absolute
  paths, `WORKDIR` of an absolute path. Its files are as `COPY` writes
  them: root's, each with its own mode and time.

Anything else (a `RUN`, an `ENV`, an `ENTRYPOINT`, a continued line, a flag,
a wildcard, quotes, a substitution, a link as a source, a file with a set-id
bit or several names, a `.dockerignore`, a parser directive) is built by
Docker as before. So is a layer whose copies would meet something in the
parent image that this module does not reproduce (a link on the way to a
destination, a folder where a file goes, a set-id folder, `ONBUILD`):
`parent_entries` says which, and the caller builds it with Docker instead.

Docker's `COPY` rules kept here: a folder's contents go into the
destination; a file goes to the destination, or into it when it ends in
`/`; folders on the way that the parent lacks are made root's, 0755, and
those it has keep their owner, mode and time; a later copy of a file
replaces an earlier one.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path, PurePosixPath
from typing import Any

from ssebench.errors import SSEBenchError

# A new value makes every simple layer again (it is in their digests, with this file's hash).
VERSION = "v3"


@dataclass(frozen=True)
class Form:
    """What a Dockerfile may hold to be assembled here."""

    arg: str  # the one ARG before FROM
    base: re.Pattern[str]  # what FROM may name
    under: str  # COPY writes only below this folder ("/": anywhere)
    config: frozenset[str]  # the configuration instructions it may hold
    mask: int  # mode bits cleared on every copied file and folder


# An agent's program on the tool image: nothing it copies can be a set-id program or writable by others
# (the tool layer's rules), and nothing it configures but its command.
AGENT = Form(
    "SSEBENCH_TOOL", re.compile(r"\$\{SSEBENCH_TOOL\}|\$SSEBENCH_TOOL"), "/opt/agent", frozenset({"CMD"}), 0o6022
)
# A task's tree and scripts on its base, as Docker's COPY writes them.
CASE = Form(
    "SSEBENCH_REGISTRY",
    re.compile(r"\$\{SSEBENCH_REGISTRY\}/base-generic-[a-z]+:[A-Za-z0-9_][A-Za-z0-9_.-]*"),
    "/",
    frozenset({"WORKDIR"}),
    0,
)

_ARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:=([A-Za-z0-9_./:-]+))?")


@dataclass(frozen=True)
class Copy:
    sources: tuple[Path, ...]  # inside the context
    dest: str  # absolute; a folder when it ends in "/"


@dataclass(frozen=True)
class SimpleDockerfile:
    arg: str
    default: str | None  # the ARG's default
    base: str  # FROM's argument as written
    copies: tuple[Copy, ...]
    cmd: tuple[str, ...] | None
    workdirs: tuple[str, ...]  # each one is made; the last is the image's
    mask: int
    instructions: tuple[str, ...]  # after FROM, as written (the image's history)

    def parent(self, buildargs: dict[str, str]) -> str:
        value = buildargs.get(self.arg, self.default or "")
        return self.base.replace("${" + self.arg + "}", value).replace("$" + self.arg, value)


def _instructions(text: str) -> list[tuple[str, str]] | None:
    """(INSTRUCTION, rest) of each instruction, comments and blank lines dropped; None when a line is
    continued (Docker's rules for joining them are not reproduced here)."""
    out: list[tuple[str, str]] = []
    for line in _lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            return None
        word, _, rest = stripped.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _text(dockerfile: Path, context: Path) -> str | None:
    """The Dockerfile's text, or None when Docker would read it, or its context, otherwise than plainly: a
    .dockerignore changes what COPY sees; a parser directive (escape, syntax) changes how lines read."""
    try:
        text = dockerfile.read_bytes().decode("utf-8")  # no newline translation: Docker ends lines at \n only
    except (OSError, UnicodeDecodeError):
        return None
    if (
        text.startswith("\ufeff")
        or (context / ".dockerignore").exists()
        or re.match(r"\s*#\s*(escape|syntax|check)\s*=", text, re.I)
    ):
        return None  # a byte-order mark: Docker drops it and reads a directive after it
    return text


def _lines(text: str) -> list[str]:
    """The Dockerfile's lines as Docker splits them: at \n, one \r before it dropped."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def simple_dockerfile(dockerfile: Path, context: Path, form: Form) -> SimpleDockerfile | None:
    """The Dockerfile as files to copy and configuration to set, or None when it does anything else."""
    text = _text(dockerfile, context)
    if text is None:
        return None
    instructions = _instructions(text)
    if instructions is None or [word for word, _ in instructions[:2]] != ["ARG", "FROM"]:
        return None
    (_, arg), (_, base), *rest = instructions
    declared = _ARG.fullmatch(arg)
    if declared is None or declared.group(1) != form.arg or not form.base.fullmatch(base):
        return None
    copies: list[Copy] = []
    cmd: tuple[str, ...] | None = None
    workdirs: list[str] = []
    root = context.resolve()
    for word, args in rest:
        if word == "COPY":
            copy = _copy(args, root, form)
            if copy is None:
                return None
            copies.append(copy)
        elif word == "CMD" and word in form.config and cmd is None:
            cmd = _exec_form(args)
            if cmd is None:
                return None
        elif word == "WORKDIR" and word in form.config and _absolute(args, form):
            workdirs.append(args)
        else:
            return None
    return SimpleDockerfile(
        form.arg,
        declared.group(2),
        base,
        tuple(copies),
        cmd,
        tuple(workdirs),
        form.mask,
        tuple(f"{word} {args}" for word, args in rest),
    )


@dataclass(frozen=True)
class Split:
    """A Dockerfile whose first steps only Docker's build makes and whose last ones only copy and set the
    working folder: Docker builds the head; the tail is assembled on the head's image."""

    head: str  # the Dockerfile's text up to the tail
    tail: SimpleDockerfile  # its parent is the head's image, whatever `base` says


# Fewer instructions than this at the end are left to Docker: the head's label is a step of its own.
MIN_TAIL = 2


def split_dockerfile(dockerfile: Path, context: Path, form: Form) -> Split | None:
    """The head and the tail of a Dockerfile that ends in `MIN_TAIL` or more instructions of `form` (one line
    each: a line continued from the one before it is the head's), or None."""
    text = _text(dockerfile, context)
    if text is None:
        return None
    lines = _lines(text)
    significant = [i for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("#")]
    # The lines that start an instruction: the first, and each after one that does not go on.
    starts = [i for k, i in enumerate(significant) if k == 0 or not lines[significant[k - 1]].rstrip().endswith("\\")]
    root = context.resolve()
    tail: list[tuple[str, str, Copy | None]] = []
    start = len(lines)
    for i in reversed(starts[1:]):
        line = lines[i].strip()
        if line.endswith("\\"):
            break
        word, _, args = line.partition(" ")
        word, args = word.upper(), args.strip()
        copy = _copy(args, root, form) if word == "COPY" else None
        if copy is None and not (word == "WORKDIR" and "WORKDIR" in form.config and _absolute(args, form)):
            break
        tail.insert(0, (word, args, copy))
        start = i
    if len(tail) < MIN_TAIL or not any(lines[i].split(maxsplit=1)[0].upper() == "FROM" for i in starts if i < start):
        return None
    simple = SimpleDockerfile(
        "",
        None,
        "",
        tuple(c for _, _, c in tail if c is not None),
        None,
        tuple(a for w, a, _ in tail if w == "WORKDIR"),
        form.mask,
        tuple(f"{w} {a}" for w, a, _ in tail),
    )
    return Split("\n".join(text.split("\n")[:start]).rstrip() + "\n", simple)  # the file's own text


def _exec_form(args: str) -> tuple[str, ...] | None:
    try:
        value = json.loads(args)
    except ValueError:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and "$" not in v for v in value):
        return None
    return tuple(value)


def _absolute(path: str, form: Form) -> bool:
    """An absolute path without substitution, `..`, quotes or wildcards, under the form's folder."""
    if not path.startswith("/") or any(c in path for c in "*?[]\\\"'$ \t") or ".." in path.split("/"):
        return False
    return form.under == "/" or path.startswith(form.under.rstrip("/") + "/")


def _copy(args: str, root: Path, form: Form) -> Copy | None:
    """A `COPY` of plain files or folders of the context to an absolute path the form allows, or None."""
    parts = args.split()
    if len(parts) < 2 or any(c in args for c in "*?[]\\\"'$") or args.startswith("--"):
        return None
    *sources, dest = parts
    if not _absolute(dest, form) or not dest.strip("/") or (len(sources) > 1 and not dest.endswith("/")):
        return None
    resolved = []
    for source in sources:
        named = root / source
        path = named.resolve()
        if named.is_symlink() or (path != root and root not in path.parents) or path == root:
            return None
        if (
            not (path.is_dir() or path.is_file())
            or not _plain(path)
            or (path.is_dir() and (not _plain_tree(path) or not any(path.rglob("*"))))
        ):
            return None
        resolved.append(path)
    return Copy(tuple(resolved), dest)


def _plain(path: Path) -> bool:
    """A file or folder Docker's COPY writes as it is: no set-id bit (its chown clears them), one name (it
    keeps a file's other names in the same copy as links), and a name the engine reads as a name."""
    if path.name.startswith(".wh."):
        return False  # a whiteout to the engine: it would delete, not copy
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return True
    if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
        return False
    return stat.S_ISDIR(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink == 1)


def _plain_tree(folder: Path) -> bool:
    """Only plain files, folders and symbolic links under `folder` (a fifo, a socket or a device, a set-id
    bit or a file of several names is left to Docker)."""
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            if not _plain(Path(dirpath, name)):
                return False
    return True


# ---- the layer's paths


class LeftToDocker(SSEBenchError):
    """A layer meant to be assembled meets something only Docker's build makes as Docker makes it: two
    copies that disagree on a path, a parent with a link, a file or a set-id folder on the way or ONBUILD
    steps, an engine that will not load the archive. The message says which; Docker builds the layer."""


@dataclass(frozen=True)
class Layout:
    """What the layer writes: each path (no leading /) and the context file, folder or link it comes
    from, and the folders it makes or passes through (their owner and mode are the parent image's where it
    has them)."""

    sources: dict[PurePosixPath, Path]
    folders: frozenset[PurePosixPath]


def layout(simple: SimpleDockerfile) -> Layout:
    """The layer's paths. Raises LeftToDocker when two copies disagree on what a path is."""
    sources: dict[PurePosixPath, Path] = {}
    made: set[PurePosixPath] = set()  # folders a COPY of a folder or a WORKDIR makes

    def put(target: PurePosixPath, source: Path) -> None:
        before = sources.get(target)
        if before is not None and (before.is_symlink() or source.is_symlink()):
            raise LeftToDocker(f"two copies write {target}, one of them a link")  # COPY may write through a link
        if before is not None and before.is_dir() != source.is_dir():
            raise LeftToDocker(f"two copies make {target} a file and a folder")
        sources[target] = source

    for copy in simple.copies:
        dest = PurePosixPath(copy.dest.lstrip("/"))
        for source in copy.sources:
            if source.is_file():
                put(dest / source.name if copy.dest.endswith("/") else dest, source)
                continue
            made.add(dest)
            for dirpath, dirnames, filenames in os.walk(source):
                here = Path(dirpath)
                folder = dest / here.relative_to(source).as_posix() if here != source else dest
                for name in dirnames + filenames:
                    put(folder / name, here / name)
                dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
    workdirs = {PurePosixPath(w.lstrip("/")) for w in simple.workdirs}
    made |= workdirs
    folders = {p for path in list(sources) + list(made) for p in path.parents if p != PurePosixPath(".")}
    folders |= {m for m in made if m not in sources or m in workdirs}
    for path, source in sources.items():
        if path in folders and not (source.is_dir() and not source.is_symlink()):
            raise LeftToDocker(f"a copy puts a file at {path}, where a folder of the layer goes")
    return Layout(sources, frozenset(folders))


# What the parent image has at a path: its archive entry (owner, mode, type), or None.
Probe = Callable[[PurePosixPath], "tarfile.TarInfo | None"]


def parent_entries(lay: Layout, probe: Probe) -> dict[PurePosixPath, tarfile.TarInfo]:
    """The parent's entries of the layer's folders. Probes only paths whose folder the parent has.

    Raises LeftToDocker when the parent holds something that COPY would treat
    otherwise than this module does (a link or a file on the way, a folder or
    link where a file goes).
    """
    present: dict[PurePosixPath, tarfile.TarInfo] = {}
    missing: set[PurePosixPath] = set()
    for path in sorted(set(lay.folders) | set(lay.sources), key=lambda p: (len(p.parts), p.parts)):
        parent = path.parent
        if parent in missing or (parent != PurePosixPath(".") and parent not in present):
            missing.add(path)
            continue
        entry = probe(path)
        if entry is None:
            missing.add(path)
            continue
        source = lay.sources.get(path)
        wants_folder = path in lay.folders or (source is not None and source.is_dir() and not source.is_symlink())
        if entry.issym() or entry.islnk():
            raise LeftToDocker(f"the parent image has a link at /{path}")
        if entry.isdir() != wants_folder:
            raise LeftToDocker(f"the parent image has a {'folder' if entry.isdir() else 'file'} at /{path}")
        if entry.isdir() and entry.mode & (stat.S_ISUID | stat.S_ISGID):
            raise LeftToDocker(f"the parent image has a set-id folder at /{path}")  # Docker's COPY may clear its bits
        if entry.isdir():
            present[path] = entry
    return present


def layer_archive(lay: Layout, parents: dict[PurePosixPath, tarfile.TarInfo], mask: int) -> bytes:
    """The layer as an uncompressed tar archive, parents before children: the parent's own entries for
    the folders it has, root's 0755 folders for those it lacks, and each copied path as COPY writes it."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(set(lay.folders) | set(lay.sources), key=lambda p: p.parts):
            source = lay.sources.get(path)
            if source is None:
                known = parents.get(path)
                if known is not None:
                    info = tarfile.TarInfo(str(path))
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, known.mode, known.mtime
                    # Owner, mode and time only: the engine's own headers name the entry by its base name.
                    info.uid, info.gid, info.uname, info.gname = known.uid, known.gid, known.uname, known.gname
                else:
                    info = tarfile.TarInfo(str(path))
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
                archive.addfile(info)
                continue
            _add(archive, source, str(path), mask)
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, path: Path, name: str, mask: int) -> None:
    """One file, link or folder as `COPY` writes it: owned by root, its own mode (less `mask`) and time."""
    info = archive.gettarinfo(str(path), arcname=name)
    if info.islnk():  # the same file copied twice (sources are files of one name): its own copy again
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.stat().st_size
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if not info.issym():
        info.mode &= ~mask
    if info.isreg():
        with path.open("rb") as f:
            archive.addfile(info, f)
    else:
        archive.addfile(info)


# ---- the image


def image_archive(
    tag: str,
    parent: dict[str, Any],
    history: Iterable[dict[str, Any]],
    layer: bytes,
    simple: SimpleDockerfile,
    labels: dict[str, str],
) -> bytes:
    """What `docker load` takes to make `tag`: the parent's layers (named, not included: the engine has
    them) and the new one, with the parent's configuration changed as the Dockerfile says.

    `parent` is the engine's inspection of the parent image; `history` its history, oldest first, as the
    engine lists it."""
    config = dict(parent.get("Config") or {})
    if simple.cmd is not None:
        config["Cmd"] = list(simple.cmd)
    if simple.workdirs:
        config["WorkingDir"] = simple.workdirs[-1]
    config["Labels"] = {**(config.get("Labels") or {}), **labels}
    config["OnBuild"] = None
    config["Image"] = parent["Id"]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    parent_layers = list(parent["RootFS"]["Layers"])
    diff_id = "sha256:" + sha256(layer).hexdigest()
    steps = [
        {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(h.get("Created") or 0))),
            "created_by": h.get("CreatedBy") or "",
            **({"comment": h["Comment"]} if h.get("Comment") else {}),
            # The engine lists no "empty layer" flag; a step of no size made none (or an empty one: the
            # engine asks only that no more steps than layers say they made one).
            **({"empty_layer": True} if not h.get("Size") else {}),
        }
        for h in history
    ]
    steps.append(
        {
            "created": created,
            "created_by": "; ".join(simple.instructions),
            "comment": "ssebench: assembled, not built (ssebench/simplelayer.py)",
        }
    )
    image = {
        "architecture": parent.get("Architecture") or "amd64",
        "os": parent.get("Os") or "linux",
        **({"variant": parent["Variant"]} if parent.get("Variant") else {}),
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [*parent_layers, diff_id]},
        "history": steps,
    }
    raw = json.dumps(image, sort_keys=True).encode()
    name = sha256(raw).hexdigest() + ".json"
    layers = [f"parent-{n}/layer.tar" for n in range(len(parent_layers))] + ["new/layer.tar"]
    manifest = json.dumps([{"Config": name, "RepoTags": [tag], "Layers": layers}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for member, data in ((name, raw), ("new/layer.tar", layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size, info.mtime = len(data), int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()
