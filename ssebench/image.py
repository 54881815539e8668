"""The images of a run, as a plan of layers: names, digests, and the form each layer's Dockerfile takes.

    os  ->  base-<lang>  ->  case/<dataset>/<task>  ->  tool/<dataset>/<task>  ->  agent-<name>/<dataset>/<task>
            runtime-<lang> (the venv, once per language)  ->  volume ssebench-runtime-<digest>

The runtime is in no task's image. Its image fills one volume per runtime
digest, once; every tool image is made, and every run's task container
runs, with that volume mounted read-only at /opt/ssebench. A task's tool
layer is a commit of its case image after `ssebench.runtime.toollayer` ran
in it, so it holds the task's users, tree and locks, and nothing of the
runtime; it is rebuilt when the tool layer's own code changes, not when the
rest of the runtime does.

Sidecar mode runs the tool image as the task container and, beside it, one
image per agent that holds nothing of any task:

    os  ->  base-c  ->  runtime-c  ->  sidecar/base  ->  sidecar/agent-<name>

A case or agent layer whose Dockerfile only copies files and sets its
working folder or command is assembled (`ssebench.simplelayer`): one layer
archive and the configuration, loaded into the engine, with no build step,
each of which is a commit that walks the whole image on fuse-overlayfs. A
task Dockerfile whose last steps only copy is split: Docker builds its
head, and its tail is assembled on that.

Each layer's *digest* hashes everything that goes into it, its parent's
digest included, so a change anywhere rebuilds exactly the layers above it.
A layer whose image carries its digest (label `ssebench.hash`) is reused.
Planning needs no Docker; building does: `ssebench.build` makes a plan's
layers current, `ssebench.layers` makes one layer, `ssebench.runtimevolume`
fills the runtime's volume.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ssebench import simplelayer
from ssebench.agent import Agent
from ssebench.runtime.contract import RUNTIME_PYTHON
from ssebench.settings import PROJECT_ROOT, Settings
from ssebench.simplelayer import AGENT, CASE, Form, SimpleDockerfile, Split, simple_dockerfile, split_dockerfile
from ssebench.task import Task
from ssebench.version import __version__

LABEL_LAYER = "ssebench.layer"
LABEL_VERSION = "ssebench.version"
LABEL_HASH = "ssebench.hash"
LABEL_TASK = "ssebench.task"
LABEL_DATASET = "ssebench.dataset"

RUNTIME_SOURCES = (PROJECT_ROOT / "ssebench" / "runtime", PROJECT_ROOT / "sdk" / "sse")
# Where every container that runs the runtime has it (RUNTIME_HOME): its venv and library.
# The modules `python -m ssebench.runtime.toollayer` imports (a unit test holds this to what it does
# import): a change to one of them, or to the runtime's pinned packages, rebuilds every tool layer; a
# change anywhere else in the runtime rebuilds only the runtime image and its volume.
TOOL_LAYER_SOURCES = tuple(
    PROJECT_ROOT / "ssebench" / "runtime" / name
    for name in (
        "__init__.py",
        "toollayer.py",
        "capture.py",
        "contract.py",
        "files.py",
        "git.py",
        "process.py",
        "taskfile.py",
    )
)
# -I: isolated Python, which never imports from the working directory (an
# image's WORKDIR is usually the source tree, which the agent owns).
TOOL_ENTRYPOINT = (RUNTIME_PYTHON, "-I", "-m", "ssebench.runtime.entrypoint")
TOOL_LAYER_COMMAND = (RUNTIME_PYTHON, "-I", "-m", "ssebench.runtime.toollayer")
# The tool image's own configuration, over the case image's (part of the tool layer's digest): root runs the
# entrypoint, which starts the agent's command; no health check of the case image's runs as root in a run.
TOOL_COMMIT_CHANGES = ("USER root", f"ENTRYPOINT {json.dumps(list(TOOL_ENTRYPOINT))}", "CMD []", "HEALTHCHECK NONE")
_BASE_REF = re.compile(r"base-generic-(c|go|rust):([A-Za-z0-9_][A-Za-z0-9_.-]*)")
_IGNORED = {"__pycache__", ".pytest_cache", ".mypy_cache"}


def file_name(image: str) -> str:
    """An image name as a file name of the cache (locks, logs, Dockerfiles): `a/b:1` -> `a_b_1`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", image)


