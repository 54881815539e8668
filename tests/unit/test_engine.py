"""The engine's boundary: one package imports the engine's libraries, and one table maps their errors.

No Docker: the library's exceptions are made here, and the client under
the seams is a stand-in that raises them.
"""

from __future__ import annotations

import ast
import io
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests
import requests.exceptions

import ssebench.engine
import ssebench.layers
from ssebench.engine import (
    ConflictError,
    DockerUnavailableError,
    EngineError,
    EngineRefusedError,
    EngineTimeoutError,
    NotFoundError,
    _docker,
    _errors,
    engine_errors,
)
from ssebench.errors import BuildCancelled, SSEBenchError
from ssebench.runtime.contract import CONTROLLER_LABEL, HOST_LABEL, OWNER_LABEL, PHASE_FILE, Phase, phase_record
from ssebench.settings import PROJECT_ROOT

# The engine's libraries, and the one package that may import them.
ENGINE_LIBRARIES = ("docker", "testcontainers", "requests")
ENGINE_PACKAGE = PROJECT_ROOT / "ssebench" / "engine"
HOST_PACKAGES = (PROJECT_ROOT / "ssebench", PROJECT_ROOT / "pytest_ssebench", PROJECT_ROOT / "sdk" / "sse")


def engine_imports(roots: tuple[Path, ...], allowed: Path) -> list[str]:
    """`file:line module` for every import of an engine library in a module under `roots` but not under
    `allowed`: at the top, inside a function or under TYPE_CHECKING alike."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path.is_relative_to(allowed):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in ENGINE_LIBRARIES:
                        found.append(f"{path.relative_to(root.parent)}:{node.lineno} {name}")
    return found


def test_no_module_outside_the_engine_imports_docker_testcontainers_or_requests() -> None:
    assert engine_imports(HOST_PACKAGES, ENGINE_PACKAGE) == []
    # The control: the scan sees the engine's own imports when it is not excused.
    inside = engine_imports((ENGINE_PACKAGE,), PROJECT_ROOT / "nowhere")
    assert {line.split()[-1].split(".")[0] for line in inside} == set(ENGINE_LIBRARIES)


def test_the_scan_catches_an_import_planted_anywhere_in_a_module(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "engine").mkdir(parents=True)
    (package / "clean.py").write_text("import os\nfrom dockerfile_parse import x\nimport requestsfoo\n")
    (package / "engine" / "ok.py").write_text("import docker\n")  # the allowed package
    (package / "planted.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import testcontainers.core.container\n"
        "def f():\n    from requests.exceptions import ReadTimeout\n    import docker.errors as e\n"
    )
    assert engine_imports((package,), package / "engine") == [
        "pkg/planted.py:3 testcontainers.core.container",
        "pkg/planted.py:5 requests.exceptions",
        "pkg/planted.py:6 docker.errors",
    ]


def test_the_engine_s_exports_are_pinned() -> None:
    assert ssebench.engine.__all__ == sorted(ssebench.engine.__all__)
    assert ssebench.engine.__all__ == [
        "Cleanup",
        "ConflictError",
        "Containers",
        "DockerBackend",
        "DockerUnavailableError",
        "EngineError",
        "EngineRefusedError",
        "EngineTimeoutError",
        "Images",
        "NotFoundError",
        "cleanup",
        "client",
        "containers",
        "engine_errors",
        "images",
        "info",
        "split_ref",
        "version",
    ]
    assert ssebench.layers.__all__ == sorted(ssebench.layers.__all__)
    assert ssebench.layers.__all__ == [
        "Assembled",
        "DockerfileBuild",
        "HeadThenTail",
        "Job",
        "LayerFailed",
        "LayerStrategy",
        "LeftToDocker",
        "ToolCommit",
        "build_layer",
        "head_image",
        "labelled_dockerfile",
        "strategy_for",
    ]


def _response(status: int) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    return response


# One library error for each row of the table, and the leaf it must become.
CASES: list[tuple[str, BaseException, type[EngineError]]] = [
    ("404", docker.errors.NotFound("no such volume", response=_response(404)), NotFoundError),
    ("no such image", docker.errors.ImageNotFound("no such image"), NotFoundError),
    ("409", docker.errors.APIError("in use", response=_response(409), explanation="volume in use"), ConflictError),
    ("500", docker.errors.APIError("boom", response=_response(500), explanation="driver failed"), EngineRefusedError),
    (
        "a command that failed",
        docker.errors.ContainerError("c", 3, ["false"], "img", b"it failed"),
        EngineRefusedError,
    ),
    ("connection refused", requests.exceptions.ConnectionError("refused"), DockerUnavailableError),
    ("read timeout", requests.exceptions.ReadTimeout("slow"), EngineTimeoutError),
    ("socket reset", ConnectionResetError("reset"), DockerUnavailableError),
    ("no engine configured", docker.errors.DockerException("no DOCKER_HOST"), DockerUnavailableError),
]


def _first_row(exc: BaseException) -> int:
    return next(n for n, row in enumerate(_errors.table()) if row.matches(exc))


@pytest.mark.parametrize(("case", "exc", "leaf"), CASES, ids=[c[0] for c in CASES])
def test_each_library_error_becomes_its_leaf_with_what_was_being_done(
    case: str, exc: BaseException, leaf: type[EngineError]
) -> None:
    with pytest.raises(EngineError) as caught, engine_errors("removing volume v1"):
        raise exc
    assert type(caught.value) is leaf
    assert caught.value.__cause__ is exc  # raised from the original, for the traceback
    assert caught.value.doing == "removing volume v1" and "removing volume v1" in str(caught.value)
    assert ("ssebench doctor" in str(caught.value)) == (leaf is DockerUnavailableError)  # the fix, where there is one


def test_every_row_of_the_table_is_tested() -> None:
    assert sorted({_first_row(exc) for _, exc, _ in CASES}) == list(range(len(_errors.table())))


def test_a_connect_timeout_is_an_engine_that_is_not_there() -> None:
    """Both a connection error and a timeout: the row of the first wins."""
    with pytest.raises(DockerUnavailableError), engine_errors("connecting"):
        raise requests.exceptions.ConnectTimeout("no answer")


@pytest.mark.parametrize(
    "exc",
    [ValueError("mine"), BuildCancelled("cancelled"), SSEBenchError("mine too"), NotFoundError("already mapped")],
    ids=["a plain error", "a cancelled build", "the harness's own", "an engine error"],
)
def test_errors_not_the_engine_library_s_pass_unchanged(exc: BaseException) -> None:
    with pytest.raises(type(exc)) as caught, engine_errors("building"):
        raise exc
    assert caught.value is exc


class FakeAPI:
    """docker-py's low-level client, each call raising what `raises` holds for it."""

    def __init__(self, raises: dict[str, BaseException]) -> None:
        self.raises = raises
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name in self.raises:
                raise self.raises[name]
            return {"Id": "sha256:1", "Config": {"Labels": {"a": "b"}}} if name == "inspect_image" else {}

        return call


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPI]:
    fake = FakeAPI({})

    class FakeClient:
        api = fake

    monkeypatch.setattr(_docker, "client", lambda: FakeClient())
    yield fake


