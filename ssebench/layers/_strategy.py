"""What every way of making a layer shares: the job, the protocol, and how a strategy says it failed."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, TextIO

from ssebench.errors import SSEBenchError
from ssebench.image import Layer
from ssebench.settings import Settings
from ssebench.simplelayer import LeftToDocker

__all__ = ["Job", "LayerFailed", "LayerStrategy", "LeftToDocker"]


class LayerFailed(SSEBenchError):
    """Making one layer failed for a reason its log shows (a build step, the tool layer's code, the engine's
    answer); `ssebench.layers.build_layer` turns it into an ImageBuildError with the log's tail."""


@dataclass(frozen=True)
class Job:
    """One layer to make, and where its output goes."""

    settings: Settings
    layer: Layer
    out: TextIO  # the layer's log
    nocache: bool = False
    # Set when the caller gives up: the strategy stops within a second, leaving nothing tagged.
    cancel: threading.Event | None = None

    def fail(self, why: str) -> LayerFailed:
        """`why` written to the log, as the exception to raise."""
        self.out.write(f"ERROR: {why}\n")
        return LayerFailed(why)


class LayerStrategy(Protocol):
    """A way of making a layer's image, tagged `layer.image` and labelled with `layer.labels`."""

    def make(self, job: Job) -> None:
        """Make the layer's image, writing what happens to `job.out`.

        Raises LayerFailed when it cannot be made (a step failed, or the engine
        refused or timed out), LeftToDocker when Docker's build must make it
        instead, BuildCancelled when `job.cancel` was set, and
        DockerUnavailableError when no engine answers: that is no failure of
        the layer, and stops every build.
        """
