"""The bencher: the task's build, PoC and test scripts, run as sse-runner in scratch copies.

Every script runs as sse-runner, in its own process group, stdin /dev/null,
with HOME, TMPDIR and caches inside a per-session runner home, in a copy of
the tree under /var/lib/ssebench-runner that model cannot enter. After a
script exits (or its time limit kills it), every process of sse-runner is
killed, so code that daemonised cannot outlive the check. Output is captured
to root-only files and capped, keeping the tail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sse.helper import ScriptResult

from ssebench.runtime import layout
from ssebench.runtime.process import User, kill_user
from ssebench.runtime.taskfile import TaskFile

TIMED_OUT = 124
NO_BUILD = -1
_STAGE = ".ssebench-stage"


class BencherError(Exception):
    """A check that cannot run: the daemon answers `status` with the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Limits:
    script_timeout: float
    output_cap: int


def read_tail(path: Path, cap: int) -> str:
    """The last `cap` bytes of a file, with a note of how much was dropped."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if size > cap:
            f.seek(size - cap)
        data = f.read(cap)
    text = data.decode("utf-8", errors="replace")
    if size > cap:
        return f"[ssebench: output capped: {size - cap} bytes dropped, the last {cap} bytes follow]\n{text}"
    return text


class Bencher:
    """Runs the task's scripts for the daemon. Thread-safe: one check at a time."""

    def __init__(self, task: TaskFile, limits: Limits, results: Path, environ: dict[str, str],
                 runner: User, task_dir: Path = Path(layout.TASK_DIR), runner_dir: Path = Path(layout.RUNNER_DIR),
                 state_dir: Path = Path(layout.STATE_DIR), repo: Path = Path(layout.REPO)) -> None:
        self.task = task
        self.limits = limits
        self.results = results
        self.runner = runner
        self.task_dir = task_dir
        self.runner_dir = runner_dir
        self.repo = repo
        self.scratch = state_dir / "bencher"
        self.base_env = {k: v for k, v in environ.items() if not k.startswith("SSE_")}
        self.lock = threading.Lock()
        self.session: Path | None = None
        self.last_build: Path | None = None
        self._sessions = 0
        self._copies = 0

    # -- sessions and copies --------------------------------------------------

    def new_session(self) -> Path:
        """Forget everything earlier checks left: processes, files, the last build."""
        with self.lock:
            return self._new_session()

    def _new_session(self) -> Path:
        kill_user(self.runner)
        for old in self.runner_dir.glob("session-*"):
            shutil.rmtree(old, ignore_errors=True)
        self._sessions += 1
        session = self.runner_dir / f"session-{self._sessions}"
        for sub in ("", "home", "tmp"):
            (session / sub).mkdir(mode=0o700, parents=True)
            os.chown(session / sub, self.runner.uid, self.runner.gid)
        self.session, self.last_build = session, None
        return session

    def _ensure_session(self) -> Path:
        return self.session if self.session is not None else self._new_session()

    def _copy(self, tree: Path, kind: str) -> Path:
        """A copy of `tree` owned by sse-runner, without any .git."""
        session = self._ensure_session()
        self._copies += 1
        dst = session / f"{kind}-{self._copies}"
        dst.mkdir(mode=0o755)
        os.chown(dst, self.runner.uid, self.runner.gid)
        # Read as root (the tree may hold files only their owner can read),
        # written as sse-runner, so the copy is the runner's without a chown pass.
        pack = subprocess.Popen(["tar", "-C", str(tree), "--exclude=.git", "--warning=no-file-changed", "-cf", "-", "."],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        unpack = subprocess.run(["tar", "-C", str(dst), "--no-same-owner", "-xf", "-"], stdin=pack.stdout,
                                capture_output=True, check=False, **self.runner.popen_kwargs())  # type: ignore[call-overload]
        assert pack.stdout is not None and pack.stderr is not None
        pack.stdout.close()
        packed = pack.wait()
        problems = pack.stderr.read().decode(errors="replace") + unpack.stderr.decode(errors="replace")
        # GNU tar exits 1 when a file changed while it was read: the copy is still made.
        if packed > 1 or unpack.returncode != 0:
            raise BencherError(500, f"copying {tree} for the check failed: {problems.strip()[-500:]}")
        return dst

    def _tree(self, grading: bool) -> Path:
        return self.repo if grading else Path(self.task.source)

    def _stage(self, into: Path, files: dict[str, Path]) -> Path:
        """Copy hidden files into a copy for one check, readable by the runner only."""
        stage = into / _STAGE
        stage.mkdir(mode=0o700, exist_ok=True)
        os.chown(stage, self.runner.uid, self.runner.gid)
        for name, src in files.items():
            dst = stage / name
            if src.is_dir():
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst)
            for p in [dst, *dst.rglob("*")] if dst.is_dir() else [dst]:
                os.lchown(p, self.runner.uid, self.runner.gid)
        return stage

    # -- running ----------------------------------------------------------------

    def _env(self, cwd: Path) -> dict[str, str]:
        session = self._ensure_session()
        home, tmp = session / "home", session / "tmp"
        env = dict(self.base_env)
        env.update(
            HOME=str(home), TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp), PWD=str(cwd),
            USER=self.runner.name, LOGNAME=self.runner.name,
            XDG_CACHE_HOME=str(home / ".cache"), GOCACHE=str(home / ".cache" / "go-build"), GOTMPDIR=str(tmp),
            GIT_CONFIG_NOSYSTEM="1", GIT_CEILING_DIRECTORIES=str(session),
        )
        return env

    def _run(self, label: str, argv: list[str], cwd: Path) -> ScriptResult:
        self.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = f"{time.time_ns() // 1_000_000}"
        out_path, err_path = self.scratch / f"{stamp}.out", self.scratch / f"{stamp}.err"
        started = time.monotonic()
        timed_out = False
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                       env=self._env(cwd), start_new_session=True,
                                       **self.runner.popen_kwargs())  # type: ignore[call-overload]
            try:
                code = process.wait(timeout=self.limits.script_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
                code = TIMED_OUT
            finally:
                # Whatever the script started, in its group or not, ends here.
                kill_user(self.runner)
        duration = time.monotonic() - started
        stdout = read_tail(out_path, self.limits.output_cap)
        stderr = read_tail(err_path, self.limits.output_cap)
        out_path.unlink()
        err_path.unlink()
        if timed_out:
            stderr += f"\n[ssebench: {label} killed after its time limit of {self.limits.script_timeout:.0f} s]\n"
        self._log(stamp, label, argv, cwd, code, duration, stdout, stderr)
        return ScriptResult(code=code, stdout=stdout, stderr=stderr)

    def _log(self, stamp: str, label: str, argv: list[str], cwd: Path, code: int, duration: float,
             stdout: str, stderr: str) -> None:
        record = {"check": label, "argv": argv, "cwd": str(cwd), "code": code, "duration": round(duration, 3)}
        try:
            with (self.results / f"scriptrunner-{stamp}.log").open("w", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n--- stdout ---\n" + stdout + "\n--- stderr ---\n" + stderr)
        except OSError:
            pass  # a full or missing results dir must not fail the check

    def _script(self, name: str, path: str | None) -> Path:
        if path is None:
            raise BencherError(404, f"this task has no {name} script")
        return self.task_dir / path

    # -- the checks -------------------------------------------------------------

    def build(self, grading: bool = False) -> ScriptResult:
        script = self._script("build", self.task.build_script)
        with self.lock:
            copy = self._copy(self._tree(grading), "build")
            result = self._run("build", ["bash", str(script)], copy)
            self.last_build = copy
            return result

    def poc_path(self, poc: str) -> str:
        """The config entry of a PoC given as the path /project reported, or as the entry itself."""
        for entry in self.task.poc:
            if poc in (entry, str(self.task_dir / entry)):
                return entry
        raise BencherError(400, f"unknown PoC {poc!r}; use one of the paths GET /project lists")

    def run_poc(self, poc: str) -> ScriptResult:
        script = self._script("run", self.task.run_script)
        entry = self.poc_path(poc)
        with self.lock:
            build = self.last_build
            if build is None or not build.exists():
                return ScriptResult(code=NO_BUILD, stdout="", stderr="no build yet: run the build first")
            stage = self._stage(build, {"run.sh": script, Path(entry).name: self.task_dir / entry})
            try:
                return self._run("run_poc", ["bash", str(stage / "run.sh"), str(stage / Path(entry).name)], build)
            finally:
                shutil.rmtree(stage, ignore_errors=True)

    def function_test(self, grading: bool = False) -> ScriptResult:
        script = self._script("test", self.task.test_script)
        with self.lock:
            copy = self._copy(self._tree(grading), "test")
            try:
                return self._run("function_test", ["bash", str(script)], copy)
            finally:
                shutil.rmtree(copy, ignore_errors=True)

    def intent_test(self, grading: bool = False) -> ScriptResult:
        script = self._script("test", self.task.test_script)
        if self.task.future_test is None:
            raise BencherError(404, "this task has no hidden tests")
        with self.lock:
            copy = self._copy(self._tree(grading), "intent")
            try:
                stage = self._stage(copy, {"hidden.diff": self.task_dir / self.task.future_test})
                applied = subprocess.run(
                    ["git", "apply", "-p1", "--whitespace=nowarn", str(stage / "hidden.diff")],
                    cwd=copy, env={**self._env(copy), "GIT_CONFIG_GLOBAL": "/dev/null"}, capture_output=True,
                    text=True, check=False, timeout=300, **self.runner.popen_kwargs(),  # type: ignore[call-overload]
                )
                shutil.rmtree(stage, ignore_errors=True)
                if applied.returncode != 0:
                    raise BencherError(500, f"git apply failed: {applied.stderr.strip()[-2000:]}")
                return self._run("intent_test", ["bash", str(script)], copy)
            finally:
                shutil.rmtree(copy, ignore_errors=True)
