"""What the gateway forwards of a model call: an allow-list of parameters per upstream API.

A call goes upstream as the parameters listed for its API and nothing else,
its output limits within the model file's `max_output_tokens`. What the
gateway does not know it can neither cap nor bill, so it is dropped: a
server's own limits (llama.cpp's `n_predict`), billing options
(`service_tier`), tools the provider runs and bills per call
(`web_search_options`, a Messages `web_search_*` tool, a Responses
`web_search` tool), state kept at the provider (`previous_response_id`,
`store`). A call asking for several answers at once is refused: the budget
is checked before a call, so one call must not multiply what it spends.

Each protocol the gateway serves is one `Api` value: OpenAI's Chat
Completions and Responses, Anthropic's Messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# A model API as its wire format (what an upstream speaks and what an agent calls) has one home, with
# the other names an agent's and a model's files share.
from ssebench.defaults import ModelProtocol

# Anthropic's smallest extended-thinking budget.
MIN_THINKING_BUDGET = 1024


class BadCall(ValueError):
    """A call the gateway refuses as it stands (a 400); the message names the parameter and the fix."""


class FetchRefused(BadCall):
    """A call whose media the provider would fetch from the internet (or an account's storage) for the run: a
    request out of the run's network, refused (and counted among the run's refused requests)."""


@dataclass(frozen=True)
class Api:
    """One upstream API: where its calls go and which of their parameters are forwarded."""

    protocol: ModelProtocol
    name: str
    # Under the model's base_url upstream, and under /v1 on a model listener.
    path: str
    # Parameters every call gives, as JSON arrays.
    lists: tuple[str, ...]
    # Passed on as the agent sent them.
    forwarded: frozenset[str]
    # Output limits: positive integers, lowered to the model's max_output_tokens; the first is
    # set to it when the call gives none.
    output_limits: tuple[str, ...]
    # The parameter asking for several answers in one call, which must be 1 (or absent).
    choices: str | None = None
    # The `type`s of tools passed on (a tool without one is the API's plain function tool);
    # an entry ending in '_' is a prefix (Anthropic's versioned client tools, `bash_20250124`).
    # Other tools run at the provider, billed per call: they are dropped.
    tool_types: tuple[str, ...] = ("function",)
    # Parameters set whatever the agent sent.
    fixed: tuple[tuple[str, Any], ...] = ()
    # The agent's request headers passed on upstream (all others are the gateway's own).
    headers: tuple[str, ...] = ()

    def upstream_body(self, body: dict[str, Any], *, model: str, max_output_tokens: int | None) -> dict[str, Any]:
        """What goes upstream for an agent's `body`, as `model`. Raises BadCall."""
        for name in self.lists:
            if not isinstance(body.get(name), list):
                raise BadCall(f"the body must be a JSON object with a {name} list")
        if "stream" in body and type(body["stream"]) is not bool:
            raise BadCall(f"stream must be true or false, not {_shown(body['stream'])}")
        if self.choices is not None and self.choices in body and not _is_int(body[self.choices], 1, 1):
            raise BadCall(
                f"{self.choices} must be 1: the gateway forwards one completion per call, "
                f"not {_shown(body[self.choices])}"
            )
        for name in ("messages", "input"):  # Responses' input may be a string: nothing in it to fetch
            _no_fetches(body.get(name))
        out = {name: value for name, value in body.items() if name in self.forwarded}
        if isinstance(out.get("tools"), list):
            out["tools"] = [tool for tool in out["tools"] if self._runs_at_the_agent(tool)]
        for name in self.output_limits:
            if name in body:
                value = body[name]
                if not _is_int(value, 1, None):
                    raise BadCall(f"{name} must be a positive integer, not {_shown(value)}")
                out[name] = value if max_output_tokens is None else min(value, max_output_tokens)
        if max_output_tokens is not None and not any(name in out for name in self.output_limits):
            out[self.output_limits[0]] = max_output_tokens
        if self.protocol == "anthropic-messages":
            _fit_thinking(out)
        if body.get("stream") is True:
            out["stream"] = True
            if self.protocol == "openai-chat":  # else the stream carries no usage, and the call no count
                out["stream_options"] = {"include_usage": True}
        else:
            out.pop("stream", None)
        out.update(self.fixed)
        out["model"] = model
        return out

    def _runs_at_the_agent(self, tool: Any) -> bool:
        if not isinstance(tool, dict) or "type" not in tool:
            return True
        kind = tool["type"]
        return isinstance(kind, str) and any(
            kind.startswith(allowed) if allowed.endswith("_") else kind == allowed for allowed in self.tool_types
        )


def _fit_thinking(out: dict[str, Any]) -> None:
    """Keep an extended-thinking budget below `max_tokens`, which Anthropic requires and the cap may break.

    Claude Code asks for max_tokens 32000 with a thinking budget just below:
    once the model's cap lowers max_tokens, the budget follows it down, and
    under Anthropic's smallest budget (1024) thinking is left off.
    """
    thinking, limit = out.get("thinking"), out.get("max_tokens")
    if not isinstance(thinking, dict) or type(limit) is not int:
        return
    budget = thinking.get("budget_tokens")
    if type(budget) is int and budget >= limit:
        if limit > MIN_THINKING_BUDGET:
            out["thinking"] = {**thinking, "budget_tokens": limit - 1}
        else:
            del out["thinking"]


