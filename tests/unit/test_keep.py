"""Kept runs (--keep-containers), without Docker: what the host asks of the runtime, how it knows a kept run
is over, what the reaper leaves, and what `ssebench ps` and `ssebench rm` say of them."""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ssebench import inflight, reaper
from ssebench.agent import load_agent
from ssebench.backend import Network, RunTimeoutError
from ssebench.cli import main
from ssebench.errors import SSEBenchError
from ssebench.live import LiveRun
from ssebench.reaper import Session
from ssebench.run import execute
from ssebench.runspec import RunConfig, container_spec, sidecar_specs
from ssebench.runtime import contract, entrypoint, phase
from ssebench.runtime.contract import (
    CONTROLLER_LABEL,
    HOST_LABEL,
    KEPT_LABEL,
    OWNER_LABEL,
    RUN_LABEL,
    AgentEnd,
    Phase,
    RuntimeSettings,
    load_settings,
    phase_record,
)
from ssebench.settings import get_settings
from ssebench.task import load_task
from tests.helpers import DEMO
from tests.unit.test_engine import FakeCleanup
from tests.unit.test_entrypoint import Steps
from tests.unit.test_run import _Backend, _Container


def _config(**changes: Any) -> RunConfig:
    return RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"), **changes)


# -- what the host asks of the runtime ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sandbox", "sidecar"])
def test_a_kept_run_asks_every_container_to_stay_up_and_labels_it_kept(mode: str) -> None:
    session = Session.new()
    for keep in (False, True):
        config = _config(mode=mode, keep_container=keep)
        spec = container_spec(config, "img", session, "r1", "net", runtime="rt")
        specs = [spec] if mode == "sandbox" else list(sidecar_specs(config, spec, "tool", "r1", session)[:2])
        for made in specs:
            assert load_settings(made.env).keep_alive is keep  # the runtime reads back what the host meant
            assert (made.labels.get(KEPT_LABEL) == "1") is keep
            assert made.labels[RUN_LABEL] == "r1"


@pytest.mark.parametrize("mode", ["sandbox", "sidecar"])
def test_each_kept_run_gives_its_containers_a_token_of_its_own(mode: str, tmp_path: Path) -> None:
    """What names a kept run's end must be written in the run (no file of an image can know it)."""
    config = _config(mode=mode, keep_container=True)
    tokens = []
    for _ in range(2):
        backend = _Backend()
        execute(config, get_settings(), backend, Session.new(), tmp_path, build=False)
        said = {load_settings(spec.env).keep_token for spec in backend.specs}
        assert len(said) == 1 and len(next(iter(said))) >= 32, said  # (sidecar mode: once the task's is started)
        tokens.append(said.pop())
    assert tokens[0] != tokens[1]
    backend = _Backend()
    execute(_config(mode=mode), get_settings(), backend, Session.new(), tmp_path, build=False)
    assert [load_settings(spec.env).keep_token for spec in backend.specs] == [""]


