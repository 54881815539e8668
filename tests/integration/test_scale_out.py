"""Scale-out over a real Ray cluster: two worker nodes on this machine, every listener on loopback.

The cluster (tests/raycluster.py) and the pytest sessions that dispatch to
it run in a network namespace holding only loopback, so nothing of Ray can
listen on another of this machine's addresses; both nodes share this
machine's Docker engine through its socket. The registry runs on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from ssebench import dispatch
from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.dispatch import NodeModels, bring_home, run_on_node
from ssebench.engine import cleanup, client, images
from ssebench.image import image_names
from ssebench.inflight import runs_in_flight
from ssebench.reaper import Session
from ssebench.runspec import RunConfig
from ssebench.settings import Settings
from ssebench.task import Task
from tests.helpers import DEMO
from tests.raycluster import delete_netns, in_loopback_netns
from tests.registry import running_registry

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.ray]
ROOT = Path(__file__).resolve().parents[2]
SLOW = """\
ARG SSEBENCH_TOOL
FROM ${SSEBENCH_TOOL}
CMD ["sleep", "45"]
"""


@dataclass
class RayCluster:
    address: str
    nodes: list[dict[str, Any]]
    inside: list[str]  # the command prefix that runs a program in the cluster's network namespace
    process: subprocess.Popen[str]

    def ask(self, command: str) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(command + "\n")
        stdin.flush()
        return json.loads(stdout.readline())  # type: ignore[no-any-return]

    def node_of(self, pid: int) -> int:
        """The index of the worker node whose raylet started process `pid`."""
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return next(i for i, node in enumerate(self.nodes) if node["raylet"] == parent)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    name = f"ssebench-ray-{os.getpid()}"
    delete_netns(name)
    inside = in_loopback_netns(name)
    process = subprocess.Popen(
        [*inside, sys.executable, "-m", "tests.raycluster", "2"],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        started = json.loads(process.stdout.readline())
        yield RayCluster(started["address"], started["nodes"], inside, process)
    finally:
        if process.poll() is None:
            assert process.stdin is not None
            process.stdin.write("quit\n")
            process.stdin.flush()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
        delete_netns(name)


@pytest.fixture(scope="module")
def c_demo(settings: Settings, demo_tasks: list[Task]) -> Task:
    """c-demo's images with the dummy agent (the tests that need one task only)."""
    task = next(t for t in demo_tasks if t.id == "c-demo")
    outcome = build_images(settings, [task], load_agent(settings.agents_dir, "dummy"))
    assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    return task


