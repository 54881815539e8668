"""One hostile run's container attacks its own model listener; another run's container keeps its model.

The attacks are the unit tests' (`tests/unit/test_gateway_hardening.py`:
idle and trickling connections, huge bodies, a flood of refused calls and a
body nested 1,100 deep, smuggled parameters), run by the same program from
inside a container on the hostile run's internal network, against the real
gateway process. Meanwhile a container on another run's network calls its
model every 0.2 s, and a whole run of chat-agent (its model the scripted
fix, through the same gateway) is made and graded: every call of both must
succeed, the run must be graded passed, and the control API must keep
answering.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ssebench.gateway import Budget, GatewayClient, GatewayProcess, RunKey
from tests.helpers import scripted_upstream
from tests.integration import test_gateway_container
from tests.integration.test_gateway_container import PYTHON, run_network
from tests.unit.test_gateway_hardening import ATTACKER, LEGIT, MIB, SMUGGLED, SMUGGLED_STATUSES, process_status

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# c-demo's tool image, as the container tests' fixture gives it.
image = test_gateway_container.image

MODELS = Path(__file__).resolve().parents[2] / "models"
SECRET = "sk-attacks-test-provider-key-77b0"

# A run's agent that calls its model every 0.2 s for SECONDS s; prints the statuses and the slowest answer.
VICTIM = """
import json, sys, time, httpx
base_url, key, model, seconds = sys.argv[1:5]
messages = [{"role": "user", "content": "# Task: tlvkit (C)"}]
statuses, slowest, ends = [], 0.0, time.monotonic() + float(seconds)
with httpx.Client(headers={"authorization": "Bearer " + key}, timeout=30) as client:
    while time.monotonic() < ends:
        started = time.monotonic()
        try:
            statuses.append(client.post(base_url + "/chat/completions",
                                        json={"model": model, "messages": messages}).status_code)
        except httpx.HTTPError as exc:
            statuses.append(type(exc).__name__)
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.2)
print(json.dumps({"statuses": statuses, "slowest": slowest}))
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    models = tmp_path_factory.mktemp("models")
    mp = pytest.MonkeyPatch()
    # Short timeouts, so the attack sees them act within the test.
    for name, value in {
        "SSEBENCH_GATEWAY_IDLE_TIMEOUT": "2",
        "SSEBENCH_GATEWAY_BODY_TIMEOUT": "3",
        "UPSTREAM_KEY": SECRET,
    }.items():
        mp.setenv(name, value)
    try:
        with scripted_upstream(MODELS / "scripted" / "fix.yaml", "UPSTREAM_KEY", SECRET) as port:
            (models / "remote.yaml").write_text(
                f"name: remote\nbase_url: http://127.0.0.1:{port}/v1\n"
                "api_key_env: UPSTREAM_KEY\nmax_output_tokens: 512\n"
            )
            with GatewayProcess(models, tmp_path_factory.mktemp("state")) as process:
                yield process
    finally:
        mp.undo()


def _run(container: Any, script: str, *args: object) -> dict[str, Any]:
    code, out = container.exec_run([PYTHON, "-c", textwrap.dedent(script), *map(str, args)])
    text = out.decode(errors="replace")
    assert code == 0, text[-3000:]
    return dict(json.loads(text.strip().splitlines()[-1]))


def _attack(container: Any, key: RunKey, *args: object) -> dict[str, Any]:
    return _run(container, ATTACKER, key.base_url, key.key, key.model, *args)


