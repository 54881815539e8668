"""sse.ai as seed 003 documents it: the OpenCode config (the run's model through the proxy, else Anthropic by
name), and OpenCodeAgent's life and answers against a stand-in `opencode` server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sse.ai import AgentResponse, OpenCodeAgent, build_opencode_config


@pytest.fixture(autouse=True)
def no_run_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SSE_MODEL_NAME", "SSE_BASE_URL", "SSE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_the_runs_model_through_the_proxy_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSE_MODEL_NAME", "m1")
    monkeypatch.setenv("SSE_BASE_URL", "http://proxy:4000")
    monkeypatch.setenv("SSE_API_KEY", "run-key")
    config = build_opencode_config("ignored-model", mcp_url="http://localhost:3000/mcp")
    [(name, provider)] = config["provider"].items()
    assert config["model"] == f"{name}/m1"
    assert provider["options"] == {"baseURL": "http://proxy:4000", "apiKey": "run-key"}
    assert config["mcp"]["ssebench"] == {"type": "remote", "url": "http://localhost:3000/mcp", "enabled": True}


def test_anthropic_by_name_without_embedding_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "secret-key")
    config = build_opencode_config("claude-sonnet-4-20250514")
    assert config["model"] == "anthropic/claude-sonnet-4-20250514"
    assert "secret-key" not in repr(config) and "provider" not in config and "mcp" not in config


def test_partial_run_settings_need_a_model_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSE_MODEL_NAME", "m1")  # no proxy URL or key
    with pytest.raises(ValueError, match="model_name"):
        build_opencode_config()


# OpenCodeAgent against a stand-in `opencode` (tests/fixtures/opencode_standin.py) first on PATH: the
# wrapper's every documented behaviour, with a real process and real HTTP on 127.0.0.1.

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "opencode_standin.py"


@dataclass
class Standin:
    directory: Path
    record: Path
    port: int

    def agent(self, config: dict[str, Any] | None = None) -> OpenCodeAgent:
        return OpenCodeAgent(str(self.directory), config or {"model": "anthropic/m"}, port=self.port)

    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = json.loads(self.record.read_text())
        return facts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Standin:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "opencode"
    exe.write_text(f"#!{sys.executable}\n{STANDIN.read_text()}")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    record = tmp_path / "record.json"
    monkeypatch.setenv("STANDIN_RECORD", str(record))
    monkeypatch.delenv("STANDIN_MODE", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    return Standin(directory=project, record=record, port=free_port())


def test_start_blocks_until_the_server_answers_and_passes_the_config_in_the_environment(
    standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_DELAY", "1")  # listens only a second after it started
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-in-the-config")
    config = build_opencode_config("claude-sonnet-4-20250514")

    async def go() -> int:
        agent = standin.agent(config)
        await agent.start(timeout=30)
        try:
            # Ready means answering now, not after a retry of ours.
            async with httpx.AsyncClient() as client:
                return (await client.get(f"http://127.0.0.1:{standin.port}/config", timeout=2)).status_code
        finally:
            await agent.stop()

    assert asyncio.run(go()) == 200
    facts = standin.facts()
    assert facts["argv"] == ["serve", "--port", str(standin.port), "--hostname", "127.0.0.1"]
    assert Path(facts["cwd"]).resolve() == standin.directory.resolve()
    assert json.loads(facts["config"]) == config
    assert "sk-ant-never-in-the-config" not in facts["config"]


def test_start_raises_runtime_error_when_the_process_exits_early(
    standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_MODE", "exit")
    agent = standin.agent()
    with pytest.raises(RuntimeError, match="exited with status 3"):
        asyncio.run(agent.start(timeout=30))
    assert agent._process is None and agent._client is None


def test_start_raises_timeout_error_and_ends_a_server_that_never_gets_ready(
    standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_MODE", "silent")
    agent = standin.agent()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer"):
        asyncio.run(agent.start(timeout=1))
    assert time.monotonic() - started < 10
    assert gone(standin.facts()["pid"]), "the server that never got ready is still running"


def test_start_without_opencode_on_path_says_so(standin: Standin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(standin.directory))  # an empty folder
    with pytest.raises(RuntimeError, match="opencode is not on PATH"):
        asyncio.run(standin.agent().start(timeout=5))


def test_stop_ends_the_process_and_closes_the_client(standin: Standin) -> None:
    async def go() -> tuple[OpenCodeAgent, httpx.AsyncClient]:
        agent = standin.agent()
        await agent.start(timeout=30)
        client = agent._client
        assert client is not None and not client.is_closed and not gone(standin.facts()["pid"])
        await agent.stop()
        return agent, client

    agent, client = asyncio.run(go())
    assert client.is_closed
    assert gone(standin.facts()["pid"])
    with pytest.raises(RuntimeError, match="not started"):
        asyncio.run(agent.create_session())


def test_a_session_and_a_prompt_give_the_last_answer_and_the_whole_log(standin: Standin) -> None:
    async def go() -> tuple[str, AgentResponse]:
        async with standin.agent() as agent:
            session = await agent.create_session("fix it")
            return session, await agent.send_prompt(session, "Fix the overflow in tlv.c", timeout=30)

    session, response = asyncio.run(go())
    assert session == "ses_1"
    # The last assistant message's text parts only; the log has every message's text parts, tools left out.
    assert response.final_message == "Fixed the bounds check.\nDone."
    assert response.full_log == "Fix the overflow in tlv.c\n\nLooking at the parser.\n\nFixed the bounds check.\nDone."
    assert gone(standin.facts()["pid"])  # `async with` stopped it


def test_create_session_raises_on_a_failing_status(standin: Standin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "session-500")

    async def go() -> None:
        async with standin.agent() as agent:
            await agent.create_session()

    with pytest.raises(httpx.HTTPStatusError) as raised:
        asyncio.run(go())
    assert raised.value.response.status_code == 500


def test_send_prompt_on_timeout_gives_the_indicator_and_the_messages_so_far(
    standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_MODE", "slow-prompt")  # answers never

    async def go() -> tuple[AgentResponse, float]:
        async with standin.agent() as agent:
            session = await agent.create_session()
            started = time.monotonic()
            response = await agent.send_prompt(session, "Fix the overflow", timeout=1)
            return response, time.monotonic() - started

    response, took = asyncio.run(go())
    assert took < 10
    assert response.final_message == "[timeout: no answer within 1 s]"
    assert response.full_log == "Fix the overflow\n\nLooking at the parser."
