"""A scripted model: plays back a conversation from a YAML file, for tests and demos.

A script holds conversations; the first that applies to a request plays:
its `match` is a substring of the request's opening user text (its user
messages before the model's first answer) and the request declares every
tool its `tools` names (none when left out):

    conversations:
      - match: "# Task: tlvkit"
        tools: [view_file, edit_file]                # optional: only for agents with these tools
        steps:
          - content: "Let me read the parser."          # an answer: reasoning, content and/or tool calls
            reasoning: "The length check looks off."
            tool_calls:
              - {name: view_file, arguments: {path: tlv.c}}
              - {name: apply_patch, custom: true, input: "*** Begin Patch ..."}   # a freeform (custom) tool
              - {name: test_patch, namespace: mcp__ssebench}  # Responses: a tool of a namespace tool
            usage: {prompt_tokens: 1200, completion_tokens: 35, cache_read_tokens: 1000}
          - error: {status: 500, body: "overloaded"}    # a fault, served `times` times (default 1)
            times: 2
          - garbage: "<html>502 Bad Gateway</html>"     # a 200 whose body is not JSON
          - malformed_tool_call: true                   # a tool call whose arguments are not JSON
            usage: {prompt_tokens: 1300, completion_tokens: 10}
      - match: ""                                       # side calls (titles, quota probes): any request
        repeat: true                                    # its one answer step, at every position
        steps:
          - content: "Fix the TLV parser"

The answer is chosen without state from the position in the conversation:
the number of assistant messages in a Chat Completions or Messages request,
the number of runs of model output (assistant messages, function_call,
custom_tool_call and reasoning items in a row) in a Responses request's
`input`. Answers (and malformed tool calls, which the agent keeps in its
history) each take one position; `malformed_tool_call` with `times: N`
takes N positions in a row. Errors and garbage take none: they are served
at the position of the answer that follows them, `times` requests in a row,
counted per caller (the run's key), so a retry sees the fault again until it
is used up. Faults after the last answer, once used up, leave the caller out
of script: a 500 saying so. A `repeat` conversation has one step, an answer,
served at every position: put it last, where only what no other
conversation takes reaches it.

The same script answers in every protocol, in the protocol of the route it
is called on (`Playback.respond`), whole or streamed (`stream: true`) as
the real APIs stream: OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages. `reasoning` is the Chat answer's `reasoning_content`, a
Responses reasoning item (its summary) and a Messages thinking block.
`usage.prompt_tokens` is all the input, the cache tokens among it (an
Anthropic answer reports `input_tokens` without them). A custom tool call
is a Responses `custom_tool_call`, a Chat `custom` tool call, and a
Messages `tool_use` whose input is `{"input": <the string>}`.

The same playback runs inside the gateway (a model file's `script:`) and as
a standalone server of all three protocols, the upstream of the gateway's
tests:

    python -m ssebench.gateway.scripted --script FILE --host 127.0.0.1 --port N
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, model_validator

from ssebench.defaults import ModelProtocol
from ssebench.errors import SSEBenchError
from ssebench.gateway._apis import APIS, counted_tokens
from ssebench.gateway._usage import Tokens
from ssebench.schema import Strict, load

if TYPE_CHECKING:
    from starlette.applications import Starlette

# The arguments of a malformed tool call: JSON cut short.
MALFORMED_ARGUMENTS = '{"path": "src/'
# Streamed text and arguments come in pieces of this many characters, as a model's tokens would.
PIECE = 16
# Responses input items that are the model's output: a run of them is one turn of the model.
_MODEL_ITEMS = frozenset({"function_call", "custom_tool_call", "reasoning", "local_shell_call"})


class _Strict(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TokenUsage(_Strict):
    prompt_tokens: int = Field(default=0, ge=0)
    """The prompt tokens the answer reports (and the gateway counts)."""
    completion_tokens: int = Field(default=0, ge=0)
    """The completion tokens the answer reports (and the gateway counts)."""
    cache_read_tokens: int = Field(default=0, ge=0)
    """Of the prompt tokens, those read from the provider's cache."""
    cache_write_tokens: int = Field(default=0, ge=0)
    """Of the prompt tokens, those written to the provider's cache."""

    @model_validator(mode="after")
    def _cached_within_input(self) -> TokenUsage:
        if self.cache_read_tokens + self.cache_write_tokens > self.prompt_tokens:
            raise ValueError(
                "prompt_tokens is all the input: it must hold cache_read_tokens and cache_write_tokens, "
                f"not {self.prompt_tokens} < {self.cache_read_tokens} + {self.cache_write_tokens}"
            )
        return self

    @property
    def tokens(self) -> Tokens:
        return Tokens(self.prompt_tokens, self.completion_tokens, self.cache_read_tokens, self.cache_write_tokens)


