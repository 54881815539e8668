"""The entrypoint's own machinery, on this host: the MCP server started on demand, the evaluator's hand-over."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ssebench.runtime import entrypoint, listeners
from ssebench.runtime.contract import RuntimeSettings


class Started:
    """What `entrypoint.serve` is asked to start, standing in for it."""

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
) -> tuple[Started, int, entrypoint.OnDemand]:
    """An on-demand server on a loopback port whose starts `Started` stands in for: (it, the port, it)."""
    started = Started(fail_first)
    monkeypatch.setattr(entrypoint, "serve", started)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    return started, port, entrypoint.OnDemand("m", tmp_path / "mcp.log", {}, listener)


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
    assert on_demand.close() == ("served", bound)
    for sock in (first, second, server_side, bound[listeners.MCP]):
        sock.close()


def test_a_failed_start_refuses_that_client_and_the_next_one_starts_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started, port, on_demand = _on_demand(monkeypatch, tmp_path, fail_first=1)
    refused = socket.create_connection(("127.0.0.1", port), timeout=2)
    refused.settimeout(5)
    try:
        assert refused.recv(1) == b""  # taken off the queue and closed, not left hanging
    except ConnectionResetError:
        pass
    refused.close()
    assert on_demand.failures == 1
    again = socket.create_connection(("127.0.0.1", port), timeout=2)
    _until(lambda: len(started.calls) == 2)
    served = on_demand.close()
    assert served is not None and served[0] == "served"
    again.close()
    served[1][listeners.MCP].close()


def _evaluator(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


# Reads the figures and grades by writing result.json where the settings say.
GRADES = """
import json, os, sys
figures = json.loads(sys.stdin.readline())
with open(os.path.join(sys.argv[1], "result.json"), "w") as f:
    json.dump({"patch_result": {"status": "failed"}, "figures": figures}, f)
"""


def test_an_evaluator_that_died_with_the_agent_is_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = RuntimeSettings(results=str(tmp_path))
    dead = _evaluator("import sys; sys.exit(3)")
    dead.wait()
    replacements = []

    def start(settings: RuntimeSettings, env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", GRADES, str(tmp_path)], stdin=subprocess.PIPE)
        replacements.append(process)
        return process

    monkeypatch.setattr(entrypoint, "start_evaluator", start)
    entrypoint.evaluate(settings, {}, dead, None, tmp_path / "evaluator.log", {"AGENT_DURATION": "1.5"})  # type: ignore[arg-type]
    assert len(replacements) == 1 and dead.stdin is not None and dead.stdin.closed
    replacements[0].wait()
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["figures"] == {"AGENT_DURATION": "1.5"}  # the replacement was told, and graded


def test_an_evaluator_that_ends_without_a_grade_leaves_an_error_naming_its_status(tmp_path: Path) -> None:
    settings = RuntimeSettings(results=str(tmp_path))
    (tmp_path / "evaluator.log").write_text("Traceback: something broke\n")
    quits = _evaluator("import sys; sys.stdin.readline(); sys.exit(5)")
    entrypoint.evaluate(settings, {}, quits, None, tmp_path / "evaluator.log", {})  # type: ignore[arg-type]
    assert quits.returncode == 5
    grade = json.loads((tmp_path / "result.json").read_text())["patch_result"]
    assert grade["status"] == "error"
    assert grade["error_msg"].startswith("the evaluator exited with status 5 without a grade")
    assert "something broke" in grade["error_msg"]
