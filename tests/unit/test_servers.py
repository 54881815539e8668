"""The runtime's servers as the entrypoint runs them, on this host: the MCP server started on demand."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from ssebench.runtime import listeners, servers


class Started:
    """What `servers.serve` is asked to start, standing in for it."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[dict[str, socket.socket]] = []
        self.fail_first = fail_first

    def __call__(self, module: str, log: Path, env: dict[str, str], bound: dict[str, socket.socket]) -> Any:
        self.calls.append(bound)
        if len(self.calls) <= self.fail_first:
            for sock in bound.values():
                sock.close()
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return ("served", bound)


def _on_demand(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fail_first: int = 0
) -> tuple[Started, int, servers.OnDemand]:
    """An on-demand server on a loopback port whose starts `Started` stands in for: (it, the port, it)."""
    started = Started(fail_first)
    monkeypatch.setattr(servers, "serve", started)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    return started, port, servers.OnDemand("m", tmp_path / "mcp.log", {}, listener)


def _until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_no_client_no_server_and_the_socket_closes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started, port, on_demand = _on_demand(monkeypatch, tmp_path)
    assert on_demand.close() is None and started.calls == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_the_first_client_starts_the_server_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started, port, on_demand = _on_demand(monkeypatch, tmp_path)
    first = socket.create_connection(("127.0.0.1", port), timeout=2)
    _until(lambda: len(started.calls) == 1)
    [bound] = started.calls
    assert list(bound) == [listeners.MCP]
    server_side, _ = bound[listeners.MCP].accept()  # the server's copy of the socket holds the client
    second = socket.create_connection(("127.0.0.1", port), timeout=2)
    time.sleep(0.2)
    assert len(started.calls) == 1  # one start for every client
    closed: Any = on_demand.close()  # what the stand-in for `serve` returned
    assert closed == ("served", bound)
    for sock in (first, second, server_side, bound[listeners.MCP]):
        sock.close()


def test_a_failed_start_refuses_that_client_and_the_next_one_starts_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started, port, on_demand = _on_demand(monkeypatch, tmp_path, fail_first=1)
    refused = socket.create_connection(("127.0.0.1", port), timeout=2)
    refused.settimeout(5)
    with contextlib.suppress(ConnectionResetError):
        assert refused.recv(1) == b""  # taken off the queue and closed, not left hanging
    refused.close()
    assert on_demand.failures == 1
    again = socket.create_connection(("127.0.0.1", port), timeout=2)
    _until(lambda: len(started.calls) == 2)
    served: Any = on_demand.close()
    assert served is not None and served[0] == "served"
    again.close()
    served[1][listeners.MCP].close()