class ToolCall(_Strict):
    """A function call (`arguments`, a JSON object) or, with `custom: true`, a freeform one (`input`, a string)."""

    name: str = Field(min_length=1)
    """The tool's name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The tool's arguments, sent as JSON."""
    custom: bool = False
    """A freeform (custom) tool call, answered with `input` rather than JSON arguments."""
    input: str | None = None
    """The freeform tool call's input text."""
    namespace: str | None = Field(default=None, min_length=1)
    """A Responses function call of a tool inside this `namespace` tool (how Codex declares an MCP server's
    tools, e.g. mcp__ssebench); other protocols leave it out."""

    @model_validator(mode="after")
    def _one_form(self) -> ToolCall:
        if self.custom and (self.input is None or self.arguments):
            raise ValueError("a custom tool call has input (a string) and no arguments")
        if not self.custom and self.input is not None:
            raise ValueError("input is for custom tool calls: add custom: true, or give arguments")
        return self


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
    """Plays when this is a substring of the request's opening user text (its user messages before the model's
    first answer); the first conversation that matches plays."""
    tools: list[str] = Field(default_factory=list)
    """Plays only when the request declares all these tools (one conversation per agent for one task)."""
    repeat: bool = False
    """Its one answer is served at every position (side calls: put it last with match "")."""
    steps: list[Step] = Field(min_length=1)
    """The replies, in order (see the module's docstring for how a request's position is counted)."""

    @model_validator(mode="after")
    def _repeat_is_one_answer(self) -> Conversation:
        if self.repeat and (len(self.steps) != 1 or not self.steps[0].takes_position):
            raise ValueError("a repeat conversation has one step, an answer, served at every position")
        return self


class Script(_Strict):
    conversations: list[Conversation] = Field(min_length=1)
    """The conversations the script can play."""

    def conversation_for(self, text: str, tools: set[str]) -> tuple[int, Conversation] | None:
        """The conversation that plays (and its index): the first whose match is in the opening user `text`
        and whose tools are all among the `tools` the request declares."""
        return next(
            ((i, c) for i, c in enumerate(self.conversations) if c.match in text and tools.issuperset(c.tools)), None
        )


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
    """An HTTP answer: status, body bytes, content type, the usage it reports (None when it reports none).

    A streamed answer (`chunks`, server-sent events) has them as its body too.
    """

    status: int
    body: bytes
    content_type: str = "application/json"
    usage: Tokens | None = None
    chunks: tuple[bytes, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    def json(self) -> Any:
        return json.loads(self.body)


def error_body(kind: str, message: str, protocol: ModelProtocol = "openai-chat") -> dict[str, Any]:
    """An error in the protocol's own shape: Anthropic's names itself an error at the top."""
    if protocol == "anthropic-messages":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"type": kind, "message": message}}


def error_reply(status: int, kind: str, message: str, protocol: ModelProtocol = "openai-chat") -> Reply:
    return Reply(status, json.dumps(error_body(kind, message, protocol)).encode())


# -- reading a request ----------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _is_model_output(item: Any, protocol: ModelProtocol) -> bool:
    if not isinstance(item, dict):
        return False
    if protocol == "openai-responses" and item.get("type") in _MODEL_ITEMS:
        return True
    return bool(item.get("role") == "assistant")