@pytest.fixture
def demo(pytester: pytest.Pytester, c_demo: Task) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _summaries(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/*/*/*/summary.json")) if not p.parent.is_symlink()]


def _session_left(session: str) -> list[dict[str, Any]]:
    return cleanup().containers({"label": f"ssebench.session={session}"})


def test_the_demo_over_two_ray_nodes_grades_as_a_local_session(
    demo: pytest.Pytester, ray_cluster: RayCluster, demo_images: list[Task]
) -> None:
    result = demo.run(
        *ray_cluster.inside,
        sys.executable,
        "-m",
        "pytest",
        "datasets/demo",
        "--agent",
        "reference",
        "--agent",
        "dummy",
        "--dispatch",
        "ray",
        "--ray-address",
        ray_cluster.address,
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
        timeout=1500,
    )
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(
        [
            f"*dispatch ray ({ray_cluster.address})*",
            "*SSEBench scores*",
            "*dummy*none*2*3*0*3*0*",
            "*reference*none*2*3*3*0*0*",
        ]
    )
    summaries = _summaries(demo.path / "out")
    assert len(summaries) == 6
    grades = {(s["task"]["id"], s["config"]["agent"]): s["grade"] for s in summaries}
    assert grades == {
        (task, agent): ("passed" if agent == "reference" else "failed")
        for task in ("c-demo", "go-demo", "rust-demo")
        for agent in ("reference", "dummy")
    }
    # Every run came home whole: its result and logs, from one of the two worker nodes.
    nodes = {s["node"].split("/")[1] for s in summaries}
    assert nodes == {n["id"][:8] for n in ray_cluster.nodes}, nodes
    for s in summaries:
        run_dir = demo.path / "out" / s["task"]["id"] / "none" / s["config"]["agent"] / s["run_id"]
        assert {"result.json", "container.log", "final.patch", "archive"} <= {p.name for p in run_dir.iterdir()}
        assert s["files"]["home"]["dropped_count"] == 0 and s["files"]["home"]["files"] >= 5
    # Dummy's failures name the proof of concept, as in a local session.
    result.stdout.fnmatch_lines(
        [f"*{task}/sse/config.yaml::dummy[[]none-d2-sandbox[]]*" for task in ("c-demo", "go-demo", "rust-demo")],
        consecutive=False,
    )
    # Each names its own task's PoC (the line may show twice: in the failure and, on a wide terminal, the summary).
    for poc in ("long_value.tlv", "missing_value_length.kv", "offset_overflow.pak"):
        result.stdout.fnmatch_lines([f"*A proof of concept still reproduces: /ssebench/pocs/{poc}*"])
    assert not _session_left(summaries[0]["session"])
    # `ssebench run` dispatches the same way.
    cli = demo.run(
        *ray_cluster.inside,
        sys.executable,
        "-m",
        "ssebench.cli",
        "run",
        "--task",
        "datasets/demo/c-demo",
        "--agent",
        "reference",
        "--dispatch",
        "ray",
        "--ray-address",
        ray_cluster.address,
        "--results",
        "cli",
        timeout=600,
    )
    assert cli.ret == 0, cli.stdout.str() + cli.stderr.str()
    cli.stdout.fnmatch_lines(["grade: passed", "run directory: */cli/c-demo/none/reference/* (ran on */*)"])
    # Nothing of the cluster listens beyond loopback.
    listening = ray_cluster.ask("listeners")["listeners"]
    assert listening and all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for a in listening), listening


def test_a_node_pulls_from_the_registry_the_images_it_lacks(
    demo: pytest.Pytester, ray_cluster: RayCluster, settings: Settings, c_demo: Task, tmp_path: Path
) -> None:
    names = image_names(settings, c_demo, "dummy", "sandbox")
    wanted = [names["tool"], names["agent"]]
    before = {name: images().id(name) for name in wanted}
    with running_registry(tmp_path / "registry") as registry:
        pushed = subprocess.run(
            [
                sys.executable,
                "-m",
                "ssebench.cli",
                "images",
                "build",
                "datasets/demo/c-demo",
                "--agent",
                "dummy",
                "--registry",
                registry.address,
            ],
            cwd=demo.path,
            capture_output=True,
            text=True,
        )
        assert pushed.returncode == 0, pushed.stderr
        assert "pushed" in pushed.stdout and f"to {registry.address}" in pushed.stdout
        # The machine no longer holds the task's images: as a node that never built them.
        for name in wanted:
            for ref in (name, f"{registry.address}/{name}"):
                client().api.remove_image(ref, noprune=True)
            assert images().id(name) is None
        result = demo.run(
            *ray_cluster.inside,
            sys.executable,
            "-m",
            "pytest",
            "datasets/demo/c-demo",
            "--agent",
            "dummy",
            "--dispatch",
            "ray",
            "--ray-address",
            ray_cluster.address,
            "--registry",
            registry.address,
            "--results",
            "out",
            "-p",
            "no:cacheprovider",
            timeout=900,
        )
        served = registry.log()
    result.assert_outcomes(failed=1)
    (summary,) = _summaries(demo.path / "out")
    assert summary["grade"] == "failed" and summary["node"]
    assert sorted(summary["images"]["pulled"]) == sorted(wanted) and summary["images"]["built"] == []
    # The same images came back, from the registry.
    assert {name: images().id(name) for name in wanted} == before
    for name in wanted:
        repository, _, tag = name.rpartition(":")
        # (HEAD when the engine still holds the layers: it asks the registry which manifest the name is.)
        assert re.search(rf'"(GET|HEAD) /v2/{re.escape(repository)}/manifests/{re.escape(tag)} ', served), (
            f"{name} was not pulled from the registry"
        )


