"""The task container's entrypoint (sandbox mode), as root.

1. results (0755 in its 0700 parent) and archive (model's) prepared; the
   runner's area taken empty, and the agent's tree prepared in its volume:
   grading's original kept, its `.git` written, given to model
   (`ssebench.runtime.tree`);
2. the daemon started on its three listeners, bound here first, and awaited:
   it says on a pipe once it serves (SSE_DAEMON_TIMEOUT); nothing of the agent
   runs while it starts, so nothing the agent does can starve its start-up;
3. the MCP server's socket bound; the server starts when its first client
   connects (never, for an agent that does not use it);
4. the agent command (the image's CMD) run as model, in its own session,
   stdin /dev/null, output to agent.log, killed with its whole process group
   at TIMEOUT seconds (exit status 124);
5. POST /admin/agent_exited on the admin socket;
6. the evaluator, with SSE_DAEMON_SOCKET set to the admin socket: started with
   the agent, it has loaded what grading needs by the time it is told, on its
   stdin, the agent phase's figures (AGENT_DURATION, AGENT_EXIT_STATUS,
   SSE_METRIC_AGENT_TIMEOUT), and grades;
7. exit with the agent's status; SSE_KEEP_ALIVE=1 keeps the container up.

Every component logs to its own file in the results directory. Root starts
in `/` and every runtime process is an isolated Python (`-I`) started from
`/`, so a module the agent writes into its tree (where an image's WORKDIR
usually points) is never imported by root. The agent's command runs
confined (file-size limit, first in line for the OOM killer). After grading,
the archive is pruned to regular files and directories under its caps, and
what the run's cgroup counted (OOM kills, forks refused at the pids limit,
CPU throttling) goes to limits.json.

Sidecar mode (SSE_ROLE) moves only the agent out, into a container that holds
nothing that grades:

- the task container (`task`) does everything above but run the agent: it
  prepares the tree, serves the daemon and the MCP server (on its own
  network address, for the agent container), starts the evaluator, and
  waits, in place of step 4, for the host to tell it the agent phase is
  over (`await_agent`: the agent's figures through a fifo of root's, which
  the host writes with `docker exec`, `ssebench.runtime.phase`); then steps
  5 to 7, the archive pruned and its own cgroup's counts in limits.json;
- the agent container (`agent`) only waits until the daemon answers on the
  shared agent socket, runs the agent as model (step 4, its output on the
  container's own log), ends every process of model, and exits with the
  agent's status. It has no /ssebench, no admin socket, no results: an agent
  that became root there can change nothing of its grade. The tree's path
  comes in SSE_SOURCE.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ssebench.runtime import contract, listeners, phase
from ssebench.runtime.contract import RuntimeSettings, SettingsError, load_settings
from ssebench.runtime.files import check_root_path, prune_tree, write_atomic
from ssebench.runtime.process import NEUTRAL_CWD, User, clear_user, confined, kill_group, python_command, wait

TIMED_OUT = 124
LOG_DIR = Path(contract.MCP_LOG_DIR)
# Shared scratch directories: model's alone, so nothing sse-runner runs can
# leave a file there for the agent to pick up.
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def say(message: str) -> None:
    """One line of the entrypoint's own on the container's log, stamped to the millisecond (UTC)."""
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
    print(f"[ssebench-entrypoint {stamp}] {message}", file=sys.stderr, flush=True)


def prepare_dirs(settings: RuntimeSettings, model: User) -> None:
    """The results (the container that grades only), the archive (model's), the shared scratch directories
    and the MCP server's log directory."""
    if settings.role != "agent":
        results = Path(settings.results)
        results.parent.mkdir(parents=True, exist_ok=True)
        os.chown(results.parent, 0, 0)
        os.chmod(results.parent, 0o700)
        results.mkdir(exist_ok=True)
        os.chmod(results, 0o755)
    if settings.role == "task":  # the agent socket's directory, a volume the agent container mounts too
        sockets = Path(settings.agent_socket).parent
        sockets.mkdir(parents=True, exist_ok=True)
        os.chown(sockets, 0, 0)
        os.chmod(sockets, 0o755)
    archive = Path(settings.archive)
    if archive.is_symlink():
        archive.unlink()
    archive.mkdir(parents=True, exist_ok=True)
    os.chown(archive, model.uid, model.gid)
    os.chmod(archive, 0o755)
    for shared in SHARED_TMP:
        if os.path.isdir(shared) and not os.path.islink(shared):
            os.chown(shared, 0, model.gid)
            os.chmod(shared, 0o1770)
    if not LOG_DIR.is_dir() or LOG_DIR.is_symlink():
        LOG_DIR.unlink(missing_ok=True)
        LOG_DIR.mkdir(mode=0o755)
    os.chown(LOG_DIR, 0, 0)
    os.chmod(LOG_DIR, 0o755)


def prepare_runner_area(runner_gid: int) -> str:
    """Where grading builds (contract.RUNNER_DIR), made root's and traversable by sse-runner; what it is.

    A run mounts a volume of its own there, which the engine makes empty and root's; without one (a tool
    image started by hand) it is the image's directory. Either way it is taken only as an empty, real
    directory reached through no link: nothing in it may have been prepared for root to find (the
    bencher's names are random, but nothing else is expected there either). Raises RuntimeError.
    """
    path = contract.RUNNER_DIR
    try:
        check_root_path(path)
        if entries := os.listdir(path):
            raise ValueError(f"{path} must be empty when a run starts, but holds " + ", ".join(sorted(entries)[:5]))
    except (ValueError, OSError) as exc:
        raise RuntimeError(f"the runner's area: {exc}") from None
    os.chown(path, 0, runner_gid)
    os.chmod(path, 0o710)
    return mounted(path)


def mounted(path: str) -> str:
    """What is at `path`: a volume (with its file system's type), or the image's own directory."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 4 and fields[4] == path:
                return f"a volume ({fields[fields.index('-') + 1]})"
    return "the image's directory"


def start(
    module: str, log: IO[bytes], env: dict[str, str], *, stdin: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """A runtime process: isolated Python, started in `/`."""
    return subprocess.Popen(python_command(module), cwd=NEUTRAL_CWD, stdin=stdin, stdout=log, stderr=log, env=env)


def start_evaluator(settings: RuntimeSettings, env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """The evaluator, started with the agent: it loads what grading needs while the agent works, then waits
    on its stdin (a pipe of root's) for the agent phase's figures before it grades
    (`ssebench.runtime.evaluator`)."""
    return start(
        "ssebench.runtime.evaluator", log, {**env, "SSE_DAEMON_SOCKET": settings.admin_socket}, stdin=subprocess.PIPE
    )


def evaluate(
    settings: RuntimeSettings,
    env: dict[str, str],
    evaluator: subprocess.Popen[bytes],
    log: IO[bytes],
    log_path: Path,
    figures: dict[str, str],
) -> None:
    """Have the evaluator grade, with the agent phase's `figures`, and wait for it (the grading time limit
    and some slack). One that ended while the agent ran (the OOM killer's choice, say) is replaced by a
    fresh one; one that ends without a grade leaves an error that names its status."""
    if evaluator.poll() is not None:
        say(f"the evaluator started with the agent has exited (status {evaluator.returncode}); starting another")
        if evaluator.stdin is not None:
            evaluator.stdin.close()
        for attempt in range(5):  # the agent's processes are gone: their pids come back as they are reaped
            try:
                evaluator = start_evaluator(settings, env, log)
                break
            except OSError as exc:
                say(f"starting the evaluator failed (attempt {attempt + 1} of 5): {exc}")
                time.sleep(1)
        else:
            write_error(settings, "the evaluator could not be started")
            return
    assert evaluator.stdin is not None
    try:
        evaluator.stdin.write(json.dumps(figures).encode() + b"\n")
        evaluator.stdin.close()
    except OSError:
        pass  # it ended meanwhile: its status says so, below
    try:
        status = wait(evaluator, settings.grading_timeout + 120)
    except subprocess.TimeoutExpired:
        end(evaluator)
        write_error(settings, "the evaluator did not exit")
        return
    if not (Path(settings.results) / "result.json").exists():
        write_error(settings, f"the evaluator exited with status {status} without a grade:\n{_tail(log_path)}")


@dataclass
class Served:
    """A server started on sockets bound for it here; `ready` is the pipe on which it says it serves."""

    process: subprocess.Popen[bytes]
    ready: int
    log: Path
    said: bool = False
    silent: bool = False  # it exited without saying so: the pipe's end closed with nothing on it
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, timeout: float = 0.0) -> bool:
        """Whether it has said it serves (it writes one byte once it does), waiting up to `timeout` seconds;
        False at once when it has exited without saying so (its end of the pipe is closed)."""
        with self._lock:
            if not (self.said or self.silent):
                poller = select.poll()
                poller.register(self.ready, select.POLLIN)
                if poller.poll(max(0, int(timeout * 1000))):
                    said = os.read(self.ready, 1)
                    self.said, self.silent = said == b"1", said != b"1"
            return self.said

    def failed_to_start(self) -> bool:
        """It exited without ever serving: the harness's failure, not the agent's (which cannot signal root,
        and whose processes the OOM killer takes first)."""
        return self.process.poll() is not None and not self.started()


def serve(module: str, log: Path, env: dict[str, str], bound: dict[str, socket.socket]) -> Served:
    """Start a runtime process that serves on the sockets `bound` here, by name.

    It finds their numbers in SSE_LISTEN_FDS and a pipe's in SSE_READY_FD,
    on which it writes one byte once it serves (`ssebench.runtime.listeners`).
    This process keeps no copy of the sockets, so they close when that
    process ends. Clients may connect at once: the kernel queues them until
    it serves.
    """
    fds = tuple(sock.fileno() for sock in bound.values())
    try:
        read, write = os.pipe()
        try:
            env = {**env, contract.LISTEN_FDS: listeners.encode(bound), contract.READY_FD: str(write)}
            with log.open("ab") as out:
                process = subprocess.Popen(
                    python_command(module),
                    cwd=NEUTRAL_CWD,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    env=env,
                    pass_fds=(*fds, write),
                )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
    finally:
        for sock in bound.values():
            sock.close()
    return Served(process, read, log)


class OnDemand:
    """A server started only when its first client connects to the socket bound for it here.

    The MCP server is the heaviest runtime process to start (mcp, pydantic, its HTTP stack), and an agent
    that never calls it (the SDK's agents, the dummy) paid for that start on the same cores as its own. A
    thread waits until a connection is queued on the listener, then starts the server on it (`serve`);
    the client waits in the queue meanwhile, as it would for a server still loading. A start that fails
    (the agent holding every pid, say) refuses that client and keeps the socket for the next one.
    """

    def __init__(self, module: str, log: Path, env: dict[str, str], listener: socket.socket) -> None:
        self._args = (module, log, env)
        self._listener = listener
        listener.setblocking(False)  # a refused client is taken off the queue without waiting
        self._lock = threading.Lock()
        self._closed = False
        self.server: Served | None = None
        self.failures = 0
        self._wake, self._stop = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="mcp-on-demand", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                watched = [self._listener.fileno(), self._wake]
            readable, _, _ = select.select(watched, [], [])
            with self._lock:
                if self._closed or self._wake in readable:
                    return
                try:  # a copy of the socket goes to the server; this one stays until it serves
                    self.server = serve(*self._args, {listeners.MCP: self._listener.dup()})
                    self._listener.close()
                    return
                except OSError as exc:
                    self.failures += 1
                    if self.failures in (1, 10, 100) or self.failures % 1000 == 0:  # not a line for every try
                        say(
                            f"the MCP server could not be started ({exc}; {self.failures} attempt(s)); "
                            "the next client tries again"
                        )
                    with contextlib.suppress(OSError):
                        self._listener.accept()[0].close()
            time.sleep(0.1)  # a client left in the queue (the refusal failed too) is not retried in a loop

    def close(self) -> Served | None:
        """No start from now on; the server if one was started (else the listener is closed unserved).

        The watcher selects on the listener outside the lock: the listener is closed only once the watcher
        has returned (or never, if it does not), or its select would be on a closed descriptor, one the
        kernel may already have given to another file.
        """
        with self._lock:
            self._closed = True
        os.write(self._stop, b"x")
        self._thread.join(5)
        with self._lock:
            server = self.server
            if server is None and not self._thread.is_alive():
                self._listener.close()
        if not self._thread.is_alive():
            os.close(self._wake)
            os.close(self._stop)
        return server


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_for(what: str, ready: Callable[[], bool], timeout: float, log: Path) -> None:
    """Poll `ready` until it holds (a server of another container: sidecar mode's daemon)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.02)
    raise RuntimeError(f"the {what} did not become ready within {timeout:.0f} s:\n{_tail(log)}")


# How long root waits for the daemon's answer to agent_exited (it ends model's processes and captures the
# patch first), as the SDK waits.
ADMIN_TIMEOUT = 4 * 3600.0


def http_status(address: str | tuple[str, int], method: str, path: str, timeout: float) -> int | None:
    """The status of one HTTP/1.1 request (an empty JSON body for POST) to a unix socket path or a (host,
    port); None when nothing answers in HTTP.

    Plain sockets, not an HTTP library: the entrypoint asks this while the daemon starts beside it, on the
    same cores, and an import of httpx or urllib costs more than the rest of its start-up.
    """
    body = b"{}" if method == "POST" else b""
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    deadline = time.monotonic() + timeout  # for the whole exchange, not for each read

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(left())
            sock.connect(address)
            sock.settimeout(left())
            sock.sendall(request)
            head = b""
            while b"\r\n" not in head and len(head) < 1024:
                sock.settimeout(left())
                chunk = sock.recv(1024)
                if not chunk:
                    break
                head += chunk
    except OSError:  # TimeoutError among them
        return None
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


def admin_post(settings: RuntimeSettings, path: str) -> None:
    status = http_status(settings.admin_socket, "POST", path, ADMIN_TIMEOUT)
    if status != 200:
        raise RuntimeError(f"POST {path} on the admin socket: " + (f"status {status}" if status else "no answer"))


def agent_env(settings: RuntimeSettings, model: User) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SSE_ADMIN_SOCKET"}
    env.update(
        HOME=model.home,
        USER=model.name,
        LOGNAME=model.name,
        SHELL="/bin/bash",
        SSE_DAEMON_SOCKET=settings.agent_socket,
        SSE_ARCHIVE=settings.archive,
        SSE_DIFFICULTY=str(settings.difficulty),
        TIMEOUT=str(int(settings.agent_timeout)),
        SSE_MCP_URL=settings.mcp_url,  # the socket root bound (loopback's 127.0.0.1, not ::1; sidecar mode's task)
    )
    return env


def run_agent(
    command: list[str], settings: RuntimeSettings, model: User, cwd: str, log: IO[bytes]
) -> tuple[int, float, bool]:
    """(exit status, seconds, timed out)."""
    started = time.monotonic()
    try:
        agent = subprocess.Popen(
            confined(command, settings.file_size),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=agent_env(settings, model),
            start_new_session=True,
            **model.popen_kwargs(),
        )
    except OSError as exc:
        log.write(f"[ssebench] cannot start the agent command {command}: {exc}\n".encode())
        return 127, time.monotonic() - started, False
    try:
        status = wait(agent, settings.agent_timeout)
        return status, time.monotonic() - started, False
    except subprocess.TimeoutExpired:
        kill_group(agent.pid)
        agent.wait()
        return TIMED_OUT, time.monotonic() - started, True


def write_error(settings: RuntimeSettings, message: str) -> None:
    from ssebench.runtime.evaluator import error_result, runtime_result

    result = {"patch_result": error_result(message), "runtime_result": runtime_result({}, False)}
    write_atomic(Path(settings.results), "result.json", json.dumps(result, indent=2) + "\n")


def _cgroup_file(*names: str) -> dict[str, int]:
    """`key value` lines of the first cgroup file that exists (v1 or v2 layout)."""
    for name in names:
        try:
            text = Path("/sys/fs/cgroup", name).read_text()
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                values[key] = int(value)
        return values
    return {}


def _cgroup_value(*names: str) -> int | None:
    for name in names:
        try:
            text = Path("/sys/fs/cgroup", name).read_text().strip()
        except OSError:
            continue
        return int(text) if text.isdigit() else None
    return None


def limits_report() -> dict[str, object]:
    """What the container's cgroup counted: OOM kills, forks refused at the pids limit, CPU throttling."""
    memory = _cgroup_file("memory/memory.oom_control", "memory.events")
    pids = _cgroup_file("pids/pids.events", "pids.events")
    cpu = _cgroup_file("cpu/cpu.stat", "cpu,cpuacct/cpu.stat", "cpu.stat")
    report: dict[str, object] = {
        "memory": {
            "oom_kills": memory.get("oom_kill"),
            "limit": _cgroup_value("memory/memory.limit_in_bytes", "memory.max"),
            "peak": _cgroup_value("memory/memory.max_usage_in_bytes", "memory.peak"),
        },
        "pids": {"refused": pids.get("max"), "limit": _cgroup_value("pids/pids.max", "pids.max")},
        "cpu": {"throttled": cpu.get("nr_throttled")},
    }
    hit = []
    if memory.get("oom_kill"):
        hit.append(f"memory: the OOM killer ended {memory['oom_kill']} process(es)")
    if pids.get("max"):
        hit.append(f"pids: {pids['max']} fork(s) refused at the limit")
    report["hit"] = hit
    return report


def finish_archive(settings: RuntimeSettings) -> None:
    """Leave the archive regular files and directories under their caps (model no longer runs)."""
    pruned = prune_tree(
        Path(settings.archive),
        file_cap=settings.archive_file_cap,
        total_cap=settings.archive_cap,
        max_entries=settings.archive_entries,
    )
    record = {
        "kept_files": pruned.kept_files,
        "kept_bytes": pruned.kept_bytes,
        "dropped": pruned.dropped,
        "dropped_count": pruned.dropped_count,
        "unfinished": pruned.unfinished,
    }
    write_atomic(Path(settings.results), "archive.json", json.dumps(record, indent=2) + "\n")


def start_daemon(settings: RuntimeSettings, env: dict[str, str]) -> Served:
    """The daemon, on its three listeners bound here, once it serves. Raises RuntimeError (with its log's
    tail) when it exits first or is not ready within SSE_DAEMON_TIMEOUT, OSError when a listener cannot be
    bound.

    The agent starts only after this: the daemon's start-up forks and makes threads, and an agent running
    beside it could starve those (every pid, every CPU) to turn its own run into an ungraded error.
    """
    bound = listeners.daemon_listeners(settings.agent_socket, settings.admin_socket, settings.http_port)
    daemon = serve("ssebench.runtime.daemon", Path(settings.results) / "daemon.log", env, bound)
    if daemon.started(settings.daemon_timeout):
        return daemon
    status = None
    if daemon.silent:  # its end of the pipe closed with nothing on it: it has exited, or is exiting now
        with contextlib.suppress(subprocess.TimeoutExpired):
            status = wait(daemon.process, 10)
    end(daemon.process)
    why = (
        f"the daemon exited with status {status} while starting"
        if status is not None
        else f"the daemon did not become ready within {settings.daemon_timeout:.0f} s"
    )
    raise RuntimeError(f"{why}:\n{_tail(daemon.log)}")


def start_mcp(settings: RuntimeSettings, env: dict[str, str]) -> OnDemand:
    """The MCP server's socket bound (loopback); the server starts when its first client connects. Its log
    is there either way (empty when no client came)."""
    log = Path(settings.results) / "mcp.log"
    log.touch()
    daemon = {"SSE_DAEMON_SOCKET": settings.agent_socket}
    if settings.role == "task":
        # The agent socket's directory is a volume the agent container shares, whose root may be the agent's:
        # a root process here never talks to a socket found there, but to the daemon's own loopback listener.
        env = {k: v for k, v in env.items() if k != "SSE_DAEMON_SOCKET"}
        daemon = {"SSE_AGENT_DOCKER": f"127.0.0.1:{settings.http_port}"}
    return OnDemand("ssebench.runtime.mcp_server", log, {**env, **daemon}, listeners.mcp_listener(settings.mcp_bind))


def end(process: subprocess.Popen[bytes]) -> None:
    """End a runtime process whose work is done. Killed, not asked: what it had to write (the grade, the
    logs, line by line) is written, and the daemon's graceful shutdown (its three servers' loops) took
    0.2 s of every run."""
    process.kill()
    process.wait()


def write_limits(settings: RuntimeSettings, name: str) -> None:
    report = limits_report()
    write_atomic(Path(settings.results), name, json.dumps(report, indent=2) + "\n")
    for line in report["hit"]:  # type: ignore[attr-defined]
        say(f"limit hit: {line}")


def wait_for_stop() -> None:
    """Block until SIGTERM or SIGINT."""
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    while signal.sigtimedwait(signals, 1.0) is None:
        pass


# Sidecar mode: how long the task container waits for the host to say the agent phase is over, beyond the
# agent's time limit (the host stops the agent container at its limit, and says so, well before).
AGENT_DONE_SLACK = 900.0


def await_agent(settings: RuntimeSettings, done: int) -> tuple[int, float, bool]:
    """Sidecar mode's task container: wait for the agent phase's figures, which the host writes into the fifo
    `done` once the agent container has exited (`ssebench.runtime.phase`); (exit status, seconds, timed out).

    Without word from the host by the agent's time limit and some slack, the phase is over all the same:
    the run is graded as one whose agent timed out.
    """
    started = time.monotonic()
    deadline = started + settings.agent_timeout + AGENT_DONE_SLACK
    poller = select.poll()
    poller.register(done, select.POLLIN)
    line = b""
    while b"\n" not in line:
        left = deadline - time.monotonic()
        if left <= 0:
            say(f"no word from the host of the agent's end within {settings.agent_timeout + AGENT_DONE_SLACK:.0f} s")
            return TIMED_OUT, time.monotonic() - started, True
        if poller.poll(min(left, 5.0) * 1000):
            try:
                line += os.read(done, 4096)
            except BlockingIOError:
                continue
    try:
        figures = json.loads(line.split(b"\n", 1)[0])
        status = int(figures.get("AGENT_EXIT_STATUS", TIMED_OUT))
        duration = float(figures.get("AGENT_DURATION", time.monotonic() - started))
        timed_out = str(figures.get("SSE_METRIC_AGENT_TIMEOUT", "")).lower() == "true"
    except (ValueError, TypeError, AttributeError) as exc:
        say(f"the host's figures of the agent's end are unreadable ({exc}): graded as timed out")
        return TIMED_OUT, time.monotonic() - started, True
    return status, duration, timed_out


def agent_socket_ready(settings: RuntimeSettings) -> bool:
    """Whether the daemon answers on the agent socket (sidecar mode's agent container: the shared one)."""
    return os.path.exists(settings.agent_socket) and http_status(settings.agent_socket, "GET", "/version", 2) == 200


def run_agent_container(settings: RuntimeSettings, model: User, command: list[str]) -> int:
    """Sidecar mode's agent container: once the daemon answers, the agent as model; its status.

    Nothing here grades or writes what grading reads: the agent's output goes to this container's log, and
    the host tells the task container when this container has exited.
    """
    try:
        wait_for("daemon", lambda: agent_socket_ready(settings), settings.daemon_timeout, Path(os.devnull))
    except RuntimeError as exc:
        say(f"infrastructure failure: {exc}")
        return 1
    say(f"agent: {' '.join(command)} (timeout {settings.agent_timeout:.0f} s, difficulty {settings.difficulty})")
    sys.stdout.flush()
    status, duration, timed_out = run_agent(command, settings, model, settings.source, sys.stdout.buffer)
    say(f"agent exited with status {status} after {duration:.1f} s" + (" (timed out)" if timed_out else ""))
    try:  # nothing of the agent may go on changing the shared tree while it is captured and graded
        say(f"ended {clear_user(model)} leftover process(es) and IPC object(s) of {model.name}")
    except OSError as exc:
        say(f"ending {model.name}'s processes failed: {exc}")
    for line in limits_report()["hit"]:  # type: ignore[attr-defined]
        say(f"limit hit: {line}")  # on this stream of the container's log, which the agent's output is not on
    return status


def main(argv: list[str]) -> int:
    os.chdir(NEUTRAL_CWD)  # never work in a directory an image's WORKDIR (the agent's tree) names
    try:
        settings = load_settings()
    except SettingsError as exc:
        say(f"refusing to start: {exc}")
        return 2

    say(f"starting ({settings.role})")
    model = User.named(contract.MODEL)
    prepare_dirs(settings, model)
    command = argv or ["true"]
    if settings.role == "agent":
        return run_agent_container(settings, model, command)

    # The container that grades, and where the task is: sandbox mode's one, sidecar mode's task container.
    from ssebench.runtime.taskfile import load_taskfile
    from ssebench.runtime.tree import prepare_tree

    try:
        say(f"the runner's area is {prepare_runner_area(User.named(contract.RUNNER).gid)}")
        source = load_taskfile(Path(contract.TASK_DIR) / "config.yaml").source
        started = time.monotonic()
        entries = prepare_tree(Path(source), model)
        say(
            f"the agent's tree is {mounted(source)}, model's: {entries} entries, its original kept for "
            f"grading, in {time.monotonic() - started:.2f} s"
        )
    except (RuntimeError, OSError, ValueError) as exc:  # OSError, ValueError: no readable config.yaml
        say(f"refusing to start: {exc}")
        write_error(settings, f"the runtime failed to start: {exc}")
        return 1
    results = Path(settings.results)
    env = {**os.environ, "SSE_RESULTS": settings.results}
    daemon: Served | None = None
    try:
        done = phase.make_fifo() if settings.role == "task" else None
        daemon = start_daemon(settings, env)
        mcp = start_mcp(settings, env)
    except (RuntimeError, OSError) as exc:
        say(f"infrastructure failure: {exc}")
        write_error(settings, f"the runtime failed to start: {exc}")
        if daemon is not None:
            end(daemon.process)
        write_limits(settings, "limits.json")
        return 1
    say(contract.SERVING)

    evaluator_log = (results / "evaluator.log").open("ab")
    evaluator = start_evaluator(settings, env, evaluator_log)
    if done is None:
        say(f"agent: {' '.join(command)} (timeout {settings.agent_timeout:.0f} s, difficulty {settings.difficulty})")
        with (results / "agent.log").open("ab") as agent_log:
            status, duration, timed_out = run_agent(command, settings, model, source, agent_log)
    else:
        say(f"agent: in its own container (timeout {settings.agent_timeout:.0f} s, difficulty {settings.difficulty})")
        status, duration, timed_out = await_agent(settings, done)
        os.close(done)
    say(f"agent exited with status {status} after {duration:.1f} s" + (" (timed out)" if timed_out else ""))

    ended = False
    for attempt in range(3):
        try:
            admin_post(settings, "/admin/agent_exited")
            ended = True
            break
        except Exception as exc:
            say(f"agent_exited failed (attempt {attempt + 1} of 3): {exc}")
            time.sleep(1)
    # An MCP server that never served failed the run, not the agent: the run is an error, and is not graded.
    # One that served and then ended is the agent's lookout, as any tool that failed it (its log says so).
    # One that no client asked for was never started.
    served = mcp.close()
    unserved = served is not None and served.failed_to_start()
    if served is None:
        say(
            f"the MCP server could not be started ({mcp.failures} attempt(s)); see above"
            if mcp.failures
            else "the MCP server was not started: no client connected"
        )
    else:
        if served.process.poll() is not None:
            say(
                f"the MCP server exited with status {served.process.returncode} "
                + ("before it served" if unserved else "before the agent did")
                + "; see mcp.log"
            )
        end(served.process)
        os.close(served.ready)

    with evaluator_log:
        if unserved:
            end(evaluator)
            write_error(settings, f"the MCP server failed to start:\n{_tail(results / 'mcp.log')}")
            say("not graded: the MCP server failed to start")
        else:
            evaluate(
                settings,
                env,
                evaluator,
                evaluator_log,
                results / "evaluator.log",
                {
                    "AGENT_DURATION": f"{duration:.3f}",
                    "AGENT_EXIT_STATUS": str(status),
                    "SSE_METRIC_AGENT_TIMEOUT": "true" if timed_out else "false",
                },
            )
            say("graded: " + _tail(results / "evaluator.log", 1))
    if not ended:
        # Processes of model may live on: the archive is left as it is, and the host keeps regular files
        # only, under its caps, whatever is in it.
        say("the archive is not pruned: the end of the agent phase was not confirmed")
    else:
        try:
            finish_archive(settings)
        except Exception as exc:  # a prune that fails leaves the archive to the host's caps; never the grade
            say(f"pruning the archive failed: {type(exc).__name__}: {exc}")
    write_limits(settings, "limits.json")

    if settings.keep_alive:
        say("SSE_KEEP_ALIVE=1: the container stays up (the daemon still answers)")
        wait_for_stop()
    end(daemon.process)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