def _history(request: dict[str, Any], protocol: ModelProtocol) -> list[Any]:
    key = "input" if protocol == "openai-responses" else "messages"
    history = request.get(key)
    if protocol == "openai-responses" and isinstance(history, str):
        return [{"role": "user", "content": history}]
    return history if isinstance(history, list) else []


def opening_text(history: list[Any], protocol: ModelProtocol) -> str:
    """The user text before the model's first output: what a conversation's `match` is looked for in."""
    texts: list[str] = []
    for item in history:
        if _is_model_output(item, protocol):
            break
        if isinstance(item, dict) and item.get("role") == "user":
            texts.append(_text(item.get("content")))
    return "\n".join(texts)


def position_in(history: list[Any], protocol: ModelProtocol) -> int:
    """How many turns the model has had: assistant messages, or (Responses) runs of model-output items."""
    if protocol != "openai-responses":
        return sum(1 for m in history if isinstance(m, dict) and m.get("role") == "assistant")
    runs, inside = 0, False
    for item in history:
        output = _is_model_output(item, protocol)
        runs += output and not inside
        inside = output
    return runs


def declared_tools(request: dict[str, Any], protocol: ModelProtocol) -> set[str]:
    names: set[str] = set()
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if protocol == "openai-chat":
            inner = tool.get("function") or tool.get("custom")
            name = inner.get("name") if isinstance(inner, dict) else None
        else:
            name = tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


# -- rendering an answer --------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """A tool call as an answer holds it: its id, name, and arguments (JSON text) or custom input."""

    id: str
    name: str
    arguments: str
    custom: bool = False
    namespace: str | None = None


@dataclass(frozen=True)
class _Answer:
    id: str
    model: str
    reasoning: str | None
    content: str | None
    calls: list[_Call]
    usage: TokenUsage


def _answer(model: str, position: int, step: Step) -> _Answer:
    if step.malformed_tool_call:
        calls = [_Call(f"call_{position}_0", "edit_file", MALFORMED_ARGUMENTS)]
    else:
        calls = [
            _Call(
                f"call_{position}_{i}",
                c.name,
                c.input if c.custom and c.input is not None else json.dumps(c.arguments),
                custom=c.custom,
                namespace=c.namespace,
            )
            for i, c in enumerate(step.tool_calls)
        ]
    return _Answer(f"scripted-{position}", model, step.reasoning, step.content, calls, step.usage)


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _reply(body: Any, usage: TokenUsage) -> Reply:
    return Reply(200, json.dumps(body).encode(), usage=usage.tokens)


def _streamed(chunks: list[bytes], usage: TokenUsage) -> Reply:
    return Reply(200, b"".join(chunks), "text/event-stream", usage=usage.tokens, chunks=tuple(chunks))


# OpenAI Chat Completions


def _chat_usage(usage: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
    }


