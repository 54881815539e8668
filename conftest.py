"""Repository-level pytest setup: the Docker probe for tests/.

Tests that need Docker carry the `docker` marker. Where no engine answers
they are skipped with a loud reason, counted in the header; on a machine
with Docker they always run.
"""

from __future__ import annotations

import functools

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


def pytest_report_header(config: pytest.Config) -> str:
    problem = docker_status()
    if problem is None:
        return "docker: engine reachable; docker-marked tests will run"
    return f"docker: NOT REACHABLE ({problem}); EVERY docker-marked test WILL BE SKIPPED"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs_docker = [item for item in items if item.get_closest_marker("docker")]
    if not needs_docker:
        return
    problem = docker_status()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"DOCKER UNAVAILABLE, container test not run: {problem}")
    for item in needs_docker:
        item.add_marker(skip)
