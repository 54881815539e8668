"""Fixtures shared by the container tests (integration and integrity): real images of the demo dataset."""

from __future__ import annotations

from collections.abc import Iterator

# Loaded once, before any in-process pytester run: pytester drops the modules a
# run imported when it ends, and a docker imported half inside one run (its
# `requests` kept, `requests.exceptions` dropped) broke the next run's import.
import docker  # noqa: F401

# The same for httpcore: httpx fills its map of httpcore's errors on first use, so a first use inside a
# pytester run kept the classes of an httpcore the run's end dropped, and later connection errors escaped as
# httpcore's own (sse.ai's OpenCodeAgent saw them after test_agent_software's in-process run).
import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.dataset import load_tasks
from ssebench.settings import Settings, get_settings
from ssebench.task import Task
from tests.helpers import DEMO


@pytest.fixture(scope="session")
def settings() -> Settings:
    return get_settings()


@pytest.fixture(scope="session")
def demo_tasks() -> list[Task]:
    return load_tasks(DEMO)


@pytest.fixture(scope="session")
def demo_images(settings: Settings, demo_tasks: list[Task]) -> Iterator[list[Task]]:
    """Every layer of the demo tasks with the dummy agent, built or reused."""
    outcome = build_images(settings, demo_tasks, load_agent(settings.agents_dir, "dummy"))
    assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    yield demo_tasks
