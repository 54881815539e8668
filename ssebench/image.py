"""The images of a run, as a plan of layers, and building the plan.

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
Planning needs no Docker; building does.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from filelock import FileLock

from ssebench import simplelayer
from ssebench.agent import Agent
from ssebench.engine import (
    client,
    docker_errors,
    image_attrs,
    image_id,
    image_labels,
    list_volumes,
    remove_container,
    remove_volume,
    split_ref,
    tag_image,
)
from ssebench.errors import BuildCancelled, ImageBuildError, SSEBenchError
from ssebench.logs import file_tail
from ssebench.registry import fetch, publish
from ssebench.runtime.contract import RUNTIME_HOME, RUNTIME_PYTHON
from ssebench.settings import PROJECT_ROOT, Settings
from ssebench.simplelayer import AGENT, CASE, Form, SimpleDockerfile, Split, simple_dockerfile, split_dockerfile
from ssebench.task import Task
from ssebench.version import __version__

LABEL_LAYER = "ssebench.layer"
LABEL_VERSION = "ssebench.version"
LABEL_HASH = "ssebench.hash"
LABEL_TASK = "ssebench.task"
LABEL_DATASET = "ssebench.dataset"
# Every runtime volume's name starts so (`make clean-images` removes them with the images).
RUNTIME_VOLUME_PREFIX = "ssebench-runtime-"

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
TOOL_LAYER_TIMEOUT = 1800
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


def _push_once(settings: Settings, layer: Layer, report: BuildReport) -> None:
    if settings.image_registry and layer.image not in report.pushed:
        publish(settings, layer.image)
        report.pushed.append(layer.image)


def is_current(layer: Layer) -> bool:
    labels = image_labels(layer.image)
    return labels is not None and labels.get(LABEL_HASH) == layer.digest


def _lock_path(settings: Settings, image: str) -> Path:
    locks = settings.cache_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return locks / (file_name(image) + ".lock")


def log_path(settings: Settings, image: str) -> Path:
    logs = settings.cache_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / (file_name(image) + ".log")


def labelled_dockerfile(settings: Settings, layer: Layer) -> Path:
    """The layer's Dockerfile with one LABEL instruction appended.

    The legacy builder turns every label given through the API into a step of
    its own (a container and a commit each, seconds apiece on some storage
    drivers); one appended instruction labels the image in a single step. It
    lives outside the build context, so the task folder is never written to.
    """
    assert layer.dockerfile is not None
    pairs = " ".join(f'{key}="{value}"' for key, value in sorted(layer.labels.items()))
    text = layer.dockerfile.read_text(encoding="utf-8")
    folder = settings.cache_dir / "dockerfiles"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / (file_name(layer.image) + ".Dockerfile")
    out.write_text(f"{text.rstrip()}\nLABEL {pairs}\n", encoding="utf-8")
    return out


def build_layer(
    settings: Settings, layer: Layer, *, nocache: bool = False, cancel: threading.Event | None = None
) -> None:
    """Build one layer, its output to a log file; raise ImageBuildError on failure.

    A set `cancel` event stops the build at its next line of output (a
    Dockerfile build: reading stops and the connection is dropped, so the
    engine abandons the build without tagging anything) or within a second
    (the tool layer's commit: its container is removed untagged).
    """
    log = log_path(settings, layer.image)
    if layer.stage is not None:
        if layer.context.exists():
            shutil.rmtree(layer.context)
        layer.context.mkdir(parents=True)
        layer.stage(layer.context)
    with log.open("w", encoding="utf-8") as out:
        out.write(f"# {layer.kind} layer {layer.image}\n# digest {layer.digest}\n# build args {layer.buildargs}\n")
        simple = simple_form(layer.kind, layer.dockerfile, layer.context) if layer.dockerfile else None
        if layer.dockerfile is None:
            failure = _commit_tool_layer(settings, layer, out, cancel)
        else:
            split = split_form(layer.kind, layer.dockerfile, layer.context) if simple is None else None
            try:
                if simple is not None:
                    failure = _assemble_layer(layer, simple, out)
                elif split is not None:
                    failure = _build_head_and_assemble_tail(settings, layer, split, out, nocache, cancel)
                else:
                    failure = _build_dockerfile(settings, layer, out, nocache, cancel)
            except _LeftToDocker as why:
                out.write(f"# built by Docker: {why}\n")
                failure = _build_dockerfile(settings, layer, out, nocache, cancel)
    task_id = layer.task.id if layer.task else None
    if failure is not None:
        raise ImageBuildError(layer.image, layer.kind, log, file_tail(log), task=task_id)
    labels = image_labels(layer.image)
    if labels is None or labels.get(LABEL_HASH) != layer.digest:
        raise ImageBuildError(
            layer.image, layer.kind, log, file_tail(log) + "\n(the build ended without tagging the image)", task=task_id
        )


def _build_dockerfile(
    settings: Settings, layer: Layer, out: TextIO, nocache: bool, cancel: threading.Event | None
) -> str | None:
    """`docker build` of the layer's Dockerfile, its output to `out`; the failure, if any."""
    dockerfile = labelled_dockerfile(settings, layer)
    failure: str | None = None
    import docker

    # A connection of its own: closing it is what tells the daemon to stop.
    with docker_errors(f"connecting to build {layer.image}"):
        api = docker.from_env(timeout=600).api
    try:
        with docker_errors(f"building {layer.image}"):
            stream = api.build(
                path=str(layer.context),
                dockerfile=str(dockerfile),
                tag=layer.image,
                buildargs=layer.buildargs,
                rm=True,
                forcerm=True,
                pull=False,
                nocache=nocache,
                decode=True,
            )
            for chunk in stream:
                if cancel is not None and cancel.is_set():
                    out.write("ERROR: cancelled\n")
                    raise BuildCancelled(f"building {layer.image} was cancelled")
                if "stream" in chunk:
                    out.write(chunk["stream"])
                elif "error" in chunk:
                    failure = str(chunk["error"])
                    out.write(f"ERROR: {failure}\n")
                elif "status" in chunk:
                    out.write(f"{chunk['status']}\n")
                out.flush()
    except BuildCancelled:
        raise
    except SSEBenchError as exc:
        failure = str(exc)
        out.write(f"ERROR: {failure}\n")
    finally:
        api.close()
    return failure


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


@lru_cache(maxsize=1)
def _assembler_code() -> str:
    return digest(
        hash_tree(Path(simplelayer.__file__)),
        *(inspect.getsource(f) for f in (_assemble_layer, _probe, _build_head_and_assemble_tail, split_form)),
    )


def head_image(image: str) -> str:
    """Where the head of a split task Dockerfile is built: the case image's repository, tag `head`."""
    repository, _ = split_ref(image)
    return f"{repository}:head"


def _build_head_and_assemble_tail(
    settings: Settings, layer: Layer, split: Split, out: TextIO, nocache: bool, cancel: threading.Event | None
) -> str | None:
    """Docker's build of the Dockerfile's head (its own cache kept), then the tail assembled on it; the
    failure, if any. The head image carries the layer's labels but `ssebench.layer=case-head`, so what
    removes a dataset's or the project's images removes it too, and the case image's labels replace all."""
    folder = settings.cache_dir / "dockerfiles"
    folder.mkdir(parents=True, exist_ok=True)
    text = folder / (file_name(layer.image) + ".head.Dockerfile")
    text.write_text(split.head, encoding="utf-8")
    head = replace(layer, kind="case-head", image=head_image(layer.image), dockerfile=text)
    out.write(f"# the head, up to {len(split.tail.instructions)} instruction(s) assembled after it\n")
    failure = _build_dockerfile(settings, head, out, nocache, cancel)
    if failure is not None:
        return failure
    # By the id of the image this build labelled, not by its tag, which another builder could move meanwhile.
    attrs = image_attrs(head.image) or {}
    if ((attrs.get("Config") or {}).get("Labels") or {}).get(LABEL_HASH) != layer.digest:
        raise _LeftToDocker(f"{head.image} is not the head this build made")
    out.write(f"# the head: {head.image} ({str(attrs['Id'])[:19]})\n")
    return _assemble_layer(layer, split.tail, out, parent=str(attrs["Id"]))


class _LeftToDocker(Exception):
    """A simple Dockerfile whose copies meet something in its parent image that only Docker's build makes
    as Docker makes it."""


def _probe(container: str) -> simplelayer.Probe:
    """What a created container of the parent image has at a path: the first entry of the engine's archive
    of it (its own owner, mode and type; a link is not followed), or None. Only that entry is read."""
    api = client().api

    def probe(path: PurePosixPath) -> tarfile.TarInfo | None:
        with docker_errors(f"reading /{path} of a parent image"):
            response = api._get(
                api._url("/containers/{0}/archive", container),
                params={"path": f"/{path}"},
                headers={"Accept-Encoding": "identity"},
                stream=True,
            )
            try:
                if response.status_code == 404:
                    return None
                api._raise_for_status(response)
                with tarfile.open(fileobj=response.raw, mode="r|*") as archive:
                    return archive.next()
            finally:
                response.close()

    return probe


def _assemble_layer(layer: Layer, simple: SimpleDockerfile, out: TextIO, parent: str | None = None) -> str | None:
    """A simple Dockerfile's layer as one archive loaded as a child of its parent image
    (`ssebench.simplelayer`); the failure, if any (written to `out` too). Raises _LeftToDocker when Docker
    must build it: the parent holds what COPY would treat otherwise, or the engine will not load an image
    whose parent's layers it is not given (as with the containerd image store)."""
    import docker.errors

    named = parent or simple.parent(layer.buildargs)
    api = client().api
    failure: str | None = None
    try:
        with docker_errors(f"assembling the {layer.kind} layer {layer.image} on {named}"):
            attrs = api.inspect_image(named)
            parent = str(attrs["Id"])  # by its id from here on: the name could move meanwhile
            if (attrs.get("Config") or {}).get("OnBuild"):
                raise _LeftToDocker(f"{named} has ONBUILD steps")
            lay = simplelayer.layout(simple)
            if isinstance(lay, str):
                raise _LeftToDocker(lay)
            container = str(
                api.create_container(
                    parent, entrypoint=[], command=["/nonexistent"], network_disabled=True, labels=layer.labels
                )["Id"]
            )
            try:
                parents = simplelayer.parent_entries(lay, _probe(container))
            finally:
                remove_container(container)
            if isinstance(parents, str):
                raise _LeftToDocker(parents)
            files = simplelayer.layer_archive(lay, parents, simple.mask)
            out.write(
                f"# assembled on {named} ({parent[:19]}): {len(lay.sources)} path(s) copied, "
                f"{len(lay.folders)} folder(s); {list(simple.instructions)}\n"
            )
            history = list(reversed(api.history(parent)))
            image = simplelayer.image_archive(layer.image, attrs, history, files, simple, layer.labels)
            try:
                for chunk in api.load_image(image):
                    if "error" in chunk:
                        raise _LeftToDocker(f"the engine did not load the assembled image: {chunk['error']}")
                    out.write(chunk.get("stream") or "")
            except docker.errors.APIError as exc:
                raise _LeftToDocker(f"the engine did not load the assembled image: {exc.explanation or exc}")
    except OSError as exc:
        failure = f"reading the files to copy: {exc}"
    except SSEBenchError as exc:
        failure = str(exc)
    if failure is not None:
        out.write(f"ERROR: {failure}\n")
    return failure


def runtime_volume_name(digest: str) -> str:
    """The volume that holds a runtime image's /opt/ssebench: one per runtime digest, named by it."""
    return f"{RUNTIME_VOLUME_PREFIX}{digest[:32]}"


def runtime_binds(volume: str) -> dict[str, dict[str, str]]:
    """docker-py's `binds`/`volumes` that mount a runtime volume where tool images run it: read-only, and
    never filled from the container's image."""
    return {volume: {"bind": RUNTIME_HOME, "mode": "ro,nocopy"}}


# Written last into a runtime volume by the container that fills it: the fill's id (its volume's label).
RUNTIME_COMPLETE = ".ssebench-runtime-complete"
LABEL_FILL = "ssebench.fill"
RUNTIME_FILL_TIMEOUT = 600
# Fills /fill from the runtime image's /opt/ssebench, refuses a runtime that is not root's alone (owner, group,
# no write for others, no set-id bit: runs mount it where root imports it), then says it is complete.
_FILL = (
    f"set -eu; cp -a {RUNTIME_HOME}/. /fill/; "
    "bad=$(find /fill ! -type l \\( ! -user 0 -o ! -group 0 -o -perm /6022 \\) -print | head -5); "
    'if [ -n "$bad" ]; then echo "not root\'s alone: $bad"; exit 1; fi; '
    f'sync; printf %s "$1" > /fill/{RUNTIME_COMPLETE}'
)


def ensure_runtime_volume(settings: Settings, runtime_image: str) -> str:
    """The name of the volume that holds `runtime_image`'s runtime, made from the image if it is missing.

    A new volume gets a fill id (label `ssebench.fill`); a container of the
    runtime image copies its runtime in, checks that all of it is root's
    alone, and writes the fill id last. A volume is used only when it is
    known complete: this machine recorded its fill id when it filled it
    (`<cache>/runtime-volumes/`), or its marker names its own fill id. Any
    other (a fill that failed or was killed, a volume the engine made empty
    because it was removed under a run) is removed and filled again. The file
    lock keeps the workers of this machine from filling one twice.
    Containers mount it read-only.
    """
    labels = image_labels(runtime_image)
    if labels is None or not labels.get(LABEL_HASH):
        raise SSEBenchError(f"there is no runtime image {runtime_image}: build it with `ssebench images build`")
    name = runtime_volume_name(labels[LABEL_HASH])
    records = settings.cache_dir / "runtime-volumes"
    with FileLock(str(_lock_path(settings, name))):
        found = next((v for v in list_volumes({"name": name}) if v.get("Name") == name), None)
        fill_id = ((found or {}).get("Labels") or {}).get(LABEL_FILL)
        if fill_id and _read(records / name) == fill_id:
            return name
        if fill_id and _marker(runtime_image, name) == fill_id:
            _record(records, name, fill_id)
            return name
        if found is not None and not remove_volume(name):
            raise SSEBenchError(
                f"the runtime volume {name} is incomplete and a container still uses it: remove "
                f"that container, then run again (or `docker volume rm -f {name}`)"
            )
        fill_id = uuid.uuid4().hex
        _fill(runtime_image, name, fill_id, labels[LABEL_HASH])
        _record(records, name, fill_id)
    return name


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _record(records: Path, name: str, fill_id: str) -> None:
    records.mkdir(parents=True, exist_ok=True)
    (records / name).write_text(fill_id + "\n", encoding="utf-8")


def _marker(runtime_image: str, volume: str) -> str | None:
    """The fill id a runtime volume's marker holds, read through a container that is created, never started."""
    import io
    import tarfile

    import docker.errors

    api = client().api
    with docker_errors(f"checking the runtime volume {volume}"):
        made = str(
            api.create_container(
                runtime_image,
                command=["true"],
                network_disabled=True,
                host_config=api.create_host_config(binds={volume: {"bind": "/check", "mode": "ro,nocopy"}}),
            )["Id"]
        )
    try:
        with docker_errors(f"reading the runtime volume {volume}'s marker"):
            stream, _ = api.get_archive(made, f"/check/{RUNTIME_COMPLETE}")
            data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = archive.extractfile(f"{RUNTIME_COMPLETE}")
            return member.read(200).decode("utf-8", errors="replace").strip() if member else None
    except SSEBenchError as exc:
        if isinstance(exc.__cause__, docker.errors.NotFound):
            return None  # no marker: the fill never ended
        raise
    except (tarfile.TarError, KeyError):
        return None
    finally:
        remove_container(made)


def _fill(runtime_image: str, volume: str, fill_id: str, digest: str) -> None:
    """Make the volume and fill it from the image; on any failure, remove it again and raise SSEBenchError."""
    api = client().api
    made: str | None = None
    filled = False
    try:
        with docker_errors(f"filling the runtime volume {volume} from {runtime_image}"):
            api.create_volume(
                volume, driver="local", labels={LABEL_LAYER: "runtime-volume", LABEL_HASH: digest, LABEL_FILL: fill_id}
            )
            made = str(
                api.create_container(
                    runtime_image,
                    entrypoint=["sh", "-c", _FILL, "fill"],
                    command=[fill_id],
                    user="root",
                    network_disabled=True,
                    labels={LABEL_LAYER: "runtime-fill"},
                    host_config=api.create_host_config(binds={volume: {"bind": "/fill", "mode": "rw,nocopy"}}),
                )["Id"]
            )
            status = _run_to_end(made, f"filling the runtime volume {volume}", RUNTIME_FILL_TIMEOUT)
            if status != 0:
                tail = api.logs(made).decode("utf-8", errors="replace").strip()[-2000:]
                raise SSEBenchError(
                    f"filling the runtime volume {volume} from {runtime_image} failed (status {status}): {tail}"
                )
        filled = True
    finally:
        if made is not None:
            remove_container(made)  # first: a volume goes once no container uses it
        if not filled:
            remove_volume(volume)


def _run_to_end(container: str, what: str, timeout: float, cancel: threading.Event | None = None) -> int:
    """Start a created container and wait for it to exit; its status.

    Raises SSEBenchError after `timeout` seconds, BuildCancelled as soon as
    `cancel` is set (the caller removes the container).
    """
    api = client().api
    api.start(container)
    deadline = time.monotonic() + timeout
    while True:
        if cancel is not None and cancel.is_set():
            raise BuildCancelled(f"{what} was cancelled")
        state = api.inspect_container(container).get("State") or {}
        if not state.get("Running"):
            return int(state.get("ExitCode", -1))
        if time.monotonic() > deadline:
            raise SSEBenchError(f"{what} did not end within {timeout:.0f} s")
        time.sleep(0.1)


def _commit_tool_layer(settings: Settings, layer: Layer, out: TextIO, cancel: threading.Event | None) -> str | None:
    """Make the tool layer: run the tool layer's code as root in a container of the case image, with the
    runtime volume mounted read-only (and no network), then commit that container; the failure, if any.

    Nothing of the runtime enters the image: the commit leaves the volume out.
    """
    case, runtime = layer.buildargs["SSEBENCH_CASE"], layer.buildargs["SSEBENCH_RUNTIME"]
    env = ((image_attrs(case) or {}).get("Config") or {}).get("Env") or []
    loader = sorted({str(v).split("=", 1)[0] for v in env if str(v).startswith("LD_")})
    if loader:  # root's processes inherit the image's environment: no variable may steer its dynamic loader
        refused = f"{case} sets {', '.join(loader)} in its environment; a task image may set no LD_ variable"
        out.write(f"ERROR: {refused}\n")
        return refused
    volume = ensure_runtime_volume(settings, runtime)
    api = client().api

    def run(container: str) -> str | None:
        out.write(f"# in container {container[:12]} of {case}, runtime volume {volume} read-only\n")
        try:
            status = _run_to_end(container, f"building {layer.image}", TOOL_LAYER_TIMEOUT, cancel)
        finally:
            out.write(api.logs(container).decode("utf-8", errors="replace"))
        return f"the tool layer's code exited with status {status}" if status != 0 else None

    return _commit_layer(
        layer,
        case,
        out,
        TOOL_COMMIT_CHANGES,
        run,
        command=list(TOOL_LAYER_COMMAND),
        entrypoint=[],
        user="root",
        host_config=api.create_host_config(binds=runtime_binds(volume)),
    )


def _commit_layer(
    layer: Layer, base: str, out: TextIO, changes: Sequence[str], prepare: Callable[[str], str | None], **create: Any
) -> str | None:
    """Make `layer` as a commit of a container of `base` (created with `create`, no network, the layer's
    labels) once `prepare(container)` returned no failure; the container is removed whatever happens.
    The failure, if any (written to `out` too)."""
    api = client().api
    container: str | None = None
    failure: str | None = None
    try:
        with docker_errors(f"making the {layer.kind} layer {layer.image} from {base}"):
            container = str(api.create_container(base, labels=layer.labels, network_disabled=True, **create)["Id"])
            failure = prepare(container)
            if failure is None:
                repository, tag = split_ref(layer.image)
                api.commit(container, repository=repository, tag=tag, changes=list(changes))
    except BuildCancelled:
        out.write("ERROR: cancelled\n")
        raise
    except SSEBenchError as exc:
        failure = str(exc)
    finally:
        if container is not None:
            remove_container(container)
    if failure is not None:
        out.write(f"ERROR: {failure}\n")
    return failure


@dataclass
class BuildReport:
    """What `ensure` did with each layer."""

    built: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    # From the registry (--registry) instead of built here, and pushed to it.
    pulled: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)


