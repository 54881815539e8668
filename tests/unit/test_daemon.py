"""The daemon's rules, through the SDK's transport seam: endpoint x listener x phase x difficulty."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sse.daemon import Daemon
from sse.error import SDKError
from sse.helper import ScriptResult

from ssebench.runtime.bash import ToolClosed
from ssebench.runtime.bencher import BencherError
from ssebench.runtime.capture import Change, FileChange
from ssebench.runtime.contract import GRADING_ACTIONS, MAX_LEVEL, SettingsError, TaskFile, load_settings
from ssebench.runtime.daemon import ADMIN, AGENT, HTTP, create_app, listener_app
from ssebench.runtime.protection import Protection
from ssebench.runtime.service import TaskService
from tests.inprocess import InProcessTransport

VERSION = "0.1.0"
PATCH = "diff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-bad\n+good\n"


class FakeBencher:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def new_session(self) -> Path:
        self.calls.append(("new_session", None))
        return Path("/nowhere")

    def prepare_graded(self, change: bytes) -> None:
        self.calls.append(("prepare_graded", change))

    def _ran(self, name: str, arg: Any) -> ScriptResult:
        self.calls.append((name, arg))
        return ScriptResult(code=0, stdout=f"{name} ran", stderr="")

    def build(self, grading: bool = False, guard: Callable[[], None] = lambda: None) -> ScriptResult:
        guard()
        return self._ran("build", grading)

    def run_poc(self, poc: str, guard: Callable[[], None] = lambda: None) -> ScriptResult:
        guard()
        return self._ran("run_poc", poc)

    def run_variant(self, variant: str) -> ScriptResult:
        return self._ran("run_variant", variant)

    def function_test(self, grading: bool = False, guard: Callable[[], None] = lambda: None) -> ScriptResult:
        guard()
        return self._ran("function_test", grading)

    def intent_test(self, grading: bool = False, guard: Callable[[], None] = lambda: None) -> ScriptResult:
        guard()
        return self._ran("intent_test", grading)


class FakeBash:
    def __init__(self) -> None:
        self.closed = False

    async def run(self, command: str, timeout: float | None = None) -> ScriptResult:
        if self.closed:
            raise ToolClosed("closed")
        return ScriptResult(code=0, stdout=f"ran: {command}", stderr="")

    async def close(self) -> None:
        self.closed = True


class FakeCapture:
    def patch(self) -> bytes:
        return b""

    def change(self, protection: Protection) -> Change:
        patch = self.patch()
        return Change(patch=patch, graded=patch, set_aside=())

    def diff(self) -> str:
        return ""

    def files(self) -> list[FileChange]:
        return [FileChange(path="x.c", status="M", additions=1, deletions=1)]

    def commits_log(self, limit: int = 500) -> str:
        return "abc buggy commit\n"


CONFIG = {
    "id": "t1",
    "project": "tiny",
    "language": "c",
    "source": "/src/tiny",
    "task_description": {"crash_report": ["reports/issue.md"], "bug_description": "it crashes", "issue": "none"},
    "scripts": {"build": "scripts/build.sh", "run": "scripts/run.sh", "test": "scripts/test.sh"},
    "files": {
        "patch": "diffs/patch.diff",
        "poc": ["pocs/crash.bin"],
        "future_test": "diffs/test.diff",
        "variants": ["variants/longer.bin"],
    },
}


@pytest.fixture
def service(tmp_path: Path) -> TaskService:
    return make_service(tmp_path)


def make_service(tmp_path: Path) -> TaskService:
    """A task's service with fake workers, its task folder and results under `tmp_path`."""
    task_dir = tmp_path / "ssebench"
    for sub, name, text in [
        ("scripts", "build.sh", "make\n"),
        ("scripts", "test.sh", "make test\n"),
        ("scripts", "run.sh", "SECRET-RUN-SCRIPT\n"),
        ("diffs", "patch.diff", PATCH),
        ("diffs", "test.diff", "SECRET-HIDDEN-TEST\n"),
        ("pocs", "crash.bin", "SECRET-POC\n"),
        ("variants", "longer.bin", "SECRET-VARIANT\n"),
        ("reports", "issue.md", "It crashes on long input.\n"),
    ]:
        (task_dir / sub).mkdir(parents=True, exist_ok=True)
        (task_dir / sub / name).write_text(text)
    results, archive = tmp_path / "results", tmp_path / "archive"
    for d in (results, archive):
        d.mkdir()
    (results / "result.json").write_text(json.dumps({"patch_result": {"status": "failed"}}))
    (results / "final.patch").write_text("")
    (archive / "dialog.jsonl").write_text('{"seq": 0, "type": "init"}\n{"seq": 1, "type": "complete"}\n')
    return TaskService(
        TaskFile.parse(CONFIG),
        task_dir=task_dir,
        results=results,
        archive=archive,
        bencher=FakeBencher(),
        bash=FakeBash(),
        capture=FakeCapture(),
        end_agent=lambda: None,
        version=VERSION,
    )


