"""An agent's software volume against the real engine, and mini-swe-agent running the demo through it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ssebench.agent import load_agent
from ssebench.agentvolume import agent_binds, ensure_agent_volume
from ssebench.engine import cleanup, client, images
from ssebench.errors import SSEBenchError
from ssebench.image import image_names
from ssebench.runtimevolume import LABEL_FILL
from ssebench.settings import Settings
from ssebench.task import Task
from ssebench.wheelhouse import agent_wheelhouse
from tests.helpers import DEMO
from tests.unit.test_agent_software import write_agent

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture
def demo(pytester: pytest.Pytester, demo_images: list[Task]) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _volume(name: str) -> dict[str, object]:
    [found] = [v for v in cleanup().volumes({"name": name}) if v.get("Name") == name]
    return found


# The digest of six 1.17.0's wheel on PyPI (six-1.17.0-py2.py3-none-any.whl).
SIX = "--hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"


def test_a_wheel_that_is_not_the_one_locked_is_refused(settings: Settings, tmp_path: Path) -> None:
    """The closure's digests decide what the download takes: another wheel under the locked name fails it."""
    write_agent(tmp_path, "software: {python: [six==1.17.0]}\n", f"six==1.17.0 --hash=sha256:{'0' * 64}\n", name="x")
    agent = load_agent(tmp_path, "x")
    with pytest.raises(SSEBenchError, match=r"downloading agent x's software's wheels .* failed") as info:
        agent_wheelhouse(settings.model_copy(update={"cache_dir": tmp_path / "cache"}), agent, "3.11", "x86_64")
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in str(info.value), info.value
    # The positive control: the right digest downloads it.
    write_agent(tmp_path, "software: {python: [six==1.17.0]}\n", f"six==1.17.0 {SIX}\n", name="x")
    wheels = agent_wheelhouse(
        settings.model_copy(update={"cache_dir": tmp_path / "cache"}), load_agent(tmp_path, "x"), "3.11", "x86_64"
    )
    assert (wheels / "six-1.17.0-py2.py3-none-any.whl").is_file() and list(wheels.glob("pip-*.whl"))


def test_an_agent_volume_is_filled_once_root_s_alone_and_mounted_read_only(
    settings: Settings, demo_images: list[Task], tmp_path: Path
) -> None:
    """A small pinned agent (six, a wheel with no dependencies): its venv at /opt/agents/<name>, made once."""
    write_agent(tmp_path, "version: '1'\nsoftware: {python: [six==1.17.0]}\n", f"six==1.17.0 {SIX}\n", name="pinned")
    agent = load_agent(tmp_path, "pinned")
    runtime = image_names(settings, demo_images[0])["runtime"]
    name = ensure_agent_volume(settings, agent, runtime)
    try:
        fill_id = _volume(name)["Labels"][LABEL_FILL]  # type: ignore[index]
        # Made once: asked again (a second run, another task's runtime), the same volume, not filled again.
        other = image_names(settings, demo_images[-1])["runtime"]
        assert ensure_agent_volume(settings, agent, other) == name
        assert _volume(name)["Labels"][LABEL_FILL] == fill_id  # type: ignore[index]
        assert cleanup().containers({"volume": name}) == []  # its filler (and the marker's reader) are gone
        # Another machine's worker (no record of the fill here) reads the volume's marker instead.
        (settings.cache_dir / "runtime-volumes" / name).unlink()
        assert ensure_agent_volume(settings, agent, runtime) == name
        assert _volume(name)["Labels"][LABEL_FILL] == fill_id  # type: ignore[index]
        # Where a run mounts it: read-only, root's alone, the venv's Python working at its own path.
        script = (
            "set -e; stat -c '%U:%G %a' /opt/agents/pinned /opt/agents/pinned/bin/python3; "
            "find /opt/agents/pinned ! -type l \\( ! -user 0 -o -perm /022 \\) | wc -l; "
            "/opt/agents/pinned/bin/python -c 'import six, sys; print(six.__version__, sys.prefix)'; "
            "touch /opt/agents/pinned/x 2>&1 || true"
        )
        out = client().containers.run(
            runtime,
            ["sh", "-c", script],
            entrypoint=[],
            user="root",
            volumes=agent_binds(agent, name),
            network_disabled=True,
            remove=True,
        )
        lines = out.decode().splitlines()
        assert lines[0] == "root:root 755" and lines[1].startswith("root:root")
        assert lines[2] == "0"  # nothing in it is anyone's but root's, nor writable by others
        assert lines[3] == "1.17.0 /opt/agents/pinned"
        assert "Read-only file system" in lines[4]  # not even root in a run can change it
    finally:
        cleanup().remove_volume(name)


