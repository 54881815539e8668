"""What the gateway forwards of a model call: an allow-list of parameters per upstream API.

A call goes upstream as the parameters listed for its API and nothing else,
its output limits within the model file's `max_output_tokens`. What the
gateway does not know it can neither cap nor bill, so it is dropped: a
server's own limits (llama.cpp's `n_predict`), billing options (`store`,
`service_tier`), tools the provider bills per call (`web_search_options`).
A call asking for several answers at once is refused: the budget is checked
before a call, so one call must not multiply what it spends. Each API the
gateway serves is one `Api` value (OpenAI's Responses and Anthropic's
Messages will be two more).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class BadCall(ValueError):
    """A call the gateway refuses as it stands (a 400); the message names the parameter and the fix."""


@dataclass(frozen=True)
class Api:
    """One upstream API: where its calls go and which of their parameters are forwarded."""

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
    streaming: bool = False

    def upstream_body(self, body: dict[str, Any], *, model: str, max_output_tokens: int | None) -> dict[str, Any]:
        """What goes upstream for an agent's `body`, as `model`. Raises BadCall."""
        for name in self.lists:
            if not isinstance(body.get(name), list):
                raise BadCall(f"the body must be a JSON object with a {name} list")
        if body.get("stream") and not self.streaming:
            raise BadCall("streaming is not supported by the SSEBench gateway; send stream: false")
        if self.choices is not None and self.choices in body and not _is_int(body[self.choices], 1, 1):
            raise BadCall(
                f"{self.choices} must be 1: the gateway forwards one completion per call, "
                f"not {_shown(body[self.choices])}"
            )
        out = {name: value for name, value in body.items() if name in self.forwarded}
        for name in self.output_limits:
            if name in body:
                value = body[name]
                if not _is_int(value, 1, None):
                    raise BadCall(f"{name} must be a positive integer, not {_shown(value)}")
                out[name] = value if max_output_tokens is None else min(value, max_output_tokens)
        if max_output_tokens is not None and not any(name in out for name in self.output_limits):
            out[self.output_limits[0]] = max_output_tokens
        out["model"] = model
        return out


def _is_int(value: Any, low: int, high: int | None) -> bool:
    # type(), not isinstance(): True is an int to Python, and 1 to a server that reads it as one.
    return type(value) is int and value >= low and (high is None or value <= high)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


CHAT_COMPLETIONS = Api(
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
)
