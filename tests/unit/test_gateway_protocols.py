"""The three protocols through the gateway in-process, read by the official SDKs: scripted playback and pass-through.

Claude Code speaks Anthropic Messages, Codex OpenAI Responses, mini-swe-agent
OpenAI Chat Completions: each answer here is parsed by the SDK of its
protocol (`anthropic`, `openai`), whole and streamed, so a playback that
drifts from the real wire format fails here and not in an agent's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ssebench.gateway import MODEL_PROTOCOLS, ModelConfig, Price
from ssebench.gateway._apis import CHAT_COMPLETIONS, MESSAGES, RESPONSES, BadCall
from ssebench.gateway._listeners import listen, server
from ssebench.gateway.scripted import Playback, create_app, load_script
from tests.unit.test_gateway_server import RUN_HOST, SECRET, Setup, _setup, run

PRICE = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
TASK = "# Task: proto (C)"
SCRIPT: dict[str, Any] = {
    "conversations": [
        {
            "match": "# Task: proto",
            "tools": ["Bash", "Edit"],  # Claude Code's
            "steps": [
                {
                    "reasoning": "The parser reads past the buffer.",
                    "content": "Let me look at the parser.",
                    "tool_calls": [{"name": "Bash", "arguments": {"command": "cat tlv.c"}}],
                    "usage": {
                        "prompt_tokens": 1000,
                        "completion_tokens": 50,
                        "cache_read_tokens": 600,
                        "cache_write_tokens": 300,
                    },
                },
                {"content": "Fixed.", "usage": {"prompt_tokens": 1200, "completion_tokens": 10}},
            ],
        },
        {
            "match": "# Task: proto",
            "tools": ["shell", "apply_patch"],  # Codex's
            "steps": [
                {
                    "reasoning": "Check the length first.",
                    "tool_calls": [
                        {"name": "shell", "arguments": {"command": ["cat", "tlv.c"]}},
                        {"name": "apply_patch", "custom": True, "input": "*** Begin Patch\n*** End Patch\n"},
                    ],
                    "usage": {"prompt_tokens": 800, "completion_tokens": 40, "cache_read_tokens": 500},
                },
                {"content": "Done.", "usage": {"prompt_tokens": 900, "completion_tokens": 5}},
            ],
        },
        {
            "match": "# Task: proto",
            "steps": [
                {
                    "content": "Running a command.",
                    "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
                    "usage": {"prompt_tokens": 300, "completion_tokens": 20, "cache_read_tokens": 100},
                }
            ],
        },
        {"match": "", "repeat": True, "steps": [{"content": "Fix the TLV parser", "usage": {"prompt_tokens": 40}}]},
    ]
}
CLAUDE_TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("Bash", "Edit")]
CODEX_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "shell", "parameters": {"type": "object"}},
    {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
]
CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _scripted(tmp_path: Path, script: dict[str, Any] = SCRIPT, **extra: Any) -> ModelConfig:
    (tmp_path / "proto.yaml").write_text(yaml.safe_dump(script))
    return ModelConfig(
        name="scripted-proto", script="proto.yaml", source=tmp_path / "scripted-proto.yaml", price=PRICE, **extra
    )


def _http(protocol: str, **extra: Any) -> ModelConfig:
    return ModelConfig.model_validate(
        {
            "name": "remote",
            "base_url": "http://upstream.test/v1",
            "protocol": protocol,
            "upstream_model": "provider-id",
            "api_key_env": "TEST_PROVIDER_KEY",
            "price": PRICE,
            **extra,
        }
    )


def _transport(setup: Setup, host: str = RUN_HOST) -> httpx2.ASGITransport:
    return httpx2.ASGITransport(app=setup.gateway.model_app(host))


def _anthropic(setup: Setup, key: str, **auth: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        **(auth or {"api_key": key}),
        base_url=f"http://{RUN_HOST}:4080",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=_transport(setup)),
    )


def _openai(setup: Setup, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=f"http://{RUN_HOST}:4080/v1",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=_transport(setup)),
    )


def _cost(prompt: int, completion: int, read: int = 0, write: int = 0) -> float:
    return ((prompt - read - write) * 3.0 + read * 0.3 + write * 3.75 + completion * 15.0) / 1_000_000


# -- Anthropic Messages -------------------------------------------------------------


def test_claude_code_reads_the_scripted_messages_whole_and_streamed(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"scripted-proto": _scripted(tmp_path)})

    async def test() -> None:
        key = (await setup.register(model="scripted-proto"))["key"]
        client = _anthropic(setup, key)
        ask: dict[str, Any] = {
            "model": "scripted-proto",
            "max_tokens": 4096,
            "tools": CLAUDE_TOOLS,
            "messages": [{"role": "user", "content": [{"type": "text", "text": TASK}]}],
        }
        whole = await client.messages.create(**ask)
        assert [b.type for b in whole.content] == ["thinking", "text", "tool_use"]
        thinking, text, tool = whole.content
        assert thinking.type == "thinking" and thinking.thinking == "The parser reads past the buffer."
        assert text.type == "text" and text.text == "Let me look at the parser."
        assert tool.type == "tool_use" and tool.name == "Bash" and tool.input == {"command": "cat tlv.c"}
        assert whole.stop_reason == "tool_use"
        assert (whole.usage.input_tokens, whole.usage.output_tokens) == (100, 50)
        assert (whole.usage.cache_read_input_tokens, whole.usage.cache_creation_input_tokens) == (600, 300)
        seen: list[str] = []
        async with client.messages.stream(**ask) as stream:
            async for event in stream:
                seen.append(event.type)
            streamed = await stream.get_final_message()
        assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in whole.content]
        assert streamed.usage.output_tokens == 50 and streamed.usage.cache_read_input_tokens == 600
        assert seen[0] == "message_start" and seen[-1] == "message_stop" and "input_json" in seen
        # The next turn: one assistant message in the history, the conversation's second step.
        ask["messages"] += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in whole.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "int main"}]},
        ]
        second = await client.messages.create(**ask)
        assert second.content[0].type == "text" and second.content[0].text == "Fixed."
        assert second.stop_reason == "end_turn"
        usage = setup.gateway.runs["run-1"].usage()
        assert [(r.prompt_tokens, r.cache_read_tokens, r.cache_write_tokens) for r in usage.records] == [
            (1000, 600, 300),
            (1000, 600, 300),
            (1200, 0, 0),
        ]
        assert usage.cost == pytest.approx(2 * _cost(1000, 50, 600, 300) + _cost(1200, 10))
        assert usage.cache_read_tokens == 1200 and usage.total_tokens == 2 * 1050 + 1210

    run(test)


def test_side_calls_count_tokens_and_the_bearer_form_of_the_key(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"scripted-proto": _scripted(tmp_path)})

    async def test() -> None:
        key = (await setup.register(model="scripted-proto"))["key"]
        client = _anthropic(setup, key, auth_token=key)  # ANTHROPIC_AUTH_TOKEN: Authorization: Bearer
        # A title request, with an assistant turn in it: the repeat conversation answers at any position.
        side = await client.messages.create(
            model="scripted-proto",
            max_tokens=1,
            messages=[
                {"role": "user", "content": "Write a title for this conversation"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "Shorter"},
            ],
        )
        assert side.content[0].type == "text" and side.content[0].text == "Fix the TLV parser"
        body: dict[str, Any] = {"model": "scripted-proto", "messages": [{"role": "user", "content": TASK}]}
        counted = await client.messages.count_tokens(**body)
        again = await client.messages.count_tokens(**body)
        longer = await client.messages.count_tokens(
            model="scripted-proto", messages=[{"role": "user", "content": TASK * 50}]
        )
        assert counted.input_tokens == again.input_tokens > 0 and longer.input_tokens > counted.input_tokens
        listed = [m.id async for m in client.models.list()]
        assert listed == [m.id async for m in _openai(setup, key).models.list()] == ["scripted-proto"]
        # Counting is no model call: one call recorded (the side call), nothing counted for the budget.
        usage = setup.gateway.runs["run-1"].usage()
        assert usage.calls == 1 and usage.prompt_tokens == 40
        with pytest.raises(anthropic.PermissionDeniedError):
            await client.messages.count_tokens(model="scripted-fix", messages=body["messages"])

    run(test)


def test_errors_reach_the_sdks_in_their_own_shape(tmp_path: Path) -> None:
    models = {"scripted-proto": _scripted(tmp_path, budget={"tokens": 500}), "remote": _http("openai-chat")}
    setup = _setup(tmp_path, models, {"TEST_PROVIDER_KEY": SECRET})

    async def test() -> None:
        key = (await setup.register(model="scripted-proto"))["key"]
        client = _anthropic(setup, key)
        ask: dict[str, Any] = {"model": "scripted-proto", "max_tokens": 10, "tools": CLAUDE_TOOLS}
        await client.messages.create(**ask, messages=[{"role": "user", "content": TASK}])  # 1050 tokens
        with pytest.raises(anthropic.RateLimitError) as budget:
            await client.messages.create(**ask, messages=[{"role": "user", "content": TASK}])
        assert budget.value.body == {
            "type": "error",
            "error": {"type": "budget_exhausted", "message": budget.value.body["error"]["message"]},  # type: ignore[index]
        }
        with pytest.raises(anthropic.AuthenticationError):
            await _anthropic(setup, "sse-run-not-a-key").messages.create(**ask, messages=[])
        with pytest.raises(anthropic.BadRequestError, match="messages list"):
            await client.messages.create(model="scripted-proto", max_tokens=5, messages="hi")  # type: ignore[arg-type]
        with pytest.raises(anthropic.BadRequestError, match="max_tokens must be a positive integer"):
            await client.messages.create(model="scripted-proto", max_tokens=0, messages=[])
        remote = (await setup.register("run-2", model="remote"))["key"]
        with pytest.raises(anthropic.NotFoundError) as wrong:
            await _anthropic(setup, remote).messages.create(**{**ask, "model": "remote"}, messages=[])
        assert (
            wrong.value.message.count(".") <= 1 and "speaks openai-chat, not anthropic-messages" in wrong.value.message
        )
        with pytest.raises(openai.NotFoundError, match="not openai-responses"):
            await _openai(setup, remote).responses.create(model="remote", input="hi")
        assert setup.gateway.runs["run-2"].usage().rejected == 2

    run(test)


# -- OpenAI Responses -----------------------------------------------------------------


def test_codex_reads_the_scripted_responses_whole_and_streamed(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"scripted-proto": _scripted(tmp_path)})

    async def test() -> None:
        key = (await setup.register(model="scripted-proto"))["key"]
        client = _openai(setup, key)
        opening: list[Any] = [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<env>/src</env>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]},
        ]
        ask: dict[str, Any] = {"model": "scripted-proto", "tools": CODEX_TOOLS, "store": False}
        events: list[str] = []
        async with client.responses.stream(**ask, input=opening) as stream:
            async for event in stream:
                events.append(event.type)
            streamed = await stream.get_final_response()
        assert events[:2] == ["response.created", "response.in_progress"] and events[-1] == "response.completed"
        for kind in (
            "response.reasoning_summary_text.delta",
            "response.function_call_arguments.done",
            "response.custom_tool_call_input.delta",
            "response.output_item.done",
        ):
            assert kind in events
        reasoning, shell, patch = streamed.output
        assert reasoning.type == "reasoning" and reasoning.summary[0].text == "Check the length first."
        assert shell.type == "function_call" and json.loads(shell.arguments) == {"command": ["cat", "tlv.c"]}
        assert patch.type == "custom_tool_call" and patch.input == "*** Begin Patch\n*** End Patch\n"
        assert streamed.usage is not None and streamed.usage.input_tokens == 800
        assert streamed.usage.input_tokens_details.cached_tokens == 500
        whole = await client.responses.create(**ask, input=opening)
        assert [i.model_dump(exclude={"parsed_arguments"}) for i in whole.output] == [
            i.model_dump(exclude={"parsed_arguments"}) for i in streamed.output
        ]
        # Codex resends the whole input: the model's output items in a row are one turn.
        history = [
            *opening,
            *(i.model_dump(exclude_none=True) for i in streamed.output),
            {"type": "function_call_output", "call_id": shell.call_id, "output": "int main"},
            {"type": "custom_tool_call_output", "call_id": patch.call_id, "output": "Success"},
        ]
        second = await client.responses.create(**ask, input=history)
        assert second.output_text == "Done." and second.usage is not None and second.usage.output_tokens == 5
        usage = setup.gateway.runs["run-1"].usage()
        assert [(r.prompt_tokens, r.completion_tokens, r.cache_read_tokens) for r in usage.records] == [
            (800, 40, 500),
            (800, 40, 500),
            (900, 5, 0),
        ]
        assert usage.cost == pytest.approx(2 * _cost(800, 40, 500) + _cost(900, 5))

    run(test)


# -- OpenAI Chat Completions ------------------------------------------------------------


def test_litellm_style_chat_reads_the_scripted_stream_and_its_usage(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"scripted-proto": _scripted(tmp_path)})

    async def test() -> None:
        key = (await setup.register(model="scripted-proto"))["key"]
        client = _openai(setup, key)
        ask: dict[str, Any] = {
            "model": "scripted-proto",
            "tools": CHAT_TOOLS,
            "messages": [{"role": "user", "content": TASK}],
        }
        chunks = [chunk async for chunk in await client.chat.completions.create(**ask, stream=True)]
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.prompt_tokens_details is not None
        assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 100
        async with client.chat.completions.stream(**ask) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_completion()
        message = final.choices[0].message
        assert message.content == "Running a command." and final.choices[0].finish_reason == "tool_calls"
        assert message.tool_calls is not None and message.tool_calls[0].type == "function"
        assert json.loads(message.tool_calls[0].function.arguments) == {"command": "ls"}
        whole = await client.chat.completions.create(**ask)
        assert whole.choices[0].message.content == message.content and whole.usage is not None
        usage = setup.gateway.runs["run-1"].usage()
        assert [(r.prompt_tokens, r.cache_read_tokens, r.error) for r in usage.records] == [(300, 100, None)] * 3

    run(test)


# -- pass-through: an upstream of each protocol ------------------------------------------

ASKS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": TASK}], "tools": CHAT_TOOLS}),
    "openai-responses": ("/v1/responses", {"input": TASK, "tools": CODEX_TOOLS}),
    "anthropic-messages": (
        "/v1/messages",
        {"messages": [{"role": "user", "content": TASK}], "tools": CLAUDE_TOOLS, "max_tokens": 100},
    ),
}
# What the scripted upstream reports for each (SCRIPT's first step of the conversation each one's tools pick).
EXPECTED = {
    "openai-chat": (300, 20, 100, 0),
    "openai-responses": (800, 40, 500, 0),
    "anthropic-messages": (1000, 50, 600, 300),
}


@pytest.mark.parametrize("protocol", MODEL_PROTOCOLS)
@pytest.mark.parametrize("stream", [True, False])
def test_an_upstream_of_each_protocol_is_relayed_and_its_usage_recorded(
    tmp_path: Path, protocol: str, stream: bool
) -> None:
    upstream = create_app(Playback(load_script(_write(tmp_path))), api_key=SECRET, model="provider-id")
    setup = _setup(tmp_path, {"remote": _http(protocol)}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        key = (await setup.register(model="remote"))["key"]
        path, body = ASKS[protocol]
        headers = {"x-api-key": key} if protocol == "anthropic-messages" else {"authorization": f"Bearer {key}"}
        headers |= {"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2099", "x-agent-secret": "mine"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=setup.gateway.model_app(RUN_HOST))) as client:
            answer = await client.post(
                f"http://{RUN_HOST}:4080{path}", json={"model": "remote", "stream": stream, **body}, headers=headers
            )
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/event-stream" if stream else "application/json")
        assert SECRET not in answer.text
        record = setup.gateway.runs["run-1"].usage().records[-1]
        tokens = (record.prompt_tokens, record.completion_tokens, record.cache_read_tokens, record.cache_write_tokens)
        assert tokens == EXPECTED[protocol] and record.error is None
        assert record.cost == pytest.approx(_cost(*EXPECTED[protocol]))
        # Upstream: the provider key in the protocol's header, the model id, and of the agent's headers
        # only Anthropic's version and beta flags.
        sent = upstream.state.headers[-1]
        if protocol == "anthropic-messages":
            assert sent["x-api-key"] == SECRET and "authorization" not in sent
            assert (sent["anthropic-version"], sent["anthropic-beta"]) == ("2023-06-01", "tools-2099")
        else:
            assert sent["authorization"] == f"Bearer {SECRET}" and "x-api-key" not in sent
            assert "anthropic-beta" not in sent
        assert "x-agent-secret" not in sent and key not in json.dumps(sent)
        assert upstream.state.received[-1]["model"] == "provider-id"

    run(test)


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "upstream.yaml"
    path.write_text(yaml.safe_dump(SCRIPT))
    return path


def _stream_app(events: list[bytes], gate: asyncio.Event | None = None) -> Starlette:
    """An upstream that streams `events`, the first at once and the rest once `gate` is set."""

    async def answer(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield events[0]
            if gate is not None:
                await gate.wait()
            for event in events[1:]:
                yield event

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/messages", answer, methods=["POST"])])


def _anthropic_events() -> list[bytes]:
    reply = Playback(load_script(_write_plain())).respond(
        {"model": "m", "stream": True, "tools": CLAUDE_TOOLS, "messages": [{"role": "user", "content": TASK}]},
        "k",
        "anthropic-messages",
    )
    return list(reply.chunks)


def _write_plain() -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "s.yaml"
    path.write_text(yaml.safe_dump(SCRIPT))
    return path


def test_a_stream_cut_short_is_recorded_with_what_it_reported(tmp_path: Path) -> None:
    events = _anthropic_events()
    cut = [e for e in events if b"message_delta" not in e and b"message_stop" not in e]
    setup = _setup(tmp_path, {"remote": _http("anthropic-messages")}, {"TEST_PROVIDER_KEY": SECRET}, _stream_app(cut))

    async def test() -> None:
        key = (await setup.register(model="remote"))["key"]
        async with setup.model(key) as client:
            answer = await client.post(
                "/v1/messages", json={"model": "remote", "stream": True, **ASKS["anthropic-messages"][1]}
            )
        assert answer.status_code == 200 and b"".join(cut).decode() == answer.text
        record = setup.gateway.runs["run-1"].usage().records[-1]
        # message_start told the input (and its first output token); the rest never came.
        assert (record.prompt_tokens, record.completion_tokens, record.cache_read_tokens) == (1000, 1, 600)
        assert record.error is not None and "cut short" in record.error

    run(test)


def test_a_stream_without_usage_is_recorded_as_such(tmp_path: Path) -> None:
    events = [b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n', b"data: [DONE]\n\n"]

    async def answer(request: Request) -> Response:
        return StreamingResponse(iter(events), media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    setup = _setup(tmp_path, {"remote": _http("openai-chat")}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        key = (await setup.register(model="remote"))["key"]
        async with setup.model(key) as client:
            reply = await client.post("/v1/chat/completions", json={"model": "remote", "stream": True, "messages": []})
        assert reply.status_code == 200 and "[DONE]" in reply.text
        record = setup.gateway.runs["run-1"].usage().records[-1]
        # The upstream billed it, so the budget counts an estimate of its prompt (the body's size over four).
        assert record.prompt_tokens > 0 and record.error == (
            f"upstream stream reports no usage; billed as {record.prompt_tokens} prompt tokens estimated from the "
            "request's size"
        )

    run(test)


@contextlib.asynccontextmanager
async def _sockets(tmp_path: Path, upstream_app: Starlette) -> AsyncIterator[tuple[Setup, str]]:
    """The gateway's model app and an upstream on real loopback sockets: (setup, the model listener's URL)."""
    upstream_sock = listen("127.0.0.1", 0)
    upstream = server(upstream_app)
    model = _http("anthropic-messages", base_url=f"http://127.0.0.1:{upstream_sock.getsockname()[1]}/v1")
    setup = _setup(tmp_path, {"remote": model}, {"TEST_PROVIDER_KEY": SECRET})
    gateway_sock = listen("127.0.0.1", 0)
    listener = server(setup.gateway.model_app("127.0.0.1"))
    tasks = [
        asyncio.create_task(upstream.serve(sockets=[upstream_sock])),
        asyncio.create_task(listener.serve(sockets=[gateway_sock])),
    ]
    try:
        yield setup, f"http://127.0.0.1:{gateway_sock.getsockname()[1]}/v1"
    finally:
        upstream.should_exit = listener.should_exit = True
        await setup.gateway.close()
        await asyncio.gather(*tasks)


STREAMED_CALL = {"model": "remote", "stream": True, **ASKS["anthropic-messages"][1]}


def test_a_stream_reaches_the_agent_as_it_comes_and_is_recorded_whole_when_the_agent_leaves(tmp_path: Path) -> None:
    """Real sockets on both sides: the agent reads the first event while the upstream holds the rest back."""
    events = _anthropic_events()

    async def test() -> None:
        gate = asyncio.Event()
        async with _sockets(tmp_path, _stream_app(events, gate)) as (setup, url):
            key = (await setup.register(model="remote", host="127.0.0.1"))["key"]
            async with (
                httpx.AsyncClient() as agent,
                agent.stream("POST", f"{url}/messages", json=STREAMED_CALL, headers={"x-api-key": key}) as answer,
            ):
                first = await asyncio.wait_for(answer.aiter_raw().__anext__(), 10)
                assert b"message_start" in first and not gate.is_set()
                run_ = setup.gateway.runs["run-1"]
                assert run_.active == 1 and run_.records == []
            # The agent has left; the upstream sends the rest, which the gateway reads for its usage.
            gate.set()
            usage = await setup.gateway.finish("run-1")
            assert [(r.status, r.prompt_tokens, r.completion_tokens, r.error) for r in usage.records] == [
                (200, 1000, 50, None)
            ]
            assert setup.gateway.runs["run-1"].active == 0

    run(test)


def test_finishing_a_run_mid_stream_records_the_call_with_the_tokens_it_reported(tmp_path: Path) -> None:
    events = _anthropic_events()

    async def test() -> None:
        gate = asyncio.Event()  # never set: the upstream holds the stream open
        async with _sockets(tmp_path, _stream_app(events, gate)) as (setup, url):
            key = (await setup.register(model="remote", host="127.0.0.1"))["key"]
            async with (
                httpx.AsyncClient() as agent,
                agent.stream("POST", f"{url}/messages", json=STREAMED_CALL, headers={"x-api-key": key}) as answer,
            ):
                chunks = answer.aiter_raw()
                received = [await asyncio.wait_for(chunks.__anext__(), 10)]
                usage = await setup.gateway.finish("run-1", wait=0.2)
                received += [chunk async for chunk in chunks]  # the stream ends: cut short
            assert b"message_start" in received[0] and b"message_stop" not in b"".join(received)
            assert [(r.status, r.prompt_tokens, r.cache_read_tokens) for r in usage.records] == [(503, 1000, 600)]
            assert usage.records[0].error is not None and usage.records[0].error.startswith("cancelled")

    run(test)


# -- the allow-list of each protocol -------------------------------------------------------


def test_responses_go_upstream_as_the_allow_list_says_without_provider_state_or_tools() -> None:
    body = {
        "model": "remote",
        "input": [],
        "instructions": "be brief",
        "tools": [*CODEX_TOOLS, {"type": "web_search"}, {"type": "mcp", "server_url": "http://evil"}, {"type": 7}],
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": True,
        "previous_response_id": "resp_other_run",
        "background": True,
        "service_tier": "priority",
        "max_output_tokens": 100000,
        "stream": True,
    }
    out = RESPONSES.upstream_body(body, model="provider-id", max_output_tokens=512)
    assert out == {
        "model": "provider-id",
        "input": [],
        "instructions": "be brief",
        "tools": CODEX_TOOLS,
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "max_output_tokens": 512,
        "stream": True,
    }
    assert RESPONSES.upstream_body({"input": "hi"}, model="p", max_output_tokens=64)["max_output_tokens"] == 64
    for bad in ({"max_output_tokens": 0}, {"max_output_tokens": True}, {"stream": "true"}, {"stream": 1}):
        with pytest.raises(BadCall):
            RESPONSES.upstream_body({"input": "hi", **bad}, model="p", max_output_tokens=None)


def test_messages_go_upstream_as_the_allow_list_says_within_the_cap() -> None:
    tools = [*CLAUDE_TOOLS, {"type": "bash_20250124", "name": "bash"}, {"type": "custom", "name": "x"}]
    body = {
        "model": "remote",
        "messages": [],
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [*tools, {"type": "web_search_20250305", "name": "web_search"}, {"type": "code_execution_20250825"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "mcp_servers": [{"type": "url", "url": "http://evil"}],
        "container": "c",
        "service_tier": "auto",
        "max_tokens": 32000,
    }
    out = MESSAGES.upstream_body(body, model="claude", max_output_tokens=4096)
    assert out == {
        "model": "claude",
        "messages": [],
        "system": body["system"],
        "tools": tools,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "max_tokens": 4096,
    }
    assert MESSAGES.upstream_body({"messages": []}, model="c", max_output_tokens=64)["max_tokens"] == 64
    # Claude Code's thinking budget follows max_tokens down to the cap, or is left off below Anthropic's minimum.
    thinking = {"messages": [], "max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 31999}}
    assert MESSAGES.upstream_body(thinking, model="c", max_output_tokens=4096)["thinking"] == {
        "type": "enabled",
        "budget_tokens": 4095,
    }
    assert "thinking" not in MESSAGES.upstream_body(thinking, model="c", max_output_tokens=1000)
    assert MESSAGES.upstream_body(thinking, model="c", max_output_tokens=None)["thinking"] == thinking["thinking"]
    with pytest.raises(BadCall, match="messages list"):
        MESSAGES.upstream_body({"messages": {}}, model="c", max_output_tokens=None)


def test_a_streamed_chat_always_asks_for_its_usage() -> None:
    body = {"messages": [], "stream": True, "stream_options": {"include_usage": False}}
    out = CHAT_COMPLETIONS.upstream_body(body, model="p", max_output_tokens=None)
    assert out["stream_options"] == {"include_usage": True} and out["stream"] is True
    assert "stream" not in CHAT_COMPLETIONS.upstream_body(
        {"messages": [], "stream": False}, model="p", max_output_tokens=None
    )


def test_the_agents_headers_cannot_smuggle_lines_or_keys_upstream(tmp_path: Path) -> None:
    upstream = create_app(Playback(load_script(_write(tmp_path))), api_key=SECRET, model="provider-id")
    setup = _setup(tmp_path, {"remote": _http("anthropic-messages")}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        key = (await setup.register(model="remote"))["key"]
        body = {"model": "remote", **ASKS["anthropic-messages"][1]}
        async with setup.model(key) as client:
            long = await client.post("/v1/messages", json=body, headers={"anthropic-beta": "x" * 600})
            # The agent's own x-api-key (here beside its Bearer key) never replaces the provider's.
            own = await client.post("/v1/messages", json=body, headers={"x-api-key": "sk-agent-chosen"})
        assert long.status_code == 400 and "anthropic-beta header" in long.json()["error"]["message"]
        assert long.json()["type"] == "error"
        assert own.status_code == 200 and upstream.state.headers[-1]["x-api-key"] == SECRET
        assert len(upstream.state.received) == 1

    run(test)


def test_the_x_api_key_form_is_bound_like_the_bearer_form(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"scripted-proto": _scripted(tmp_path)})

    async def test() -> None:
        mine = (await setup.register(model="scripted-proto"))["key"]
        other = (await setup.register("run-2", model="scripted-proto", host="172.19.0.1"))["key"]
        body = {"model": "scripted-proto", "max_tokens": 5, "messages": [{"role": "user", "content": TASK}]}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=setup.gateway.model_app(RUN_HOST)), base_url="http://gw"
        ) as client:
            answers = [
                await client.post("/v1/messages", json=body, headers=headers)
                for headers in (
                    {"x-api-key": other},  # another run's key, on this run's listener
                    {"x-api-key": mine[:-1]},
                    {"x-api-key": ""},
                    {"authorization": "Basic " + mine, "x-api-key": "nope"},
                    {"x-api-key": mine},
                )
            ]
        assert [a.status_code for a in answers] == [401, 401, 401, 401, 200]
        assert answers[0].json() == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid key: not a key of a run served here"},
        }
        assert answers[0].headers["connection"] == "close"
        await setup.gateway.finish("run-1")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=setup.gateway.model_app(RUN_HOST)), base_url="http://gw"
        ) as client:
            revoked = await client.post("/v1/messages", json=body, headers={"x-api-key": mine})
        assert revoked.status_code == 401 and "invalid key" in revoked.text

    run(test)


def test_token_counts_are_answered_by_the_gateway_never_upstream(tmp_path: Path) -> None:
    upstream = create_app(Playback(load_script(_write(tmp_path))), api_key=SECRET, model="provider-id")
    model = _http("anthropic-messages", budget={"tokens": 1})
    setup = _setup(tmp_path, {"remote": model}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        key = (await setup.register(model="remote"))["key"]
        body = {"model": "remote", "messages": [{"role": "user", "content": TASK}]}
        async with setup.model(key) as client:
            counted = await client.post("/v1/messages/count_tokens", json=body)
            nested = json.loads("[" * 70 + "]" * 70)
            deep = await client.post("/v1/messages/count_tokens", json={"model": "remote", "messages": nested})
            other = await client.post("/v1/messages/count_tokens", json={**body, "model": "scripted-fix"})
        assert counted.status_code == 200 and counted.json() == {"input_tokens": len(counted.request.content) // 4}
        assert deep.status_code == 400 and "nested deeper" in deep.json()["error"]["message"]
        assert other.status_code == 403 and other.json()["type"] == "error"
        assert upstream.state.received == []
        usage = setup.gateway.runs["run-1"].usage()
        assert usage.calls == 0 and usage.total_tokens == 0 and usage.rejected == 2

    run(test)


DATA = "data:image/png;base64,iVBORw0KGgo="
PAGE = "https://github.com/o/r/commit/abc123"


@pytest.mark.parametrize(
    "api, part",
    [
        (CHAT_COMPLETIONS, {"type": "image_url", "image_url": {"url": PAGE}}),
        (CHAT_COMPLETIONS, {"type": "file", "file": {"file_id": "file-1"}}),
        (MESSAGES, {"type": "image", "source": {"type": "url", "url": PAGE}}),
        (MESSAGES, {"type": "document", "source": {"type": "url", "url": PAGE}}),
        (MESSAGES, {"type": "document", "source": {"type": "file", "file_id": "file_1"}}),
        (RESPONSES, {"type": "input_image", "image_url": PAGE}),
        (RESPONSES, {"type": "input_file", "file_url": PAGE}),
        (RESPONSES, {"type": "input_file", "file_id": "file-1"}),
    ],
)
def test_media_by_url_or_file_id_is_refused_so_no_provider_fetches_for_the_run(api: Any, part: dict[str, Any]) -> None:
    """A provider fetching a page (the upstream fix's commit, rendered) would reach the internet for a run whose
    network reaches nothing: such a part is refused, in every protocol, wherever it sits in the history."""

    def body(content_part: dict[str, Any]) -> dict[str, Any]:
        if api is MESSAGES:
            # Inside a tool result too: Messages nests content there.
            turn = [{"type": "tool_result", "tool_use_id": "t", "content": [content_part]}]
            return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": turn}]}
        message = {"role": "user", "content": [{"type": "text", "text": f"see {PAGE}"}, content_part]}
        return {"model": "m", "input" if api is RESPONSES else "messages": [message]}

    with pytest.raises(BadCall, match="is not forwarded: give its content inline"):
        api.upstream_body(body(part), model="m", max_output_tokens=None)
    # The controls: the same part with its content inline, and a URL in text or a tool's input, go upstream.
    inlines: dict[str, dict[str, Any]] = {
        "image_url": {"type": "image_url", "image_url": {"url": DATA}},
        "file": {"type": "file", "file": {"file_data": DATA}},
        "image": {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        "document": {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
        "input_image": {"type": "input_image", "image_url": DATA},
        "input_file": {"type": "input_file", "file_data": DATA, "filename": "a.txt"},
    }
    assert api.upstream_body(body(inlines[part["type"]]), model="m", max_output_tokens=None)
    tool_use = {"type": "tool_use", "id": "t", "name": "fetch", "input": {"url": PAGE}}
    if api is MESSAGES:
        said = {"model": "m", "max_tokens": 10, "messages": [{"role": "assistant", "content": [tool_use]}]}
        assert api.upstream_body(said, model="m", max_output_tokens=None)