# Sidecar mode's is left out of CI (README, Tests): its agent's container mounts the same volume.
@pytest.mark.parametrize("mode", ["sandbox", pytest.param("sidecar", marks=pytest.mark.exhaustive)])
def test_mini_swe_agent_fixes_the_demo_in_both_modes_with_the_script_s_usage_and_one_volume(
    demo: pytest.Pytester, settings: Settings, mode: str
) -> None:
    from sse.dialog import read, validate

    result = demo.runpytest_subprocess(
        "datasets/demo",
        "--agent",
        "mini-swe-agent",
        "--model",
        "scripted-fix",
        "--mode",
        mode,
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
    agent = load_agent(settings.agents_dir, "mini-swe-agent")
    script = yaml.safe_load((MODELS / "scripted" / "fix.yaml").read_text())
    # Each run's own directory (not the `latest` link beside them).
    run_dirs = [
        p.parent
        for p in (demo.path / "out").glob("*/scripted-fix/mini-swe-agent/*/summary.json")
        if not p.parent.is_symlink()
    ]
    modes = sorted(json.loads((d / "summary.json").read_text())["config"]["mode"] for d in run_dirs)
    assert modes == [mode] * 3
    for run_dir in run_dirs:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["grade"] == "passed" and summary["config"]["agent_software"] == agent.software_digest
        dialog = read(run_dir / "archive" / "dialog.jsonl")
        assert validate(dialog) == [], run_dir
        assert dialog[-1]["status"] == "done"
        prompt = next(r["text"] for r in dialog if r["type"] == "prompt")
        [steps] = [
            c["steps"]
            for c in script["conversations"]
            if c["match"] == f"Please solve this issue: {prompt.splitlines()[0].split(' (')[0]}"
        ]
        usage = summary["usage"]
        expected = (
            sum(s["usage"]["prompt_tokens"] for s in steps),
            sum(s["usage"]["completion_tokens"] for s in steps),
        )
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == expected, run_dir
        assert usage["calls"] == len(steps)
        # Every command the model gave is in the dialog with its output.
        commands = [r["input"]["command"] for r in dialog if r["type"] == "tool_call"]
        assert commands == [s["tool_calls"][0]["arguments"]["command"] for s in steps]
    # One volume for all the runs, the agent's software in none of its images: each task adds its launcher.
    volumes = [v for v in cleanup().volumes({"name": "ssebench-agent-mini-swe-agent-"})]
    assert (
        len({v["Labels"][LABEL_FILL] for v in volumes if v["Labels"].get("ssebench.hash") == agent.software_digest})
        == 1
    )
    for task in ("c-demo", "go-demo", "rust-demo") if mode == "sandbox" else ():  # sidecar: one image per agent
        names = image_names(settings, next(t for t in _tasks() if t.id == task), "mini-swe-agent")
        added = images().inspect(names["agent"])["Size"] - images().inspect(names["tool"])["Size"]  # type: ignore[index]
        assert 0 < added <= 1 << 20, (task, added)


def _tasks() -> list[Task]:
    from ssebench.dataset import load_tasks

    return load_tasks(DEMO)


# CI leaves it out (README, Tests): chat-agent's budget and wander runs are CI's; this agent's, `make test TESTS=`.
@pytest.mark.exhaustive
def test_mini_swe_agent_wandering_fails_and_a_spent_budget_stops_it(demo: pytest.Pytester) -> None:
    from sse.dialog import read

    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "mini-swe-agent",
        "--model",
        "scripted-wander,scripted-budget",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    runs = {
        p.parent.parent.parent.name: p.parent
        for p in (demo.path / "out").glob("c-demo/*/mini-swe-agent/*/summary.json")
    }
    assert set(runs) == {"scripted-wander", "scripted-budget"}, result.stdout.str()
    wander = json.loads((runs["scripted-wander"] / "summary.json").read_text())
    assert wander["grade"] == "failed"
    assert read(runs["scripted-wander"] / "archive" / "dialog.jsonl")[-1]["status"] == "done"
    budget = read(runs["scripted-budget"] / "archive" / "dialog.jsonl")
    assert budget[-1]["status"] == "budget", budget[-1]
    usage = json.loads((runs["scripted-budget"] / "summary.json").read_text())["usage"]
    assert usage["refused"] >= 1 and usage["total_tokens"] >= 5000