def test_a_hostile_runs_attacks_leave_another_run_its_model(
    image: tuple[str, dict[str, dict[str, str]]], gateway: GatewayProcess, tmp_path: Path
) -> None:
    assert gateway.process is not None
    pid = gateway.process.pid
    client = GatewayClient(gateway.control_url or "", gateway.admin_token, timeout=10)
    with run_network(image) as (hostile_ip, hostile_box), run_network(image) as (victim_ip, victim_box):
        hostile = client.register_run(
            "attacker", "remote", bind_host=hostile_ip, ttl_seconds=600, budget=Budget(tokens=2000)
        )  # two calls of the script spend it
        victim = client.register_run("victim", "remote", bind_host=victim_ip, ttl_seconds=600)
        before = process_status(pid)
        seen: dict[str, Any] = {}

        def victim_calls() -> None:
            seen["victim"] = _run(victim_box, VICTIM, victim.base_url, victim.key, victim.model, 45)

        def control_calls() -> None:
            slowest, ends = 0.0, time.monotonic() + 45
            while time.monotonic() < ends:
                started = time.monotonic()
                client.health()
                slowest = max(slowest, time.monotonic() - started)
                seen["fds"] = max(seen.get("fds", 0), process_status(pid)["fds"])
                time.sleep(0.2)
            seen["control"] = slowest

        def graded_run() -> None:
            import os
            import uuid

            from ssebench.agent import load_agent
            from ssebench.dataset import load_tasks
            from ssebench.engine import DockerBackend
            from ssebench.gateway import GatewayLink
            from ssebench.reaper import Session, reap_session
            from ssebench.run import execute
            from ssebench.runspec import RunConfig
            from ssebench.settings import get_settings
            from tests.helpers import DEMO

            settings = get_settings()
            task = next(t for t in load_tasks(DEMO) if t.id == "c-demo")
            config = RunConfig(
                task=task, agent=load_agent(settings.agents_dir, "chat-agent"), model="remote", timeout=600
            )
            session = Session(id=f"tests-attacks-{uuid.uuid4().hex[:8]}", controller=os.getpid())
            own = GatewayClient(gateway.control_url or "", gateway.admin_token, timeout=30)
            try:
                seen["run"] = execute(config, settings, DockerBackend(), session, tmp_path, models=GatewayLink(own))
            finally:
                own.close()
                reap_session(session.id)

        others = [
            threading.Thread(target=victim_calls),
            threading.Thread(target=control_calls),
            threading.Thread(target=graded_run),
        ]
        for thread in others:
            thread.start()
        try:
            idle = _attack(hostile_box, hostile, "idle", 400, 12)
            declared = _attack(hostile_box, hostile, "body", 512 * MIB, 1, "length")["results"][0]
            chunked = _attack(hostile_box, hostile, "body", 256 * MIB, 4, "chunked")["results"]
            grown = (process_status(pid)["VmHWM"] - before["VmHWM"]) // 1024
            smuggled = _attack(hostile_box, hostile, "smuggle", json.dumps([{**LEGIT, **extra} for extra in SMUGGLED]))[
                "answers"
            ]
            flood = _attack(hostile_box, hostile, "flood", 1500, 300, 1100)  # its first call spends the budget
            # A run registered and finished meanwhile.
            late = client.register_run("late", "remote", bind_host=hostile_ip, ttl_seconds=600)
            assert client.finish_run(late.run_id).calls == 0
        finally:
            for thread in others:
                thread.join(600)

        # The attacks happened (positive controls) and were held to their limits.
        assert idle["opened"] == 400 and idle["closed"]["silent"] > 300, idle
        assert min(idle["sent"]["head"]) >= 3 and idle["longest"]["head"] < 4, idle
        assert seen["fds"] - before["fds"] <= 128, seen
        assert all(r["sent"] >= 32 * MIB for r in chunked) and declared["sent"] < 32 * MIB, (declared, chunked)
        assert grown < 200, f"the gateway grew by {grown} MiB"
        assert flood["statuses"] == {"200": 1, "429": 1499} and flood["bad"] == {"400": 300}, flood
        assert flood["deep"]["status"] == 400, flood
        assert [status for status, _ in smuggled] == SMUGGLED_STATUSES, smuggled
        # The whole run beside the attacks: graded as without them, every model call of it answered.
        record = seen["run"]
        assert record.infra_error is None and record.grade == "passed", (record.infra_error, record.grade)
        assert record.usage is not None and record.usage["calls"] >= 3, record.usage
        lines = [
            json.loads(line)
            for line in (gateway.state_dir / "usage" / f"{record.run_id}.jsonl").read_text().splitlines()
        ]
        assert len(lines) == record.usage["calls"] and {line["status"] for line in lines} == {200}, lines
        # The other run: every call answered, promptly; the control API too.
        statuses = seen["victim"]["statuses"]
        assert len(statuses) > 50 and set(statuses) == {200}, seen["victim"]
        assert seen["victim"]["slowest"] < 5 and seen["control"] < 5, seen
        usage = client.finish_run("attacker")
        assert usage.calls == 2 and usage.refused == 1499 and len(usage.records) <= 22
        assert client.finish_run("victim").calls == len(statuses)
    log = gateway.log_path.read_text()
    attacker = [line for line in log.splitlines() if "attacker" in line]
    assert "Traceback" not in log and len(attacker) <= 15, "\n".join(attacker)
    client.close()
