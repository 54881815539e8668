"""A run's container spec and results directory, without Docker."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sse.result import SCHEMA_VERSION, GradeStatus, RunResult

from ssebench.agent import available_agents, load_agent
from ssebench.backend import Backend, ContainerSpec, Handle, LogStream, Network, RunTimeoutError, Volume
from ssebench.defaults import Mode
from ssebench.errors import SSEBenchError
from ssebench.limits import Limits
from ssebench.live import LiveRun
from ssebench.reaper import Session
from ssebench.record import RunRecord, finished_run
from ssebench.result import make_run_dir, name_of, path_component, point_latest, read_result, read_safely
from ssebench.run import execute
from ssebench.runspec import REFERENCE_IN_CONTAINER, RESTRICTED_DNS_OPTIONS, RunConfig, container_spec, sidecar_specs
from ssebench.runtime.contract import SERVING
from ssebench.settings import Settings, get_settings
from ssebench.task import load_task
from tests.helpers import DEMO


@pytest.mark.parametrize("agent_name", available_agents(get_settings().agents_dir))
def test_only_the_reference_agent_gets_the_reference_patch(agent_name: str, tmp_path: Path) -> None:
    agent = load_agent(get_settings().agents_dir, agent_name)
    task = load_task(DEMO / "c-demo")
    spec = container_spec(RunConfig(task=task, agent=agent), "img", Session.new(), "r1", "net", runtime="rt")
    reference_mounts = [m for m in spec.mounts if m.container == REFERENCE_IN_CONTAINER]
    if agent_name == "reference":
        [mount] = reference_mounts
        assert mount.read_only and mount.host == (DEMO / "c-demo" / "sse" / "diffs" / "patch.diff").resolve()
    else:
        assert reference_mounts == []
    assert spec.labels["ssebench.session"] and spec.labels["ssebench.run"] == "r1"
    assert spec.env["SSE_DIFFICULTY"] == "2" and "SSE_MODEL_NAME" not in spec.env
    # Nothing else of the host enters a run: results come out by copy.
    assert [m for m in spec.mounts if m.container != REFERENCE_IN_CONTAINER] == []
    assert spec.limits == Limits() and spec.capabilities and "NET_RAW" not in spec.capabilities
    # The runtime is a volume that every run shares: read-only, and never filled from the agent's image.
    assert spec.volumes == [Volume("rt", "/opt/ssebench", fill=False, read_only=True)]
    # No egress: a name outside the run's network fails after one short try (test_backend shows why).
    assert spec.dns_options == RESTRICTED_DNS_OPTIONS == ("timeout:1", "attempts:1", "retrans:1000", "retry:1")
    open_run = container_spec(
        RunConfig(task=task, agent=agent, egress="open"), "img", Session.new(), "r1", "net", runtime="rt"
    )
    assert open_run.dns_options == ()


@pytest.mark.parametrize("agent_name", available_agents(get_settings().agents_dir))
def test_sidecar_mode_gives_the_task_container_nothing_of_the_agent_and_the_agent_nothing_of_the_task(
    agent_name: str,
) -> None:
    agent = load_agent(get_settings().agents_dir, agent_name)
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=agent, mode="sidecar", model="m1")
    session = Session.new()
    spec = container_spec(
        config, "agent-img", session, "r1", "net", {"SSE_API_KEY": "k", "SSE_BASE_URL": "u"}, runtime="rt"
    )
    spec.env.update(SSE_CAPTURE_TIMEOUT="10", OTHER="x")  # a runtime setting (and something else) for the run
    task, agent_side, volumes = sidecar_specs(config, spec, "tool-img", "r1", session)
    assert task.env["SSE_CAPTURE_TIMEOUT"] == "10" and task.env["TIMEOUT"] == "3600" and "OTHER" not in task.env
    assert (task.image, agent_side.image) == ("tool-img", "agent-img")
    assert task.mounts == [] and task.command is None  # the reference patch, if any, is the agent's alone
    assert agent_side.mounts == spec.mounts
    assert not {"SSE_API_KEY", "SSE_BASE_URL", "SSE_MODEL_NAME"} & set(task.env)
    assert agent_side.env["SSE_API_KEY"] == "k" and agent_side.env["SSE_SOURCE"] == "/src/tlvkit"
    assert (task.env["SSE_ROLE"], agent_side.env["SSE_ROLE"]) == ("task", "agent")
    assert task.env["SSE_DAEMON_SOCKET"] == agent_side.env["SSE_DAEMON_SOCKET"] == "/run/sse-agent/sse.sock"
    # The agent reaches the MCP server where grading is, by the task container's name; it listens there.
    assert task.env["SSE_MCP_URL"] == agent_side.env["SSE_MCP_URL"] == f"http://{task.name}:3000/mcp"
    assert task.env["SSE_MCP_BIND"] == "0.0.0.0" and "SSE_MCP_BIND" not in agent_side.env
    assert task.name and len(task.name) <= 63 and task.name.replace("-", "").isalnum()  # one DNS label
    # The task container (a tool image) runs the runtime from its read-only volume; the agent's image has its
    # own runtime, so the agent container does not mount it.
    runtime, *own = task.volumes
    assert runtime == Volume("rt", "/opt/ssebench", read_only=True) and runtime not in agent_side.volumes
    shared = {v.container for v in own}
    assert [(v.name, v.container) for v in own] == [(v.name, v.container) for v in agent_side.volumes]
    assert len(volumes) == 3 == len({v.name for v in own}) and not any(v.read_only for v in agent_side.volumes)
    # only the tree is filled, and only from the task's image: nothing of the agent's image enters a volume
    assert [v.container for v in task.volumes if v.fill] == ["/src/tlvkit"] and not any(
        v.fill for v in agent_side.volumes
    )
    # Never the results, the admin socket's directory, the task's files: what grades stays in the task container.
    assert shared == {"/src/tlvkit", "/run/sse-agent", "/tmp/sse-archive"}
    assert not any(
        path.startswith(("/ssebench", "/reference", "/var/lib/ssebench", "/run/ssebench")) for path in shared
    )
    for side in (task, agent_side):  # the same network, limits and capabilities for both
        assert (side.network, side.limits, side.capabilities) == (spec.network, spec.limits, spec.capabilities)
        assert side.labels["ssebench.run"] == "r1" and side.labels["ssebench.mode"] == "sidecar"


def test_run_dirs_are_never_reused(tmp_path: Path) -> None:
    first = make_run_dir(tmp_path, "t", "none", "dummy", "run-1")
    point_latest(first)
    second = make_run_dir(tmp_path, "t", "none", "dummy", "run-2")
    point_latest(second)
    assert os.readlink(tmp_path / "t" / "none" / "dummy" / "latest") == "run-2"
    with pytest.raises(Exception, match="already exists"):
        make_run_dir(tmp_path, "t", "none", "dummy", "run-1")


HOSTILE_NAMES = [
    "../../x",
    "..",
    ".",
    "openai/gpt-4o",
    "/etc",
    "a/../../b",
    ".hidden",
    "x\x00y",
    "100%",
    "a\\b",
    "%2E%2E",
    "\u00e9l\u00e8ve",
    " spaced ",
    "latest",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_names_become_one_reversible_path_component_inside_results(name: str, tmp_path: Path) -> None:
    root = tmp_path / "results"
    root.mkdir()
    run_dir = make_run_dir(root, name, name, name, "run-1")
    # Exactly four levels below the root, each named by its own escaped component.
    assert run_dir.resolve().parent.parent.parent.parent == root.resolve()
    for part in run_dir.relative_to(root).parts[:3]:
        assert part not in (".", "..") and not part.startswith(".") and "/" not in part and "\x00" not in part
        assert name_of(part) == name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_distinct_names_never_share_a_directory() -> None:
    names = [*HOSTILE_NAMES, "%2F", "/", "openai%2Fgpt-4o"]
    assert len({path_component(n) for n in names}) == len(names)


def test_a_link_in_results_cannot_lead_a_run_outside(tmp_path: Path) -> None:
    root = tmp_path / "results"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "t").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Exception, match="is a link"):
        make_run_dir(root, "t", "none", "dummy", "run-1")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_reading_a_run_never_follows_a_link(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "t", "none", "dummy", "run-1")
    (run_dir / "archive").mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("the host's secret")
    (run_dir / "archive" / "dialog.jsonl").symlink_to(secret)
    assert read_safely(run_dir, "archive/dialog.jsonl") is None
    (run_dir / "archive" / "dialog.jsonl").unlink()
    (run_dir / "archive").rmdir()
    (run_dir / "archive").symlink_to(tmp_path)
    assert read_safely(run_dir, "archive/host-secret") is None
    os.mkfifo(run_dir / "pipe")
    assert read_safely(run_dir, "pipe") is None  # and it did not block
    assert read_safely(run_dir, "../host-secret") is None


def test_long_files_are_read_by_their_tail(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("x" * 100 + "END")
    text = read_safely(tmp_path, "log", limit=10)
    assert text is not None and text.endswith("xxxxxxxEND") and "bytes before this" in text


def test_result_must_be_a_grade(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps({"patch_result": {"status": "passed"}}))
    assert read_result(tmp_path) == RunResult(status="passed", schema_version=SCHEMA_VERSION)
    (tmp_path / "result.json").write_text(json.dumps({"patch_result": {"status": "graded by me"}}))
    read = read_result(tmp_path)
    assert read is not None and read.status == "error"  # anything but a grade is no grade
    for not_one in ("[1, 2]", '{"patch_result": "passed"}', '{"schema_version": 99, "patch_result": {}}'):
        (tmp_path / "result.json").write_text(not_one)
        assert read_result(tmp_path) is None, not_one


class _BrokenHandle(Handle):
    """A container whose engine fails at every step after starting."""

    removed = False

    @property
    def id(self) -> str:
        return "0123456789abcdef"

    def wait(self, timeout: float) -> int:
        return 0

    def logs(self, stream: LogStream = "all") -> str:
        raise SSEBenchError("Docker refused reading the log: engine hiccup")

    def export(self, path: str) -> Iterator[bytes]:
        raise SSEBenchError("Docker refused copying: engine hiccup")

    def memory_exhausted(self) -> bool:
        raise SSEBenchError("Docker refused inspecting: engine hiccup")

    def poll(self) -> int | None:
        raise SSEBenchError("Docker refused inspecting: engine hiccup")

    def stop(self, grace: float) -> None:
        raise SSEBenchError("Docker refused stopping: engine hiccup")

    def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:
        raise SSEBenchError("Docker refused running a command: engine hiccup")

    def phase_file(self) -> bytes | None:
        raise SSEBenchError("Docker refused copying: engine hiccup")

    def pause(self) -> None:
        raise SSEBenchError("Docker refused pausing: engine hiccup")

    def unpause(self) -> None:
        raise SSEBenchError("Docker refused unpausing: engine hiccup")

    def remove(self) -> None:
        raise SSEBenchError("Docker refused removing: engine hiccup")


class _Backend(Backend):
    def __init__(self, handles: list[Handle] | None = None) -> None:
        self.networks: list[str] = []
        self.volumes: list[str] = []
        self.specs: list[ContainerSpec] = []
        self.handles = handles

    def start(self, spec: ContainerSpec) -> Handle:
        self.specs.append(spec)
        return self.handles.pop(0) if self.handles else _BrokenHandle()

    def create_network(self, name: str, *, internal: bool, labels: dict[str, str]) -> Network:
        self.networks.append(name)
        return Network(name=name, gateway=None)

    def remove_network(self, name: str) -> None:
        self.networks.remove(name)

    def create_volume(self, name: str, *, labels: dict[str, str]) -> None:
        self.volumes.append(name)

    def remove_volume(self, name: str) -> None:
        self.volumes.remove(name)

    def runtime_volume(self, settings: Settings, image: str) -> str:
        return "runtime-volume"


@pytest.mark.parametrize("mode", ["sandbox", "sidecar"])
def test_engine_errors_anywhere_in_a_run_are_recorded_and_cleanup_still_happens(mode: Mode, tmp_path: Path) -> None:
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"), mode=mode)
    backend = _Backend()
    record = execute(config, get_settings(), backend, Session.new(), tmp_path, build=False)
    assert record.grade == "error" and record.infra_error is not None
    assert "engine hiccup" in record.infra_error
    # (Sidecar mode: the agent's container waits for the task container to serve, whose log the engine refused.)
    assert len(backend.specs) == 1
    # removing the containers failed; the volumes and the network went all the same
    assert backend.networks == [] and backend.volumes == []
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert summary["grade"] == "error" and "engine hiccup" in summary["error"]
    if mode == "sandbox":  # (sidecar mode's run stopped before its agent's container, with nothing to copy)
        assert "engine hiccup" in summary["files"]["results"]["error"]


@pytest.mark.parametrize("mode", ["sandbox", "sidecar"])
def test_the_container_that_grades_gets_the_tree_and_the_runners_area_as_volumes_of_the_run(
    mode: Mode, tmp_path: Path
) -> None:
    """The tree is filled from the task's image (the case's tree, kept once in it), the area never is; both
    are the run's own, created before the containers and removed with them."""
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"), mode=mode)
    backend = _Backend()
    created: list[str] = []

    def create_volume(name: str, *, labels: dict[str, str]) -> None:
        created.append(name)
        backend.volumes.append(name)

    backend.create_volume = create_volume  # type: ignore[method-assign]
    execute(config, get_settings(), backend, Session.new(), tmp_path, build=False)
    grading = backend.specs[0]  # sandbox mode's one container; sidecar mode's task container, started first
    own = {v.container: v for v in grading.volumes if v.name in created}
    assert own["/src/tlvkit"].fill and not own["/src/tlvkit"].read_only
    assert not own["/var/lib/ssebench-runner"].fill
    assert own["/src/tlvkit"].name.endswith("-src") and own["/var/lib/ssebench-runner"].name.endswith("-runner")
    assert backend.volumes == []