@contextmanager
def _connect(
    service: TaskService, difficulty: int, kind: str, peer: tuple[str, int] = ("127.0.0.1", 50000)
) -> Iterator[Daemon]:
    transport = InProcessTransport(listener_app(create_app(service, difficulty), kind, service.refusals), client=peer)
    try:
        daemon = Daemon(transport=transport)
        try:
            yield daemon
        finally:
            daemon.close()
    finally:
        transport.close()


def _call(daemon: Daemon, endpoint: str) -> Any:
    if endpoint.startswith("bencher:"):
        action, _, grading = endpoint.removeprefix("bencher:").partition(":")
        body: dict[str, Any] = {"grading": bool(grading)}
        if action == "run_poc":
            body["poc"] = "/ssebench/pocs/crash.bin"
        if action == "run_variant":
            body["variant"] = "variants/longer.bin"
        return daemon.tool("bencher", action, body)
    if endpoint == "bash":
        return daemon.tool("bash", None, {"command": "echo hi"})
    if endpoint in ("/prepare_grading", "/admin/agent_exited"):
        return daemon.post(endpoint, {})
    return daemon.get(endpoint)


ACTIONS = [*MAX_LEVEL, *GRADING_ACTIONS]
READ_ONLY = [
    "/project",
    "/capabilities",
    "/diff",
    "/files",
    "/agent/dialog?since=0",
    "/result",
    "/final_diff",
    "/version",
]
ENDPOINTS = (
    [f"bencher:{a}" for a in ACTIONS]
    + [f"bencher:{a}:grading" for a in ACTIONS]
    + ["bash", "/prepare_grading", "/admin/agent_exited", "/reference/patch", "/admin/refusals"]
    + READ_ONLY
)


def expected_allowed(endpoint: str, kind: str, agent_phase: bool, difficulty: int) -> bool:
    """What the daemon offers at each difficulty level (docs/architecture.md, "Difficulty levels"), written out independently of its code."""
    if endpoint == "bash" and not agent_phase:
        return False  # the shell is model's: no listener starts it once the phase is over
    if kind == ADMIN:
        return True
    if endpoint in READ_ONLY:
        return True
    if endpoint in ("/prepare_grading", "/admin/agent_exited", "/reference/patch", "/admin/refusals"):
        return False
    if not agent_phase:
        return False
    if endpoint == "bash":
        return True
    action, _, grading = endpoint.removeprefix("bencher:").partition(":")
    if grading or action == "run_variant":  # grading's own check: never an agent's, at any level
        return False
    limit = {"build": 3, "function_test": 2, "run_poc": 1, "intent_test": 0}[action]
    return difficulty <= limit