def test_a_node_serves_a_runs_model_from_a_gateway_of_its_own(settings: Settings, c_demo: Task, tmp_path: Path) -> None:
    """What a Ray task runs on its node, called here: the run reaches its model through a gateway the node
    started (its listener on the run network's host address, which only that node has), and comes home
    with the model's use accounted. (The cluster tests run in a loopback-only namespace, which has no run
    network addresses; Ray's transport of the same outcome is tested there.)"""
    agent = load_agent(settings.agents_dir, "chat-agent")
    config = RunConfig(task=c_demo, agent=agent, model="scripted-fix", limits=settings.default_limits())
    outcome = run_on_node(config, settings, Session.new().id, NodeModels(settings.models_dir))
    assert dispatch._node_gateway is not None
    record = bring_home(config, outcome, tmp_path / "out")
    assert record.grade == "passed", record.infra_error
    assert record.usage and record.usage["calls"] >= 2 and record.usage["prompt_tokens"] > 0
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert summary["usage"]["calls"] == record.usage["calls"] and summary["node"]
    # The provider side stayed on the node: no key in the run's environment, only its run key.
    assert "SSE_API_KEY" not in json.dumps(summary)
    dispatch._node_gateway.stop()
    dispatch._node_gateway = None


def test_a_node_lost_in_the_agent_phase_is_retried_on_the_other(
    demo: pytest.Pytester, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = demo.path / "agents"
    shutil.copytree(ROOT / "agents", agents)
    (agents / "slow").mkdir()
    (agents / "slow" / "agent.yaml").write_text("name: slow\nneeds_model: false\n")
    (agents / "slow" / "Dockerfile").write_text(SLOW)
    monkeypatch.setenv("SSEBENCH_AGENTS_DIR", str(agents))
    log: IO[str] = (demo.path / "pytest.log").open("w")
    process = subprocess.Popen(
        [
            *ray_cluster.inside,
            sys.executable,
            "-m",
            "pytest",
            "datasets/demo/c-demo",
            "--agent",
            "slow",
            "--dispatch",
            "ray",
            "--ray-address",
            ray_cluster.address,
            "--infra-retries",
            "1",
            "--results",
            "out",
            "-p",
            "no:cacheprovider",
            "-rA",
        ],
        cwd=demo.path,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not (running := [r for r in runs_in_flight() if r.agent == "slow" and r.phase == "agent"]):
            assert process.poll() is None and time.monotonic() < deadline, (demo.path / "pytest.log").read_text()
            time.sleep(0.5)
        (container,) = cleanup().containers({"label": f"ssebench.run={running[0].run}"})
        lost = ray_cluster.node_of(int(container["Labels"]["ssebench.controller"]))
        ray_cluster.ask(f"remove {lost}")
        process.wait(900)
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    output = (demo.path / "pytest.log").read_text()
    assert process.returncode == 1, output
    assert "1 failed" in output and "error" not in output.splitlines()[-1], output
    assert "attempt 1 of 2 hit an infrastructure error, retrying" in output
    assert "Ray node or worker was lost" in output
    summaries = sorted(_summaries(demo.path / "out"), key=lambda s: s["started_at"])
    assert [s["grade"] for s in summaries] == ["error", "failed"], summaries
    assert "lost" in summaries[0]["error"]
    # The retry ran on the node that is left.
    assert summaries[1]["node"].split("/")[1] == ray_cluster.nodes[1 - lost]["id"][:8]
    assert not _session_left(summaries[1]["session"])
    assert not [r for r in runs_in_flight() if r.session == summaries[1]["session"]]