class _Container(_BrokenHandle):
    """A container that runs until `ends` polls, then exits with `status`; its engine works. Told anything
    (`execute`), it records it; `told_ends` then sets how many more polls it runs (a task container grading
    once told the agent's end)."""

    def __init__(self, name: str, status: int, ends: int, told_ends: int | None = None) -> None:
        self.name, self.status, self.ends, self.stopped = name, status, ends, False
        self.told: list[list[str]] = []
        self.told_ends = told_ends

    def wait(self, timeout: float) -> int:
        if self.ends > 0:
            self.ends -= 1
            raise RunTimeoutError("still running")
        return self.status

    def poll(self) -> int | None:
        return self.wait(0) if self.ends <= 0 else None

    def stop(self, grace: float) -> None:
        self.stopped = True
        self.ends = 0

    def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:
        self.told.append(argv)
        if self.told_ends is not None:
            self.ends = self.told_ends
        return 0, ""

    def logs(self, stream: LogStream = "all") -> str:
        out = f"{self.name} output\n"
        err = f"[ssebench-entrypoint 00:00:00.000] {SERVING}\n{self.name} line 1\n{self.name}: the last line\n"
        return {"all": out + err, "stdout": out, "stderr": err}[stream]

    def export(self, path: str) -> Iterator[bytes]:
        raise SSEBenchError("nothing to copy")

    def memory_exhausted(self) -> bool:
        return False

    def remove(self) -> None:
        pass