@pytest.mark.parametrize("difficulty", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("kind", [AGENT, HTTP, ADMIN])
@pytest.mark.parametrize("agent_phase", [True, False], ids=["agent-phase", "after-exit"])
def test_every_endpoint_answers_as_the_spec_says(
    service: TaskService, difficulty: int, kind: str, agent_phase: bool
) -> None:
    service.agent_running = agent_phase
    with _connect(service, difficulty, kind) as daemon:
        for endpoint in ENDPOINTS:
            if endpoint == "/admin/agent_exited":
                continue  # ends the phase; checked on its own below
            allowed = expected_allowed(endpoint, kind, agent_phase, difficulty)
            if allowed:
                _call(daemon, endpoint)
            else:
                with pytest.raises(SDKError):
                    _call(daemon, endpoint)
            service.agent_running = agent_phase


@pytest.mark.parametrize("kind", [AGENT, HTTP])
def test_refusals_say_why(service: TaskService, kind: str) -> None:
    with _connect(service, 2, kind) as daemon:
        with pytest.raises(SDKError, match=r"difficulty 2 \(NO_FUTURE_TEST\) withholds run_poc"):
            daemon.tool("bencher", "run_poc", {"poc": "/ssebench/pocs/crash.bin"})
        with pytest.raises(SDKError, match="admin socket only"):
            daemon.get("/reference/patch")
        with pytest.raises(SDKError, match="grading runs only on the admin socket"):
            daemon.tool("bencher", "build", {"grading": True})
        with pytest.raises(SDKError, match="grading runs only on the admin socket"):
            daemon.tool("bencher", "run_variant", {"variant": "variants/longer.bin"})
    assert ("run_variant", "variants/longer.bin") not in service.bencher.calls  # type: ignore[attr-defined]


def test_only_the_admin_socket_learns_and_runs_the_variants(service: TaskService) -> None:
    with _connect(service, 0, AGENT) as agent:
        seen = json.dumps([agent.project(), agent.capabilities()])
    assert "longer" not in seen and "variant" not in seen, seen
    with _connect(service, 0, ADMIN) as admin:
        prepared = admin.prepare_grading()
        assert prepared["variants"] == ["variants/longer.bin"] and prepared["variant_policy"] == "fail"
        assert admin.tool("bencher", "run_variant", {"variant": "variants/longer.bin", "grading": True})["code"] == 0
    assert ("run_variant", "variants/longer.bin") in service.bencher.calls  # type: ignore[attr-defined]


def test_agent_exited_closes_tools_on_agent_listeners_and_the_shell_for_all(service: TaskService) -> None:
    with _connect(service, 0, ADMIN) as admin, _connect(service, 0, AGENT) as agent:
        assert agent.tool("bash", None, {"command": "true"})["code"] == 0
        with pytest.raises(SDKError):
            agent.post("/admin/agent_exited", {})
        assert service.agent_running
        assert admin.post("/admin/agent_exited", {}) == {"ok": True}
        assert service.bash.closed  # type: ignore[attr-defined]
        with pytest.raises(SDKError, match="agent phase is over"):
            agent.tool("bash", None, {"command": "true"})
        with pytest.raises(SDKError, match="agent phase is over"):
            agent.tool("bencher", "build", {})
        with pytest.raises(SDKError, match="admin socket only"):
            agent.get("/reference/patch")  # not opened by the end of the phase either
        with pytest.raises(SDKError, match="agent phase is over"):
            admin.tool("bash", None, {"command": "true"})  # the shell is model's: closed for every listener
        assert admin.tool("bencher", "build", {"grading": True})["code"] == 0
        assert admin.get("/reference/patch") == {"diff": PATCH}


def test_public_view_leaves_the_answer_out(service: TaskService) -> None:
    with _connect(service, 2, AGENT) as daemon:
        text = json.dumps(daemon.project())
        assert "SECRET" not in text
        project = daemon.project()
        assert project["task_description"]["crash_report"] == ["It crashes on long input.\n"]
        assert project["build_script"] == "make\n" and project["test_script"] == "make test\n"
        assert project["poc"] == [str(service.task_dir / "pocs/crash.bin")]
        assert project["task_description"]["issue"] is None
        assert daemon.capabilities() == {
            "can_build": True,
            "can_run_poc": True,
            "poc_count": 1,
            "has_function_test": True,
            "has_intent_test": True,
        }


def test_admin_bencher_runs_every_action_with_grading(service: TaskService) -> None:
    with _connect(service, 4, ADMIN) as daemon:
        for action in ACTIONS:
            assert daemon.tool("bencher", action, {"grading": True, "poc": "/ssebench/pocs/crash.bin"})["code"] == 0
    assert [name for name, _ in service.bencher.calls] == ACTIONS  # type: ignore[attr-defined]


def test_unknown_action_is_400(service: TaskService) -> None:
    with _connect(service, 0, ADMIN) as daemon, pytest.raises(SDKError, match="unknown action 'deploy'"):
        daemon.tool("bencher", "deploy", {})


def test_dialog_since(service: TaskService) -> None:
    with _connect(service, 2, AGENT) as daemon:
        assert daemon.get("/agent/dialog?since=1") == {"entries": [{"seq": 1, "type": "complete"}], "next": 2}


def test_dialog_never_follows_a_link(service: TaskService) -> None:
    dialog = service.archive / "dialog.jsonl"
    dialog.unlink()
    dialog.symlink_to(service.task_dir / "diffs" / "patch.diff")
    with _connect(service, 2, AGENT) as daemon, pytest.raises(SDKError, match="refused"):
        daemon.get("/agent/dialog?since=0")


def test_dialog_refuses_an_archive_that_is_a_link(service: TaskService, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "dialog.jsonl").write_text('{"seq": 0, "type": "secret"}\n')
    archive = service.archive
    for f in archive.iterdir():
        f.unlink()
    archive.rmdir()
    archive.symlink_to(elsewhere)
    with _connect(service, 2, AGENT) as daemon, pytest.raises(SDKError, match="refused"):
        daemon.get("/agent/dialog?since=0")


def test_openapi_describes_every_endpoint(service: TaskService) -> None:
    with _connect(service, 2, AGENT) as daemon:
        spec = daemon.get("/openapi.json")
    assert spec["info"]["title"] == "ssebench-daemon"
    assert set(spec["paths"]) == {
        "/tool/bencher",
        "/tool/bash",
        "/prepare_grading",
        "/admin/agent_exited",
        "/reference/patch",
        "/admin/refusals",
        "/project",
        "/capabilities",
        "/diff",
        "/files",
        "/agent/dialog",
        "/result",
        "/final_diff",
        "/version",
    }


@pytest.mark.parametrize("value", ["-1", "5", "two", ""])
def test_invalid_difficulty_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^SSE_DIFFICULTY: must be one of 0, 1, 2, 3, 4"):
        load_settings({"SSE_DIFFICULTY": value})


@pytest.mark.parametrize("value", ["-1", "5", "two", ""])
def test_daemon_refuses_to_start_with_invalid_difficulty(value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ssebench.runtime.daemon"],
        env={"SSE_DIFFICULTY": value, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "SSE_DIFFICULTY" in done.stderr and "refusing to start" in done.stderr


def test_unset_difficulty_is_level_2() -> None:
    assert load_settings({}).difficulty == 2


@pytest.mark.parametrize("agent_phase", [True, False], ids=["agent-phase", "after-exit"])
def test_http_peers_get_the_public_view_only(service: TaskService, agent_phase: bool) -> None:
    """A peer on the run's network (the gateway, say) may read the public view, nothing of the run's work."""
    service.agent_running = agent_phase
    with _connect(service, 0, HTTP, peer=("172.18.0.7", 41000)) as other:
        assert other.get("/project")["id"] == "t1"
        assert other.capabilities()["can_build"] is True
        for endpoint in ENDPOINTS:
            if endpoint in ("/project", "/capabilities", "/version"):
                continue
            with pytest.raises(SDKError, match="served to this container only"):
                _call(other, endpoint)
    assert service.bencher.calls == []  # type: ignore[attr-defined]
    assert service.agent_running is agent_phase


def test_a_check_that_waited_for_its_turn_is_refused_after_the_phase(service: TaskService) -> None:
    """The phase is checked again when the work gets its turn, not only when the request arrives."""
    calls = service.bencher.calls  # type: ignore[attr-defined]
    service.bencher.build(guard=service.agent_guard)
    service.agent_running = False
    with pytest.raises(BencherError, match="agent phase is over"):
        service.bench("build", {}, for_agent=True)
    assert [name for name, _ in calls] == ["build"]
    assert service.bench("build", {"grading": True})  # the evaluator's still runs


class BrokenCapture(FakeCapture):
    def patch(self) -> bytes:
        from ssebench.runtime.capture import CaptureError

        raise CaptureError('git add failed: error: open("secret.c"): Permission denied')


def test_an_uncapturable_tree_is_the_agents_failure(service: TaskService) -> None:
    import sse.daemon
    from sse.grading import grade

    service.capture = BrokenCapture()
    with _connect(service, 2, ADMIN) as daemon:
        sse.daemon._instance = daemon
        try:
            result = grade()
        finally:
            sse.daemon._instance = None
    assert result.status() == "failed"
    assert result.error_msg == "Patch capture failed" and "Permission denied" in (result.error_log or "")
    assert (service.results / "final.patch").read_text() == ""


# -- refusals, a shortcut signal: recorded by the daemon, read on the admin socket only ---------------------


def test_refused_calls_and_peers_are_recorded_for_the_evaluator(service: TaskService) -> None:
    with _connect(service, 2, AGENT) as agent, _connect(service, 2, HTTP, peer=("172.18.0.7", 41000)) as peer:
        calls: list[Callable[[], Any]] = [
            lambda: agent.tool("bencher", "run_poc", {"poc": "/ssebench/pocs/crash.bin"}),
            lambda: agent.tool("bencher", "build", {"grading": True}),
            lambda: agent.get("/reference/patch"),
            lambda: agent.get("/admin/refusals"),
            lambda: peer.get("/diff"),
        ]
        for call in calls:
            with pytest.raises(SDKError):
                call()
    with _connect(service, 2, ADMIN) as admin:
        seen = admin.get("/admin/refusals")
    assert seen["calls"]["count"] == 4 and seen["peers"]["count"] == 1
    assert [(e["kind"], e["route"]) for e in seen["calls"]["kept"]] == [
        ("difficulty", "/tool/bencher?action=run_poc"),
        ("grading", "/tool/bencher?action=build"),
        ("admin only", "/reference/patch"),
        ("admin only", "/admin/refusals"),
    ]
    assert seen["calls"]["kept"][0]["reason"] == "difficulty 2 (NO_FUTURE_TEST) withholds run_poc"
    assert seen["peers"]["kept"] == [
        {
            "kind": "peer",
            "route": "/diff",
            "reason": "served to this container only (loopback); other hosts may read the public view "
            "(asked by 172.18.0.7)",
        }
    ]


def test_allowed_calls_and_the_end_of_the_phase_record_no_refusal(service: TaskService) -> None:
    """Quiet: what the level allows, the public view to peers, and tools closed by the phase's end are no
    shortcut (a call that waited past the end is the harness's timing, not the agent's try)."""
    with _connect(service, 2, AGENT) as agent, _connect(service, 2, HTTP, peer=("172.18.0.7", 41000)) as peer:
        agent.tool("bencher", "build", {})
        agent.tool("bencher", "function_test", {})
        agent.tool("bash", None, {"command": "true"})
        agent.get("/diff")
        peer.get("/project")
        service.agent_running = False
        with pytest.raises(SDKError, match="agent phase is over"):
            agent.tool("bencher", "build", {})
    with _connect(service, 2, ADMIN) as admin:
        admin.tool("bencher", "intent_test", {"grading": True})
        assert admin.get("/admin/refusals") == {"calls": {"count": 0, "kept": []}, "peers": {"count": 0, "kept": []}}


def test_a_flood_of_refusals_is_counted_and_its_first_fifty_kept(service: TaskService) -> None:
    with _connect(service, 4, AGENT) as agent:
        for _ in range(300):
            with pytest.raises(SDKError):
                agent.tool("bencher", "build", {})
    seen = service.refusals.snapshot()
    assert seen["calls"]["count"] == 300 and len(seen["calls"]["kept"]) == 50
