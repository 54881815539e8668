"""The host-container contract: what one side writes, the other reads back the same."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from ssebench.runtime import contract
from ssebench.runtime.contract import (
    ENV,
    AgentEnd,
    Phase,
    RunLabels,
    RuntimeSettings,
    SettingsError,
    TaskFile,
    load_settings,
    parse_phase,
    phase_record,
)
from ssebench.task import load_task
from tests.helpers import DEMO, PILOT

# Every setting away from its default, as a run could set it.
CHANGED = RuntimeSettings(
    role="task",
    source="/src/proj",
    difficulty=0,
    results="/r",
    archive="/a",
    agent_socket="/run/sse-agent/sse.sock",
    admin_socket="/run/x/admin.sock",
    http_port=8080,
    agent_timeout=90.0,
    daemon_timeout=12.5,
    script_timeout=30.0,
    bash_timeout=40.0,
    grading_timeout=50.0,
    output_cap=4096,
    keep_alive=True,
    prediction=True,
    keep_token="t0k3n",
    file_size=2 << 20,
    copy_limit=3 << 20,
    patch_limit=4 << 10,
    capture_timeout=60.0,
    archive_file_cap=5,
    archive_cap=6,
    archive_entries=7,
    mcp_bind="0.0.0.0",
    mcp_url="http://task:3000/mcp",
)


def test_every_setting_changed_on_the_host_reads_back_the_same_in_the_container() -> None:
    assert all(getattr(CHANGED, f.name) != f.default for f in dataclasses.fields(RuntimeSettings))
    env = CHANGED.to_env()
    assert set(env) == set(ENV.values())
    assert load_settings(env) == CHANGED
    assert load_settings({}) == RuntimeSettings()


def test_the_environment_carries_only_the_named_settings() -> None:
    assert RuntimeSettings(difficulty=3).to_env("difficulty", "agent_timeout") == {
        "SSE_DIFFICULTY": "3",
        "TIMEOUT": "3600",
    }
    with pytest.raises(SettingsError, match="SSE_DIFFICULTY"):
        load_settings({"SSE_DIFFICULTY": "7"})


def test_the_run_env_the_host_writes_is_what_the_container_reads() -> None:
    from ssebench.agent import load_agent
    from ssebench.limits import Limits
    from ssebench.runspec import RunConfig, run_env
    from ssebench.settings import get_settings

    agent = load_agent(get_settings().agents_dir, "dummy")
    config = RunConfig(
        task=load_task(DEMO / "c-demo"), agent=agent, difficulty=1, timeout=90.5, limits=Limits(file_size=5 << 20)
    )
    settings = load_settings(run_env(config))
    assert settings.difficulty == config.difficulty and settings.agent_timeout == int(config.timeout)
    assert settings.grading_timeout == int(config.grading_timeout) and settings.file_size == config.limits.file_size


def test_labels_read_back_and_a_missing_one_reads_as_unknown() -> None:
    labels = RunLabels(run="r", task="t", agent="a", model="m", difficulty="2", mode="sidecar", trial="3")
    assert labels.to_labels()["ssebench.mode"] == "sidecar"
    assert RunLabels.from_labels(labels.to_labels()) == labels
    assert RunLabels.from_labels({}) == RunLabels("?", "?", "?", "?", "?", "?", "1")


def test_the_agent_phase_figures_read_back() -> None:
    end = AgentEnd(124, 12.5, True)
    assert AgentEnd.from_figures(end.to_figures(), 0.0) == end
    assert set(end.to_figures()) == set(AgentEnd.FIGURES)
    assert AgentEnd.from_figures({}, 3.0) == AgentEnd(contract.TIMED_OUT, 3.0, False)
    with pytest.raises(ValueError):
        AgentEnd.from_figures({"AGENT_EXIT_STATUS": "zero"}, 0.0)


def test_grading_reads_the_figures_the_host_or_the_entrypoint_wrote_into_result_json() -> None:
    from ssebench.runtime.evaluator import runtime_result

    written = AgentEnd(137, 4.25, False).to_figures()  # as sidecar mode's host and the entrypoint write them
    result = asdict(runtime_result(AgentEnd.read(written), evaluator_timeout=True))
    assert result == {"agent_duration": 4.25, "agent_timeout": False, "evaluator_timeout": True, "agent_exit_code": 137}
    # Figures missing or not numbers say nothing of how the agent ended, and are not taken for a timeout.
    for broken in (
        {},
        {**written, "AGENT_EXIT_STATUS": "zero"},
        {k: v for k, v in written.items() if k != "AGENT_DURATION"},
    ):
        assert AgentEnd.read(broken) is None
    unknown = asdict(runtime_result(None, evaluator_timeout=False))
    assert unknown == {
        "agent_duration": None,
        "agent_timeout": False,
        "evaluator_timeout": False,
        "agent_exit_code": None,
    }


@pytest.mark.parametrize("folder", sorted([*DEMO.glob("*/sse/config.yaml"), *PILOT.glob("*/sse/config.yaml")]))
def test_host_and_runtime_count_the_same_checks_of_a_task(folder: Path) -> None:
    task = load_task(folder.parent.parent)
    runtime = TaskFile.parse(yaml.safe_load(folder.read_text()))
    assert task.checks() == runtime.checks()
    assert set(task.checks()) <= set(contract.CHECKS) and task.checks()


def test_a_task_without_a_run_script_supports_no_poc_and_without_tests_no_intent_test() -> None:
    base = {"id": "t", "project": "p", "language": "c", "source": "/src/p"}
    files = {"poc": ["pocs/x"], "future_test": "diffs/t.diff"}
    assert TaskFile.parse({**base, "scripts": {"build": "b.sh"}, "files": files}).checks() == ["build"]
    both = {"build": "b.sh", "run": "r.sh", "test": "t.sh"}
    assert TaskFile.parse({**base, "scripts": both, "files": files}).checks() == list(contract.CHECKS)


def test_a_phase_reads_back_and_nothing_else_reads_as_one() -> None:
    for phase in Phase:
        assert parse_phase(phase_record(phase, 1.5)) == phase
    for forged in (b'{"phase": "passed"}', b'{"phase": ["agent"]}', b"[]", b"agent", b"\xff", b" " * 300 + b"{}"):
        assert parse_phase(forged) is None


def test_only_a_reference_runs_containers_carry_the_reference_run_label() -> None:
    from ssebench.runtime.contract import REFERENCE_RUN_LABEL, RunLabels

    def labels(agent: str) -> dict[str, str]:
        return RunLabels(
            run="r", task="t", agent=agent, model="none", difficulty="2", mode="sandbox", trial="1"
        ).to_labels()

    assert labels("reference")[REFERENCE_RUN_LABEL] == "true"
    assert REFERENCE_RUN_LABEL not in labels("dummy") and REFERENCE_RUN_LABEL not in labels("reference-ish")
    # Read back, the labels are the run's (the extra one is not a field).
    assert RunLabels.from_labels(labels("reference")).agent == "reference"


def test_a_reference_run_is_labelled_so_and_another_agents_run_is_not() -> None:
    from ssebench.agent import load_agent
    from ssebench.reaper import Session
    from ssebench.runspec import RunConfig, run_labels
    from ssebench.runtime.contract import REFERENCE_RUN_LABEL
    from ssebench.settings import get_settings
    from ssebench.task import load_task
    from tests.helpers import DEMO

    task = load_task(DEMO / "c-demo")
    for agent, labelled in (("reference", True), ("dummy", False)):
        config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, agent))
        assert (REFERENCE_RUN_LABEL in run_labels(config, Session.new(), "r1")) is labelled, agent


def test_model_s_environments_hold_none_of_root_s_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's and the bash tool's: no admin socket, no results directory, no kept run's token (what ends a
    kept run's wait on the host)."""
    from ssebench.runtime.agent import agent_env
    from ssebench.runtime.contract import ENV, ROOT_ONLY, for_model, load_settings
    from ssebench.runtime.process import User

    planted = {
        ENV["admin_socket"]: "/run/ssebench/admin.sock",
        ENV["results"]: "/var/lib/x",
        ENV["keep_token"]: "t0k3n",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SSE_DIFFICULTY", "2")
    assert set(planted) == ROOT_ONLY
    assert not ROOT_ONLY & set(for_model(dict(os.environ)))
    env = agent_env(load_settings(dict(os.environ)), User(name="model", uid=1000, gid=1000, home="/home/model"))
    assert not ROOT_ONLY & set(env) and "t0k3n" not in env.values()
    assert env["SSE_DIFFICULTY"] == "2" and env["HOME"] == "/home/model"  # the control: the rest is there
