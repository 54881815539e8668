"""Conformance tests every run backend must pass (docker today)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssebench.backend import Backend, ContainerSpec, DockerBackend, Mount, RunTimeoutError
from ssebench.engine import client
from ssebench.errors import SSEBenchError
from ssebench.settings import get_settings

pytestmark = [pytest.mark.docker]

BACKENDS = [DockerBackend]


@pytest.fixture(params=BACKENDS, ids=lambda cls: cls.__name__)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param()  # type: ignore[no-any-return]


@pytest.fixture
def labels() -> Iterator[dict[str, str]]:
    session = {"ssebench.session": f"conformance-{uuid.uuid4().hex[:8]}"}
    yield session
    for c in client().containers.list(all=True, filters={"label": f"ssebench.session={session['ssebench.session']}"}):
        c.remove(force=True)
    for n in client().networks.list(filters={"label": f"ssebench.session={session['ssebench.session']}"}):
        n.remove()


def _image() -> str:
    return get_settings().os_image


def test_runs_with_env_mounts_and_labels(backend: Backend, labels: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from the host")
    spec = ContainerSpec(image=_image(), env={"GREETING": "hello"}, labels=labels,
                         mounts=[Mount(tmp_path, "/data")],
                         command=["bash", "-c", "echo $GREETING; cat /data/in.txt > /data/out.txt; exit 3"])
    handle = backend.start(spec)
    try:
        assert handle.wait(120) == 3
        assert "hello" in handle.logs()
        assert (tmp_path / "out.txt").read_text() == "from the host"
        container = client().containers.get(handle.id)
        assert container.labels["ssebench.session"] == labels["ssebench.session"]
    finally:
        handle.remove()
    handle.remove()  # removing twice is a no-op
    assert not client().containers.list(all=True, filters={"id": handle.id})


def test_read_only_mount(backend: Backend, labels: dict[str, str], tmp_path: Path) -> None:
    spec = ContainerSpec(image=_image(), labels=labels, mounts=[Mount(tmp_path, "/ro", read_only=True)],
                         command=["bash", "-c", "touch /ro/x"])
    handle = backend.start(spec)
    try:
        assert handle.wait(120) != 0
    finally:
        handle.remove()
    assert not (tmp_path / "x").exists()


def test_wait_times_out(backend: Backend, labels: dict[str, str]) -> None:
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, command=["sleep", "60"]))
    try:
        with pytest.raises(RunTimeoutError):
            handle.wait(2)
    finally:
        handle.remove()


@pytest.mark.parametrize("broken", ["image", "network"])
def test_failed_start_raises_and_leaves_nothing(backend: Backend, labels: dict[str, str], broken: str) -> None:
    image = "ssebench-test/no-such-image:none" if broken == "image" else _image()
    network = "ssebench-no-such-network" if broken == "network" else None
    with pytest.raises(SSEBenchError):
        backend.start(ContainerSpec(image=image, labels=labels, network=network, command=["true"]))
    assert client().containers.list(all=True, filters={"label": f"ssebench.session={labels['ssebench.session']}"}) == []


def test_internal_network_has_no_route_out(backend: Backend, labels: dict[str, str]) -> None:
    name = f"ssebench-conformance-{uuid.uuid4().hex[:8]}"
    assert backend.ensure_network(name, internal=True, labels=labels) == name
    assert backend.ensure_network(name, internal=True, labels=labels) == name  # idempotent
    assert len([n for n in client().networks.list(names=[name]) if n.name == name]) == 1
    probe = "exec 3<>/dev/tcp/1.1.1.1/80 && echo reached || echo unreachable"
    handle = backend.start(ContainerSpec(image=_image(), labels=labels, network=name,
                                         command=["timeout", "5", "bash", "-c", probe]))
    try:
        handle.wait(60)
        assert "reached" not in handle.logs().replace("unreachable", "")
    finally:
        handle.remove()
