"""Fixtures of the integrity suite: the demo's images and launchers of attacked runs (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import MODES, Launcher, launching


@pytest.fixture(scope="session")
def integrity_images(settings: Settings, demo_tasks: list[Task]) -> list[Task]:
    """The demo's images for the agents the suite uses, in both modes."""
    for agent in ("dummy", "reference"):
        outcome = build_images(settings, demo_tasks, load_agent(settings.agents_dir, agent), modes=tuple(MODES))
        assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    return demo_tasks


@pytest.fixture(scope="module", params=MODES)
def launcher(request: pytest.FixtureRequest, settings: Settings, integrity_images: list[Task],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """Starts held runs in one mode (each test that uses it runs in both)."""
    with launching(settings, integrity_images, tmp_path_factory.mktemp("integrity"), request.param) as launch:
        yield launch


@pytest.fixture(params=MODES)
def fresh_launcher(request: pytest.FixtureRequest, settings: Settings, integrity_images: list[Task],
                   tmp_path: Path) -> Iterator[Launcher]:
    with launching(settings, integrity_images, tmp_path, request.param) as launch:
        yield launch


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """A mode, for tests that start runs through ssebench.run.execute themselves."""
    return str(request.param)


# CI's subset (`make test`): sandbox mode in full; sidecar mode at every level for test_bypass.py, at the
# default level 2 for the other attacks, and every resource attack but the 10 GB disk fill (3 to 5 minutes,
# the same patch limit as in sandbox mode). The rest of sidecar mode is marked `exhaustive` and runs with
# `pytest tests -m integrity` (the whole suite, both modes: about 30 minutes here).
EVERY_LEVEL_IN_CI = {"test_bypass.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        sidecar = "sidecar" in (params.get("launcher"), params.get("fresh_launcher"), params.get("mode"))
        if not sidecar or item.path.name in EVERY_LEVEL_IN_CI:
            continue
        if params.get("level", 2) != 2 or params.get("attack") == "disk-fill":
            item.add_marker(pytest.mark.exhaustive)