def test_a_sidecar_run_whose_task_container_dies_is_an_error_with_its_log_tail(tmp_path: Path) -> None:
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"), mode="sidecar")
    backend = _Backend([_Container("task", 137, ends=0), _Container("agent", 0, ends=1000)])
    record = execute(config, get_settings(), backend, Session.new(), tmp_path, build=False)
    assert record.grade == "error" and record.infra_error is not None
    assert record.infra_error.startswith(
        "No result: evaluator did not produce output (the task container exited (status 137) during the run"
    )
    assert "task: the last line" in record.infra_error
    # The task container grades: its log is the run's container.log; the agent's container's is its own.
    assert (record.run_dir / "container.log").read_text().endswith("task: the last line\n")
    assert (record.run_dir / "agent-container.log").read_text().endswith("agent: the last line\n")
    assert backend.networks == [] and backend.volumes == []


def test_a_sidecar_task_container_killed_for_the_memory_the_agent_took_is_the_agents_failure(tmp_path: Path) -> None:
    """The agent's bash tool and checks run in the task container: memory they fill there ends the container
    (its init among the killed), which is the agent's doing, graded failed as in sandbox mode, never an error."""
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"), mode="sidecar")

    class OutOfMemory(_Container):
        def memory_exhausted(self) -> bool:
            return True

    backend = _Backend([OutOfMemory("task", 137, ends=0), _Container("agent", 0, ends=1000)])
    record = execute(config, get_settings(), backend, Session.new(), tmp_path, build=False)
    assert record.grade == "failed" and record.infra_error is None, record.infra_error
    assert record.patch_result.error_msg is not None and record.patch_result.error_msg.startswith("Memory limit")
    assert record.limits_hit == [f"memory: the container hit its memory limit of {config.limits.memory} bytes"]


