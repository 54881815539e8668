"""The entrypoint's steps, on this host: the phase each writes, and how a failure is typed and reported."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ssebench.runtime import contract, entrypoint, phase
from ssebench.runtime.container import RefusedStart
from ssebench.runtime.contract import AgentEnd, Phase, RuntimeSettings
from ssebench.runtime.servers import ServerError


def test_a_phase_is_written_whole_for_root_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(phase, "check_root_path", lambda path: None)  # tmp_path is under /tmp, others' too
    path = tmp_path / "run" / "phase"
    phase.write_phase(Phase.AGENT, str(path))
    phase.write_phase(Phase.GRADING, str(path))
    assert contract.parse_phase(path.read_bytes()) == Phase.GRADING
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert os.listdir(path.parent) == ["phase"]  # no temporary file left beside it


def test_a_phase_is_not_written_where_others_may_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run" / "phase"  # under /tmp: a directory everyone may write
    phase.write_phase(Phase.AGENT, str(path))  # said, never raised: the run goes on
    assert not path.exists()
    assert "the phase (agent) could not be written" in capsys.readouterr().err


class Steps:
    """Stands in for the container's steps; records the phases written, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, refuse: bool = False) -> None:
        self.phases: list[Phase] = []
        self.errors: list[str] = []
        monkeypatch.setattr(phase, "write_phase", lambda step, path=contract.PHASE_FILE: self.phases.append(step))
        monkeypatch.setattr(entrypoint, "write_error", lambda settings, message: self.errors.append(message))

        def prepare_task(settings: RuntimeSettings, model: Any) -> str:
            if refuse:
                raise RefusedStart("the runner's area: /var/lib/ssebench-runner must be empty")
            return str(tmp_path)

        monkeypatch.setattr(entrypoint, "prepare_task", prepare_task)
        monkeypatch.setattr(entrypoint, "write_limits", lambda settings, name: None)


def test_a_container_unfit_for_a_run_refuses_it_with_an_error_and_the_phase_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps = Steps(monkeypatch, tmp_path, refuse=True)
    agent = entrypoint.RunHere(["true"])
    status = entrypoint.grading_container(RuntimeSettings(results=str(tmp_path)), None, agent)  # type: ignore[arg-type]
    assert status == 1 and steps.phases == [Phase.STARTING, Phase.FAILED]
    assert steps.errors == ["the runtime failed to start: the runner's area: /var/lib/ssebench-runner must be empty"]


def test_a_daemon_that_does_not_start_is_an_infrastructure_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps = Steps(monkeypatch, tmp_path)

    def start_daemon(settings: RuntimeSettings, env: dict[str, str]) -> Any:
        raise ServerError("the daemon exited with status 1 while starting:\nTraceback")

    monkeypatch.setattr(entrypoint, "start_daemon", start_daemon)
    status = entrypoint.grading_container(RuntimeSettings(results=str(tmp_path)), None, entrypoint.RunHere(["true"]))  # type: ignore[arg-type]
    assert status == 1 and steps.phases == [Phase.STARTING, Phase.FAILED]
    assert steps.errors[0].startswith("the runtime failed to start: the daemon exited with status 1")


def test_the_phases_of_a_graded_run_in_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    steps = Steps(monkeypatch, tmp_path)

    class Process:
        returncode = 0

        def poll(self) -> int:
            return 0

    class Daemon:
        process = Process()

    class Mcp:
        failures = 0

        def close(self) -> None:
            return None

    graded: list[AgentEnd] = []
    monkeypatch.setattr(entrypoint, "start_daemon", lambda settings, env: Daemon())
    monkeypatch.setattr(entrypoint, "start_mcp", lambda settings, env, shared_sockets: Mcp())
    monkeypatch.setattr(entrypoint, "start_evaluator", lambda settings, env, log: Process())
    monkeypatch.setattr(entrypoint, "admin_post", lambda settings, path: None)
    monkeypatch.setattr(entrypoint, "end", lambda process: None)
    monkeypatch.setattr(entrypoint, "finish_archive", lambda settings: None)
    monkeypatch.setattr(entrypoint, "evaluate", lambda *args: graded.append(args[-1]))

    class Agent(entrypoint.RunHere):
        def run(self, settings: RuntimeSettings, model: Any, source: str) -> AgentEnd:
            assert steps.phases[-1] == Phase.AGENT  # written before the agent runs
            return AgentEnd(3, 1.0, False)

    status = entrypoint.grading_container(RuntimeSettings(results=str(tmp_path)), None, Agent(["x"]))  # type: ignore[arg-type]
    assert status == 3 and graded == [AgentEnd(3, 1.0, False)] and steps.errors == []
    assert steps.phases == [Phase.STARTING, Phase.AGENT, Phase.GRADING, Phase.FINISHING]


def test_each_role_is_its_own_steps() -> None:
    assert set(entrypoint.ROLES) == set(contract.ROLES)
    assert entrypoint.AwaitHost().shares_sockets and not entrypoint.RunHere(["x"]).shares_sockets


def test_the_task_container_reads_the_hosts_figures_of_the_agents_end(tmp_path: Path) -> None:
    fifo = phase.make_fifo(str(tmp_path / "run" / "agent-done"))
    try:
        phase.tell(AgentEnd(0, 42.0, False).to_figures(), str(tmp_path / "run" / "agent-done"))
        assert phase.await_agent(RuntimeSettings(), fifo) == AgentEnd(0, 42.0, False)
        os.write(fifo, json.dumps({"AGENT_EXIT_STATUS": "x"}).encode() + b"\n")
        assert phase.await_agent(RuntimeSettings(), fifo).timed_out  # unreadable figures: graded as timed out
    finally:
        os.close(fifo)
