"""The runtime's servers as the entrypoint runs them: started on sockets bound here, awaited, asked, ended.

The daemon is started on its three listeners and awaited: it says on a pipe once it serves
(SSE_DAEMON_TIMEOUT). The MCP server's socket is bound, and the server starts when its first client connects
(`OnDemand`). A server that does not start raises `ServerError`: the harness failed the run, not the agent.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ssebench.runtime import contract, listeners
from ssebench.runtime.console import say, tail
from ssebench.runtime.contract import RuntimeSettings
from ssebench.runtime.process import NEUTRAL_CWD, python_command, wait


class ServerError(RuntimeError):
    """A runtime server did not start, or did not answer; the message says which, with its log's tail."""


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


def wait_for(what: str, ready: Callable[[], bool], timeout: float, log: Path) -> None:
    """Poll `ready` until it holds (a server of another container: sidecar mode's daemon)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.02)
    raise ServerError(f"the {what} did not become ready within {timeout:.0f} s:\n{tail(log)}")


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
        raise ServerError(f"POST {path} on the admin socket: " + (f"status {status}" if status else "no answer"))


def start_daemon(settings: RuntimeSettings, env: dict[str, str]) -> Served:
    """The daemon, on its three listeners bound here, once it serves. Raises ServerError (with its log's
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
    raise ServerError(f"{why}:\n{tail(daemon.log)}")


def start_mcp(settings: RuntimeSettings, env: dict[str, str], *, shared_sockets: bool) -> OnDemand:
    """The MCP server's socket bound (`settings.mcp_bind`); the server starts when its first client connects.
    Its log is there either way (empty when no client came).

    `shared_sockets`: the agent socket's directory is a volume another container shares (sidecar mode), whose
    root may be the agent's: a root process here never talks to a socket found there, but to the daemon's own
    loopback listener.
    """
    log = Path(settings.results) / "mcp.log"
    log.touch()
    socket_var = contract.ENV["agent_socket"]
    daemon = {socket_var: settings.agent_socket}
    if shared_sockets:
        env = {k: v for k, v in env.items() if k != socket_var}
        daemon = {"SSE_AGENT_DOCKER": f"127.0.0.1:{settings.http_port}"}
    return OnDemand("ssebench.runtime.mcp_server", log, {**env, **daemon}, listeners.mcp_listener(settings.mcp_bind))


def end(process: subprocess.Popen[bytes]) -> None:
    """End a runtime process whose work is done. Killed, not asked: what it had to write (the grade, the
    logs, line by line) is written, and the daemon's graceful shutdown (its three servers' loops) took
    0.2 s of every run."""
    process.kill()
    process.wait()