def ensure_layers(
    settings: Settings,
    layers: Iterable[Layer],
    *,
    force: bool = False,
    report: BuildReport | None = None,
    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    cancel: threading.Event | None = None,
    push: bool = False,
) -> BuildReport:
    """Reuse each layer whose image carries its digest; pull or build the others, parents first.

    With a registry (the `image_registry` setting), a layer this engine lacks
    is pulled from it when it holds the plan's digest, and what is built here
    is pushed to it; `push` pushes the reused layers too.

    A per-image file lock makes concurrent builders (threads of one call,
    xdist workers, several pytest processes) wait for each other instead of
    building twice. A shared `report` carries what was already built across
    calls and threads, so a `force` rebuilds each image once.
    """
    report = report if report is not None else BuildReport()
    for layer in layers:
        if (
            layer.image in report.built
            or (layer.image in report.reused and not force)
            or (layer.image in report.pulled)
        ):
            if push:
                _push_once(settings, layer, report)
            continue
        if not force and is_current(layer):
            report.reused.append(layer.image)
        else:
            with FileLock(str(_lock_path(settings, layer.image))):
                if layer.image in report.built:
                    pass  # another thread of this call built it while this one waited
                elif not force and is_current(layer):
                    report.reused.append(layer.image)
                elif not force and fetch(settings, layer.image, lambda labels: labels.get(LABEL_HASH) == layer.digest):
                    say(f"pulled   {layer.kind:7} {layer.image} from {settings.image_registry}")
                    report.pulled.append(layer.image)
                else:
                    started = time.monotonic()
                    say(f"building {layer.kind:7} {layer.image} (log: {log_path(settings, layer.image)})")
                    build_layer(settings, layer, nocache=force, cancel=cancel)
                    say(f"built    {layer.kind:7} {layer.image} in {time.monotonic() - started:.0f}s")
                    report.built.append(layer.image)
        for alias in layer.aliases:
            if image_id(alias) != image_id(layer.image):
                tag_image(layer.image, alias)
        if push:
            _push_once(settings, layer, report)
        elif settings.image_registry and layer.image in report.built:
            # A machine's own build is shared if it can be; a refused push does not fail its run.
            try:
                _push_once(settings, layer, report)
            except SSEBenchError as exc:
                say(f"ssebench: {exc}")
    return report