def _figures(told: list[list[str]]) -> dict[str, str]:
    [argv] = told
    assert argv[1:4] == ["-I", "-m", "ssebench.runtime.phase"], argv
    return dict(json.loads(argv[4]))


def test_a_sidecar_run_tells_the_task_container_the_agents_end_and_the_task_container_grades(tmp_path: Path) -> None:
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"), mode="sidecar")
    task_container = _Container("task", 1, ends=1000, told_ends=0)
    agent_container = _Container("agent", 1, ends=2)
    record = execute(
        config, get_settings(), _Backend([task_container, agent_container]), Session.new(), tmp_path, build=False
    )
    figures = _figures(task_container.told)
    assert figures["AGENT_EXIT_STATUS"] == "1" and figures["SSE_METRIC_AGENT_TIMEOUT"] == "false"
    assert float(figures["AGENT_DURATION"]) >= 0 and not agent_container.stopped
    assert record.exit_code == 1  # the task container's, once it graded
    # Results come from the task container only: here it has none, so the run has no result.json.
    assert record.infra_error is not None and "without a result.json" in record.infra_error
    assert "task: the last line" in record.infra_error


def test_an_agent_container_past_the_agents_limit_is_stopped_and_its_end_told_as_timed_out() -> None:
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"), mode="sidecar", timeout=0.1)
    task_container, agent_container = (
        _Container("task", 124, ends=10**9, told_ends=0),
        _Container("agent", 0, ends=10**9),
    )
    live = LiveRun(
        handle=agent_container, network=Network(name="n", gateway=None), run_id="r", task=task_container, config=config
    )
    import ssebench.live as live_module

    slack, live_module.AGENT_CONTAINER_SLACK = live_module.AGENT_CONTAINER_SLACK, 0.0
    try:
        assert live.wait(30) == 124
    finally:
        live_module.AGENT_CONTAINER_SLACK = slack
    assert agent_container.stopped
    figures = _figures(task_container.told)
    assert figures["AGENT_EXIT_STATUS"] == "124" and figures["SSE_METRIC_AGENT_TIMEOUT"] == "true"


