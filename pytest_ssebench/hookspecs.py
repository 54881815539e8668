"""Hooks the SSEBench plugin calls, for other plugins and conftest.py files to implement."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ssebench.backend import Backend
    from ssebench.run import RunConfig, RunRecord


@pytest.hookspec(firstresult=True)
def pytest_ssebench_backend(config: pytest.Config) -> Backend | None:
    """Return the backend that runs containers (default: Docker through testcontainers).

    The first non-None result is used.
    """


@pytest.hookspec(firstresult=True)
def pytest_ssebench_model_env(config: pytest.Config, run: RunConfig) -> dict[str, str] | None:
    """Return SSE_BASE_URL / SSE_API_KEY for a run's model (default: from SSEBENCH_BASE_URL / SSEBENCH_API_KEY)."""


def pytest_ssebench_run_finished(item: pytest.Item, record: RunRecord) -> None:
    """Called after each run (each attempt, retries included), with what it produced."""
