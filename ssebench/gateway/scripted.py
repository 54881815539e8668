"""A scripted model: plays back a conversation from a YAML file, for tests and demos.

A script holds conversations; the first whose `match` is a substring of the
request's first user message plays:

    conversations:
      - match: "# Task: tlvkit"
        steps:
          - content: "Let me read the parser."          # an answer: content and/or tool calls
            tool_calls:
              - {name: view_file, arguments: {path: tlv.c}}
            usage: {prompt_tokens: 1200, completion_tokens: 35}
          - error: {status: 500, body: "overloaded"}    # a fault, served `times` times (default 1)
            times: 2
          - garbage: "<html>502 Bad Gateway</html>"     # a 200 whose body is not JSON
          - malformed_tool_call: true                   # a tool call whose arguments are not JSON
            usage: {prompt_tokens: 1300, completion_tokens: 10}

The answer is chosen without state from the number of assistant messages in
the request: that is the position in the conversation. Answers (and
malformed tool calls, which the agent keeps in its history) each take one
position; `malformed_tool_call` with `times: N` takes N positions in a row.
Errors and garbage take none: they are served at the position of
the answer that follows them, `times` requests in a row, counted per caller
(the run's key), so a retry sees the fault again until it is used up. Faults
after the last answer, once used up, leave the caller out of script: a 500
saying so.

The same playback runs inside the gateway (a model file's `script:`) and as
a standalone OpenAI-compatible server, the upstream of the gateway's tests:

    python -m ssebench.gateway.scripted --script FILE --host 127.0.0.1 --port N
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, model_validator

from ssebench.errors import SSEBenchError
from ssebench.schema import Strict, load

if TYPE_CHECKING:
    from starlette.applications import Starlette

# The arguments of a malformed tool call: JSON cut short.
MALFORMED_ARGUMENTS = '{"path": "src/'


class _Strict(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TokenUsage(_Strict):
    prompt_tokens: int = Field(default=0, ge=0)
    """The prompt tokens the answer reports (and the gateway counts)."""
    completion_tokens: int = Field(default=0, ge=0)
    """The completion tokens the answer reports (and the gateway counts)."""


class ToolCall(_Strict):
    name: str = Field(min_length=1)
    """The tool's name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The tool's arguments, sent as JSON."""


class ErrorReply(_Strict):
    status: int = Field(ge=400, le=599)
    """The HTTP status served (400 to 599)."""
    body: str = ""
    """The body served (JSON or text)."""


class Step(_Strict):
    """One step: an answer (content, tool_calls, reasoning, usage) or a fault (error, garbage, malformed_tool_call)."""

    content: str | None = None
    """An answer's text."""
    reasoning: str | None = None
    """An answer's reasoning (served as reasoning_content)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """An answer's tool calls."""
    usage: TokenUsage = TokenUsage()
    """The tokens the answer reports."""
    error: ErrorReply | None = None
    """A fault: an HTTP error."""
    garbage: str | None = None
    """A fault: a 200 whose body is this text, not JSON."""
    malformed_tool_call: bool = False
    """A fault the agent keeps in its history: a tool call whose arguments are not JSON."""
    times: int = Field(default=1, ge=1)
    """How many times a fault is served (faults only)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        faults = [
            name
            for name, on in (
                ("error", self.error is not None),
                ("garbage", self.garbage is not None),
                ("malformed_tool_call", self.malformed_tool_call),
            )
            if on
        ]
        answer = self.content is not None or bool(self.tool_calls) or self.reasoning is not None
        if len(faults) > 1 or (faults and answer):
            raise ValueError(
                "a step is either an answer (content, tool_calls) or one fault "
                "(error, garbage or malformed_tool_call), not several"
            )
        if not faults and not answer:
            raise ValueError("a step needs content or tool_calls, or one fault (error, garbage, malformed_tool_call)")
        if self.times != 1 and not faults:
            raise ValueError("times applies to faults only; repeat an answer by writing it again")
        return self

    @property
    def takes_position(self) -> bool:
        """Whether the agent keeps this reply in its history (an answer, malformed or not)."""
        return self.error is None and self.garbage is None


class Conversation(_Strict):
    match: str
    """Plays when this is a substring of the request's first user message (the first match wins)."""
    steps: list[Step] = Field(min_length=1)
    """The replies, in order (see the module's docstring for how a request's position is counted)."""


class Script(_Strict):
    conversations: list[Conversation] = Field(min_length=1)
    """The conversations the script can play."""


@dataclass(frozen=True)
class Position:
    """What is served at one position: faults first (each `times` times), then the answer."""

    faults: list[Step]
    answer: Step | None


def timeline(conversation: Conversation) -> list[Position]:
    positions: list[Position] = []
    pending: list[Step] = []
    for step in conversation.steps:
        if not step.takes_position:
            pending.append(step)
        elif step.malformed_tool_call:
            for i in range(step.times):
                positions.append(Position(pending if i == 0 else [], step))
            pending = []
        else:
            positions.append(Position(pending, step))
            pending = []
    if pending:
        positions.append(Position(pending, None))
    return positions


