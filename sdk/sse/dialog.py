"""The dialog protocol: how an agent writes its session to $SSE_ARCHIVE/dialog.jsonl.

One JSON object per line, each with `seq` (0, 1, 2, ... with no gap), `ts`
(seconds since the epoch) and `type`:

    init       agent, model (+ anything else the agent wants to say about itself)
    prompt     text: the task prompt the agent started from
    message    text, tokens: the model's answer of one turn ({input, output} or null)
    thinking   text, tokens: reasoning the model returned apart from its answer
    tool_call  tool_id, name, input: a tool the agent runs (for the model or on its own)
    tool_result tool_id, output, code, error: what that tool gave back
    complete   status (done|error|timeout|budget|turns), reason, totals

`init` comes first, `prompt` second, `complete` last and once; every
`tool_call` is answered by exactly one `tool_result` with its `tool_id`.
`Dialog` writes records that follow this; `validate` checks a list of
records and names every problem. docs/dialog.md shows real examples.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

STATUSES = ("done", "error", "timeout", "budget", "turns")
TYPES = ("init", "prompt", "message", "thinking", "tool_call", "tool_result", "complete")
TOTALS = ("input_tokens", "output_tokens", "turns", "tool_calls")


def default_path() -> Path:
    """$SSE_ARCHIVE/dialog.jsonl (the archive is /tmp/sse-archive when unset)."""
    return Path(os.environ.get("SSE_ARCHIVE") or "/tmp/sse-archive") / "dialog.jsonl"


class Dialog:
    """Appends a session's records to a JSON-lines file, one flushed line per record.

    Every line is complete on disk once its method returns, so a session cut
    short still leaves every record it wrote. The writer keeps the running
    totals that `complete` writes unless it is given its own.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.seq = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.turns = 0
        self.tool_calls = 0
        self.completed = False

    def _write(self, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        record = {"seq": self.seq, "ts": time.time(), "type": kind, **fields}
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        self.seq += 1
        return record

    def _count(self, tokens: dict[str, int] | None) -> None:
        if tokens is not None:
            self.input_tokens += int(tokens.get("input", 0))
            self.output_tokens += int(tokens.get("output", 0))

    def init(self, agent: str, model: str, **extra: Any) -> dict[str, Any]:
        """The first record: who is talking, to which model ("none" for agents without one)."""
        return self._write("init", {"agent": agent, "model": model, **extra})

    def prompt(self, text: str) -> dict[str, Any]:
        """The second record: the task prompt."""
        return self._write("prompt", {"text": text})

    def message(self, text: str, tokens: dict[str, int] | None = None) -> dict[str, Any]:
        """The model's answer of one turn; `tokens` = {input, output} of that model call, counted as a turn."""
        self._count(tokens)
        if tokens is not None:
            self.turns += 1
        return self._write("message", {"text": text, "tokens": tokens})

    def thinking(self, text: str, tokens: dict[str, int] | None = None) -> dict[str, Any]:
        """Reasoning the model returned beside its answer."""
        self._count(tokens)
        return self._write("thinking", {"text": text, "tokens": tokens})

    def tool_call(self, tool_id: str, name: str, input: Any) -> dict[str, Any]:
        """A tool about to run; answer it with `tool_result` and the same `tool_id`."""
        self.tool_calls += 1
        return self._write("tool_call", {"tool_id": tool_id, "name": name, "input": input})

    def tool_result(
        self, tool_id: str, output: str, code: int | None = None, error: str | None = None
    ) -> dict[str, Any]:
        """What the tool of `tool_id` gave back: its output, exit code if it has one, error if it failed."""
        return self._write("tool_result", {"tool_id": tool_id, "output": output, "code": code, "error": error})

    def complete(self, status: str, reason: str | None = None, totals: dict[str, int] | None = None) -> dict[str, Any]:
        """The last record. `totals` defaults to what this writer counted.

        Raises ValueError for a status outside STATUSES or a second complete.
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        if self.completed:
            raise ValueError("the dialog is already complete")
        if totals is None:
            totals = {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "turns": self.turns,
                "tool_calls": self.tool_calls,
            }
        self.completed = True
        return self._write("complete", {"status": status, "reason": reason, "totals": totals})


def cap(text: str, limit: int) -> str:
    """At most about `limit` characters: the head and the (longer) tail, with what was cut in between.

    For tool outputs an agent writes to its dialog (and shows its model): a long log's end says most.
    """
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def read(path: Path | str) -> list[Any]:
    """The records of a dialog file; a line that is not JSON becomes the string it was."""
    return parse(Path(path).read_text(encoding="utf-8", errors="replace"))


# The deepest nesting a record may have: a dialog's records are a few levels deep, and a reader (the
# report's renderer, json itself) recurses once per level.
MAX_DEPTH = 64


def loads_record(line: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """One JSON value nested at most `max_depth` deep. Raises ValueError otherwise (a line nested too deep
    for json's own recursion included: the writer of a dialog is the agent)."""
    try:
        value = json.loads(line)
    except RecursionError:
        raise ValueError("nested deeper than JSON can be read") from None
    level: list[Any] = [value]
    for _depth in range(max_depth + 1):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return value
    raise ValueError(f"nested deeper than {max_depth} levels")


def parse(text: str) -> list[Any]:
    """The records of a dialog's text; a line that is not JSON (or nested too deep) becomes the string it was."""
    out: list[Any] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(loads_record(line))
        except ValueError:
            out.append(line)
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _tokens_problem(tokens: object) -> str | None:
    if tokens is None:
        return None
    if not isinstance(tokens, dict) or set(tokens) != {"input", "output"}:
        return "tokens must be null or {input, output}"
    if not all(_is_int(v) and v >= 0 for v in tokens.values()):
        return "tokens.input and tokens.output must be non-negative integers"
    return None


def _field_problems(record: dict[str, Any]) -> list[str]:
    """Problems with the fields of one record of a known type."""
    kind = record["type"]
    problems: list[str] = []

    def need(name: str, check: Any, what: str) -> None:
        if name not in record:
            problems.append(f"{kind} lacks {name}")
        elif not check(record[name]):
            problems.append(f"{kind}.{name} must be {what}")

    text = (lambda v: isinstance(v, str), "a string")
    optional_text = (lambda v: v is None or isinstance(v, str), "a string or null")
    if kind == "init":
        need("agent", *text)
        need("model", *text)
    elif kind == "prompt":
        need("text", *text)
    elif kind in ("message", "thinking"):
        need("text", *text)
        if problem := _tokens_problem(record.get("tokens")):
            problems.append(f"{kind}: {problem}")
    elif kind == "tool_call":
        need("tool_id", lambda v: isinstance(v, str) and v != "", "a non-empty string")
        need("name", lambda v: isinstance(v, str) and v != "", "a non-empty string")
        if "input" not in record:
            problems.append("tool_call lacks input")
    elif kind == "tool_result":
        need("tool_id", lambda v: isinstance(v, str) and v != "", "a non-empty string")
        need("output", *text)
        if not (record.get("code") is None or _is_int(record.get("code"))):
            problems.append("tool_result.code must be an integer or null")
        if not optional_text[0](record.get("error")):
            problems.append("tool_result.error must be a string or null")
    elif kind == "complete":
        need("status", lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}")
        if not optional_text[0](record.get("reason")):
            problems.append("complete.reason must be a string or null")
        totals = record.get("totals")
        if not isinstance(totals, dict):
            problems.append(f"complete.totals must be {{{', '.join(TOTALS)}}}")
        else:
            for name in TOTALS:
                if not (_is_int(totals.get(name)) and totals[name] >= 0):
                    problems.append(f"complete.totals.{name} must be a non-negative integer")
    return problems


def validate(records: list[Any]) -> list[str]:
    """Every way `records` break the protocol, one sentence each; empty when they follow it."""
    problems: list[str] = []
    if not records:
        return ["the dialog is empty: it needs at least init, prompt and complete"]
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    completes = 0
    for index, record in enumerate(records):
        where = f"record {index}"
        if not isinstance(record, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        if record.get("seq") != index or not _is_int(record.get("seq")):
            problems.append(f"{where}: seq is {record.get('seq')!r}, expected {index}")
        if not _is_number(record.get("ts")):
            problems.append(f"{where}: ts must be a number of seconds")
        kind = record.get("type")
        if kind not in TYPES:
            problems.append(f"{where}: unknown type {kind!r}")
            continue
        problems += [f"{where}: {p}" for p in _field_problems(record)]
        if index == 0 and kind != "init":
            problems.append(f"{where}: the first record must be init, not {kind}")
        if index == 1 and kind != "prompt":
            problems.append(f"{where}: the second record must be prompt, not {kind}")
        if index > 0 and kind == "init":
            problems.append(f"{where}: init must come first, and once")
        if index > 1 and kind == "prompt":
            problems.append(f"{where}: prompt must come second, and once")
        if kind == "complete":
            completes += 1
            if completes > 1:
                problems.append(f"{where}: a second complete")
            elif index != len(records) - 1:
                problems.append(f"{where}: complete must be the last record")
        tool_id = record.get("tool_id")
        if kind == "tool_call" and isinstance(tool_id, str):
            if tool_id in open_calls or tool_id in answered:
                problems.append(f"{where}: tool_id {tool_id!r} is used by an earlier tool_call")
            else:
                open_calls[tool_id] = index
        elif kind == "tool_result" and isinstance(tool_id, str):
            if tool_id in open_calls:
                del open_calls[tool_id]
                answered.add(tool_id)
            elif tool_id in answered:
                problems.append(f"{where}: a second tool_result for tool_id {tool_id!r}")
            else:
                problems.append(f"{where}: tool_result for tool_id {tool_id!r}, which no earlier tool_call has")
    for tool_id, index in open_calls.items():
        problems.append(f"record {index}: tool_call {tool_id!r} has no tool_result")
    if completes == 0:
        problems.append("no complete record: the agent did not finish its dialog (killed at TIMEOUT?)")
    return problems