def hash_tree(path: Path, h: hashlib._Hash | None = None) -> str:
    """Digest of a file or folder: relative paths, executable bits, contents, link targets."""
    h = h or hashlib.sha256()
    path = Path(path)
    entries = [path] if path.is_file() else sorted(_walk(path))
    for entry in entries:
        rel = "." if entry == path else entry.relative_to(path).as_posix()
        if entry.is_symlink():
            h.update(f"L {rel} -> {os.readlink(entry)}\0".encode())
        elif entry.is_file():
            mode = "x" if os.access(entry, os.X_OK) else "-"
            h.update(f"F {rel} {mode} {entry.stat().st_size}\0".encode())
            with entry.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        else:
            h.update(f"D {rel}\0".encode())
    return h.hexdigest()


def file_digests(path: Path) -> dict[str, str]:
    """Each file and link of a folder, by relative path: `sha256:<hex>` (` +x` when executable) or `link:<target>`.

    The same files `hash_tree` hashes (its folders aside), one entry each, so a change can be named.
    """
    path = Path(path)
    digests: dict[str, str] = {}
    for entry in sorted(_walk(path)):
        rel = entry.relative_to(path).as_posix()
        if entry.is_symlink():
            digests[rel] = f"link:{os.readlink(entry)}"
        elif entry.is_file():
            h = hashlib.sha256()
            with entry.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            digests[rel] = f"sha256:{h.hexdigest()}" + (" +x" if os.access(entry, os.X_OK) else "")
    return dict(sorted(digests.items()))


def _walk(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _IGNORED]
        base = Path(dirpath)
        for name in dirnames + [f for f in filenames if not f.endswith(".pyc")]:
            yield base / name


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Layer:
    """One image to build: where from, with what, and the digest of its inputs."""

    kind: str
    image: str
    # None: not a Dockerfile build but a commit (the tool layer, `commit_tool_layer`).
    dockerfile: Path | None
    context: Path
    buildargs: dict[str, str]
    digest: str
    task: Task | None = None
    aliases: tuple[str, ...] = ()
    # Fills a staging context just before the build (the runtime layer).
    stage: Callable[[Path], None] | None = field(default=None, compare=False)

    @property
    def labels(self) -> dict[str, str]:
        labels = {LABEL_LAYER: self.kind, LABEL_VERSION: __version__, LABEL_HASH: self.digest}
        if self.task is not None:
            labels[LABEL_TASK] = self.task.id
            labels[LABEL_DATASET] = self.task.dataset
        return labels


def _slug(name: str) -> str:
    return name.lower()


# For a language, what fills its runtime layer's build context just before the build.
Stager = Callable[[str], Callable[[Path], None]]
# The runtime image sidecar mode's agent image starts from: Python for the runtime, git for the agents.
SIDECAR_LANGUAGE = "c"


def sidecar_names(settings: Settings, agent: str) -> dict[str, str]:
    """Image references of sidecar mode's agent image and the base below it: one per agent, for every task."""
    p, v = settings.prefix, __version__
    return {"sidecar-base": f"{p}/sidecar/base:{v}", "agent": f"{p}/sidecar/agent-{_slug(agent)}:{v}"}


def image_names(settings: Settings, task: Task, agent: str | None = None, mode: str = "sandbox") -> dict[str, str]:
    """Image references of a task's layers (Docker names are lower case).

    `tool` is what sandbox mode's agent image and sidecar mode's task container start from; `agent`, when
    an agent is given, is the image its agent runs in, in `mode`.
    """
    p, ds, tid, v = settings.prefix, _slug(task.dataset), _slug(task.id), __version__
    names = {
        "base": f"{p}/base-{task.language}:{settings.base_version}",
        "runtime": f"{p}/runtime-{task.language}:{v}",
        "case": f"{p}/case/{ds}/{tid}:latest",
        "tool": f"{p}/tool/{ds}/{tid}:{v}",
    }
    if agent is not None:
        names["agent"] = (
            sidecar_names(settings, agent)["agent"] if mode == "sidecar" else f"{p}/agent-{agent}/{ds}/{tid}:{v}"
        )
    return names