def load_script(path: Path) -> Script:
    """Read a script file. Raises ConfigError / ConfigErrors naming the file and field."""
    return load(Script, path)


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, body bytes, content type, and the usage it reports (None when it reports none)."""

    status: int
    body: bytes
    content_type: str = "application/json"
    usage: tuple[int, int] | None = None

    def json(self) -> Any:
        return json.loads(self.body)


def error_reply(status: int, kind: str, message: str) -> Reply:
    return Reply(status, json.dumps({"error": {"type": kind, "message": message}}).encode())


def _first_user_text(messages: list[Any]) -> str:
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return ""
    return ""


def _tool_call(position: int, index: int, name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{position}_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(model: str, position: int, step: Step) -> Reply:
    """The chat.completion object of an answer (or of a malformed tool call)."""
    if step.malformed_tool_call:
        calls = [_tool_call(position, 0, "edit_file", MALFORMED_ARGUMENTS)]
    else:
        calls = [_tool_call(position, i, c.name, json.dumps(c.arguments)) for i, c in enumerate(step.tool_calls)]
    message: dict[str, Any] = {"role": "assistant", "content": step.content}
    if calls:
        message["tool_calls"] = calls
    if step.reasoning is not None:
        message["reasoning_content"] = step.reasoning
    usage = step.usage
    body = {
        "id": f"chatcmpl-scripted-{position}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        },
    }
    return Reply(200, json.dumps(body).encode(), usage=(usage.prompt_tokens, usage.completion_tokens))


def _fault(step: Step) -> Reply:
    if step.error is not None:
        body = step.error.body
        try:
            json.loads(body)
            kind = "application/json"
        except ValueError:
            kind = "text/plain"
        return Reply(step.error.status, body.encode(), kind)
    return Reply(200, (step.garbage or "").encode(), "application/json")


@dataclass
class Playback:
    """A script's answers, with the count of faults served per caller."""

    script: Script
    name: str = "script"
    _served: dict[tuple[str, int, int, int], int] = field(default_factory=lambda: defaultdict(int))

    @classmethod
    def from_file(cls, path: Path) -> Playback:
        return cls(load_script(path), name=path.name)

    def respond(self, request: Any, caller: str) -> Reply:
        """The answer to one chat-completions request body from `caller`."""
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            return error_reply(400, "invalid_request_error", "the body must be a JSON object with a messages list")
        messages: list[Any] = request["messages"]
        text = _first_user_text(messages)
        found = next(((i, c) for i, c in enumerate(self.script.conversations) if c.match in text), None)
        if found is None:
            return error_reply(
                400, "invalid_request_error", f"{self.name}: no conversation matches the first user message"
            )
        index, conversation = found
        positions = timeline(conversation)
        position = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        if position >= len(positions):
            return error_reply(
                500,
                "out_of_script",
                f"{self.name}: conversation {conversation.match!r} has no step for assistant turn {position + 1}",
            )
        at = positions[position]
        for number, fault in enumerate(at.faults):
            key = (caller, index, position, number)
            if self._served[key] < fault.times:
                self._served[key] += 1
                return _fault(fault)
        if at.answer is None:
            return error_reply(
                500, "out_of_script", f"{self.name}: conversation {conversation.match!r} ends in faults, all served"
            )
        return completion(str(request.get("model") or "scripted"), position, at.answer)


# -- the standalone server ----------------------------------------------------


def create_app(playback: Playback, *, api_key: str | None = None, model: str | None = None) -> Starlette:
    """An OpenAI-compatible server of `playback`.

    With `api_key`, requests must carry it as their bearer token; with
    `model`, they must name that model. The bodies it received are kept in
    `app.state.received`, for tests.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def refuse(request: Request) -> Response | None:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            return JSONResponse({"error": {"type": "authentication_error", "message": "wrong API key"}}, 401)
        return None

    async def completions(request: Request) -> Response:
        if (refused := refuse(request)) is not None:
            return refused
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": {"type": "invalid_request_error", "message": "body is not JSON"}}, 400)
        request.app.state.received.append(body)
        if model is not None and isinstance(body, dict) and body.get("model") != model:
            return JSONResponse(
                {"error": {"type": "not_found_error", "message": f"model {body.get('model')!r} does not exist"}}, 404
            )
        reply = playback.respond(body, request.headers.get("authorization", "anonymous"))
        return Response(reply.body, reply.status, media_type=reply.content_type)

    async def models(request: Request) -> Response:
        if (refused := refuse(request)) is not None:
            return refused
        return JSONResponse(
            {"object": "list", "data": [{"id": model or "scripted", "object": "model", "owned_by": "ssebench"}]}
        )

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )
    app.state.received = []
    return app


def main(argv: list[str] | None = None) -> None:
    import os

    import uvicorn

    parser = argparse.ArgumentParser(
        prog="python -m ssebench.gateway.scripted", description="Serve a scripted model as an OpenAI-compatible server."
    )
    parser.add_argument("--script", type=Path, required=True, help="the script YAML file")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=4100)
    parser.add_argument("--api-key-env", help="require the bearer token held in this environment variable")
    parser.add_argument("--model", help="require requests to name this model")
    args = parser.parse_args(argv)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"--api-key-env: {args.api_key_env} is not set")
    try:
        playback = Playback.from_file(args.script)
    except SSEBenchError as exc:
        parser.error(str(exc))
    uvicorn.run(
        create_app(playback, api_key=api_key, model=args.model), host=args.host, port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
