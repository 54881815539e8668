"""Docker's own build of a Dockerfile."""

from __future__ import annotations

from pathlib import Path

from ssebench.engine import DockerUnavailableError, EngineError, images
from ssebench.errors import BuildCancelled
from ssebench.image import Layer, file_name
from ssebench.layers._strategy import Job, LayerFailed
from ssebench.settings import Settings


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


class DockerfileBuild:
    """`docker build` of the layer's Dockerfile. A set `cancel` stops it at its next line of output: reading
    stops and the build's connection is dropped, so the engine abandons it without tagging anything."""

    def make(self, job: Job) -> None:
        layer, out = job.layer, job.out
        dockerfile = labelled_dockerfile(job.settings, layer)
        failure: str | None = None
        stream = images().build(layer.context, dockerfile, layer.image, layer.buildargs, nocache=job.nocache)
        try:
            for chunk in stream:
                if job.cancel is not None and job.cancel.is_set():
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
        except DockerUnavailableError:
            raise  # no engine: nothing to build on, for this layer or any other
        except EngineError as exc:
            raise job.fail(str(exc)) from exc
        finally:
            stream.close()  # drops the build's connection
        if failure is not None:
            raise LayerFailed(failure)  # the log has it already
