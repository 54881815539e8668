"""Repository-level pytest setup: the Docker probe for tests/.

Tests that need Docker carry the `docker` marker. Where no engine answers
they are skipped with a loud reason, counted in the header; on a machine
with Docker they always run. Under CI (`CI=true`, which .ci/run sets) an
engine that does not answer fails each of them instead: a CI that skipped
its container tests would be green for nothing.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest


@functools.lru_cache(maxsize=1)
def docker_status() -> str | None:
    """None when the engine answers, else why not."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as exc:  # any failure means: no usable engine
        return f"{type(exc).__name__}: {exc}"
    return None


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _runs_the_suite(config: pytest.Config) -> bool:
    """Whether the session collects this project's own tests (tests/), not only benchmark runs."""
    tests = Path(__file__).parent / "tests"
    given = [config.invocation_params.dir / arg.split("::", 1)[0] for arg in config.args if not arg.startswith("-")]
    return any(
        tests == path.resolve() or tests in path.resolve().parents or path.resolve() in tests.parents for path in given
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _runs_the_suite(config):
        return None  # a benchmark run: the session checks the engine itself, and says so once
    problem = docker_status()
    if problem is None:
        return "docker: engine reachable; docker-marked tests will run"
    if under_ci():
        return f"docker: NOT REACHABLE ({problem}); under CI EVERY docker-marked test WILL FAIL"
    return f"docker: NOT REACHABLE ({problem}); EVERY docker-marked test WILL BE SKIPPED"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs_docker = [item for item in items if item.get_closest_marker("docker")]
    if not needs_docker:
        return
    problem = docker_status()
    if problem is None:
        return
    if under_ci():
        for item in needs_docker:
            item.stash[_NO_ENGINE] = problem
        return
    skip = pytest.mark.skip(reason=f"DOCKER UNAVAILABLE, container test not run: {problem}")
    for item in needs_docker:
        item.add_marker(skip)


_NO_ENGINE = pytest.StashKey[str]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    problem = item.stash.get(_NO_ENGINE, None)
    if problem is not None:
        pytest.fail(
            f"CI=true and the Docker engine does not answer ({problem}): a container test cannot be skipped under CI",
            pytrace=False,
        )
