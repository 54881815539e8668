"""What the daemon does, apart from HTTP: the task's public view, checks, capture, grading prep.

`TaskService` holds the run's state (agent phase or not, the graded patch)
and the three workers (bencher, bash tool, capture). The daemon app
(`ssebench.runtime.daemon`) decides who may call what; this module does it.
Workers are injected, so the daemon's rules are unit-tested with fakes and
the workers themselves in real containers.

The agent phase is checked twice for an agent's request: when it arrives
(the daemon) and again when its work gets its turn (`agent_guard`), so a
request that waited behind another runs nothing once the phase is over.
Ending the phase kills every process of model and of sse-runner, so a check
the agent started stops too, and grading starts from a fresh session.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from sse.dialog import loads_record
from sse.helper import ScriptResult

from ssebench.runtime.bencher import BencherError, ChangeFailed, Guard, set_aside_note
from ssebench.runtime.capture import CaptureError, Change, FileChange
from ssebench.runtime.contract import RuntimeSettings, TaskFile, for_model
from ssebench.runtime.files import read_no_follow, write_atomic
from ssebench.runtime.protection import Protection
from ssebench.runtime.signals import Refusals, classify, patch_paths

MAX_DIALOG_BYTES = 64 * 1024 * 1024
PHASE_OVER = "the agent phase is over: tools are closed on this listener"


class BencherLike(Protocol):
    def new_session(self) -> Path: ...
    def prepare_graded(self, change: bytes) -> None: ...
    def build(self, grading: bool = False, guard: Guard = ...) -> ScriptResult: ...
    def run_poc(self, poc: str, guard: Guard = ...) -> ScriptResult: ...
    def run_variant(self, variant: str) -> ScriptResult: ...
    def function_test(self, grading: bool = False, guard: Guard = ...) -> ScriptResult: ...
    def intent_test(self, grading: bool = False, guard: Guard = ...) -> ScriptResult: ...


class BashLike(Protocol):
    async def run(self, command: str, timeout: float | None = None) -> ScriptResult: ...
    async def close(self) -> None: ...


class CaptureLike(Protocol):
    def patch(self) -> bytes: ...
    def change(self, protection: Protection) -> Change: ...
    def diff(self) -> str: ...
    def files(self) -> list[FileChange]: ...
    def commits_log(self, limit: int = 500) -> str: ...


class TaskService:
    """The daemon's state and actions for one task container."""

    def __init__(
        self,
        task: TaskFile,
        *,
        task_dir: Path,
        results: Path,
        archive: Path,
        bencher: BencherLike,
        bash: BashLike,
        capture: CaptureLike,
        end_agent: Callable[[], object],
        version: str,
        file_size: int | None = None,
    ) -> None:
        self.task = task
        self.task_dir = task_dir
        self.results = results
        self.archive = archive
        self.bencher = bencher
        self.bash = bash
        self.capture = capture
        self.end_agent = end_agent
        self.version = version
        self.file_size = file_size
        self.protection = Protection.of_task(task)
        self.agent_running = True
        self.prepared: dict[str, Any] | None = None
        self._grading = threading.Lock()
        # The agent-facing requests the daemon refused (a shortcut signal); the evaluator reads them.
        self.refusals = Refusals()

    # -- the public view ------------------------------------------------------

    def _text(self, relative: str | None) -> str | None:
        if relative is None:
            return None
        try:
            return (self.task_dir / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def project(self) -> dict[str, Any]:
        """What the agent may know: never the patch, hidden tests, PoC contents or run script."""
        t = self.task
        reports = [text for text in (self._text(p) for p in t.crash_report) if text is not None]
        return {
            "id": t.id,
            "project": t.project,
            "language": t.language,
            "source": t.source,
            "task_description": {
                "issue": t.issue,
                "crash_report": reports or None,
                "bug_description": t.bug_description,
            },
            "poc": [str(self.task_dir / p) for p in t.poc],
            "build_script": self._text(t.build_script),
            "test_script": self._text(t.test_script),
        }

    def capabilities(self) -> dict[str, Any]:
        checks = self.task.checks()
        return {
            "can_build": "build" in checks,
            "can_run_poc": "poc" in checks,
            "poc_count": len(self.task.poc),
            "has_function_test": "function_test" in checks,
            "has_intent_test": "intent_test" in checks,
        }

    # -- checks ---------------------------------------------------------------

    def agent_guard(self) -> None:
        """Raise 403 unless the agent phase still runs; called when an agent's work gets its turn."""
        if not self.agent_running:
            raise BencherError(403, PHASE_OVER)

    def bench(self, action: str, body: dict[str, Any], *, for_agent: bool = False) -> ScriptResult:
        grading = bool(body.get("grading", False)) and not for_agent
        guard: Guard = self.agent_guard if for_agent else (lambda: None)
        if action == "build":
            return self.bencher.build(grading=grading, guard=guard)
        if action == "run_poc":
            return self.bencher.run_poc(str(body.get("poc", "")), guard=guard)
        if action == "run_variant":
            if for_agent:  # the daemon refuses it first; a second lock where the inputs are
                raise BencherError(403, "variants are run by grading only")
            return self.bencher.run_variant(str(body.get("variant", "")))
        if action == "function_test":
            return self.bencher.function_test(grading=grading, guard=guard)
        if action == "intent_test":
            return self.bencher.intent_test(grading=grading, guard=guard)
        raise ValueError(action)

    # -- the agent's change -----------------------------------------------------

    def diff(self) -> str:
        """The live change during the agent phase; afterwards the graded one (nothing runs as model then)."""
        if not self.agent_running:
            return self.final_diff() or ""
        return self.capture.diff()

    def files(self) -> list[dict[str, Any]]:
        if not self.agent_running:
            return list((self.prepared or {}).get("changes") or [])
        return [asdict(change) for change in self.capture.files()]

    def dialog(self, since: int) -> dict[str, Any]:
        raw = read_no_follow(self.archive, "dialog.jsonl", MAX_DIALOG_BYTES) or b""
        entries = []
        for line in raw.decode("utf-8", errors="replace").splitlines():
            try:
                entry = loads_record(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("seq"), int) and entry["seq"] >= since:
                entries.append(entry)
        following = max((e["seq"] for e in entries), default=since - 1) + 1
        return {"entries": entries, "next": following}

    # -- the end of the agent phase and grading -----------------------------

    async def agent_exited(self) -> None:
        """End the agent phase: no tool of the agent runs from now on, and none of its processes lives."""
        self.agent_running = False
        self.end_agent()  # first: a process the agent left behind may hold the shell's pipes
        await self.bash.close()

    def prepare_grading(self) -> dict[str, Any]:
        """Fresh runner session; capture; final.patch and commits.log; apply onto the graded copy."""
        with self._grading:
            if self.prepared is None:
                self.prepared = self._prepare()
            return self.prepared

    def _prepare(self) -> dict[str, Any]:
        self.agent_running = False
        self.bencher.new_session()
        try:
            change = self.capture.change(self.protection)
            changes = [asdict(change) for change in self.capture.files()]
            commits = self.capture.commits_log()
        except CaptureError as exc:
            # The tree is the agent's: if it made it uncapturable (a file it
            # cannot read, a change over the patch limit), that is its
            # failure, not the harness's. An "error" would drop the run.
            write_atomic(self.results, "final.patch", "")
            return {
                "applied": False,
                "files": 0,
                "reason": "Patch capture failed",
                "log": str(exc),
                "changes": [],
                "set_aside": [],
            }
        finally:
            self.end_agent()  # whatever the capture ran as model is gone before grading starts
        write_atomic(self.results, "final.patch", change.patch)
        write_atomic(self.results, "graded.patch", change.graded)
        write_atomic(self.results, "commits.log", commits)
        prepared: dict[str, Any] = {
            "applied": True,
            "files": len(changes),
            "changes": changes,
            "set_aside": list(change.set_aside),
            "classified": self.classified([str(c["path"]) for c in changes]),
            # Grading's own inputs (this answer is the admin socket's only): the variants it runs after the PoCs.
            "variants": list(self.task.variants),
            "variant_policy": self.task.variant_policy,
        }
        if not change.patch.strip():
            prepared["log"] = "the agent changed nothing"
        elif change.set_aside:
            prepared["log"] = set_aside_note(change.set_aside).strip()
        try:
            # The original with the graded part of the change, applied as sse-runner: what every check grades.
            self.bencher.prepare_graded(change.graded)
        except ChangeFailed as exc:
            return {**prepared, "applied": False, "log": str(exc)[-4000:]}
        return prepared

    def classified(self, paths: list[str]) -> dict[str, list[str]]:
        """Which changed `paths` are the task's tests (its hidden tests' files among them), PoC harnesses or
        build logic (`ssebench.runtime.signals.classify`)."""
        hidden = patch_paths(self._text(self.task.future_test) or "")
        return classify(paths, self.task, hidden).to_json()

    def reference_patch(self) -> str:
        return self._text(self.task.patch) or ""

    def result(self) -> Any | None:
        raw = read_no_follow(self.results, "result.json", 16 * 1024 * 1024)
        return None if raw is None else json.loads(raw)

    def final_diff(self) -> str | None:
        raw = read_no_follow(self.results, "final.patch", 256 * 1024 * 1024)
        return None if raw is None else raw.decode("utf-8", errors="replace")


def container_service(settings: RuntimeSettings) -> TaskService:
    """The service of a real task container: workers as sse-runner and model, base snapshotted now."""
    from sse._version import __version__

    from ssebench.runtime import contract
    from ssebench.runtime.bash import BashTool
    from ssebench.runtime.bencher import Bencher, Limits
    from ssebench.runtime.capture import Capture
    from ssebench.runtime.process import User, clear_user
    from ssebench.runtime.taskfile import load_taskfile

    task = load_taskfile(Path(contract.TASK_DIR) / "config.yaml")
    model, runner = User.named(contract.MODEL), User.named(contract.RUNNER)
    results = Path(settings.results)
    environ = dict(os.environ)
    limits = Limits(
        settings.script_timeout, settings.output_cap, copy_limit=settings.copy_limit, file_size=settings.file_size
    )
    capture = Capture(
        Path(task.source),
        Path(contract.CAPTURE_DIR),
        model,
        patch_limit=settings.patch_limit,
        time_limit=settings.capture_timeout,
    )
    capture.prepare()
    protection = Protection.of_task(task)
    bencher = Bencher(task, limits, results, environ, runner, changes=lambda: capture.change(protection))
    bencher.new_session()
    shell_env = for_model(environ)
    shell_env.update(HOME=model.home, USER=model.name, LOGNAME=model.name, SHELL="/bin/bash")
    bash = BashTool(
        model, Path(task.source), shell_env, settings.bash_timeout, settings.output_cap, file_size=settings.file_size
    )

    def end_agent() -> None:
        clear_user(model)
        clear_user(runner)

    return TaskService(
        task,
        task_dir=Path(contract.TASK_DIR),
        results=results,
        archive=Path(settings.archive),
        bencher=bencher,
        bash=bash,
        capture=capture,
        end_agent=end_agent,
        version=__version__,
        file_size=settings.file_size,
    )
