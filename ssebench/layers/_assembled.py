"""Layers made without Docker's builder (`ssebench.simplelayer`): a simple Dockerfile's layer assembled
whole, or a task Dockerfile whose head Docker builds and whose tail of copies is assembled on it.

This module's source is part of the digest of every layer it makes
(`ssebench.image.assembled_how`): a change to it makes them again.
"""

from __future__ import annotations

import tarfile
from dataclasses import replace
from pathlib import PurePosixPath

from ssebench import simplelayer
from ssebench.engine import DockerUnavailableError, EngineError, EngineRefusedError, containers, images, split_ref
from ssebench.image import LABEL_HASH, file_name
from ssebench.layers._dockerfile import DockerfileBuild
from ssebench.layers._strategy import Job, LeftToDocker
from ssebench.simplelayer import SimpleDockerfile, Split


def _probe(container: str) -> simplelayer.Probe:
    """What a created container of the parent image has at a path (`Containers.first_entry`)."""

    def probe(path: PurePosixPath) -> tarfile.TarInfo | None:
        return containers().first_entry(container, f"/{path}")

    return probe


class Assembled:
    """A simple Dockerfile's layer as one archive loaded as a child of its parent image (by default the one
    its FROM names). Raises LeftToDocker when Docker must build it: the parent holds what COPY would treat
    otherwise, or the engine will not load an image whose parent's layers it is not given (as with the
    containerd image store)."""

    def __init__(self, simple: SimpleDockerfile, parent: str | None = None) -> None:
        self.simple, self.parent = simple, parent

    def make(self, job: Job) -> None:
        layer, out, simple = job.layer, job.out, self.simple
        named = self.parent or simple.parent(layer.buildargs)
        try:
            attrs = images().inspect(named)
            if attrs is None:
                raise job.fail(f"there is no image {named} to assemble the {layer.kind} layer {layer.image} on")
            parent = str(attrs["Id"])  # by its id from here on: the name could move meanwhile
            if (attrs.get("Config") or {}).get("OnBuild"):
                raise LeftToDocker(f"{named} has ONBUILD steps")
            lay = simplelayer.layout(simple)
            container = containers().create(parent, entrypoint=[], command=["/nonexistent"], labels=layer.labels)
            try:
                parents = simplelayer.parent_entries(lay, _probe(container))
            finally:
                containers().remove(container)
            files = simplelayer.layer_archive(lay, parents, simple.mask)
            out.write(
                f"# assembled on {named} ({parent[:19]}): {len(lay.sources)} path(s) copied, "
                f"{len(lay.folders)} folder(s); {list(simple.instructions)}\n"
            )
            history = list(reversed(images().history(parent)))
            archive = simplelayer.image_archive(layer.image, attrs, history, files, simple, layer.labels)
            try:
                for chunk in images().load(archive):
                    if "error" in chunk:
                        raise LeftToDocker(f"the engine did not load the assembled image: {chunk['error']}")
                    out.write(chunk.get("stream") or "")
            except EngineRefusedError as exc:
                raise LeftToDocker(f"the engine did not load the assembled image: {exc}") from exc
        except OSError as exc:
            raise job.fail(f"reading the files to copy: {exc}") from exc
        except DockerUnavailableError:
            raise
        except EngineError as exc:
            raise job.fail(str(exc)) from exc


def head_image(image: str) -> str:
    """Where the head of a split task Dockerfile is built: the case image's repository, tag `head`."""
    repository, _ = split_ref(image)
    return f"{repository}:head"


class HeadThenTail:
    """Docker's build of a task Dockerfile's head (its own cache kept), then the tail assembled on it. The
    head image carries the layer's labels but `ssebench.layer=case-head`, so what removes a dataset's or the
    project's images removes it too, and the case image's labels replace all."""

    def __init__(self, split: Split) -> None:
        self.split = split

    def make(self, job: Job) -> None:
        layer, out = job.layer, job.out
        folder = job.settings.cache_dir / "dockerfiles"
        folder.mkdir(parents=True, exist_ok=True)
        text = folder / (file_name(layer.image) + ".head.Dockerfile")
        text.write_text(self.split.head, encoding="utf-8")
        head = replace(layer, kind="case-head", image=head_image(layer.image), dockerfile=text)
        out.write(f"# the head, up to {len(self.split.tail.instructions)} instruction(s) assembled after it\n")
        DockerfileBuild().make(replace(job, layer=head))
        # By the id of the image this build labelled, not by its tag, which another builder could move meanwhile.
        attrs = images().inspect(head.image) or {}
        if ((attrs.get("Config") or {}).get("Labels") or {}).get(LABEL_HASH) != layer.digest:
            raise LeftToDocker(f"{head.image} is not the head this build made")
        out.write(f"# the head: {head.image} ({str(attrs['Id'])[:19]})\n")
        Assembled(self.split.tail, parent=str(attrs["Id"])).make(job)