def base_aliases(settings: Settings, task: Task) -> tuple[str, ...]:
    """Upstream names of the base a task's Dockerfile asks for (`base-generic-<lang>:<ver>`)."""
    wanted = {settings.base_version}
    try:
        text = task.dockerfile.read_text(errors="replace")
    except OSError:
        text = ""
    wanted |= {ver for lang, ver in _BASE_REF.findall(text) if lang == task.language}
    return tuple(f"{settings.prefix}/base-generic-{task.language}:{ver}" for ver in sorted(wanted))


def base_layer(settings: Settings, language: str, os_id: str, aliases: tuple[str, ...] = ()) -> Layer:
    folder = settings.images_dir / "base" / language
    return Layer(
        kind="base",
        image=f"{settings.prefix}/base-{language}:{settings.base_version}",
        dockerfile=folder / "Dockerfile",
        context=folder,
        buildargs={"SSEBENCH_OS": settings.os_image},
        digest=digest("base", language, settings.os_image, os_id, hash_tree(folder)),
        aliases=aliases,
    )


def runtime_layer(settings: Settings, language: str, base: Layer, stage: Callable[[Path], None] | None) -> Layer:
    folder = settings.images_dir / "runtime"
    return Layer(
        kind="runtime",
        image=f"{settings.prefix}/runtime-{language}:{__version__}",
        dockerfile=folder / "Dockerfile",
        context=settings.cache_dir / "contexts" / f"runtime-{language}",
        buildargs={"SSEBENCH_BASE": base.image},
        digest=digest("runtime", base.digest, hash_tree(folder), *(hash_tree(p) for p in RUNTIME_SOURCES)),
        stage=stage,
    )


def sidecar_plan(settings: Settings, os_id: str, agent: Agent, stager: Stager | None = None) -> list[Layer]:
    """Sidecar mode's agent image and the layers below it, parents first: nothing of a task in any."""
    names = sidecar_names(settings, agent.name)
    base = base_layer(settings, SIDECAR_LANGUAGE, os_id)
    runtime = runtime_layer(settings, SIDECAR_LANGUAGE, base, stager(SIDECAR_LANGUAGE) if stager else None)
    folder = settings.images_dir / "agent-base"
    agent_base = Layer(
        kind="sidecar-base",
        image=names["sidecar-base"],
        dockerfile=folder / "Dockerfile",
        context=folder,
        buildargs={"SSEBENCH_RUNTIME": runtime.image},
        digest=digest("sidecar-base", runtime.digest, hash_tree(folder)),
    )
    return [base, runtime, agent_base, agent_layer(agent, names["agent"], agent_base, "sidecar-agent")]


def agent_layer(agent: Agent, image: str, parent: Layer, salt: str, task: Task | None = None) -> Layer:
    """An agent's own Dockerfile on `parent` (SSEBENCH_TOOL): a task's tool image, or sidecar mode's base.

    A Dockerfile that only copies files and sets a command is assembled without Docker's builder
    (`ssebench.simplelayer`); the way it is made is part of its digest.
    """
    dockerfile = agent.path / "Dockerfile"
    return Layer(
        kind="agent",
        image=image,
        dockerfile=dockerfile,
        context=agent.path,
        buildargs={"SSEBENCH_TOOL": parent.image},
        digest=digest(
            salt, parent.digest, hash_tree(agent.path), assembled_how("agent", dockerfile, agent.path) or "build"
        ),
        task=task,
    )