def test_a_handle_is_removed_when_its_block_ends() -> None:
    removed: list[bool] = []

    class Handled(_BrokenHandle):
        def remove(self) -> None:
            removed.append(True)

    with Handled() as handle:
        assert handle.id
    assert removed == [True]


def _finished(config: RunConfig, root: Path, grade: GradeStatus, run_id: str) -> Path:
    """A run directory as execute leaves it, graded `grade`."""
    run_dir = make_run_dir(root, config.task.id, config.model, config.agent.name, run_id)
    record = RunRecord(
        config=config,
        run_id=run_id,
        run_dir=run_dir,
        started_at="2026-12-01T00:00:00+00:00",
        grade=grade,
        result=RunResult(status=grade),
        infra_error="the engine hiccuped" if grade == "error" else None,
    )
    assert record.result is not None
    (run_dir / "result.json").write_text(json.dumps(record.result.to_json()))
    record.write()
    return run_dir


def test_resume_finds_only_a_graded_run_of_the_same_identity(tmp_path: Path) -> None:
    task = load_task(DEMO / "c-demo")
    dummy = load_agent(get_settings().agents_dir, "dummy")
    config = RunConfig(task=task, agent=dummy, trial=2)
    assert finished_run(config, tmp_path) is None
    done = _finished(config, tmp_path, "failed", "20261201T000000-d2-sandbox-aaaaaa")
    _finished(config, tmp_path, "error", "20261201T000001-d2-sandbox-bbbbbb")  # newer, but not finished
    found = finished_run(config, tmp_path)
    assert found is not None and found.run_dir == done and found.grade == "failed" and found.resumed
    # Any other identity is not that run.
    others = [
        replace(config, trial=1),
        replace(config, difficulty=0),
        replace(config, mode="sidecar"),
        replace(config, task=replace(task, dataset_version="demo-v999")),
        replace(config, agent=load_agent(get_settings().agents_dir, "reference")),
        replace(config, egress="open"),
        replace(config, timeout=60.0),
        replace(config, limits=replace(config.limits, pids=512)),
    ]
    for other in others:
        assert finished_run(other, tmp_path) is None, other
    # A task whose files changed since is another version of it.
    changed = tmp_path / "copy" / "c-demo"
    shutil.copytree(DEMO / "c-demo", changed)
    (changed / "sse" / "build.sh").write_text((changed / "sse" / "build.sh").read_text() + "\n# changed\n")
    assert finished_run(replace(config, task=load_task(changed)), tmp_path) is None


