"""Hooks the SSEBench plugin calls, for other plugins and conftest.py files to implement."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ssebench.backend import Backend
    from ssebench.live import ModelLink
    from ssebench.record import RunRecord
    from ssebench.runspec import RunConfig


@pytest.hookspec(firstresult=True)
def pytest_ssebench_backend(config: pytest.Config) -> Backend | None:
    """Return the backend that runs containers (default: Docker through testcontainers).

    The first non-None result is used.
    """


@pytest.hookspec(firstresult=True)
def pytest_ssebench_model_link(config: pytest.Config, run: RunConfig) -> ModelLink | None:
    """Return how a run's agent reaches its model (default: the session's model gateway).

    The first non-None result is used. A link grants the run access when it
    starts and reports what it used when it ends; no provider key may enter
    the run's container.
    """


def pytest_ssebench_run_finished(item: pytest.Item, record: RunRecord) -> None:
    """Called after each run (each attempt, retries included), with what it produced."""