def plan(
    settings: Settings,
    task: Task,
    os_id: str,
    agent: Agent | None = None,
    stager: Stager | None = None,
    modes: tuple[str, ...] = ("sandbox",),
) -> list[Layer]:
    """The layers of a task (and agent, in each of `modes`), parents first. Needs no Docker.

    `stager` gives, for a language, what fills its runtime layer's build context.
    """
    names = image_names(settings, task, agent.name if agent else None)
    base = base_layer(settings, task.language, os_id, base_aliases(settings, task))
    runtime = runtime_layer(settings, task.language, base, stager(task.language) if stager else None)
    case = Layer(
        kind="case",
        image=names["case"],
        dockerfile=task.dockerfile,
        context=task.path,
        buildargs={"SSEBENCH_REGISTRY": settings.prefix},
        # A Dockerfile that Docker builds keeps the digest it had before some were assembled.
        digest=digest(
            "case",
            base.digest,
            settings.prefix,
            hash_tree(task.path),
            *filter(None, [assembled_how("case", task.dockerfile, task.path)]),
        ),
        task=task,
    )
    tool = Layer(
        kind="tool",
        image=names["tool"],
        dockerfile=None,  # a commit of the case image after the tool layer's code ran in it
        context=task.path,
        buildargs={"SSEBENCH_CASE": case.image, "SSEBENCH_RUNTIME": runtime.image},
        # Not the runtime's digest: a change to the runtime rebuilds the runtime alone. What the tool layer's
        # container runs and how it is committed are in it, and how the runtime's venv is made.
        digest=digest(
            "tool",
            case.digest,
            base.digest,
            json.dumps(TOOL_LAYER_COMMAND),
            json.dumps(TOOL_COMMIT_CHANGES),
            hash_tree(settings.images_dir / "runtime"),
            *(hash_tree(p) for p in TOOL_LAYER_SOURCES),
        ),
        task=task,
    )
    layers = [base, runtime, case, tool]
    if agent is not None and "sidecar" in modes:
        have = {layer.image for layer in layers}
        layers += [layer for layer in sidecar_plan(settings, os_id, agent, stager) if layer.image not in have]
    if agent is not None and "sandbox" in modes:
        layers.append(agent_layer(agent, names["agent"], tool, "agent", task))
    return layers


def lock_path(settings: Settings, image: str) -> Path:
    """The file lock that keeps this machine's builders (and fillers of a volume named `image`) from making
    one thing twice."""
    locks = settings.cache_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return locks / (file_name(image) + ".lock")


def log_path(settings: Settings, image: str) -> Path:
    """Where the output of making `image` goes."""
    logs = settings.cache_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / (file_name(image) + ".log")


# The Dockerfile forms a layer of each kind may take to be assembled without Docker's builder.
SIMPLE_FORMS: dict[str, Form] = {"agent": AGENT, "case": CASE}


def simple_form(layer_kind: str, dockerfile: Path, context: Path) -> SimpleDockerfile | None:
    form = SIMPLE_FORMS.get(layer_kind)
    return simple_dockerfile(dockerfile, context, form) if form is not None else None


def split_form(layer_kind: str, dockerfile: Path, context: Path) -> Split | None:
    """A task's Dockerfile that Docker builds up to a tail that is assembled (`simplelayer.split_dockerfile`);
    asked only of one that is not assembled whole (`simple_form`)."""
    return split_dockerfile(dockerfile, context, CASE) if layer_kind == "case" else None


def assembled_how(layer_kind: str, dockerfile: Path, context: Path) -> str | None:
    """For the digest of a layer that is assembled, whole or its tail (`ssebench.simplelayer`): this version
    of the code that does it, so that a change to it makes such layers again; None for one Docker builds."""
    if simple_form(layer_kind, dockerfile, context) is not None:
        return f"assembled {simplelayer.VERSION} {_assembler_code()}"
    if split_form(layer_kind, dockerfile, context) is not None:
        return f"tail assembled {simplelayer.VERSION} {_assembler_code()}"
    return None


# The code that assembles layers (`ssebench.layers.Assembled`, `HeadThenTail`): part of the digest of each.
ASSEMBLER_SOURCES = (
    PROJECT_ROOT / "ssebench" / "simplelayer.py",
    PROJECT_ROOT / "ssebench" / "layers" / "_assembled.py",
)


@lru_cache(maxsize=1)
def _assembler_code() -> str:
    return digest(*(hash_tree(path) for path in ASSEMBLER_SOURCES), inspect.getsource(split_form))
