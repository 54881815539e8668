"""The bencher: the task's build, PoC and test scripts, run as sse-runner in scratch copies.

Every script runs as sse-runner, in its own process group, stdin /dev/null,
with HOME, TMPDIR and caches inside a per-session runner home, in a copy of
the tree under /var/lib/ssebench-runner (the run's own volume, which the
entrypoint takes only empty) that model cannot enter. After a
script exits (or its time limit kills it), every process of sse-runner is
killed, so code that daemonised cannot outlive the check. Output is captured
to root-only files and capped, keeping the tail.

Root never writes into a place sse-runner or model could have prepared:

- a session directory is root's (sse-runner may traverse it, not add to
  it); only its `home` and `tmp` are sse-runner's;
- copies are made by root under fresh random names in the session, then
  filled by tar running as sse-runner (the agent's tree is read as its
  owner, model, so a link in it leads nowhere root could read);
- hidden files a check needs (the run script, a PoC, the hidden tests) are
  staged in a root-made directory beside the copies, never inside one, and
  written with exclusive, no-follow creates.

Every check runs on a copy of the original tree with the graded part of the
agent's change applied to it as sse-runner: the code under repair, never a
file that decides a check (a Makefile, a build script, a test, a harness;
`ssebench.runtime.protection`). So a check the agent asks for sees what
grading will see, and what the agent changed beyond its code is set aside,
said in the check's output and, for grading, in result.json.

A PoC still reproduces when its output holds the sanitizer's or the
language runtime's own report of a crash (`CRASH_REPORTS`), whatever the
exit status: a report written is not taken back by the process that goes on.

Copies are capped in size (`copy_limit`): a tree the agent filled cannot make
the harness fill the disk with copies of it.

Grading builds once: the graded tree (`prepare_graded`) is where the build,
its PoCs, then the function test, then the hidden tests (applied to it) run,
as a person would check a patch in one checkout. The agent's code runs as sse-runner with that
tree in every check either way, so sharing it gives that code nothing a fresh
copy would not; the checks' scripts and hidden files stay root's and staged.
An agent's own checks (without grading) each get a fresh copy of its tree,
which may have changed between them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sse.helper import ScriptResult

from ssebench.runtime import contract, git
from ssebench.runtime.capture import Change
from ssebench.runtime.contract import TaskFile
from ssebench.runtime.files import create_exclusive, remove_tree
from ssebench.runtime.process import (
    NEUTRAL_CWD,
    ROOT_PATH,
    AsUser,
    User,
    clear_user,
    confined,
    kill_group,
    kill_user,
    wait,
)

TIMED_OUT = 124
NO_BUILD = -1
# A check whose tree could not be made from the agent's change (it could not be captured or applied).
NO_TREE = -2
# A PoC whose script exited 0 though the output holds a crash report.
CRASH_REPORTED = 125
APPLY_TIMEOUT = 300  # seconds for a `git apply` of the agent's change or of the hidden tests

Guard = Callable[[], None]

# The reports a crash leaves in a PoC's output, written by the sanitizer or the language's runtime before
# the process ends. Each is found by a fixed string (bytes.find: linear, whatever the output) and then checked
# in a bounded window around it; a regular expression over the whole output was quadratic on a long run of
# non-space bytes, and the scan runs in the daemon. A report of several parts (a Go panic: its headline and
# its goroutine) needs all of them.
_SANITIZER_NAMES = (
    b"AddressSanitizer",
    b"MemorySanitizer",
    b"LeakSanitizer",
    b"ThreadSanitizer",
    b"HWAddressSanitizer",
    b"UndefinedBehaviorSanitizer",
)
_LOCATION = re.compile(rb"[^\s:]+(?::[^\s:]+)*:\d{1,9}:\d{1,9}")


def _line_start(window: bytes, at: int) -> bool:
    return at == 0 or window[at - 1 : at] == b"\n"


def _asan(window: bytes, at: int) -> bytes | None:
    # "==1234==ERROR: AddressSanitizer: ..."
    start = window.rfind(b"==", max(0, at - 12), at)
    after = window[at + 9 : at + 9 + 24]
    if start >= 0 and window[start + 2 : at].isdigit() and after.startswith(_SANITIZER_NAMES):
        return window[start : at + 9] + after.split(b":")[0]
    return None


def _ubsan(window: bytes, at: int) -> bytes | None:
    # "file.c:12:5: runtime error: signed integer overflow"
    token = window[max(0, at - 512) : at].rsplit(None, 1)[-1:] or [b""]
    return token[0] + b": runtime error:" if _LOCATION.fullmatch(token[0]) else None


def _summary(window: bytes, at: int) -> bytes | None:
    after = window[at + 9 : at + 9 + 32]
    return window[at : at + 9] + after.split(b":")[0] if after.startswith(_SANITIZER_NAMES) else None


def _go_headline(window: bytes, at: int) -> bytes | None:
    return window[at : window.find(b": ", at)] if _line_start(window, at) else None


def _goroutine(window: bytes, at: int) -> bytes | None:
    found = re.match(rb"goroutine \d{1,12} \[", window[at : at + 40])
    return found.group(0) if found and _line_start(window, at) else None


def _rust_thread(window: bytes, at: int) -> bytes | None:
    # "thread 'main' panicked at src/lib.rs:10:5:" / "thread 'main' has overflowed its stack"
    line = window[max(0, at - 256) : at].rsplit(b"\n", 1)[-1]
    opening = line.rfind(b"thread '")
    return line[opening:] + b"'" if opening >= 0 and b"'" not in line[opening + 8 :] else None


Mark = tuple[bytes, Callable[[bytes, int], "bytes | None"]]
_SANITIZER_MARKS: tuple[tuple[Mark, ...], ...] = (
    ((b"==ERROR: ", _asan),),
    ((b": runtime error: ", _ubsan),),
    ((b"SUMMARY: ", _summary),),
)
CRASH_REPORTS: dict[str, tuple[tuple[Mark, ...], ...]] = {
    "c": _SANITIZER_MARKS,
    "go": (
        *_SANITIZER_MARKS,
        ((b"panic: ", _go_headline), (b"goroutine ", _goroutine)),
        ((b"fatal error: ", _go_headline), (b"goroutine ", _goroutine)),
    ),
    "rust": (*_SANITIZER_MARKS, ((b"' panicked at", _rust_thread),), ((b"' has overflowed its stack", _rust_thread),)),
}
# How a file is read for reports: its first and last SCAN_SPAN bytes (a crash report ends the program's output,
# or comes before what other processes write), in chunks that overlap by more than any report's window; and at
# most MARKS_CHECKED places of one fixed string are checked, however many times the output repeats it.
_SCAN_CHUNK, _SCAN_OVERLAP, SCAN_SPAN, MARKS_CHECKED = 1 << 20, 1 << 12, 64 << 20, 100_000


def crash_report(paths: list[Path], language: str) -> str | None:
    """The first crash report found in the files, as its text; None."""
    for group in CRASH_REPORTS.get(language, CRASH_REPORTS["c"]):
        found: list[bytes] = []
        for mark in group:
            match = _search(paths, mark)
            if match is None:
                break
            found.append(match)
        else:
            return " / ".join(m.decode("utf-8", errors="replace") for m in found)
    return None


def _chunks(path: Path) -> Iterator[bytes]:
    """Overlapping chunks of the file's first and last SCAN_SPAN bytes."""
    size = path.stat().st_size
    spans = [(0, min(size, SCAN_SPAN))]
    if size > SCAN_SPAN:
        spans.append((max(SCAN_SPAN, size - SCAN_SPAN), size))
    with path.open("rb") as f:
        for begin, end in spans:
            f.seek(max(0, begin - _SCAN_OVERLAP) if begin else 0)
            at = f.tell()
            while at < end:
                chunk = f.read(min(_SCAN_CHUNK + _SCAN_OVERLAP, end - at))
                if not chunk:
                    break
                yield chunk
                at += len(chunk) - _SCAN_OVERLAP if at + len(chunk) < end else len(chunk)
                f.seek(at)