GONE = docker.errors.NotFound("gone", response=_response(404))
IN_USE = docker.errors.APIError("in use", response=_response(409))
REFUSED = docker.errors.APIError("broken", response=_response(500))
UNREACHABLE = requests.exceptions.ConnectionError("refused")


@pytest.mark.parametrize(
    ("raised", "outcome"),
    [
        (None, True),
        (GONE, False),
        (IN_USE, False),
        (REFUSED, EngineRefusedError),
        (UNREACHABLE, DockerUnavailableError),
    ],
    ids=["removed", "already gone", "still in use", "refused", "unreachable"],
)
def test_removing_a_volume_tells_gone_and_in_use_from_the_engine_failing(
    api: FakeAPI, raised: BaseException | None, outcome: bool | type[EngineError]
) -> None:
    if raised is not None:
        api.raises["remove_volume"] = raised
    if isinstance(outcome, bool):
        assert _docker.DockerCleanup().remove_volume("v") is outcome
    else:
        with pytest.raises(outcome):
            _docker.DockerCleanup().remove_volume("v")


@pytest.mark.parametrize(
    ("raised", "outcome"),
    [(None, True), (GONE, False), (IN_USE, ConflictError), (UNREACHABLE, DockerUnavailableError)],
    ids=["removed", "already gone", "conflict", "unreachable"],
)
def test_removing_a_container_is_false_only_when_it_is_gone(
    api: FakeAPI, raised: BaseException | None, outcome: bool | type[EngineError]
) -> None:
    if raised is not None:
        api.raises["remove_container"] = raised
    if isinstance(outcome, bool):
        assert _docker.DockerContainers().remove("c" * 64) is outcome
    else:
        with pytest.raises(outcome):
            _docker.DockerContainers().remove("c" * 64)