def test_resume_ignores_a_run_whose_result_disagrees_with_its_summary(tmp_path: Path) -> None:
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"))
    run_dir = _finished(config, tmp_path, "passed", "20261201T000000-d2-sandbox-aaaaaa")
    (run_dir / "result.json").write_text(json.dumps({"patch_result": {"status": "failed"}}))
    assert finished_run(config, tmp_path) is None


def test_a_run_that_cannot_get_a_directory_is_an_error_record_not_an_exception(tmp_path: Path) -> None:
    from ssebench.session import Plan, RunSession

    root = tmp_path / "results"
    root.mkdir()
    (root / "c-demo").symlink_to(tmp_path)  # a link where the task's runs would go
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"))
    record = RunSession(get_settings(), Plan(results=root, retries=1)).run(config)
    assert record.grade == "error" and record.infra_error is not None and "is a link" in record.infra_error


def test_resume_never_reads_runs_through_a_link(tmp_path: Path) -> None:
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"))
    elsewhere = tmp_path / "elsewhere"
    _finished(config, elsewhere, "failed", "20261201T000000-d2-sandbox-aaaaaa")
    assert finished_run(config, elsewhere) is not None  # the control: it is a finished run
    root = tmp_path / "results"
    (root / "c-demo").mkdir(parents=True)
    (root / "c-demo" / "none").symlink_to(elsewhere / "c-demo" / "none")
    assert finished_run(config, root) is None


def test_a_sidecar_wait_names_the_whole_limit_and_the_run_ends_with_the_graders_status() -> None:
    network = Network(name="n", gateway=None)
    hung = LiveRun(
        handle=_Container("agent", 0, ends=10**9), network=network, run_id="r", task=_Container("task", 0, ends=10**9)
    )
    with pytest.raises(RunTimeoutError, match="still running after 3 s"):  # the whole limit, not one poll's
        hung.wait(3)
    done = LiveRun(
        handle=_Container("agent", 3, ends=0),
        network=network,
        run_id="r",
        task=_Container("task", 3, ends=10**9, told_ends=0),
    )
    assert done.wait(5) == 3

    class Deaf(_Container):
        def execute(self, argv: list[str], timeout: float) -> tuple[int, str]:
            return 1, "ssebench-phase: [Errno 6] No such device or address"

    deaf = LiveRun(handle=_Container("agent", 0, ends=0), network=network, run_id="r", task=Deaf("task", 0, ends=10**9))
    with pytest.raises(
        SSEBenchError, match=r"telling the task container the agent's end failed \(status 1\): ssebench-phase"
    ):
        deaf.wait(5)


class _OutOfMemory(_Container):
    """A sandbox container that ran out of memory: the engine says so, and it wrote `result` (or none)."""

    def __init__(self, result: dict[str, Any] | None) -> None:
        super().__init__("oom", 137, ends=0)
        self.result = result

    def memory_exhausted(self) -> bool:
        return True

    def export(self, path: str) -> Iterator[bytes]:
        import io
        import tarfile

        if path != "/var/lib/ssebench/results" or self.result is None:
            raise SSEBenchError("nothing to copy")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            data = json.dumps(self.result).encode()
            info = tarfile.TarInfo("results/result.json")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        yield buffer.getvalue()


