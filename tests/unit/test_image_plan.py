"""The image plan: names, digests and what a change rebuilds. No Docker."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from ssebench import build, image
from ssebench.agent import load_agent
from ssebench.engine import DockerUnavailableError
from ssebench.errors import BuildCancelled
from ssebench.settings import PROJECT_ROOT, Settings
from ssebench.task import Task, load_task
from tests.helpers import task_config, write_dataset, write_task

OS_ID = "sha256:" + "0" * 64


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(cache_dir=tmp_path / "cache")


def _digests(settings: Settings, dataset: Path, agent_name: str | None = "dummy") -> dict[tuple[str, str], str]:
    agent = load_agent(settings.agents_dir, agent_name) if agent_name else None
    out = {}
    for folder in sorted(p for p in dataset.iterdir() if p.is_dir()):
        for layer in image.plan(settings, load_task(folder), OS_ID, agent):
            out[(folder.name, layer.kind)] = layer.digest
    return out


def test_layers_parents_first_with_lower_case_names(settings: Settings, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, name="MixedCase", tasks=())
    write_task(dataset, "RUSTSEC-2019-0009", config=task_config("RUSTSEC-2019-0009", language="rust"))
    task = load_task(dataset / "RUSTSEC-2019-0009")
    layers = image.plan(settings, task, OS_ID, load_agent(settings.agents_dir, "dummy"))
    assert [layer.kind for layer in layers] == ["base", "runtime", "case", "tool", "agent"]
    assert [layer.image for layer in layers] == [
        "ssebench/base-rust:1.0.0",
        "ssebench/runtime-rust:0.1.0",
        "ssebench/case/mixedcase/rustsec-2019-0009:latest",
        "ssebench/tool/mixedcase/rustsec-2019-0009:0.1.0",
        "ssebench/agent-dummy/mixedcase/rustsec-2019-0009:0.1.0",
    ]
    tool, agent = layers[3], layers[4]
    assert tool.buildargs == {"SSEBENCH_CASE": layers[2].image, "SSEBENCH_RUNTIME": layers[1].image}
    assert tool.dockerfile is None  # a commit of the case image, with the runtime mounted, not a COPY of it
    assert agent.buildargs == {"SSEBENCH_TOOL": tool.image}
    assert layers[2].buildargs == {"SSEBENCH_REGISTRY": "ssebench"}
    assert tool.labels["ssebench.task"] == "RUSTSEC-2019-0009" and tool.labels["ssebench.hash"] == tool.digest


def test_sidecar_mode_plans_one_agent_image_per_agent_with_nothing_of_a_task(
    settings: Settings, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path, tasks=())
    for name, language in (("one", "c"), ("two", "go"), ("three", "rust")):
        write_task(dataset, name, config=task_config(name, language=language))
    tasks = [load_task(dataset / name) for name in ("one", "two", "three")]
    agents = [load_agent(settings.agents_dir, name) for name in ("dummy", "reference")]
    plans = {(t.id, a.name): image.plan(settings, t, OS_ID, a, modes=("sidecar",)) for t in tasks for a in agents}
    agent_layers = {
        key: [layer for layer in layers if layer.kind in ("sidecar-base", "agent")] for key, layers in plans.items()
    }
    for (_, agent_name), (base, agent) in agent_layers.items():
        assert base.image == "ssebench/sidecar/base:0.1.0" and base.task is None
        assert agent.image == f"ssebench/sidecar/agent-{agent_name}:0.1.0" and agent.task is None
        assert base.buildargs == {"SSEBENCH_RUNTIME": "ssebench/runtime-c:0.1.0"}
        assert agent.buildargs == {"SSEBENCH_TOOL": base.image}
        assert "ssebench.task" not in agent.labels
    # one image (and one digest) per agent, whatever the task and its language
    for each in agents:
        assert len({agent_layers[(t.id, each.name)][1].digest for t in tasks}) == 1
    # the task's own layers are still planned (the tool image is the task container), but no per-task agent layer
    kinds = [layer.kind for layer in plans[("two", "dummy")]]
    assert kinds == ["base", "runtime", "case", "tool", "base", "runtime", "sidecar-base", "agent"]
    both = image.plan(settings, tasks[0], OS_ID, agents[0], modes=("sandbox", "sidecar"))
    assert [layer.image for layer in both if layer.kind == "agent"] == [
        "ssebench/sidecar/agent-dummy:0.1.0",
        "ssebench/agent-dummy/tinyset/one:0.1.0",
    ]


def test_digests_are_stable(settings: Settings, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    assert _digests(settings, dataset) == _digests(settings, dataset)


def test_changing_one_run_script_changes_only_that_tasks_case_tool_agent(settings: Settings, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    before = _digests(settings, dataset)
    run = dataset / "one" / "sse" / "run.sh"
    run.write_text(run.read_text() + "# changed\n")
    after = _digests(settings, dataset)
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {("one", "case"), ("one", "tool"), ("one", "agent")}


def test_mode_change_alone_changes_the_digest(settings: Settings, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, tasks=("one",))
    before = _digests(settings, dataset)
    (dataset / "one" / "sse" / "run.sh").chmod(0o644)
    assert _digests(settings, dataset)[("one", "case")] != before[("one", "case")]


def test_a_runtime_change_rebuilds_the_runtime_alone(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime is no task's: a change to it (its daemon, its SDK) makes a new runtime image and volume,
    and no task's tool or agent layer."""
    fake_runtime, fake_sdk = tmp_path / "runtime", tmp_path / "sdk"
    for d in (fake_runtime, fake_sdk):
        d.mkdir()
        (d / "__init__.py").write_text("")
    monkeypatch.setattr(image, "RUNTIME_SOURCES", (fake_runtime, fake_sdk))
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    before = _digests(settings, dataset)
    (fake_sdk / "new.py").write_text("x = 1\n")
    (fake_runtime / "daemon.py").write_text("x = 2\n")
    after = _digests(settings, dataset)
    assert {k for k in before if before[k] != after[k]} == {("one", "runtime"), ("two", "runtime")}