def _chat_call(call: _Call, arguments: str | None = None) -> dict[str, Any]:
    text = call.arguments if arguments is None else arguments
    if call.custom:
        return {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": text}}
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": text}}


def chat_completion(answer: _Answer) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.calls:
        message["tool_calls"] = [_chat_call(c) for c in answer.calls]
    if answer.reasoning is not None:
        message["reasoning_content"] = answer.reasoning
    body = {
        "id": f"chatcmpl-{answer.id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if answer.calls else "stop"}],
        "usage": _chat_usage(answer.usage),
    }
    return _reply(body, answer.usage)


def chat_stream(answer: _Answer) -> Reply:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        base = {"id": f"chatcmpl-{answer.id}", "object": "chat.completion.chunk", "created": created}
        return _sse({**base, "model": answer.model, "choices": [choice]})

    chunks = [chunk({"role": "assistant", "content": ""})]
    if answer.reasoning is not None:
        chunks += [chunk({"reasoning_content": piece}) for piece in _pieces(answer.reasoning)]
    if answer.content is not None:
        chunks += [chunk({"content": piece}) for piece in _pieces(answer.content)]
    for index, call in enumerate(answer.calls):
        first = {"index": index, **_chat_call(call, "")}
        chunks.append(chunk({"tool_calls": [first]}))
        inner = "custom" if call.custom else "function"
        field_name = "input" if call.custom else "arguments"
        for piece in _pieces(call.arguments):
            chunks.append(chunk({"tool_calls": [{"index": index, inner: {field_name: piece}}]}))
    chunks.append(chunk({}, "tool_calls" if answer.calls else "stop"))
    last = {"id": f"chatcmpl-{answer.id}", "object": "chat.completion.chunk", "created": created}
    chunks.append(_sse({**last, "model": answer.model, "choices": [], "usage": _chat_usage(answer.usage)}))
    chunks.append(b"data: [DONE]\n\n")
    return _streamed(chunks, answer.usage)


# OpenAI Responses


def _responses_usage(usage: TokenUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def _response_items(answer: _Answer) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if answer.reasoning is not None:
        summary = [{"type": "summary_text", "text": answer.reasoning}]
        items.append({"id": f"rs_{answer.id}", "type": "reasoning", "summary": summary})
    if answer.content is not None:
        text = {"type": "output_text", "text": answer.content, "annotations": []}
        items.append(
            {"id": f"msg_{answer.id}", "type": "message", "role": "assistant", "status": "completed", "content": [text]}
        )
    for call in answer.calls:
        if call.custom:
            items.append(
                {"id": f"ctc_{call.id}", "type": "custom_tool_call", "call_id": call.id, "name": call.name}
                | {"input": call.arguments}
            )
        else:
            items.append(
                {"id": f"fc_{call.id}", "type": "function_call", "call_id": call.id, "name": call.name}
                | ({"namespace": call.namespace} if call.namespace else {})
                | {"arguments": call.arguments, "status": "completed"}
            )
    return items


def _response(answer: _Answer, created: int, *, done: bool) -> dict[str, Any]:
    return {
        "id": f"resp_{answer.id}",
        "object": "response",
        "created_at": created,
        "status": "completed" if done else "in_progress",
        "model": answer.model,
        "output": _response_items(answer) if done else [],
        "usage": _responses_usage(answer.usage) if done else None,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "store": False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
    }


def response(answer: _Answer) -> Reply:
    return _reply(_response(answer, int(time.time()), done=True), answer.usage)


def response_stream(answer: _Answer) -> Reply:
    created = int(time.time())
    chunks: list[bytes] = []

    def event(kind: str, **data: Any) -> None:
        chunks.append(_sse({"type": kind, "sequence_number": len(chunks), **data}, kind))

    event("response.created", response=_response(answer, created, done=False))
    event("response.in_progress", response=_response(answer, created, done=False))
    for index, item in enumerate(_response_items(answer)):
        at = {"item_id": item["id"], "output_index": index}
        kind = item["type"]
        if kind == "reasoning":
            event("response.output_item.added", output_index=index, item={**item, "summary": []})
            text = item["summary"][0]["text"]
            event(
                "response.reasoning_summary_part.added",
                **at,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
            for piece in _pieces(text):
                event("response.reasoning_summary_text.delta", **at, summary_index=0, delta=piece)
            event("response.reasoning_summary_text.done", **at, summary_index=0, text=text)
            event("response.reasoning_summary_part.done", **at, summary_index=0, part=item["summary"][0])
        elif kind == "message":
            event(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            part = item["content"][0]
            event("response.content_part.added", **at, content_index=0, part={**part, "text": ""})
            for piece in _pieces(part["text"]):
                event("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
            event("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[])
            event("response.content_part.done", **at, content_index=0, part=part)
        elif kind == "function_call":
            event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in _pieces(item["arguments"]):
                event("response.function_call_arguments.delta", **at, delta=piece)
            event("response.function_call_arguments.done", **at, name=item["name"], arguments=item["arguments"])
        else:
            event("response.output_item.added", output_index=index, item={**item, "input": ""})
            for piece in _pieces(item["input"]):
                event("response.custom_tool_call_input.delta", **at, delta=piece)
            event("response.custom_tool_call_input.done", **at, input=item["input"])
        event("response.output_item.done", output_index=index, item=item)
    event("response.completed", response=_response(answer, created, done=True))
    return _streamed(chunks, answer.usage)


# Anthropic Messages


def _message_usage(usage: TokenUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens - usage.cache_read_tokens - usage.cache_write_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": output_tokens,
    }


def _tool_input(call: _Call) -> Any:
    if call.custom:
        return {"input": call.arguments}
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments  # a malformed call: not the object the API promises


def _blocks(answer: _Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if answer.reasoning is not None:
        blocks.append({"type": "thinking", "thinking": answer.reasoning, "signature": f"scripted-{answer.id}"})
    if answer.content is not None:
        blocks.append({"type": "text", "text": answer.content})
    for call in answer.calls:
        blocks.append({"type": "tool_use", "id": f"toolu_{call.id}", "name": call.name, "input": _tool_input(call)})
    return blocks


def _message(answer: _Answer, content: list[dict[str, Any]], stop: str | None, output_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_{answer.id}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _message_usage(answer.usage, output_tokens),
    }


def _stop_reason(answer: _Answer) -> str:
    return "tool_use" if answer.calls else "end_turn"


def message(answer: _Answer) -> Reply:
    body = _message(answer, _blocks(answer), _stop_reason(answer), answer.usage.completion_tokens)
    return _reply(body, answer.usage)


def message_stream(answer: _Answer) -> Reply:
    chunks: list[bytes] = []

    def event(kind: str, **data: Any) -> None:
        chunks.append(_sse({"type": kind, **data}, kind))

    event("message_start", message=_message(answer, [], None, min(1, answer.usage.completion_tokens)))
    event("ping")
    for index, block in enumerate(_blocks(answer)):
        kind = block["type"]
        if kind == "thinking":
            event("content_block_start", index=index, content_block={**block, "thinking": "", "signature": ""})
            for piece in _pieces(block["thinking"]):
                event("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": piece})
            event(
                "content_block_delta", index=index, delta={"type": "signature_delta", "signature": block["signature"]}
            )
        elif kind == "text":
            event("content_block_start", index=index, content_block={**block, "text": ""})
            for piece in _pieces(block["text"]):
                event("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        else:
            event("content_block_start", index=index, content_block={**block, "input": {}})
            given = block["input"]
            text = given if isinstance(given, str) else json.dumps(given)
            for piece in _pieces(text):
                event("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
        event("content_block_stop", index=index)
    delta = {"stop_reason": _stop_reason(answer), "stop_sequence": None}
    event("message_delta", delta=delta, usage={"output_tokens": answer.usage.completion_tokens})
    event("message_stop")
    return _streamed(chunks, answer.usage)


_RENDER = {
    ("openai-chat", False): chat_completion,
    ("openai-chat", True): chat_stream,
    ("openai-responses", False): response,
    ("openai-responses", True): response_stream,
    ("anthropic-messages", False): message,
    ("anthropic-messages", True): message_stream,
}


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

    def respond(self, request: Any, caller: str, protocol: ModelProtocol = "openai-chat") -> Reply:
        """The answer to one request body from `caller`, in `protocol`, streamed when it asks to be."""
        api = APIS[protocol]
        if not isinstance(request, dict) or any(not isinstance(request.get(name), list) for name in api.lists):
            lists = " and ".join(f"a {name} list" for name in api.lists) or "input"
            return error_reply(400, "invalid_request_error", f"the body must be a JSON object with {lists}", protocol)
        history = _history(request, protocol)
        text, tools = opening_text(history, protocol), declared_tools(request, protocol)
        found = self.script.conversation_for(text, tools)
        if found is None:
            return error_reply(
                400,
                "invalid_request_error",
                f"{self.name}: no conversation matches the opening user text and the tools declared",
                protocol,
            )
        index, conversation = found
        positions = timeline(conversation)
        position = 0 if conversation.repeat else position_in(history, protocol)
        if position >= len(positions):
            return error_reply(
                500,
                "out_of_script",
                f"{self.name}: conversation {conversation.match!r} has no step for assistant turn {position + 1}",
                protocol,
            )
        at = positions[position]
        for number, fault in enumerate(at.faults):
            key = (caller, index, position, number)
            if self._served[key] < fault.times:
                self._served[key] += 1
                return _fault(fault)
        if at.answer is None:
            return error_reply(
                500,
                "out_of_script",
                f"{self.name}: conversation {conversation.match!r} ends in faults, all served",
                protocol,
            )
        answer = _answer(str(request.get("model") or "scripted"), position, at.answer)
        return _RENDER[protocol, request.get("stream") is True](answer)


def completion(model: str, position: int, step: Step) -> Reply:
    """The chat.completion object of an answer (or of a malformed tool call)."""
    return chat_completion(_answer(model, position, step))


# -- the standalone server ----------------------------------------------------


def create_app(playback: Playback, *, api_key: str | None = None, model: str | None = None) -> Starlette:
    """A server of `playback` in every protocol, as the real APIs' routes.

    With `api_key`, requests must carry it (as their bearer token, or in
    x-api-key as Anthropic's API takes it); with `model`, they must name
    that model. The bodies and headers it received are kept in
    `app.state.received` and `app.state.headers`, for tests.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def refuse(request: Request, protocol: ModelProtocol) -> Response | None:
        given = {request.headers.get("authorization"), f"Bearer {request.headers.get('x-api-key')}"}
        if api_key is not None and f"Bearer {api_key}" not in given:
            return JSONResponse(error_body("authentication_error", "wrong API key", protocol), 401)
        return None

    def route(protocol: ModelProtocol) -> Any:
        async def answer(request: Request) -> Response:
            if (refused := refuse(request, protocol)) is not None:
                return refused
            try:
                body = json.loads(await request.body())
            except ValueError:
                return JSONResponse(error_body("invalid_request_error", "body is not JSON", protocol), 400)
            request.app.state.received.append(body)
            request.app.state.headers.append(dict(request.headers))
            if model is not None and isinstance(body, dict) and body.get("model") != model:
                message = f"model {body.get('model')!r} does not exist"
                return JSONResponse(error_body("not_found_error", message, protocol), 404)
            caller = request.headers.get("authorization") or request.headers.get("x-api-key") or "anonymous"
            reply = playback.respond(body, caller, protocol)
            if reply.chunks:
                return StreamingResponse(_each(reply.chunks), reply.status, media_type=reply.content_type)
            return Response(reply.body, reply.status, media_type=reply.content_type)

        return answer

    async def count(request: Request) -> Response:
        if (refused := refuse(request, "anthropic-messages")) is not None:
            return refused
        return JSONResponse({"input_tokens": counted_tokens(len(await request.body()))})

    async def models(request: Request) -> Response:
        if (refused := refuse(request, "openai-chat")) is not None:
            return refused
        return JSONResponse(
            {"object": "list", "data": [{"id": model or "scripted", "object": "model", "owned_by": "ssebench"}]}
        )

    app = Starlette(
        routes=[
            *(Route(f"/v1{api.path}", route(protocol), methods=["POST"]) for protocol, api in APIS.items()),
            Route("/v1/messages/count_tokens", count, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )
    app.state.received = []
    app.state.headers = []
    return app


async def _each(chunks: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def main(argv: list[str] | None = None) -> None:
    import os

    import uvicorn

    parser = argparse.ArgumentParser(
        prog="python -m ssebench.gateway.scripted",
        description="Serve a scripted model in OpenAI's Chat Completions and Responses and Anthropic's Messages.",
    )
    parser.add_argument("--script", type=Path, required=True, help="the script YAML file")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=4100)
    parser.add_argument("--api-key-env", help="require the key held in this environment variable")
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
