"""The runtime's listening sockets: bound by root before the process that serves them starts.

The entrypoint binds the daemon's three listeners and the MCP server's one
and hands them over (SSE_LISTEN_FDS, `name=fd,...`), so a client may connect
the moment they exist and waits in the kernel's queue until its server
serves: the agent starts without waiting for the daemon's start-up. A server
run by itself (a test, sidecar mode's task container) binds its own.

Nothing here imports more than the standard library's sockets: the
entrypoint imports it before anything else has started.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

from ssebench.runtime import contract

AGENT, HTTP, ADMIN, MCP = "agent", "http", "admin", "mcp"
BACKLOG = 128


def unix_socket(path: str, mode: int) -> socket.socket:
    """A listening Unix socket at `path` (whatever was there is unlinked first, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, mode)
    sock.listen(BACKLOG)
    return sock


def tcp_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    return sock


def daemon_listeners(agent_socket: str, admin_socket: str, http_port: int) -> dict[str, socket.socket]:
    """The daemon's listeners: the agent socket (0666), HTTP on every interface, the admin socket (0600).

    The admin socket's directory is root's alone, unless the agent socket lives beside it (sidecar mode's
    shared socket volume): then others may pass through it, to the agent socket, but create nothing in
    it, and the admin socket's own mode keeps them off it.
    """
    admin_dir = Path(admin_socket).parent
    shared = Path(agent_socket).parent == admin_dir
    admin_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(admin_dir, 0o755 if shared else 0o700)
    bound: dict[str, socket.socket] = {}
    try:
        bound[AGENT] = unix_socket(agent_socket, 0o666)
        bound[HTTP] = tcp_socket("0.0.0.0", http_port)
        bound[ADMIN] = unix_socket(admin_socket, 0o600)
    except BaseException:
        for sock in bound.values():
            sock.close()
        raise
    return bound


def mcp_listener(host: str = "127.0.0.1") -> socket.socket:
    """The MCP server's listener: loopback, or (sidecar mode's task container) every interface of the
    container, which is on the run's own network only."""
    return socket.create_server((host, contract.MCP_PORT), backlog=BACKLOG)


def encode(listeners: dict[str, socket.socket]) -> str:
    """SSE_LISTEN_FDS for a child that inherits these sockets."""
    return ",".join(f"{name}={sock.fileno()}" for name, sock in listeners.items())


def inherited() -> dict[str, socket.socket]:
    """The listeners this process inherited (SSE_LISTEN_FDS), by name; empty when it inherited none.

    The variable leaves this process's environment: nothing it starts (the agent's shell) sees it.
    """
    listeners = {}
    for part in filter(None, os.environ.pop(contract.LISTEN_FDS, "").split(",")):
        name, _, fd = part.partition("=")
        sock = socket.socket(fileno=int(fd))
        sock.set_inheritable(False)  # nothing this process starts gets them
        listeners[name] = sock
    return listeners


def readiness() -> Callable[[], None]:
    """What a server calls once it serves: one byte on the pipe the entrypoint gave it (SSE_READY_FD),
    once, so the entrypoint knows it got that far; nothing for a server run by itself."""
    fd = os.environ.pop(contract.READY_FD, None)
    if fd is not None:
        os.set_inheritable(int(fd), False)  # nothing this process starts gets it
    said = False

    def ready() -> None:
        nonlocal said
        if fd is not None and not said:
            said = True
            os.write(int(fd), b"1")
            os.close(int(fd))

    return ready