@pytest.mark.parametrize(
    "wrote", [None, {"patch_result": {"status": "error", "error_msg": "grading raised"}}], ids=["no-grade", "an-error"]
)
def test_a_run_out_of_memory_that_could_not_be_graded_is_the_agents_failure(
    wrote: dict[str, Any] | None, tmp_path: Path
) -> None:
    """The agent's processes (or its patch's) filled the run's memory and the OOM killer ended a process of
    the harness: a failure named as the memory limit, never an error the score would leave out."""
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"))
    record = execute(config, get_settings(), _Backend([_OutOfMemory(wrote)]), Session.new(), tmp_path, build=False)
    assert record.grade == "failed" and record.infra_error is None, record.infra_error
    assert record.patch_result.error_msg is not None and record.patch_result.error_msg.startswith("Memory limit")
    written = json.loads((record.run_dir / "result.json").read_text())
    assert written["patch_result"]["status"] == "failed" and written["graded_by"] == "host: memory limit"
    if wrote is not None:
        assert "grading raised" in written["patch_result"]["error_log"]  # what the container said is kept


def test_a_graded_run_out_of_memory_keeps_its_grade(tmp_path: Path) -> None:
    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"))
    graded = {"patch_result": {"status": "failed", "error_msg": "Build failed"}}
    record = execute(config, get_settings(), _Backend([_OutOfMemory(graded)]), Session.new(), tmp_path, build=False)
    assert record.grade == "failed" and record.patch_result.error_msg == "Build failed"


def test_resume_says_why_a_run_runs_again(tmp_path: Path) -> None:
    from ssebench.record import resumable

    task = load_task(DEMO / "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"))
    assert resumable(config, tmp_path) == (None, "no earlier run")
    errored = _finished(config, tmp_path, "error", "20261201T000000-d2-sandbox-aaaaaa")
    assert resumable(config, tmp_path) == (None, f"{errored.name} ended in an error")
    failed = _finished(config, tmp_path, "failed", "20261201T000001-d2-sandbox-bbbbbb")
    found, why = resumable(config, tmp_path)
    assert found is not None and found.run_dir == failed and why == ""
    _, why = resumable(replace(config, timeout=60.0), tmp_path)
    assert why.startswith(f"{failed.name} ran under other conditions (timeout ") and "-> 60.0)" in why, why
    changed = tmp_path / "copy" / "c-demo"
    shutil.copytree(DEMO / "c-demo", changed)
    (changed / "sse" / "build.sh").write_text((changed / "sse" / "build.sh").read_text() + "\n# changed\n")
    assert resumable(replace(config, task=load_task(changed)), tmp_path) == (
        None,
        f"the task changed since {failed.name}",
    )
    # Another trial of the same run is no reason: the trial has none of its own yet.
    assert resumable(replace(config, trial=2), tmp_path) == (None, f"{errored.name} ended in an error")


class _Graded(_OutOfMemory):
    """A sandbox container that wrote `result` within its memory."""

    def memory_exhausted(self) -> bool:
        return False


class _Link:
    """The gateway stood in for: the run's access, and the usage it returns when the run ends."""

    def __init__(self, usage: dict[str, Any]) -> None:
        self.usage = usage

    def open(self, run_id: str, model: str, network: Network, ttl: float) -> dict[str, str]:
        return {"SSE_BASE_URL": "http://gateway/v1", "SSE_API_KEY": "k", "SSE_MODEL_NAME": model}

    def close(self, run_id: str) -> dict[str, Any] | None:
        return self.usage


DOWN = "the upstream of model m1 did not answer: ConnectError"
# The gateway's account of a run whose three calls all failed upstream (Usage.summary()).
CONFIRMED = "http://127.0.0.1:9/v1/models did not answer (ConnectError)"
BROKEN = {
    "run_id": "r",
    "model": "m1",
    "calls": 3,
    "answered": 0,
    "upstream_failed": 3,
    "upstream_failure": DOWN,
    "upstream_confirmed": CONFIRMED,
}