# Content parts that can carry media (Chat's image_url and file, Responses' input_image and input_file,
# Messages' image and document): by URL, the provider fetches it from the internet for the run; by file id,
# it reads the operator's account's storage. Inline data (a data: URL, base64, text) is the agent's own.
_MEDIA_PARTS = frozenset({"image_url", "file", "input_image", "input_file", "image", "document"})
# How deep in a call's messages a content part is looked for (the body's nesting is bounded before this).
_PART_DEPTH = 8


def _no_fetches(value: Any, depth: int = 0) -> None:
    """Refuse (BadCall) a media part of the call's messages that names a URL or a provider's file id: the
    run's network reaches nothing outside, and a provider fetching a page for it must not either."""
    if depth > _PART_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            _no_fetches(item, depth + 1)
        return
    if not isinstance(value, dict):
        return
    if value.get("type") in _MEDIA_PARTS:
        kind = value["type"]
        inner: dict[str, Any] = value[kind] if isinstance(value.get(kind), dict) else {}
        urls = [value.get("image_url"), value.get("file_url"), inner.get("url"), inner.get("file_url")]
        source: dict[str, Any] = value["source"] if isinstance(value.get("source"), dict) else {}
        if source.get("type") in ("url", "file") or source.get("url") or source.get("file_id"):
            raise FetchRefused(f"a {kind} part by URL or file id is not forwarded: give its content inline (base64)")
        if value.get("file_id") or inner.get("file_id"):
            raise FetchRefused(f"a {kind} part by file id is not forwarded: give its content inline")
        for url in urls:
            if isinstance(url, str) and not url.startswith("data:"):
                raise FetchRefused(f"a {kind} part by URL is not forwarded: give its content inline (a data: URL)")
        return
    for key in ("content", "output"):
        if isinstance(value.get(key), list):
            _no_fetches(value[key], depth + 1)


def _is_int(value: Any, low: int, high: int | None) -> bool:
    # type(), not isinstance(): True is an int to Python, and 1 to a server that reads it as one.
    return type(value) is int and value >= low and (high is None or value <= high)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


CHAT_COMPLETIONS = Api(
    protocol="openai-chat",
    name="OpenAI Chat Completions",
    path="/chat/completions",
    lists=("messages",),
    forwarded=frozenset(
        {
            "messages",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "functions",
            "function_call",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "logprobs",
            "top_logprobs",
            "response_format",
            "reasoning_effort",
            "user",
        }
    ),
    output_limits=("max_tokens", "max_completion_tokens"),
    choices="n",
    tool_types=("function", "custom"),
)

RESPONSES = Api(
    protocol="openai-responses",
    name="OpenAI Responses",
    path="/responses",
    lists=(),
    forwarded=frozenset(
        {
            "input",
            "instructions",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "temperature",
            "top_p",
            "reasoning",
            "text",
            "include",
            "prompt_cache_key",
            "user",
        }
    ),
    output_limits=("max_output_tokens",),
    # local_shell runs at the agent (Codex's shell tool on some models); web_search, file_search,
    # code_interpreter, mcp and image_generation run at the provider.
    tool_types=("function", "custom", "local_shell"),
    # Nothing kept at the provider: Codex sends the whole input each turn with store false, and a
    # stored response could be fetched by id by whoever holds the provider key.
    fixed=(("store", False),),
)

MESSAGES = Api(
    protocol="anthropic-messages",
    name="Anthropic Messages",
    path="/messages",
    lists=("messages",),
    forwarded=frozenset(
        {
            "messages",
            "system",
            "tools",
            "tool_choice",
            "temperature",
            "top_p",
            "top_k",
            "stop_sequences",
            "thinking",
            "metadata",
        }
    ),
    output_limits=("max_tokens",),
    # Client tools: the plain ones (no type, or "custom") and Anthropic's versioned ones the agent
    # runs itself; web_search_*, web_fetch_*, code_execution_* and MCP toolsets run at Anthropic.
    tool_types=("custom", "bash_", "text_editor_", "computer_", "memory_"),
    headers=("anthropic-version", "anthropic-beta"),
)

APIS: dict[ModelProtocol, Api] = {api.protocol: api for api in (CHAT_COMPLETIONS, RESPONSES, MESSAGES)}
# The Messages API's version the gateway sends when the agent names none.
ANTHROPIC_VERSION = "2023-06-01"


def counted_tokens(size: int) -> int:
    """The answer to a token count: an estimate from the body's size in bytes (4 a token), the same every time.

    Counting is answered by the gateway itself, for every model: it is no
    model call (nothing is generated or billed), and forwarding it would let
    an agent spend the provider's rate limits outside its budget.
    """
    return max(1, size // 4)
