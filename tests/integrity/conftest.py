"""Fixtures of the integrity suite: the demo's images and launchers of attacked runs (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import Launcher, launching


@pytest.fixture(scope="session")
def integrity_images(settings: Settings, demo_tasks: list[Task]) -> list[Task]:
    """The demo's images for the agents the suite uses."""
    for agent in ("dummy", "reference"):
        outcome = build_images(settings, demo_tasks, load_agent(settings.agents_dir, agent))
        assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    return demo_tasks


@pytest.fixture(scope="module")
def launcher(settings: Settings, integrity_images: list[Task],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    with launching(settings, integrity_images, tmp_path_factory.mktemp("integrity")) as launch:
        yield launch


@pytest.fixture
def fresh_launcher(settings: Settings, integrity_images: list[Task], tmp_path: Path) -> Iterator[Launcher]:
    with launching(settings, integrity_images, tmp_path) as launch:
        yield launch