@pytest.mark.parametrize(
    "usage, wrote, grade, error",
    [
        (
            BROKEN,
            "failed",
            "error",
            f"model m1: every call failed upstream (3 calls): {DOWN}; the gateway's own call: {CONFIRMED}",
        ),
        (
            BROKEN,
            "passed",
            "error",
            f"model m1: every call failed upstream (3 calls): {DOWN}; the gateway's own call: {CONFIRMED}",
        ),
        # The calls failed, but the gateway's own call found the model working: the agent's calls, graded.
        ({**BROKEN, "upstream_confirmed": None}, "failed", "failed", None),
        ({**BROKEN, "answered": 1, "upstream_failed": 2}, "failed", "failed", None),  # one good answer: graded
        ({**BROKEN, "calls": 0, "upstream_failed": 0, "upstream_failure": None}, "failed", "failed", None),  # no call
        ({"calls": 12, "prompt_tokens": 40000, "completion_tokens": 2000, "cost": 0.12}, "failed", "failed", None),
    ],
    ids=["all-failed", "all-failed-passed", "the-agents-own-failures", "one-answer", "no-calls", "version-0-usage"],
)
def test_a_run_whose_model_never_answered_is_an_infrastructure_error(
    tmp_path: Path, usage: dict[str, Any], wrote: GradeStatus, grade: GradeStatus, error: str | None
) -> None:
    """Every call failed upstream and none was answered: the run measured its model's server, not its agent."""
    agent = load_agent(get_settings().agents_dir, "chat-agent")
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=agent, model="m1")
    result = {"patch_result": {"status": wrote, "error_msg": "PoC failed" if wrote == "failed" else None}}
    backend = _Backend([_Graded(result)])
    record = execute(config, get_settings(), backend, Session.new(), tmp_path, build=False, models=_Link(usage))
    assert (record.grade, record.infra_error) == (grade, error)
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert (summary["grade"], summary.get("error"), summary["usage"]) == (grade, error, usage)
    assert record.result is not None and record.result.status == wrote  # what the container said is kept


class _Tree:
    """A container's export of the source tree: the chunks given, or an engine error."""

    def __init__(self, chunks: list[bytes] | None) -> None:
        self.chunks = chunks
        self.closed = False

    def export(self, path: str) -> Iterator[bytes]:
        if self.chunks is None:
            raise SSEBenchError(f"copying {path} out of container c: gone")
        try:
            yield from self.chunks
        finally:
            self.closed = True


def test_the_agents_final_tree_is_kept_as_source_tar_gz_within_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip
    import io
    import tarfile

    import ssebench.run
    from ssebench.run import save_source

    made = io.BytesIO()
    with tarfile.open(fileobj=made, mode="w") as tar:
        info = tarfile.TarInfo("src/fixed.c")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"fixed"))
    tree = _Tree([made.getvalue()[:1000], made.getvalue()[1000:]])
    said = save_source(tree, "/src", tmp_path)  # type: ignore[arg-type]
    assert said["tar_bytes"] == len(made.getvalue())
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress((tmp_path / "source.tar.gz").read_bytes()))) as tar:
        member = tar.extractfile("src/fixed.c")
        assert member is not None and member.read() == b"fixed"
    # Over the cap: not kept, nothing half-written, and the engine's stream closed.
    monkeypatch.setattr(ssebench.run, "SOURCE_CAP", 1500)
    (tmp_path / "source.tar.gz").unlink()
    big = _Tree([b"x" * 1000] * 5)
    assert save_source(big, "/src", tmp_path) == {"dropped": "over 0 MiB as a tar"}  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == [] and big.closed
    assert "gone" in save_source(_Tree(None), "/src", tmp_path)["error"]  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


class _Refused:
    """An engine that refuses the copy at once (the call raises, before any chunk)."""

    def export(self, path: str) -> Iterator[bytes]:
        raise SSEBenchError("Docker refused copying: engine hiccup")


def test_an_engine_that_refuses_the_tree_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    from ssebench.run import save_source

    assert save_source(_Refused(), "/src", tmp_path) == {"error": "Docker refused copying: engine hiccup"}  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
