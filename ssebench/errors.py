"""The exceptions of SSEBench.

Every error the harness raises on purpose is an `SSEBenchError`. Leaves carry
the context a user needs (file and field, task and layer, log path) and their
message is one line that says what went wrong and what to do. Errors from
the container engine are translated at one boundary into the leaves under
`ssebench.engine.EngineError`.
"""

from __future__ import annotations

from pathlib import Path


class SSEBenchError(Exception):
    """Base of every error SSEBench raises on purpose."""


class ConfigError(SSEBenchError):
    """A task, dataset or agent file is invalid.

    The message names the file, the field and the problem, in one line.
    """

    def __init__(self, path: Path | str, field: str, problem: str) -> None:
        self.path = Path(path)
        self.field = field
        self.problem = problem
        where = f"{path}: {field}" if field else str(path)
        super().__init__(f"{where}: {problem}")


class ConfigErrors(SSEBenchError):
    """Several problems found in one pass; each is a `ConfigError`."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


class ImageBuildError(SSEBenchError):
    """Building one layer of a task's images failed."""

    def __init__(self, image: str, layer: str, log_path: Path, tail: str, task: str | None = None) -> None:
        self.image = image
        self.layer = layer
        self.log_path = log_path
        self.tail = tail
        self.task = task
        what = f"task {task}: " if task else ""
        super().__init__(
            f"{what}building the {layer} layer ({image}) failed; full log: {log_path}\nlast lines of the log:\n{tail}"
        )


class BuildCancelled(SSEBenchError):
    """A build given up because the caller was interrupted; nothing was tagged."""


class BootstrapError(SSEBenchError):
    """The OS image could neither be pulled nor bootstrapped."""
