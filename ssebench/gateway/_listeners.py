"""The gateway's sockets: uvicorn servers in its event loop, model listeners guarded against their clients.

A model listener's clients are a run's containers, and hostile. Each
connection is admitted only within the limits (per listener, which is per
run, and in all), so one run cannot take the descriptors every run needs;
and one that sends no request head within the idle timeout (at first, or
after an answer) is dropped, so holding connections costs the client more
than it costs the gateway. uvicorn alone times out only a connection kept
alive after an answer: one that never sends a whole head is held forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette

from ssebench.gateway._limits import MODEL_BACKLOG

log = logging.getLogger("ssebench.gateway")


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP by name: asyncio turns Nagle off only on sockets that say so (accepted ones inherit it),
    # and with Nagle on, every answer (a head, then a body) waited 40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def server(
    app: Starlette, *, http: type[asyncio.Protocol] | None = None, keep_alive: float = 30, backlog: int = 128
) -> Any:
    """A uvicorn server of `app` for sockets of ours, with `http` as its protocol (default: uvicorn's).

    asyncio accepts up to `backlog` connections at a time before their
    protocol sees any of them: for a model listener it must be small
    (MODEL_BACKLOG).
    """
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # the process handles signals once, for every server
            yield

    return Server(
        uvicorn.Config(
            app,
            http=http or "h11",
            ws="none",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=math.ceil(keep_alive),
            backlog=backlog,
            timeout_graceful_shutdown=3,
        )
    )


def canned(status: int, kind: str, message: str) -> bytes:
    """A whole HTTP answer in the gateway's error shape, for a connection closed right after it."""
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Connections:
    """Open model connections, per listener address and in all, against their limits."""

    total: int
    per_host: int
    open: Counter[str] = field(default_factory=Counter)
    count: int = 0

    def admit(self, host: str) -> str | None:
        """Count one more connection to `host`, or say why not."""
        if self.open[host] >= self.per_host:
            return f"this run has {self.per_host} connections open to the gateway already, its limit; close idle ones"
        if self.count >= self.total:
            return f"the gateway has {self.total} model connections open, its limit; retry later"
        self.open[host] += 1
        self.count += 1
        return None

    def release(self, host: str) -> None:
        self.open[host] -= 1
        self.count -= 1
        if self.open[host] <= 0:
            del self.open[host]


def guarded(host: str, connections: Connections, idle_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol for the listener on `host`: admitted within the limits, dropped when idle."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Guarded(H11Protocol):
        admitted = False
        heard = False  # bytes of the next request arrived since the last answer
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            refused = connections.admit(host)
            if refused is not None:
                transport.write(canned(503, "too_many_connections", refused))
                transport.close()
                return
            self.admitted = True
            super().connection_made(transport)
            self._await_request()

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.admitted:
                return
            self.admitted = False
            connections.release(host)
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self.heard = True
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._await_request()

        def _await_request(self) -> None:
            self._disarm()
            self.heard = False
            self.deadline = self.loop.call_later(idle_timeout, self._idle)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _idle(self) -> None:
            self.deadline = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return  # closed already, or a request is under way: the app times its body, the upstream its answer
            if self.heard:  # a head begun and not finished: say why the connection closes
                self.transport.write(canned(408, "request_timeout", f"no whole request head within {idle_timeout:g} s"))
            self.transport.close()

    return Guarded


@dataclass
class _Listening:
    server: Any
    task: asyncio.Task[None]
    port: int
    users: int = 1


@dataclass
class UvicornListeners:
    """Model listeners as guarded uvicorn servers in this process's event loop."""

    app_for: Callable[[str], Starlette]
    connections: Connections
    idle_timeout: float
    active: dict[str, _Listening] = field(default_factory=dict)

    async def acquire(self, host: str, port: int) -> int:
        if host in self.active:
            self.active[host].users += 1
            return self.active[host].port
        sock = listen(host, port)
        bound = int(sock.getsockname()[1])
        served = server(
            self.app_for(host),
            http=guarded(host, self.connections, self.idle_timeout),
            keep_alive=self.idle_timeout,
            backlog=MODEL_BACKLOG,
        )
        task = asyncio.create_task(served.serve(sockets=[sock]))
        for _ in range(200):
            if served.started or task.done():
                break
            await asyncio.sleep(0.01)
        if not served.started:
            served.should_exit = True
            sock.close()
            raise OSError(f"the listener on {host}:{bound} did not start")
        self.active[host] = _Listening(served, task, bound)
        log.info("listening for model calls on %s:%d", host, bound)
        return bound

    async def release(self, host: str) -> None:
        listening = self.active.get(host)
        if listening is None:
            return
        listening.users -= 1
        if listening.users > 0:
            return
        del self.active[host]
        listening.server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(listening.task, 10)
        log.info("closed the model listener on %s", host)