def test_a_change_to_the_tool_layers_code_rebuilds_every_tool_layer(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "toollayer.py"
    fake.write_text("x = 1\n")
    monkeypatch.setattr(image, "TOOL_LAYER_SOURCES", (fake,))
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    before = _digests(settings, dataset)
    fake.write_text("x = 2\n")
    after = _digests(settings, dataset)
    assert {k for k in before if before[k] != after[k]} == {(t, k) for t in ("one", "two") for k in ("tool", "agent")}


def test_the_tool_layers_sources_are_every_module_it_imports() -> None:
    """TOOL_LAYER_SOURCES decides when tool layers rebuild: it must hold every module of the runtime that
    `python -m ssebench.runtime.toollayer` imports, as the tool layer's container imports them (the runtime's
    library alone on the path, no host package)."""
    lib = PROJECT_ROOT / "ssebench"
    # -S: no site, so no editable install of the host's own ssebench; yaml's folder is the one package added.
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]; import ssebench.runtime.toollayer; "
        "print('\\n'.join(sorted(getattr(m, '__file__', None) or '' for n, m in sys.modules.items() "
        "if n.split('.')[0] in ('ssebench', 'sse'))))"
    )
    with tempfile.TemporaryDirectory() as scratch:  # the runtime's library as its image lays it out
        shutil.copytree(lib / "runtime", Path(scratch) / "ssebench" / "runtime")
        shutil.copytree(PROJECT_ROOT / "sdk" / "sse", Path(scratch) / "sse")
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-c", code, scratch, str(Path(yaml.__file__).parents[1])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        imported = {Path(line).relative_to(scratch) for line in out.split() if line}
    declared = {p.relative_to(PROJECT_ROOT) for p in image.TOOL_LAYER_SOURCES}
    assert imported and imported <= declared, imported - declared


def test_os_image_change_rebuilds_everything(settings: Settings, tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, tasks=("one",))
    task = load_task(dataset / "one")
    a = image.plan(settings, task, OS_ID)
    b = image.plan(settings, task, "sha256:" + "1" * 64)
    assert all(x.digest != y.digest for x, y in zip(a, b, strict=True))


def test_base_aliases_cover_every_version_the_dockerfile_names(settings: Settings, tmp_path: Path) -> None:
    dockerfile = "ARG SSEBENCH_REGISTRY=ghcr.io/x\nFROM ${SSEBENCH_REGISTRY}/base-generic-c:0.9.1\n"
    folder = write_task(tmp_path, "t", config=task_config("t"), dockerfile=dockerfile)
    base = image.plan(settings, load_task(folder), OS_ID)[0]
    assert base.aliases == ("ssebench/base-generic-c:0.9.1", "ssebench/base-generic-c:1.0.0")