def test_the_entrypoint_of_a_kept_run_says_kept_with_its_status_once_it_has_finished(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps = Steps(monkeypatch, tmp_path)
    statuses: list[int | None] = []

    tokens: list[str | None] = []

    writable = [True]

    def write_phase(
        step: Phase, path: str = contract.PHASE_FILE, status: int | None = None, token: str | None = None
    ) -> bool:
        steps.phases.append(step)
        statuses.append(status)
        tokens.append(token)
        return writable[0]

    monkeypatch.setattr(phase, "write_phase", write_phase)
    finished: list[Phase] = []
    monkeypatch.setattr(entrypoint, "finish", lambda settings, confirmed: finished.append(steps.phases[-1]))
    stopped: list[Phase] = []
    monkeypatch.setattr(entrypoint, "wait_for_stop", lambda: stopped.append(steps.phases[-1]))

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

    monkeypatch.setattr(entrypoint, "start_daemon", lambda settings, env: Daemon())
    monkeypatch.setattr(entrypoint, "start_mcp", lambda settings, env, shared_sockets: Mcp())
    monkeypatch.setattr(entrypoint, "start_evaluator", lambda settings, env, log: Process())
    monkeypatch.setattr(entrypoint, "admin_post", lambda settings, path: None)
    monkeypatch.setattr(entrypoint, "end", lambda process: None)
    monkeypatch.setattr(entrypoint, "evaluate", lambda *args: None)

    class Agent(entrypoint.RunHere):
        def run(self, settings: RuntimeSettings, model: Any, source: str) -> AgentEnd:
            return AgentEnd(3, 1.0, False)

    settings = RuntimeSettings(results=str(tmp_path), keep_alive=True, keep_token="t0k3n")
    assert entrypoint.grading_container(settings, None, Agent(["x"])) == 3  # type: ignore[arg-type]
    # Kept only once everything the host brings home is final (the archive pruned, limits.json written).
    assert finished == [Phase.FINISHING] and stopped == [Phase.KEPT]
    assert steps.phases[-2:] == [Phase.FINISHING, Phase.KEPT] and statuses[-1] == 3 and tokens[-1] == "t0k3n"
    # The control: without keep-alive, no kept phase and no wait.
    steps.phases.clear()
    assert entrypoint.grading_container(RuntimeSettings(results=str(tmp_path)), None, Agent(["x"])) == 3  # type: ignore[arg-type]
    assert Phase.KEPT not in steps.phases and stopped == [Phase.KEPT]
    # A kept phase that cannot be written would leave the host waiting to the time limit: the container exits.
    writable[0] = False
    assert entrypoint.grading_container(settings, None, Agent(["x"])) == 3  # type: ignore[arg-type]
    assert steps.phases[-1] == Phase.KEPT and stopped == [Phase.KEPT]  # tried, and no wait for a stop


def test_a_kept_record_carries_its_status_and_the_runs_token_and_nothing_else_reads_as_one() -> None:
    assert contract.kept_status(phase_record(Phase.KEPT, 1.0, status=3, token="t0k3n"), "t0k3n") == 3
    assert contract.parse_phase(phase_record(Phase.KEPT, 1.0, status=3, token="t0k3n")) == Phase.KEPT
    for other in (
        phase_record(Phase.FINISHING, 1.0, token="t0k3n"),
        phase_record(Phase.FINISHING, 1.0, status=0, token="t0k3n"),  # only the kept phase says the run is over
        phase_record(Phase.KEPT, 1.0, token="t0k3n"),  # no status
        phase_record(Phase.KEPT, 1.0, status=0),  # no token: a file an image brought, say
        phase_record(Phase.KEPT, 1.0, status=0, token="another run's"),
        b'{"phase": "kept", "status": "0", "token": "t0k3n"}',
        b'{"phase": "kept", "status": true, "token": "t0k3n"}',
        b'{"phase": "kept", "status": 0, "token": "t0k3n"' + b" " * 300 + b"}",
        b"not json",
    ):
        assert contract.kept_status(other, "t0k3n") is None, other
    assert contract.kept_status(phase_record(Phase.KEPT, 1.0, status=0, token=""), "") is None  # never no token


# -- how the host knows a kept run is over --------------------------------------------------------------------


def _archive(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("phase")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


TOKEN = "f" * 32


def _live(handle: _Container, **more: Any) -> LiveRun:
    """A kept run's, of token TOKEN."""
    config = _config(keep_container=True, mode="sidecar" if "task" in more else "sandbox")
    return LiveRun(handle=handle, network=Network(name="n", gateway=None), run_id="r", config=config, **more)


class _Kept(_Container):
    """A container that keeps running; after `kept_after` polls its phase file says kept, with `status`."""

    def __init__(self, name: str, status: int, kept_after: int, exits: int = 10**9, token: str = TOKEN) -> None:
        super().__init__(name, status, ends=exits)
        self.kept_after, self.exits, self.token = kept_after, exits, token
        self.paused: list[bool] = []

    def poll(self) -> int | None:
        self.exits -= 1
        return self.status if self.exits <= 0 or self.stopped else None

    def phase_file(self) -> bytes | None:
        self.kept_after -= 1
        if self.kept_after > 0:
            return _archive(phase_record(Phase.GRADING, 0.0))
        return _archive(phase_record(Phase.KEPT, 0.0, status=self.status, token=self.token))

    def pause(self) -> None:
        self.paused.append(True)

    def unpause(self) -> None:
        self.paused.append(False)

    def wait(self, timeout: float) -> int:
        raise AssertionError("a kept run's container never exits of itself: nothing may wait for it")


def test_a_kept_sandbox_run_ends_when_its_phase_says_kept_with_the_status_it_would_have_exited_with() -> None:
    assert _live(_Kept("sandbox", 5, kept_after=3), kept_token=TOKEN).wait(30) == 5
    # Or when it exits first (its entrypoint refused to start, say).
    assert _live(_Kept("sandbox", 1, kept_after=10**9, exits=2), kept_token=TOKEN).wait(30) == 1


def test_a_phase_file_the_engine_would_not_copy_is_no_word_yet() -> None:
    """Sidecar mode's agent container is the agent's: root there may make its phase file anything, and the
    engine refuse to copy it; that is no end of the agent phase (its time limit ends it), never the run's
    infrastructure error."""

    class Refused(_Kept):
        def phase_file(self) -> bytes | None:
            if self.kept_after > 2:
                self.kept_after -= 1
                raise SSEBenchError("Docker refused copying /run/ssebench/phase: too many levels of symbolic links")
            return super().phase_file()

    assert _live(Refused("sandbox", 4, kept_after=4), kept_token=TOKEN).wait(30) == 4


def test_a_kept_run_whose_phase_never_says_kept_with_its_token_ends_at_the_whole_runs_limit() -> None:
    with pytest.raises(RunTimeoutError, match="still running after 1 s"):
        _live(_Kept("sandbox", 0, kept_after=10**9), kept_token=TOKEN).wait(1)
    # A kept phase without the run's token (an image's file, there before the entrypoint replaced it) is none.
    for forged in ("", "0" * 32):
        with pytest.raises(RunTimeoutError, match="still running after 1 s"):
            _live(_Kept("sandbox", 0, kept_after=0, token=forged), kept_token=TOKEN).wait(1)


def test_a_kept_sidecar_run_freezes_the_agent_container_before_the_task_container_grades() -> None:
    task_container = _Kept("task", 2, kept_after=10**9)
    agent_container = _Kept("agent", 7, kept_after=2)
    told: list[bool] = []
    heard = task_container.execute

    def tell(argv: list[str], timeout: float) -> tuple[int, str]:
        told.append(agent_container.paused == [True])  # frozen before the task container hears of the end
        task_container.kept_after = 2
        return heard(argv, timeout)

    task_container.execute = tell  # type: ignore[method-assign]
    live = _live(agent_container, task=task_container, kept_token=TOKEN)
    assert live.wait(30) == 2 and told == [True]
    [argv] = task_container.told
    figures = json.loads(argv[4])
    assert figures["AGENT_EXIT_STATUS"] == "7" and figures["SSE_METRIC_AGENT_TIMEOUT"] == "false"
    live.release()  # once the run's files are home: both stay up, the agent's container thawed
    assert agent_container.paused == [True, False] and task_container.paused == []


# -- what the reaper leaves, and `ssebench rm` ----------------------------------------------------------------


def _labels(**more: str) -> dict[str, str]:
    dead = "999999999"
    return {HOST_LABEL: socket.gethostname(), CONTROLLER_LABEL: dead, OWNER_LABEL: str(os.getpid()), **more}


def _kept_engine() -> FakeCleanup:
    kept = _labels(**{RUN_LABEL: "r-kept", KEPT_LABEL: "1"})
    other = _labels(**{RUN_LABEL: "r-other", KEPT_LABEL: "1"})
    plain = _labels(**{RUN_LABEL: "r-plain"})
    return FakeCleanup(
        containers=[
            {"Id": "c-kept", "Names": ["/kept-one"], "Labels": kept},
            {"Id": "c-other", "Names": ["/kept-two"], "Labels": other},
            {"Id": "c-plain", "Names": ["/plain"], "Labels": plain},
        ],
        networks=[{"Id": "n-kept", "Name": "net-kept", "Labels": kept}, {"Id": "n-plain", "Labels": plain}],
        volumes=[{"Name": "v-kept", "Labels": kept}, {"Name": "v-other", "Labels": other}],
    )


def test_the_reaper_never_removes_a_kept_run(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _kept_engine()
    monkeypatch.setattr(reaper, "cleanup", lambda: fake)
    assert reaper.reap_orphans() == 2  # its session is dead: the plain run's container and network go
    assert fake.removed == ["c-plain", "n-plain"]
    fake.removed.clear()
    reaper.reap_session("any")
    assert fake.removed == ["c-plain", "n-plain"]


def test_ssebench_rm_removes_the_named_kept_runs_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _kept_engine()
    monkeypatch.setattr(reaper, "cleanup", lambda: fake)
    assert main(["rm", "r-kept"]) == 0
    assert fake.removed == ["c-kept", "n-kept", "v-kept"]  # containers, then networks (by id), volumes last
    assert capsys.readouterr().out.splitlines() == [
        "removed container kept-one (run r-kept)",
        "removed network net-kept (run r-kept)",
        "removed volume v-kept (run r-kept)",
    ]
    fake.removed.clear()
    assert main(["rm", "r-plain"]) == 1  # not kept: the reaper's, never this command's
    assert fake.removed == []
    assert capsys.readouterr().err.splitlines() == [
        "error: no kept run r-plain on this engine (`ssebench ps` lists the kept ones)"
    ]


def test_ssebench_rm_all_kept_removes_every_kept_run_and_says_so_when_there_is_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _kept_engine()
    monkeypatch.setattr(reaper, "cleanup", lambda: fake)
    assert main(["rm", "--all-kept"]) == 0
    assert fake.removed == ["c-kept", "c-other", "n-kept", "v-kept", "v-other"]
    capsys.readouterr()
    monkeypatch.setattr(reaper, "cleanup", lambda: FakeCleanup())
    assert main(["rm", "--all-kept"]) == 0
    assert capsys.readouterr().out == "no kept runs on this engine\n"


def test_ssebench_rm_needs_runs_or_all_kept_and_not_both(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _kept_engine()
    monkeypatch.setattr(reaper, "cleanup", lambda: fake)
    for argv in (["rm"], ["rm", "r-kept", "--all-kept"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            "error: ssebench rm: name the runs to remove (RUN_ID ...) or give --all-kept, not both\n"
        )
    assert fake.removed == []


# -- what `ssebench ps` says of them ---------------------------------------------------------------------------


def test_ps_shows_a_kept_run_as_kept_with_the_line_that_enters_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = {RUN_LABEL: "r-kept", KEPT_LABEL: "1", "ssebench.mode": "sidecar", "ssebench.role": "task"}
    listed = [
        {"Id": "a" * 64, "Names": ["/ssebench-task-0123"], "Created": 1, "Labels": kept, "State": "running"},
        {
            "Id": "b" * 64,
            "Names": ["/agent-side"],
            "Created": 2,
            "Labels": {**kept, "ssebench.role": "agent"},
            "State": "running",
        },
        {"Id": "c" * 64, "Names": ["/busy"], "Created": 3, "Labels": {RUN_LABEL: "r-busy"}, "State": "running"},
    ]
    phases = {"a" * 64: Phase.KEPT, "c" * 64: Phase.AGENT}

    class Listing:
        def containers(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
            return listed

    def phase_archive(container: str) -> bytes | None:
        return _archive(phase_record(phases[container], 0.0, status=0 if phases[container] is Phase.KEPT else None))

    import ssebench.engine

    monkeypatch.setattr(ssebench.engine, "cleanup", Listing)
    monkeypatch.setattr(inflight, "phase_archive", phase_archive)
    assert main(["ps"]) == 0
    out = capsys.readouterr().out
    [kept_row, *entered] = [line for line in out.splitlines() if "r-kept" in line]
    [busy_row] = [line for line in out.splitlines() if "r-busy" in line]
    assert len(entered) == 2
    assert " kept " in kept_row and " agent " in busy_row
    assert "docker exec -it ssebench-task-0123 bash" in out and "docker exec -it agent-side bash" in out
    assert "docker exec -it busy" not in out  # a run in flight is not entered
    assert main(["ps", "--json"]) == 0
    rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["r-kept"]["state"] == "kept" and rows["r-kept"]["kept"] is True
    assert rows["r-kept"]["containers"] == ["ssebench-task-0123", "agent-side"]
    assert rows["r-busy"]["state"] == "running" and rows["r-busy"]["kept"] is False
