"""What the gateway counts: one record per model call, and a run's totals.

Both sides read these: the gateway writes them (and appends each record to
`<state_dir>/usage/<run_id>.jsonl`), the harness reads them back from the
control API. Token counts come from the upstream's `usage`, never from
anything the agent says.

`prompt_tokens` is every input token of a call, cached or not, in every
protocol, so totals compare across models: OpenAI's `prompt_tokens` /
`input_tokens` already hold the cached ones (`cached_tokens`), Anthropic's
`input_tokens` holds neither cache reads nor cache writes, so the gateway
adds them. `cache_read_tokens` and `cache_write_tokens` are the part of
`prompt_tokens` read from, and written to, the provider's prompt cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from ssebench.defaults import ModelProtocol
from ssebench.gateway._models import Budget


class UsageRecord(BaseModel):
    """One model call as the gateway forwarded it (or refused it)."""

    model_config = ConfigDict(frozen=True)

    ts: float
    run: str
    model: str
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    error: str | None = None


class Usage(BaseModel):
    """A run's use of its model: its totals, and why it was stopped, if it was.

    `calls` were forwarded upstream (each one a record); `refused` calls were
    refused for the budget, `rejected` ones for themselves (a bad body, too
    many at once, after the run's finish). Refusals are records only up to a
    few per run: `unrecorded` counts the rest.

    Of the calls forwarded, `answered` got a 200 from the upstream and
    `upstream_failed` did not reach a working model (the upstream did not
    answer or refused the provider key, did not know the model, or answered
    5xx), `upstream_failure` saying why for the last of them; the others
    were refused for themselves (a 400 or 429 of the upstream) or cut short
    by the run's finish. Usage written before these counts existed reads
    with them at 0.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    model: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    refused: int = 0
    rejected: int = 0
    unrecorded: int = 0
    stopped: str | None = None
    budget: Budget | None = None
    answered: int = 0
    upstream_failed: int = 0
    upstream_failure: str | None = None
    # When every call failed upstream: what the gateway's own call at the run's finish found broken (None:
    # it found the model working, or was not made).
    upstream_confirmed: str | None = None
    # Requests of the run's key that would have gone out of its network, refused (a shortcut signal, never a
    # grade): to a path the gateway does not serve, or a call whose media the provider would fetch. The first
    # KEPT_NETWORK_REFUSALS as {kind: "gateway", route, reason}.
    network_refused: int = 0
    network_refusals: list[dict[str, str]] = []
    records: list[UsageRecord] = []

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> Usage:
        """The usage a run's summary.json holds (`summary()`); of any version: what it lacks is 0 or unknown."""
        return cls.model_validate({"run_id": "", "model": "", **summary})

    def upstream_broken(self) -> str | None:
        """Why the run measured its model's server rather than its agent: every call it made failed upstream,
        and so did the gateway's own call at its finish (`_health.still_broken`); None when one was answered,
        one failed for itself, none was made (the agent chose not to call), or the model worked for the
        gateway (the failures were the calls' own: the agent's)."""
        if not self.calls or self.answered or self.upstream_failed < self.calls or self.upstream_confirmed is None:
            return None
        calls = f"{self.calls} call{'s' if self.calls != 1 else ''}"
        return (
            f"model {self.model}: every call failed upstream ({calls}): {self.upstream_failure or 'no cause kept'}; "
            f"the gateway's own call: {self.upstream_confirmed}"
        )

    def summary(self) -> dict[str, object]:
        """The totals without the records, as a run's summary.json holds them."""
        return self.model_dump(exclude={"records"})


class Tokens(NamedTuple):
    """The tokens of one call: all its input (`prompt`, the cache tokens among them) and its output."""

    prompt: int = 0
    completion: int = 0
    cache_read: int = 0
    cache_write: int = 0


# Bytes of a request body per token, for a call whose usage never came back: JSON and prose run about four.
BYTES_PER_TOKEN = 4


def estimated(sent: int) -> Tokens:
    """The tokens of a call sent upstream whose usage never came back (a timeout, a stream that broke off or
    reported none): its prompt, estimated from the body's size; the upstream may bill it, so the budget does."""
    return Tokens(prompt=-(-sent // BYTES_PER_TOKEN))


def estimate_said(tokens: Tokens) -> str:
    return f"billed as {tokens.prompt} prompt tokens estimated from the request's size"


# An upstream event longer than this is not read for usage (its bytes still reach the agent): the
# parser's memory stays bounded whatever the upstream sends. A Responses `response.completed`
# repeats the whole answer, so the bound is generous.
MAX_EVENT_BYTES = 16 * 1024 * 1024


def _count(data: Any, name: str) -> int | None:
    value = data.get(name) if isinstance(data, dict) else None
    return value if type(value) is int and value >= 0 else None


def read_usage(protocol: ModelProtocol, usage: Any) -> Tokens | None:
    """The tokens of an answer's `usage` object in `protocol`, or None when it is not one.

    OpenAI's input counts hold the cached tokens; Anthropic's `input_tokens`
    holds neither cache reads nor writes, which are added to it.
    """
    if protocol == "anthropic-messages":
        fresh, output = _count(usage, "input_tokens"), _count(usage, "output_tokens")
        if fresh is None or output is None:
            return None
        read = _count(usage, "cache_read_input_tokens") or 0
        write = _count(usage, "cache_creation_input_tokens") or 0
        return Tokens(fresh + read + write, output, read, write)
    names = ("prompt_tokens", "completion_tokens") if protocol == "openai-chat" else ("input_tokens", "output_tokens")
    prompt, completion = _count(usage, names[0]), _count(usage, names[1])
    if prompt is None or completion is None:
        return None
    details = usage.get("prompt_tokens_details" if protocol == "openai-chat" else "input_tokens_details")
    return Tokens(prompt, completion, min(prompt, _count(details, "cached_tokens") or 0))


def usage_of(protocol: ModelProtocol, body: bytes) -> tuple[Tokens, str | None]:
    """The tokens of a whole (not streamed) 200 answer, and why there are none when there are none."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return Tokens(), f"upstream answer is not JSON ({len(body)} bytes)"
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return Tokens(), "upstream answer reports no usage"
    tokens = read_usage(protocol, usage)
    if tokens is None:
        return Tokens(), "upstream usage is not a pair of token counts"
    return tokens, None


# What a stream that ended in an error event (the upstream overloaded, or failing, mid-answer) is recorded with.
STREAM_ERROR = "the upstream stream ended in an error event"


class StreamUsage:
    """The usage of a streamed answer, read from its server-sent events as they pass to the agent.

    Chat Completions: the last chunk's `usage` (asked for with
    `stream_options.include_usage`), then `data: [DONE]`. Responses: the
    `response.completed` (or `.incomplete`, `.failed`) event's
    `response.usage`. Messages: `message_start`'s usage (the input and
    cache tokens), `message_delta`'s `output_tokens` (a running total), then
    `message_stop`.
    """

    def __init__(self, protocol: ModelProtocol, sent: int = 0) -> None:
        self.protocol = protocol
        self.sent = sent  # the request body's bytes: what a stream without usage is billed by (`estimated`)
        self.tokens: Tokens | None = None
        self.ended = False
        self.failure: str | None = None
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk.replace(b"\r\n", b"\n")  # a CRLF split between chunks only delays an event
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:
                    self._buffer.clear()
                    self._skipping = True
                return
            event = bytes(self._buffer[:end])
            del self._buffer[: end + 2]
            if self._skipping:  # the tail of an event too long to read
                self._skipping = False
                continue
            self._event(event)

    def _event(self, event: bytes) -> None:
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
        if not data:
            return
        if data.strip() == b"[DONE]":
            self.ended = True
            return
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(value, dict):
            return
        kind = value.get("type")
        if self.protocol == "openai-chat":
            self.tokens = read_usage(self.protocol, value.get("usage")) or self.tokens
            if isinstance(value.get("error"), dict):  # a chat stream's error: a chunk of its own, then the end
                self.failure = STREAM_ERROR
        elif self.protocol == "openai-responses":
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                answer = value.get("response")
                self.tokens = read_usage(self.protocol, answer.get("usage") if isinstance(answer, dict) else None)
                self.ended = True
            elif kind == "error":
                self.failure = STREAM_ERROR
        elif kind == "message_start":
            message = value.get("message")
            self.tokens = read_usage(self.protocol, message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta" and self.tokens is not None:
            usage = value.get("usage")
            output = _count(usage, "output_tokens")
            # Newer streams repeat the input counts here; they replace those of message_start.
            later = read_usage(self.protocol, {"output_tokens": 0, **usage}) if isinstance(usage, dict) else None
            if later is not None and _count(usage, "input_tokens") is not None:
                self.tokens = later
            if output is not None:
                self.tokens = self.tokens._replace(completion=output)
        elif kind == "message_stop":
            self.ended = True
        elif kind == "error":
            self.failure = STREAM_ERROR

    def result(self, cut: str | None = None) -> tuple[Tokens, str | None]:
        """The tokens reported, and the stream's problem if it had one (`cut`: why it stopped early)."""
        problem = cut or self.failure or (None if self.ended else "upstream stream was cut short before its end")
        if self.tokens is None:
            tokens = estimated(self.sent)
            said = f" ({problem})" if problem else ""
            return tokens, f"upstream stream reports no usage{said}; {estimate_said(tokens)}"
        tokens = self.tokens
        if problem:
            return tokens, f"{problem}; the tokens are those reported before it"
        return tokens, None
