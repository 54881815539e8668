"""One network per run: no run reaches another's container; no run reaches the internet.

Two runs of one session, as a pytest session would start them side by side:
A is the reference agent, held after applying the fix (its live diff is the
answer); B is held as the agent. From B, as the agent's user, A must be
unreachable on every port. The positive controls show the probes work: B
reaches its own daemon through its own address, a service the host runs on
the host's end of B's network (where the model gateway listens), and, on an
open-egress run, the Debian mirror that the same probe cannot reach from a
restricted run.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integrity.harness import LEVELS, HeldRun, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

PROBE = """
import json, socket, os
def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__ + ":" + (os.strerror(exc.errno) if exc.errno else str(exc))
def get(host, port, path):
    try:
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(("GET " + path + " HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n").encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return data.decode(errors="replace")
    except OSError as exc:
        return "unreachable: " + type(exc).__name__
targets = json.loads(os.environ["TARGETS"])
print(json.dumps({name: (get(*t) if len(t) == 3 else reach(*t)) for name, t in targets.items()}))
"""


def address(run: HeldRun, agent: bool = False) -> str:
    """The address of the run's daemon (`agent`: of where its agent and MCP server run) on its network."""
    container = run.container if agent else run.task_container
    return str(container.attrs["NetworkSettings"]["Networks"][run.live.network.name]["IPAddress"])


@pytest.fixture
def host_service(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A tiny HTTP service the test binds on an address it is given (the host's end of a run network)."""
    servers: list[http.server.HTTPServer] = []

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the host")

        def log_message(self, *args: object) -> None:
            pass

    def serve(host: str) -> int:
        server = http.server.HTTPServer((host, 0), Hello)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return int(server.server_address[1])

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_a_run_cannot_reach_another_run(fresh_launcher: Launcher, host_service: Any, level: int) -> None:
    answer = fresh_launcher.start(
        agent="reference", level=level, command=["bash", "-c", "git apply /reference/patch.diff && sleep 3600"]
    )
    attacker = fresh_launcher.start(level=level)
    a, b, a_agent = address(answer), address(attacker), address(answer, agent=True)
    # What there is to steal: A's live diff holds the fix (read inside A).
    assert "TLV_VALUE_MAX" in answer.py(
        "1000", "import json; from sse.daemon import _default as d;print(json.dumps(d().get('/diff')['diff']))"
    )
    gateway = attacker.live.network.gateway
    assert gateway
    port = host_service(gateway)
    targets = {
        "other-daemon": [a, 4263],
        "other-diff": [a, 4263, "/diff"],
        "other-mcp": [a_agent, 3000],
        "other-ssh": [a, 22],
        "other-agent-ssh": [a_agent, 22],
        "own-address": [b, 4263, "/version"],
        "own-diff-from-peer-address": [b, 4263, "/diff"],
        "host-end-of-own-network": [gateway, port, "/"],
    }
    out = attacker.py("1000", PROBE, env={"TARGETS": json.dumps(targets)})
    for name in ("other-daemon", "other-mcp", "other-ssh", "other-agent-ssh"):
        assert out[name] != "connected" and "ConnectionRefused" not in out[name], (name, out[name])
    assert out["other-diff"].startswith("unreachable"), out["other-diff"]
    # Positive controls: the probe reaches what it should.
    assert '"version"' in out["own-address"], out["own-address"]
    assert answer.live.network.name != attacker.live.network.name
    assert "hello from the host" in out["host-end-of-own-network"], out
    # Defence in depth: the daemon's port serves a peer address nothing of the run's work.
    assert " 403 " in out["own-diff-from-peer-address"].splitlines()[0], out["own-diff-from-peer-address"]


EGRESS = {"ip": ["1.1.1.1", 80], "mirror": ["deb.debian.org", 80]}


def test_restricted_runs_reach_no_outside_host_and_open_ones_do(fresh_launcher: Launcher) -> None:
    restricted = fresh_launcher.start(level=2)
    blocked = restricted.py("1000", PROBE, env={"TARGETS": json.dumps(EGRESS)})
    through_bash = restricted.py(
        "1000",
        "import json; from sse.tools.bash import execute;"
        'print(json.dumps(execute(\'timeout 5 bash -c "exec 3<>/dev/tcp/deb.debian.org/80"'
        " && echo reached || echo blocked').stdout))",
    )
    assert blocked["ip"] != "connected" and blocked["mirror"] != "connected", blocked
    assert through_bash.strip() == "blocked"
    # Positive control: the same probe from a run with open egress reaches the mirror.
    opened = fresh_launcher.start(level=2, egress="open")
    reached = opened.py("1000", PROBE, env={"TARGETS": json.dumps(EGRESS)})
    assert reached["mirror"] == "connected", reached
