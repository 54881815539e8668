"""What the daemon does, apart from HTTP: the task's public view, checks, capture, grading prep.

`TaskService` holds the run's state (agent phase or not, the graded patch)
and the three workers (bencher, bash tool, capture). The daemon app
(`ssebench.runtime.daemon`) decides who may call what; this module does it.
Workers are injected, so the daemon's rules are unit-tested with fakes and
the workers themselves in real containers.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from sse.helper import ScriptResult

from ssebench.runtime.capture import CaptureError, FileChange
from ssebench.runtime.settings import RuntimeSettings
from ssebench.runtime.taskfile import TaskFile

MAX_DIALOG_BYTES = 64 * 1024 * 1024


class BencherLike(Protocol):
    def new_session(self) -> Path: ...
    def build(self, grading: bool = False) -> ScriptResult: ...
    def run_poc(self, poc: str) -> ScriptResult: ...
    def function_test(self, grading: bool = False) -> ScriptResult: ...
    def intent_test(self, grading: bool = False) -> ScriptResult: ...


class BashLike(Protocol):
    async def run(self, command: str, timeout: float | None = None) -> ScriptResult: ...
    async def close(self) -> None: ...


class CaptureLike(Protocol):
    def diff(self) -> str: ...
    def files(self) -> list[FileChange]: ...
    def commits_log(self, limit: int = 500) -> str: ...


def write_atomic(directory: Path, name: str, data: str) -> Path:
    """Write `directory/name` by temp file and rename: never half-written, never through a link."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, directory / name)  # replaces a planted symlink, never follows it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / name