def test_agent_change_rebuilds_only_agent_layers(settings: Settings, tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    (agents / "mine").mkdir(parents=True)
    (agents / "mine" / "agent.yaml").write_text("name: mine\n")
    (agents / "mine" / "Dockerfile").write_text("ARG SSEBENCH_TOOL\nFROM ${SSEBENCH_TOOL}\n")
    settings = Settings(cache_dir=tmp_path / "cache", agents_dir=agents)
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    before = _digests(settings, dataset, "mine")
    (agents / "mine" / "agent.py").write_text("print('hi')\n")
    after = _digests(settings, dataset, "mine")
    assert {k for k in before if before[k] != after[k]} == {("one", "agent"), ("two", "agent")}


def test_hash_tree_ignores_bytecode_caches(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    before = image.hash_tree(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"junk")
    assert image.hash_tree(tmp_path) == before


class FakeEngine:
    """Stands in for the engine: remembers which digest each image carries."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.builds: list[str] = []
        self.lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.fail_on: str | None = None  # an image name whose build loses the engine

    # What `build` asks of the engine's images beside building: ids (a base's aliases) and tags.
    def id(self, ref: str) -> str | None:
        return self.labels.get(ref)

    def tag(self, ref: str, alias: str) -> None:
        self.labels[alias] = self.labels[ref]

    def is_current(self, layer: image.Layer) -> bool:
        return self.labels.get(layer.image) == layer.digest

    def build(
        self, settings: Settings, layer: image.Layer, *, nocache: bool = False, cancel: threading.Event | None = None
    ) -> None:
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(0.05)  # long enough for a second builder to arrive
            if layer.image == self.fail_on:
                raise DockerUnavailableError("the engine went away")
            if cancel is not None and cancel.is_set():
                raise BuildCancelled(f"building {layer.image} was cancelled")
            with self.lock:
                self.builds.append(layer.image)
                self.labels[layer.image] = layer.digest
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr(build, "is_current", fake.is_current)
    monkeypatch.setattr(build, "build_layer", fake.build)
    monkeypatch.setattr(build, "images", lambda: fake)
    return fake


def _plans(settings: Settings, dataset: Path) -> list[list[image.Layer]]:
    return [image.plan(settings, load_task(d), OS_ID) for d in sorted(p for p in dataset.iterdir() if p.is_dir())]


def test_current_layers_are_reused_and_shared_ones_built_once(
    settings: Settings, tmp_path: Path, engine: FakeEngine
) -> None:
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    report = build.BuildReport()
    for layers in _plans(settings, dataset):
        build.ensure_layers(settings, layers, report=report, say=lambda m: None)
    # base and runtime are shared by both tasks: built once; case and tool per task.
    assert sorted(engine.builds) == sorted(set(engine.builds)) and len(engine.builds) == 2 + 2 * 2
    again = build.BuildReport()
    for layers in _plans(settings, dataset):
        build.ensure_layers(settings, layers, report=again, say=lambda m: None)
    assert again.built == [] and len(engine.builds) == 6


def test_force_rebuilds_every_image_once(settings: Settings, tmp_path: Path, engine: FakeEngine) -> None:
    dataset = write_dataset(tmp_path, tasks=("one", "two"))
    for layers in _plans(settings, dataset):
        build.ensure_layers(settings, layers, say=lambda m: None)
    engine.builds.clear()
    report = build.BuildReport()
    for layers in _plans(settings, dataset):
        build.ensure_layers(settings, layers, force=True, report=report, say=lambda m: None)
    assert len(engine.builds) == 6 and len(set(engine.builds)) == 6


def test_concurrent_builders_build_each_image_once(settings: Settings, tmp_path: Path, engine: FakeEngine) -> None:
    dataset = write_dataset(tmp_path, tasks=("one",))
    [layers] = _plans(settings, dataset)
    threads = [
        threading.Thread(target=build.ensure_layers, args=(settings, layers), kwargs={"say": lambda m: None})
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(engine.builds) == sorted(layer.image for layer in layers)


def _mixed_dataset(root: Path) -> list[Task]:
    """Three tasks: two C tasks sharing base-c and runtime-c, one Go task."""
    dataset = write_dataset(root, tasks=())
    write_task(dataset, "c-one")
    write_task(dataset, "c-two")
    write_task(dataset, "go-one", config=task_config("go-one", language="go"))
    return [load_task(dataset / name) for name in ("c-one", "c-two", "go-one")]


@pytest.fixture
def no_os_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "ensure_os_image", lambda settings: OS_ID)


@pytest.mark.parametrize("force", [False, True], ids=["reuse", "force"])
def test_parallel_chains_build_each_image_once(
    settings: Settings, tmp_path: Path, engine: FakeEngine, no_os_image: None, force: bool
) -> None:
    tasks = _mixed_dataset(tmp_path)
    if force:
        build.build_images(settings, tasks, jobs=1, say=lambda m: None)
        engine.builds.clear()
    outcome = build.build_images(settings, tasks, jobs=3, force=force, say=lambda m: None)
    # base-c, runtime-c, base-go, runtime-go, then a case and a tool image per task.
    assert sorted(engine.builds) == sorted(set(engine.builds)) and len(engine.builds) == 4 + 3 * 2
    assert sorted(outcome.report.built) == sorted(engine.builds) and outcome.failures == {}
    assert engine.most_at_once >= 2


def test_one_job_builds_one_image_at_a_time(
    settings: Settings, tmp_path: Path, engine: FakeEngine, no_os_image: None
) -> None:
    build.build_images(settings, _mixed_dataset(tmp_path), jobs=1, say=lambda m: None)
    assert len(engine.builds) == 10 and engine.most_at_once == 1


def test_a_lost_engine_stops_every_chain(
    settings: Settings, tmp_path: Path, engine: FakeEngine, no_os_image: None
) -> None:
    tasks = _mixed_dataset(tmp_path)
    engine.fail_on = image.plan(settings, tasks[2], OS_ID)[0].image  # base-go
    with pytest.raises(DockerUnavailableError, match="went away"):
        build.build_images(settings, tasks, jobs=3, say=lambda m: None)
    # The C chain was cancelled with it: it never got as far as its tool images.
    assert not any(name.startswith("ssebench/tool/") for name in engine.builds), engine.builds
