"""Building one layer: which strategy makes it, and what each way of failing becomes. No Docker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ssebench.dataset import load_tasks
from ssebench.engine import DockerUnavailableError, EngineRefusedError
from ssebench.errors import ImageBuildError
from ssebench.image import Layer, log_path
from ssebench.layers import Assembled, DockerfileBuild, HeadThenTail, Job, LeftToDocker, ToolCommit, _build
from ssebench.settings import PROJECT_ROOT, Settings
from ssebench.task import Task


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(cache_dir=tmp_path / "cache")


def _layer(tmp_path: Path, dockerfile: str | None, kind: str = "case") -> Layer:
    context = tmp_path / "context"
    context.mkdir(exist_ok=True)
    (context / "run.sh").write_text("true\n")
    path = None
    if dockerfile is not None:
        path = context / "Dockerfile"
        path.write_text(dockerfile)
    return Layer(
        kind=kind, image="ssebench/case/x/y:latest", dockerfile=path, context=context, buildargs={}, digest="d1"
    )


def test_the_strategy_follows_the_dockerfile_s_form(tmp_path: Path) -> None:
    demo = next(t for t in load_tasks(PROJECT_ROOT / "datasets" / "demo") if t.id == "c-demo")
    pilot = load_tasks(PROJECT_ROOT / "datasets" / "pilot")[0]

    def of(task: Task) -> Layer:
        return replace(_layer(tmp_path, None), dockerfile=task.dockerfile, context=task.path)

    assert type(_build.strategy_for(_layer(tmp_path, None, "tool"))) is ToolCommit  # no Dockerfile: a commit
    assert type(_build.strategy_for(of(demo))) is Assembled  # only copies
    assert type(_build.strategy_for(of(pilot))) is HeadThenTail  # ends in copies
    assert type(_build.strategy_for(_layer(tmp_path, "FROM debian\nRUN make\n"))) is DockerfileBuild


class Raising:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def make(self, job: Job) -> None:
        raise self.exc


@pytest.fixture
def tagged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What Docker's build was asked to make; each tags its image with the layer's digest."""
    made: list[str] = []

    class Built:
        def make(self, job: Job) -> None:
            made.append(job.layer.image)

    class Labels:
        def labels(self, ref: str) -> dict[str, str] | None:
            return {"ssebench.hash": "d1"} if made else None

    monkeypatch.setattr(_build, "DockerfileBuild", Built)
    monkeypatch.setattr(_build, "images", Labels)
    return made


def test_a_layer_left_to_docker_is_built_by_docker_and_the_log_says_why(
    settings: Settings, tmp_path: Path, tagged: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = _layer(tmp_path, "FROM x\n")
    monkeypatch.setattr(_build, "strategy_for", lambda layer: Raising(LeftToDocker("the parent has a link at /opt")))
    _build.build_layer(settings, layer)
    assert tagged == [layer.image]
    assert "# built by Docker: the parent has a link at /opt" in log_path(settings, layer.image).read_text()


def test_a_refusal_is_the_layer_s_failure_and_a_lost_engine_is_not(
    settings: Settings, tmp_path: Path, tagged: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    layer = _layer(tmp_path, "FROM x\n")

    class Refused:
        def make(self, job: Job) -> None:
            raise job.fail(str(EngineRefusedError("Docker refused committing: no space left")))

    monkeypatch.setattr(_build, "strategy_for", lambda layer: Refused())
    with pytest.raises(ImageBuildError, match="no space left") as failed:
        _build.build_layer(settings, layer)
    assert failed.value.log_path == log_path(settings, layer.image)
    monkeypatch.setattr(_build, "strategy_for", lambda layer: Raising(DockerUnavailableError("cannot reach")))
    with pytest.raises(DockerUnavailableError):  # not an ImageBuildError: no engine, no build of anything
        _build.build_layer(settings, layer)
    assert tagged == []


def test_a_build_that_ends_untagged_is_a_failure(
    settings: Settings, tmp_path: Path, tagged: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Nothing:
        def make(self, job: Job) -> None:
            pass

    monkeypatch.setattr(_build, "strategy_for", lambda layer: Nothing())
    with pytest.raises(ImageBuildError, match="without tagging the image"):
        _build.build_layer(settings, _layer(tmp_path, "FROM x\n"))
