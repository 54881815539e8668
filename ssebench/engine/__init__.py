"""The container engine: the one package that imports docker, testcontainers or requests.

Everything else asks it through narrow seams and gets `EngineError`s, never
an engine library's errors:

- `images()`: the engine's images (`Images`);
- `containers()`: one-off containers the harness runs itself (`Containers`);
- `cleanup()`: finding and removing what the harness made, by label (`Cleanup`);
- `DockerBackend`: where a run's containers run (`ssebench.backend.Backend`);
- `engine_errors`: the one boundary, which maps the library's errors through
  one table (`_errors.table`) onto the hierarchy under `EngineError`.

`client()` is the raw docker-py client, for this package and for tests that
look behind the seams. Importing the package loads none of the libraries.
"""

from ssebench.engine._backend import DockerBackend
from ssebench.engine._docker import cleanup, client, containers, images, info, split_ref, version
from ssebench.engine._errors import (
    ConflictError,
    DockerUnavailableError,
    EngineError,
    EngineRefusedError,
    EngineTimeoutError,
    NotFoundError,
    engine_errors,
)
from ssebench.engine._protocols import Cleanup, Containers, Images

__all__ = [
    "Cleanup",
    "ConflictError",
    "Containers",
    "DockerBackend",
    "DockerUnavailableError",
    "EngineError",
    "EngineRefusedError",
    "EngineTimeoutError",
    "Images",
    "NotFoundError",
    "cleanup",
    "client",
    "containers",
    "engine_errors",
    "images",
    "info",
    "split_ref",
    "version",
]
