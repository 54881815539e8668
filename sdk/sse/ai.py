"""OpenCode agent wrapper.

Provides a reusable async client for starting an OpenCode server, creating
sessions, sending prompts, and collecting responses.

Usage::

    from sse.ai import OpenCodeAgent, build_opencode_config

    config = build_opencode_config("claude-sonnet-4-20250514")
    async with OpenCodeAgent(directory="/path/to/project", config=config) as agent:
        session_id = await agent.create_session()
        response = await agent.send_prompt(session_id, "hello")
        print(response.final_message)
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    import httpx

_PROXY_PROVIDER = "ssebench"


@dataclass
class AgentResponse:
    """Structured response from an OpenCode agent session."""

    final_message: str
    full_log: str


def build_opencode_config(model_name: str | None = None, mcp_url: str | None = None) -> dict[str, Any]:
    """Build a complete OpenCode config.

    When SSE_MODEL_NAME, SSE_BASE_URL and SSE_API_KEY are set, as they are in
    a task container, the config uses the run's model through the LiteLLM
    proxy and ignores model_name. Otherwise it uses model_name with
    OpenCode's built-in Anthropic provider, which reads the ANTHROPIC_API_KEY
    environment variable at runtime -- the key is not embedded in the config
    dict.

    Raises ValueError if model_name is missing and the SSE_* variables are
    not all set.
    """
    run_model = os.environ.get("SSE_MODEL_NAME")
    base_url = os.environ.get("SSE_BASE_URL")
    api_key = os.environ.get("SSE_API_KEY")
    config: dict[str, Any] = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled"}
    if run_model and base_url and api_key:
        config["provider"] = {
            _PROXY_PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "SSEBench model proxy",
                "options": {"baseURL": base_url, "apiKey": api_key},
                "models": {run_model: {"name": run_model}},
            }
        }
        config["model"] = f"{_PROXY_PROVIDER}/{run_model}"
    elif model_name:
        config["model"] = f"anthropic/{model_name}"
    else:
        raise ValueError("give model_name, or set SSE_MODEL_NAME, SSE_BASE_URL and SSE_API_KEY")
    if mcp_url:
        config["mcp"] = {"ssebench": {"type": "remote", "url": mcp_url, "enabled": True}}
    return config


def _text_parts(message: dict[str, Any]) -> list[str]:
    return [str(p.get("text", "")) for p in message.get("parts") or [] if p.get("type") == "text"]


class OpenCodeAgent:
    """Async wrapper for the OpenCode agent server.

    Manages the full lifecycle: start the server, create sessions, send
    prompts, collect responses, and shut down cleanly. With a config that
    uses OpenCode's built-in Anthropic provider, the Anthropic API key must
    be in the ANTHROPIC_API_KEY environment variable of this process.
    """

    def __init__(self, directory: str, config: dict[str, Any], port: int = 4097, hostname: str = "127.0.0.1") -> None:
        self.directory = directory
        self.config = config
        self.port = port
        self.hostname = hostname
        self._process: asyncio.subprocess.Process | None = None
        self._client: httpx.AsyncClient | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.hostname}:{self.port}"

    async def start(self, timeout: int = 120) -> None:
        """Start the OpenCode server and block until it is ready.

        Raises RuntimeError if the server process exits prematurely (or
        `opencode` is not on PATH), and TimeoutError if the server does not
        become ready in time; either way the process is ended first.
        """
        import asyncio  # here, not at import: `import sse` loads this module, and asyncio costs 60 ms

        import httpx

        env = {**os.environ, "OPENCODE_CONFIG_CONTENT": json.dumps(self.config)}
        try:
            self._process = await asyncio.create_subprocess_exec(
                "opencode",
                "serve",
                "--port",
                str(self.port),
                "--hostname",
                self.hostname,
                cwd=self.directory,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise RuntimeError(
                "opencode is not on PATH: install OpenCode in the agent's image (sdk/README.md, sse.ai)"
            ) from None
        self._client = httpx.AsyncClient(base_url=self.base_url, timeout=30.0)
        try:
            await self._ready(timeout)
        except BaseException:
            await self.stop()  # a server that never served is not left running
            raise

    async def _ready(self, timeout: float) -> None:
        import asyncio

        import httpx

        assert self._process is not None
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self._process.returncode is not None:
                raise RuntimeError(f"opencode serve exited with status {self._process.returncode} before it served")
            try:
                # A server that accepts but never answers must not hold this past the deadline.
                await self._http().get("/config", timeout=min(left, 5.0))
                return
            except httpx.TransportError:
                await asyncio.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
        raise TimeoutError(f"opencode serve did not answer on {self.base_url} within {timeout} s")

    async def stop(self) -> None:
        """Shut down the OpenCode server and close the HTTP client."""
        import asyncio

        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        self._process = None

    async def __aenter__(self) -> OpenCodeAgent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("the OpenCode server is not started; call start() first")
        return self._client

    async def create_session(self, title: str = "Session") -> str:
        """Create a new chat session and return its ID.

        Raises httpx.HTTPStatusError if session creation fails.
        """
        response = await self._http().post("/session", json={"title": title})
        response.raise_for_status()
        return str(response.json()["id"])

    async def _log(self, session_id: str) -> tuple[str, str]:
        response = await self._http().get(f"/session/{session_id}/message")
        response.raise_for_status()
        messages = response.json()
        texts = ["\n".join(_text_parts(m)) for m in messages]
        last_assistant = next((m for m in reversed(messages) if (m.get("info") or {}).get("role") == "assistant"), None)
        final = "\n".join(_text_parts(last_assistant)) if last_assistant else ""
        return final, "\n\n".join(t for t in texts if t)

    async def send_prompt(self, session_id: str, text: str, timeout: float = 300.0) -> AgentResponse:
        """Send a prompt and wait for the complete response.

        Uses the synchronous POST /session/:id/message endpoint, which blocks
        until the assistant finishes responding; then fetches all session
        messages to build the full conversation log. If timeout is exceeded,
        final_message holds a timeout indicator and full_log whatever
        messages were available. Raises httpx.HTTPStatusError on HTTP-level
        failures from the server.
        """
        import asyncio

        import httpx

        body = {"parts": [{"type": "text", "text": text}]}
        try:
            # The whole answer within `timeout`, not each read of it.
            response = await asyncio.wait_for(
                self._http().post(f"/session/{session_id}/message", json=body, timeout=None), timeout
            )
        except (TimeoutError, httpx.TimeoutException):
            _, log = await self._log(session_id)
            return AgentResponse(final_message=f"[timeout: no answer within {timeout:g} s]", full_log=log)
        response.raise_for_status()
        final, log = await self._log(session_id)
        if not final:
            final = "\n".join(_text_parts(response.json()))
        return AgentResponse(final_message=final, full_log=log)
