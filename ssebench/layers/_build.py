"""Building one layer: the strategy its Dockerfile's form calls for, its log, and the check that it is tagged."""

from __future__ import annotations

import shutil
import threading

from ssebench.engine import images
from ssebench.errors import ImageBuildError
from ssebench.image import LABEL_HASH, Layer, log_path, simple_form, split_form
from ssebench.layers._assembled import Assembled, HeadThenTail
from ssebench.layers._commit import ToolCommit
from ssebench.layers._dockerfile import DockerfileBuild
from ssebench.layers._strategy import Job, LayerFailed, LayerStrategy, LeftToDocker
from ssebench.logs import file_tail
from ssebench.settings import Settings


def strategy_for(layer: Layer) -> LayerStrategy:
    """How `layer` is made: a commit (no Dockerfile: the tool layer), assembled whole (a simple Dockerfile),
    a Docker build of the head with the tail assembled (a task Dockerfile that ends in copies), or Docker's
    build."""
    if layer.dockerfile is None:
        return ToolCommit()
    if (simple := simple_form(layer.kind, layer.dockerfile, layer.context)) is not None:
        return Assembled(simple)
    if (split := split_form(layer.kind, layer.dockerfile, layer.context)) is not None:
        return HeadThenTail(split)
    return DockerfileBuild()


def build_layer(
    settings: Settings, layer: Layer, *, nocache: bool = False, cancel: threading.Event | None = None
) -> None:
    """Build one layer, its output to a log file; raise ImageBuildError on failure.

    A set `cancel` event stops the build (BuildCancelled) at its next line of
    output or within a second, leaving nothing tagged. A layer that cannot be
    assembled as planned (LeftToDocker) is built by Docker instead.
    """
    log = log_path(settings, layer.image)
    if layer.stage is not None:
        if layer.context.exists():
            shutil.rmtree(layer.context)
        layer.context.mkdir(parents=True)
        layer.stage(layer.context)
    task_id = layer.task.id if layer.task else None
    with log.open("w", encoding="utf-8") as out:
        out.write(f"# {layer.kind} layer {layer.image}\n# digest {layer.digest}\n# build args {layer.buildargs}\n")
        job = Job(settings, layer, out, nocache, cancel)
        try:
            try:
                strategy_for(layer).make(job)
            except LeftToDocker as why:
                out.write(f"# built by Docker: {why}\n")
                DockerfileBuild().make(job)
        except LayerFailed:
            failed = True
        else:
            failed = False
    if failed:
        raise ImageBuildError(layer.image, layer.kind, log, file_tail(log), task=task_id)
    labels = images().labels(layer.image)
    if labels is None or labels.get(LABEL_HASH) != layer.digest:
        raise ImageBuildError(
            layer.image, layer.kind, log, file_tail(log) + "\n(the build ended without tagging the image)", task=task_id
        )