def read_no_follow(directory: Path, name: str, limit: int) -> bytes | None:
    """Read a regular file without following a link anywhere in `directory/name`; None if absent."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        dir_fd = os.open(directory, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (ENOTDIR/ELOOP with O_NOFOLLOW) or a file
        raise PermissionError(f"{directory} is not a plain directory: {exc.strerror}") from exc
    try:
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PermissionError(f"{name} is not a regular file: {exc.strerror}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PermissionError(f"{name} is not a regular file")
            chunks, size = [], 0
            while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


class TaskService:
    """The daemon's state and actions for one task container."""

    def __init__(self, task: TaskFile, *, task_dir: Path, repo: Path, results: Path, archive: Path,
                 bencher: BencherLike, bash: BashLike, capture: CaptureLike,
                 end_agent: Callable[[], object], version: str) -> None:
        self.task = task
        self.task_dir = task_dir
        self.repo = repo
        self.results = results
        self.archive = archive
        self.bencher = bencher
        self.bash = bash
        self.capture = capture
        self.end_agent = end_agent
        self.version = version
        self.agent_running = True
        self.prepared: dict[str, Any] | None = None

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
            "task_description": {"issue": t.issue, "crash_report": reports or None,
                                 "bug_description": t.bug_description},
            "poc": [str(self.task_dir / p) for p in t.poc],
            "build_script": self._text(t.build_script),
            "test_script": self._text(t.test_script),
        }

    def capabilities(self) -> dict[str, Any]:
        t = self.task
        return {
            "can_build": t.build_script is not None,
            "can_run_poc": t.run_script is not None and bool(t.poc),
            "poc_count": len(t.poc),
            "has_function_test": t.test_script is not None,
            "has_intent_test": t.test_script is not None and t.future_test is not None,
        }

    # -- checks ---------------------------------------------------------------

    def bench(self, action: str, body: dict[str, Any]) -> ScriptResult:
        grading = bool(body.get("grading", False))
        if action == "build":
            return self.bencher.build(grading=grading)
        if action == "run_poc":
            return self.bencher.run_poc(str(body.get("poc", "")))
        if action == "function_test":
            return self.bencher.function_test(grading=grading)
        if action == "intent_test":
            return self.bencher.intent_test(grading=grading)
        raise ValueError(action)

    # -- the agent's change -----------------------------------------------------

    def diff(self) -> str:
        return self.capture.diff()

    def files(self) -> list[dict[str, Any]]:
        return [asdict(change) for change in self.capture.files()]

    def dialog(self, since: int) -> dict[str, Any]:
        raw = read_no_follow(self.archive, "dialog.jsonl", MAX_DIALOG_BYTES) or b""
        entries = []
        for line in raw.decode("utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("seq"), int) and entry["seq"] >= since:
                entries.append(entry)
        following = max((e["seq"] for e in entries), default=since - 1) + 1
        return {"entries": entries, "next": following}

    # -- the end of the agent phase and grading -----------------------------

    async def agent_exited(self) -> None:
        self.agent_running = False
        await self.bash.close()
        self.end_agent()

    def prepare_grading(self) -> dict[str, Any]:
        """Fresh runner session; capture; final.patch and commits.log; apply onto the graded copy."""
        if self.prepared is not None:
            return self.prepared
        self.bencher.new_session()
        try:
            diff = self.capture.diff()
        except CaptureError as exc:
            # The tree is the agent's: if it made it uncapturable (a file it
            # cannot read, say), that is its failure, not the harness's. An
            # "error" here would drop the run from the score.
            write_atomic(self.results, "final.patch", "")
            self.prepared = {"applied": False, "files": 0, "reason": "Patch capture failed", "log": str(exc)}
            return self.prepared
        write_atomic(self.results, "final.patch", diff)
        write_atomic(self.results, "commits.log", self.capture.commits_log())
        if not diff.strip():
            self.prepared = {"applied": True, "files": 0, "log": "the agent changed nothing"}
            return self.prepared
        applied = subprocess.run(
            ["git", "apply", "--binary", "--whitespace=nowarn", "-p1", str(self.results / "final.patch")],
            cwd=self.repo, capture_output=True, text=True, check=False, timeout=600,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
                 "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent",
                 "GIT_CEILING_DIRECTORIES": str(self.repo.parent)},
        )
        self.prepared = {
            "applied": applied.returncode == 0,
            "files": diff.count("\ndiff --git ") + diff.startswith("diff --git "),
            "log": (applied.stdout + applied.stderr).strip()[-4000:],
        }
        return self.prepared

    def reference_patch(self) -> str:
        return self._text(self.task.patch) or ""

    def result(self) -> Any | None:
        raw = read_no_follow(self.results, "result.json", 16 * 1024 * 1024)
        return None if raw is None else json.loads(raw)

    def final_diff(self) -> str | None:
        raw = read_no_follow(self.results, "final.patch", 256 * 1024 * 1024)
        return None if raw is None else raw.decode("utf-8", errors="surrogateescape")


def container_service(settings: RuntimeSettings) -> TaskService:
    """The service of a real task container: workers as sse-runner and model, base snapshotted now."""
    from sse._version import __version__

    from ssebench.runtime import layout
    from ssebench.runtime.bash import BashTool
    from ssebench.runtime.bencher import Bencher, Limits
    from ssebench.runtime.capture import Capture
    from ssebench.runtime.process import User, kill_user
    from ssebench.runtime.taskfile import load_taskfile

    task = load_taskfile(Path(layout.TASK_DIR) / "config.yaml")
    model, runner = User.named(layout.MODEL), User.named(layout.RUNNER)
    results = Path(settings.results)
    environ = dict(os.environ)
    bencher = Bencher(task, Limits(settings.script_timeout, settings.output_cap), results, environ, runner)
    bencher.new_session()
    capture = Capture(Path(task.source), Path(layout.CAPTURE_DIR), model)
    capture.snapshot_base()
    shell_env = {k: v for k, v in environ.items() if k != "SSE_ADMIN_SOCKET"}
    shell_env.update(HOME=model.home, USER=model.name, LOGNAME=model.name, SHELL="/bin/bash")
    bash = BashTool(model, Path(task.source), shell_env, settings.bash_timeout, settings.output_cap)
    return TaskService(
        task, task_dir=Path(layout.TASK_DIR), repo=Path(layout.REPO), results=results,
        archive=Path(settings.archive), bencher=bencher, bash=bash, capture=capture,
        end_agent=lambda: kill_user(model), version=__version__,
    )