def test_an_image_that_is_not_there_is_none_and_an_engine_that_is_not_there_raises(api: FakeAPI) -> None:
    images = _docker.DockerImages()
    assert images.labels("there") == {"a": "b"}  # the control
    api.raises["inspect_image"] = docker.errors.ImageNotFound("no such image")
    assert images.inspect("gone") is None and images.id("gone") is None and images.labels("gone") is None
    api.raises["inspect_image"] = UNREACHABLE
    with pytest.raises(DockerUnavailableError, match="inspecting image gone"):
        images.id("gone")


def test_a_pull_the_registry_refuses_is_none_and_a_lost_engine_raises(api: FakeAPI) -> None:
    api.raises["pull"] = REFUSED
    assert _docker.DockerImages().pull("127.0.0.1:5000/x:1") is None
    api.raises["pull"] = UNREACHABLE
    with pytest.raises(DockerUnavailableError):
        _docker.DockerImages().pull("127.0.0.1:5000/x:1")


def test_runs_in_flight_skip_a_container_that_ended_and_raise_on_any_other_engine_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ssebench import inflight

    listed = [{"Id": "a" * 64, "Created": 1, "Labels": {"ssebench.run": "r1"}, "State": "running"}]
    said: list[BaseException | str] = []

    class Listing:
        def containers(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
            return listed

    class PhaseFile:
        def archive_of_file(self, container: str, path: str, cap: int) -> bytes | None:
            answer = said[0]
            if isinstance(answer, BaseException):
                raise answer
            assert path == PHASE_FILE
            data = answer.encode()
            out = io.BytesIO()
            with tarfile.open(fileobj=out, mode="w") as tar:
                info = tarfile.TarInfo("phase")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            return out.getvalue()

    monkeypatch.setattr(ssebench.engine, "cleanup", Listing)
    monkeypatch.setattr(ssebench.engine, "containers", PhaseFile)
    said[:] = [phase_record(Phase.AGENT, 0.0).decode()]
    assert [run.phase for run in inflight.runs_in_flight()] == ["agent"]  # the control
    said[:] = [NotFoundError("gone")]
    assert inflight.runs_in_flight() == []
    # Any other answer of the engine about one container leaves the listing whole, that run's phase unknown.
    for other in (EngineRefusedError("broken"), DockerUnavailableError("down")):
        said[:] = [other]
        assert [run.phase for run in inflight.runs_in_flight()] == ["?"]


def test_importing_the_engine_loads_none_of_its_libraries() -> None:
    import subprocess

    code = (
        "import sys, ssebench.engine, ssebench.layers, ssebench.runtimevolume, ssebench.executor;"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {ENGINE_LIBRARIES!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class FakeCleanup:
    """The engine's clean-up seam over lists of what exists; a removal is False for what is already gone."""

    def __init__(self, **listed: list[dict[str, Any]]) -> None:
        self.listed = listed
        self.removed: list[str] = []
        self.gone: set[str] = set()

    def containers(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.listed.get("containers", [])

    def networks(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.listed.get("networks", [])

    def volumes(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.listed.get("volumes", [])

    def _remove(self, what: str) -> bool:
        self.removed.append(what)
        return what not in self.gone

    def remove_container(self, container: str) -> bool:
        return self._remove(container)

    def remove_network(self, name: str) -> bool:
        return self._remove(name)

    def remove_volume(self, name: str) -> bool:
        return self._remove(name)


def test_the_reaper_removes_only_what_dead_sessions_left_and_counts_what_it_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os
    import socket

    from ssebench import reaper

    here, dead = socket.gethostname(), "999999999"
    alive = {HOST_LABEL: here, CONTROLLER_LABEL: str(os.getpid()), OWNER_LABEL: str(os.getpid())}
    orphan = {**alive, CONTROLLER_LABEL: dead}
    elsewhere = {**orphan, HOST_LABEL: "another-machine"}
    fake = FakeCleanup(
        containers=[{"Id": "c-live", "Labels": alive}, {"Id": "c-dead", "Labels": orphan}],
        networks=[{"Id": "n-dead", "Name": "net", "Labels": orphan}, {"Id": "n-far", "Labels": elsewhere}],
        volumes=[{"Name": "v-dead", "Labels": orphan}, {"Name": "v-gone", "Labels": orphan}],
    )
    fake.gone.add("v-gone")  # removed meanwhile by its own run: not counted
    monkeypatch.setattr(reaper, "cleanup", lambda: fake)
    assert reaper.reap_orphans() == 3
    assert fake.removed == ["c-dead", "n-dead", "v-dead", "v-gone"]  # volumes last, networks by id
    fake.removed.clear()
    assert reaper.reap_session("any") == 5  # a session's own: all of it, live or not, here or not
