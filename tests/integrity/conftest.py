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
def launcher(
    request: pytest.FixtureRequest,
    settings: Settings,
    integrity_images: list[Task],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Launcher]:
    """Starts held runs in one mode (each test that uses it runs in both)."""
    with launching(settings, integrity_images, tmp_path_factory.mktemp("integrity"), request.param) as launch:
        yield launch


@pytest.fixture(params=MODES)
def fresh_launcher(
    request: pytest.FixtureRequest, settings: Settings, integrity_images: list[Task], tmp_path: Path
) -> Iterator[Launcher]:
    with launching(settings, integrity_images, tmp_path, request.param) as launch:
        yield launch


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """A mode, for tests that start runs through ssebench.run.execute themselves."""
    return str(request.param)


# CI's subset (`make test`): sandbox mode in full; sidecar mode at the default level 2 (the absence of the task
# from the agent container at every level), the fork bomb among its resource attacks. The rest of sidecar mode
# is marked `exhaustive` and runs with `pytest tests -m integrity` (the whole suite, both modes: about 30
# minutes here): levels 0 and 4, the memory hog and the 10 GB disk fill (each container's cgroup is tested
# by the fork bomb), and hung checks (the evaluator's time limit is the same code in both modes).
EVERY_LEVEL_IN_CI = {"test_the_agent_container_holds_nothing_of_the_task"}
SIDECAR_NOT_IN_CI = {"test_checks_that_never_finish_are_the_patchs_failure"}
ATTACKS_IN_CI = {"fork-bomb"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here not in item.path.parents:  # the hook sees the whole session's items: only this suite's
            continue
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        sidecar = "sidecar" in (params.get("launcher"), params.get("fresh_launcher"), params.get("mode"))
        name = getattr(item, "originalname", item.name)
        if not sidecar or name in EVERY_LEVEL_IN_CI:
            continue
        level = params.get("level", params.get("run", 2))  # test_bypass.py's held run is parametrized by level
        if level != 2 or name in SIDECAR_NOT_IN_CI or params.get("attack", "fork-bomb") not in ATTACKS_IN_CI:
            item.add_marker(pytest.mark.exhaustive)
