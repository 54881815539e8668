"""The ways a layer's image is made, behind one protocol (`LayerStrategy`), and `build_layer`, which picks one.

- `DockerfileBuild`: Docker's build of the layer's Dockerfile;
- `Assembled`: a Dockerfile that only copies files and sets its working
  folder or command, as one layer archive loaded into the engine
  (`ssebench.simplelayer`), with no build step;
- `HeadThenTail`: a task Dockerfile whose last steps only copy: Docker
  builds its head, and its tail is assembled on that;
- `ToolCommit`: the tool layer, a commit of a container of the case image.

A strategy that fails raises `LayerFailed` (its reason is in the layer's
log); one that meets what only Docker's build makes right raises
`LeftToDocker`, and Docker builds the layer instead.
"""

from ssebench.layers._assembled import Assembled, HeadThenTail, head_image
from ssebench.layers._build import build_layer, strategy_for
from ssebench.layers._commit import ToolCommit
from ssebench.layers._dockerfile import DockerfileBuild, labelled_dockerfile
from ssebench.layers._strategy import Job, LayerFailed, LayerStrategy, LeftToDocker

__all__ = [
    "Assembled",
    "DockerfileBuild",
    "HeadThenTail",
    "Job",
    "LayerFailed",
    "LayerStrategy",
    "LeftToDocker",
    "ToolCommit",
    "build_layer",
    "head_image",
    "labelled_dockerfile",
    "strategy_for",
]
