"""The result type of the daemon's script actions, and the decorator that converts to it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class ScriptResult:
    """Result of a script execution.

    This represents a successful execution of a script (the script ran).
    Check is_success() to see if the script returned exit code 0.
    """

    code: int
    stdout: str
    stderr: str

    def is_success(self) -> bool:
        """Check if the script returned exit code 0."""
        return self.code == 0


def wrap_result(cls: type[T]) -> Callable[[Callable[..., Any]], Callable[..., T]]:
    """Decorator to wrap daemon results into dataclass instances.

    Assumes daemon.py already handles error responses by raising SDKError.
    This decorator converts successful JSON responses to the specified class.
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    def decorate(fn: Callable[..., Any]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            data = fn(*args, **kwargs)
            return cls(**{k: v for k, v in data.items() if k in names})

        return wrapper

    return decorate