def _search(paths: list[Path], mark: Mark) -> bytes | None:
    anchor, check = mark
    for path in paths:
        checked = 0
        for window in _chunks(path):
            at = window.find(anchor)
            while at >= 0 and checked < MARKS_CHECKED:
                checked += 1
                if (text := check(window, at)) is not None:
                    return text[:200]
                at = window.find(anchor, at + 1)
    return None


class ChangeFailed(Exception):
    """The tree of a check could not be made from the agent's change: the message says why."""


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
    copy_limit: int = 8 << 30
    file_size: int | None = None


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


def _no_guard() -> None:
    return None


class Bencher:
    """Runs the task's scripts for the daemon. Thread-safe: one check at a time.

    Each check takes a `guard`, called once the check has its turn (it holds
    the lock): an agent's request that waited behind another is refused
    there if the agent phase ended meanwhile.
    """

    def __init__(
        self,
        task: TaskFile,
        limits: Limits,
        results: Path,
        environ: dict[str, str],
        runner: User,
        changes: Callable[[], Change],
        task_dir: Path = Path(contract.TASK_DIR),
        runner_dir: Path = Path(contract.RUNNER_DIR),
        state_dir: Path = Path(contract.STATE_DIR),
        repo: Path = Path(contract.REPO),
    ) -> None:
        self.task = task
        self.limits = limits
        self.results = results
        self.runner = runner
        # The agent's change now (a capture of its tree): what an agent's own check applies to the original.
        self.changes = changes
        self.task_dir = task_dir
        self.runner_dir = runner_dir
        self.repo = repo
        self.scratch = state_dir / "bencher"
        self.base_env = {k: v for k, v in environ.items() if not k.startswith("SSE_")}
        self.lock = threading.Lock()
        self.session: Path | None = None
        self.last_build: Path | None = None
        # The graded tree (`prepare_graded`), which the grading checks share; None once the hidden tests used it.
        self.graded_tree: Path | None = None
        # The part of the agent's change grading applies, once grading is prepared.
        self.graded_change: bytes | None = None
        self._sessions = 0

    # -- sessions and copies --------------------------------------------------

    def new_session(self) -> Path:
        """Forget everything earlier checks left: processes, files, the last build."""
        with self.lock:
            return self._new_session()

    def _new_session(self) -> Path:
        clear_user(self.runner)
        for old in self.runner_dir.glob("session-*"):
            remove_tree(old)
        self._sessions += 1
        session = self.runner_dir / f"session-{self._sessions}-{secrets.token_hex(4)}"
        session.mkdir(mode=0o710)
        os.chown(session, 0, self.runner.gid)
        for sub in ("home", "tmp"):
            (session / sub).mkdir(mode=0o700)
            os.chown(session / sub, self.runner.uid, self.runner.gid)
        self.session, self.last_build, self.graded_tree, self.graded_change = session, None, None, None
        return session

    def _ensure_session(self) -> Path:
        return self.session if self.session is not None else self._new_session()

    def _fresh_dir(self, kind: str, owner: User | None, mode: int) -> Path:
        """A new directory in the session under a name no one could have guessed."""
        path = self._ensure_session() / f"{kind}-{secrets.token_hex(6)}"
        path.mkdir(mode=mode)
        os.chmod(path, mode)
        if owner is not None:
            os.chown(path, owner.uid, owner.gid)
        else:
            os.chown(path, 0, self.runner.gid)
        return path

    def _copy(self, kind: str) -> Path:
        """A copy of the original tree owned by sse-runner, without any .git, at most `copy_limit` bytes of tar.

        The original is root's (the tree as the case image made it, kept when the run started); its copy is
        written by sse-runner, so nothing in it reaches beyond sse-runner's own reach.
        """
        tree = self.repo
        dst = self._fresh_dir(kind, self.runner, 0o755)
        # Errors go to unnamed files: an unread pipe could fill up and stall the copy.
        with tempfile.TemporaryFile() as pack_err, tempfile.TemporaryFile() as unpack_err:
            pack = subprocess.Popen(
                ["tar", "-C", str(tree), "--exclude=.git", "--warning=no-file-changed", "-cf", "-", "."],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=pack_err,
                cwd=NEUTRAL_CWD,
                env={"PATH": ROOT_PATH, "LC_ALL": "C"},
                **AsUser(),
            )
            unpack = subprocess.Popen(
                confined(
                    ["tar", "-C", str(dst), "--no-same-owner", "--no-same-permissions", "-xf", "-"],
                    self.limits.file_size,
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=unpack_err,
                cwd=NEUTRAL_CWD,
                env={"PATH": ROOT_PATH, "LC_ALL": "C", "HOME": NEUTRAL_CWD},
                **self.runner.popen_kwargs(),
            )
            assert pack.stdout is not None and unpack.stdin is not None
            copied, over = 0, False
            try:
                while moved := os.splice(pack.stdout.fileno(), unpack.stdin.fileno(), 1 << 20):
                    copied += moved
                    if copied > self.limits.copy_limit:
                        over = True
                        pack.kill()
                        break
            except OSError:
                pass  # the unpacking side died; its status says why
            finally:
                pack.stdout.close()
                unpack.stdin.close()
            packed, unpacked = pack.wait(), unpack.wait()
            problems = ""
            for errors in (pack_err, unpack_err):
                errors.seek(0)
                problems += errors.read()[-4096:].decode(errors="replace")
        if over:
            remove_tree(dst)
            raise BencherError(
                507,
                f"the source tree is larger than the copy limit of {self.limits.copy_limit} "
                "bytes (limit: copy size); remove large files from it",
            )
        # GNU tar exits 1 when a file changed while it was read: the copy is still made.
        if packed > 1 or unpacked != 0:
            if unpacked in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
                problems = (
                    f"a file is larger than the file-size limit of {self.limits.file_size} bytes "
                    "(limit: file size)\n" + problems
                )
            raise BencherError(500, f"copying {tree} for the check failed: {problems.strip()[-500:]}")
        return dst

    def _patched(self, kind: str, change: bytes) -> Path:
        """A copy of the original with `change` applied as sse-runner. Raises ChangeFailed."""
        tree = self._copy(kind)
        if change.strip():
            try:
                with self._staged({"change.diff": change}) as stage:
                    self._apply(stage / "change.diff", tree, binary=True)
            except BencherError as exc:
                remove_tree(tree)
                raise ChangeFailed(exc.message) from None
        return tree

    def _agent_tree(self, kind: str) -> tuple[Path, str]:
        """A check's tree for the agent: the original with the graded part of its change now, and a note of
        what of its change was set aside. Raises ChangeFailed."""
        from ssebench.runtime.capture import CaptureError

        try:
            change = self.changes()
        except CaptureError as exc:
            raise ChangeFailed(f"capturing your change failed: {exc}") from None
        tree = self._patched(kind, change.graded)
        return tree, set_aside_note(change.set_aside)

    def prepare_graded(self, change: bytes) -> None:
        """Make the graded tree: the original with the graded part of the change. Raises ChangeFailed when
        the change does not apply."""
        with self.lock:
            self._ensure_session()
            self.graded_change = change
            self.graded_tree = self._patched("graded", change)

    @contextmanager
    def _tree(self, grading: bool, kind: str, spend: bool = False) -> Iterator[tuple[Path, str]]:
        """Where a check runs, and a note for its output: for grading, the graded tree (made again from the
        graded change once the hidden tests spent it); for the agent, a fresh tree of its change now.
        Removed after, but for the graded tree until it is spent. Raises ChangeFailed.

        `spend`: the check changes the tree for good (the hidden tests), so the tree is removed after it and
        nothing later runs there.
        """
        if grading:
            if self.graded_change is None:
                raise BencherError(409, "grading was not prepared: POST /prepare_grading first")
            shared = self.graded_tree if self.graded_tree and self.graded_tree.is_dir() else None
            tree, note = shared or self._patched(kind, self.graded_change), ""
        else:
            shared = None
            tree, note = self._agent_tree(kind)
        try:
            yield tree, note
        finally:
            if shared is None or spend:
                remove_tree(tree)
                if shared is not None:
                    self.graded_tree = self.last_build = None

    @contextmanager
    def _staged(self, files: dict[str, Path | bytes]) -> Iterator[Path]:
        """Files for one check (hidden ones, the agent's change), in a root-made directory beside the copies,
        readable by the runner; a file of the task's keeps its execute bit, bytes are data."""
        stage = self._fresh_dir("stage", None, 0o750)
        try:
            fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                for name, src in files.items():
                    if isinstance(src, bytes):
                        data, mode = src, 0o640
                    else:
                        data, mode = src.read_bytes(), 0o750 if os.access(src, os.X_OK) else 0o640
                    create_exclusive(fd, name, data, mode)
                    os.chown(name, 0, self.runner.gid, dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(fd)
            yield stage
        finally:
            remove_tree(stage)

    # -- running ----------------------------------------------------------------

    def _env(self, cwd: Path) -> dict[str, str]:
        session = self._ensure_session()
        home, tmp = session / "home", session / "tmp"
        env = dict(self.base_env)
        env.update(
            HOME=str(home),
            TMPDIR=str(tmp),
            TMP=str(tmp),
            TEMP=str(tmp),
            PWD=str(cwd),
            USER=self.runner.name,
            LOGNAME=self.runner.name,
            XDG_CACHE_HOME=str(home / ".cache"),
            GOCACHE=str(home / ".cache" / "go-build"),
            GOTMPDIR=str(tmp),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CEILING_DIRECTORIES=str(session),
        )
        return env

    def _run(self, label: str, argv: list[str], cwd: Path, *, note: str = "", reports: bool = False) -> ScriptResult:
        """Run one script as sse-runner in `cwd`; `note` goes at the head of its stderr; with `reports`, a
        crash report in its output (`crash_report`) fails it whatever its exit status."""
        self.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = f"{time.time_ns() // 1_000_000}-{secrets.token_hex(2)}"
        out_path, err_path = self.scratch / f"{stamp}.out", self.scratch / f"{stamp}.err"
        started = time.monotonic()
        timed_out = False
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                confined(argv, self.limits.file_size),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self._env(cwd),
                start_new_session=True,
                **self.runner.popen_kwargs(),
            )
            try:
                code = wait(process, self.limits.script_timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(process.pid)
                process.wait()
                code = TIMED_OUT
            finally:
                # Whatever the script started, in its group or not, ends here.
                kill_user(self.runner)
        duration = time.monotonic() - started
        reported = crash_report([out_path, err_path], self.task.language) if reports else None
        stdout = read_tail(out_path, self.limits.output_cap)
        stderr = note + read_tail(err_path, self.limits.output_cap)
        out_path.unlink()
        err_path.unlink()
        if timed_out:
            stderr += f"\n[ssebench: {label} killed after its time limit of {self.limits.script_timeout:.0f} s]\n"
        if reported is not None and code == 0:
            code = CRASH_REPORTED
            stderr += (
                f"\n[ssebench: the output holds a crash report ({reported}): the PoC still reproduces, "
                "whatever the exit status]\n"
            )
        self._log(stamp, label, argv, cwd, code, duration, stdout, stderr)
        return ScriptResult(code=code, stdout=stdout, stderr=stderr)

    def _log(
        self, stamp: str, label: str, argv: list[str], cwd: Path, code: int, duration: float, stdout: str, stderr: str
    ) -> None:
        record = {"check": label, "argv": argv, "cwd": str(cwd), "code": code, "duration": round(duration, 3)}
        try:
            with (self.results / f"scriptrunner-{stamp}.log").open("x", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n--- stdout ---\n" + stdout + "\n--- stderr ---\n" + stderr)
        except OSError:
            pass  # a full or missing results dir must not fail the check

    def _script(self, name: str, path: str | None) -> Path:
        if path is None:
            raise BencherError(404, f"this task has no {name} script")
        return self.task_dir / path

    @contextmanager
    def _turn(self, guard: Guard) -> Iterator[None]:
        with self.lock:
            guard()
            yield

    # -- the checks -------------------------------------------------------------

    def build(self, grading: bool = False, guard: Guard = _no_guard) -> ScriptResult:
        script = self._script("build", self.task.build_script)
        with self._turn(guard):
            if grading:
                if self.graded_change is None:
                    raise BencherError(409, "grading was not prepared: POST /prepare_grading first")
                copy = (
                    self.graded_tree
                    if self.graded_tree and self.graded_tree.is_dir()
                    else self._patched("graded", self.graded_change)
                )
                note = ""
            else:
                try:
                    copy, note = self._agent_tree("build")
                except ChangeFailed as exc:
                    return _no_tree(str(exc))
            result = self._run("build", ["bash", str(script)], copy, note=note)
            if self.last_build is not None and self.last_build != copy:
                remove_tree(self.last_build)  # an agent that builds again and again keeps one build, not all
            self.last_build = copy
            self.graded_tree = copy if grading else None
            return result

    def poc_path(self, poc: str) -> str:
        """The config entry of a PoC given as the path /project reported, or as the entry itself."""
        for entry in self.task.poc:
            if poc in (entry, str(self.task_dir / entry)):
                return entry
        raise BencherError(400, f"unknown PoC {poc!r}; use one of the paths GET /project lists")

    def run_poc(self, poc: str, guard: Guard = _no_guard) -> ScriptResult:
        return self._run_input(self.poc_path(poc), guard)

    def run_variant(self, variant: str) -> ScriptResult:
        """Run a variant input as a PoC is run (grading's only: the daemon never takes it from an agent)."""
        if variant not in self.task.variants:
            raise BencherError(400, f"unknown variant {variant!r}")
        return self._run_input(variant, _no_guard)

    def _run_input(self, entry: str, guard: Guard) -> ScriptResult:
        """The run script on one input of the task's (a PoC or a variant: `entry` in config.yaml), against
        the last build."""
        script = self._script("run", self.task.run_script)
        name = Path(entry).name
        with self._turn(guard):
            build = self.last_build
            if build is None or not build.exists():
                return ScriptResult(code=NO_BUILD, stdout="", stderr="no build yet: run the build first")
            with self._staged({"run.sh": script, name: self.task_dir / entry}) as stage:
                return self._run("run_poc", ["bash", str(stage / "run.sh"), str(stage / name)], build, reports=True)

    def function_test(self, grading: bool = False, guard: Guard = _no_guard) -> ScriptResult:
        script = self._script("test", self.task.test_script)
        with self._turn(guard):
            try:
                with self._tree(grading, "test") as (tree, note):
                    return self._run("function_test", ["bash", str(script)], tree, note=note)
            except ChangeFailed as exc:
                return _no_tree(str(exc))

    def intent_test(self, grading: bool = False, guard: Guard = _no_guard) -> ScriptResult:
        script = self._script("test", self.task.test_script)
        if self.task.future_test is None:
            raise BencherError(404, "this task has no hidden tests")
        with self._turn(guard):
            try:
                with self._tree(grading, "intent", spend=True) as (tree, note):
                    with self._staged({"hidden.diff": self.task_dir / self.task.future_test}) as stage:
                        self._apply(stage / "hidden.diff", tree)
                    return self._run("intent_test", ["bash", str(script)], tree, note=note)
            except ChangeFailed as exc:
                return _no_tree(str(exc))

    def _apply(self, diff: Path, tree: Path, *, binary: bool = False) -> None:
        """Apply `diff` to `tree` as sse-runner, as a plain patch: never through a repository of the tree's.

        Code of the agent's ran in the graded tree before the hidden tests and could leave a `.git` there
        whose configuration runs a filter on every file; so git starts in the session directory (root's,
        where nobody else can make a `.git`), looks no higher (git ignores a ceiling that is its working
        directory, so the ceiling is the session's parent) and reaches the tree by `--directory`.
        Whatever goes wrong raises BencherError `git apply failed: ...`, which grading counts as the
        patch's failure (the hidden tests' intent test fails; the agent's change does not apply), never as
        an ungraded error.
        """
        session = self._ensure_session()
        argv = git.argv(
            "apply",
            "-p1",
            "--whitespace=nowarn",
            *(["--binary"] if binary else []),
            f"--directory={tree.relative_to(session)}",
            str(diff),
        )
        try:
            applied = subprocess.run(
                confined(argv, self.limits.file_size),
                cwd=session,
                capture_output=True,
                check=False,
                timeout=APPLY_TIMEOUT,
                env=git.env(str(session / "home"), GIT_CEILING_DIRECTORIES=str(session.parent)),
                **self.runner.popen_kwargs(),
            )
        except subprocess.TimeoutExpired:
            raise BencherError(500, f"git apply failed: it did not finish within {APPLY_TIMEOUT} s") from None
        finally:
            kill_user(self.runner)
        if applied.returncode != 0:
            raise BencherError(
                500, "git apply failed: " + applied.stderr.decode("utf-8", errors="replace").strip()[-2000:]
            )


def set_aside_note(paths: tuple[str, ...] | list[str], shown: int = 10) -> str:
    """What a check says of the changes it set aside (files outside the code under repair); "" for none."""
    if not paths:
        return ""
    named = ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
    return (
        f"[ssebench: set aside, as grading sets them aside: your changes to {len(paths)} file(s) outside "
        f"the code under repair (build files, tests, harnesses, data): {named}]\n"
    )


def _no_tree(message: str) -> ScriptResult:
    return ScriptResult(code=NO_TREE, stdout="", stderr=f"[ssebench: no tree to check: {message}]\n")
