"""chat-agent: a tool-calling loop over the chat-completions API of the run's model.

It starts from the task prompt (`sse.prompt.task_prompt()`), and offers the
model five tools: `bash` (the daemon's shell, as the agent user),
`view_file`, `edit_file`, `test_patch` (the MCP server's checks) and
`finish`. It stops when the model finishes (or answers without a tool), at
the turn limit, before TIMEOUT, when the gateway says the budget is spent,
or when the model keeps failing; then it commits the source tree and ends
its dialog ($SSE_ARCHIVE/dialog.jsonl, written through `sse.dialog`) with
a `complete` record saying which of these it was.

Settings come from the environment: SSE_BASE_URL, SSE_API_KEY,
SSE_MODEL_NAME (set by the harness), TIMEOUT, SSE_MCP_URL, and
CHAT_AGENT_MAX_TURNS, CHAT_AGENT_MAX_RETRIES, CHAT_AGENT_BACKOFF,
CHAT_AGENT_MAX_MALFORMED, CHAT_AGENT_OUTPUT_CAP.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from sse.dialog import Dialog, cap

AGENT = "chat-agent"
VERSION = "1"

SYSTEM = """\
You are a security engineer fixing a vulnerability in a source tree at {source}.
Work with the tools: read code with view_file, change it with edit_file (an
exact, unique old_str replaced by new_str), run shell commands with bash (the
shell persists; it starts in the source tree), and check your change with
test_patch, which builds and tests the tree with the checks this run allows.
Keep the fix small and in the project's style; do not weaken tests. When the
fix is done, call finish with a one-paragraph summary."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in a persistent bash in the source tree; returns its output and exit code.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "view_file",
            "description": "Show a file with line numbers (optionally only lines start_line..end_line), "
            "or list a directory. Paths are relative to the source tree.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer"},
                    "end_line": {"type": "integer"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace old_str, which must occur exactly once in the file, by new_str. "
            "Without old_str, create a new file holding new_str.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["path", "new_str"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "test_patch",
            "description": "Build and test the current source tree with every check this run allows.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "End the session: the fix is done (or you give up). Say what you changed and why.",
            "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
        },
    },
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
VIEW_MAX_LINES = 400
LIST_MAX_ENTRIES = 500


# -- settings -------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str
    model: str
    timeout: float = 3600.0
    mcp_url: str = "http://localhost:3000/mcp"
    max_turns: int = 60
    max_retries: int = 5
    backoff: float = 1.0
    backoff_cap: float = 20.0
    max_malformed: int = 3
    output_cap: int = 12_000

    @property
    def margin(self) -> float:
        """Time kept back from TIMEOUT to commit and write the last record."""
        return min(60.0, max(5.0, self.timeout * 0.05))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Raises ValueError naming the variable that is missing or bad."""
        missing = [n for n in ("SSE_BASE_URL", "SSE_API_KEY", "SSE_MODEL_NAME") if not environ.get(n)]
        if missing:
            raise ValueError(f"{', '.join(missing)} not set: this agent needs a model (run it with --model)")

        def number(name: str, default: float, kind: Callable[[str], Any] = int) -> Any:
            raw = environ.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None
            if value < 0:
                raise ValueError(f"{name}={raw!r} must not be negative")
            return value

        return cls(
            base_url=environ["SSE_BASE_URL"].rstrip("/"),
            api_key=environ["SSE_API_KEY"],
            model=environ["SSE_MODEL_NAME"],
            timeout=number("TIMEOUT", 3600.0, float),
            mcp_url=environ.get("SSE_MCP_URL") or "http://localhost:3000/mcp",
            max_turns=number("CHAT_AGENT_MAX_TURNS", 60),
            max_retries=number("CHAT_AGENT_MAX_RETRIES", 5),
            backoff=number("CHAT_AGENT_BACKOFF", 1.0, float),
            max_malformed=number("CHAT_AGENT_MAX_MALFORMED", 3),
            output_cap=max(1000, number("CHAT_AGENT_OUTPUT_CAP", 12_000)),
        )


# -- the model ------------------------------------------------------------------


class ModelError(Exception):
    """A model call that failed: `retryable` ones may succeed again; `budget` means stop for good."""

    def __init__(self, message: str, *, retryable: bool, budget: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.budget = budget
        self.retry_after = retry_after


@dataclass(frozen=True)
class Completion:
    message: dict[str, Any]
    input_tokens: int
    output_tokens: int


def _error_of(response: httpx.Response) -> tuple[str | None, str]:
    """(error type, message) of an error answer, whatever shape it has."""
    try:
        body = response.json()
    except ValueError:
        return None, response.text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return (str(error["type"]) if error.get("type") else None), str(error.get("message") or "")[:300]
    return None, str(error if error is not None else body)[:300]


class ModelClient:
    """POST {base_url}/chat/completions with the run's key; every failure is a ModelError."""

    def __init__(self, settings: Settings, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        # The gateway is on the run's own network: never through a proxy the environment may name.
        self._http = httpx.Client(
            transport=transport, headers={"authorization": f"Bearer {settings.api_key}"}, trust_env=False
        )

    def complete(self, messages: list[dict[str, Any]], timeout: float) -> Completion:
        body = {"model": self.settings.model, "messages": messages, "tools": TOOLS}
        try:
            response = self._http.post(
                f"{self.settings.base_url}/chat/completions",
                json=body,
                timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
            )
        except httpx.TransportError as exc:
            raise ModelError(f"cannot reach the model: {type(exc).__name__}: {exc}", retryable=True) from exc
        if response.status_code != 200:
            kind, message = _error_of(response)
            status = response.status_code
            if status == 429 and kind == "budget_exhausted":
                raise ModelError(message or "the run's budget is exhausted", retryable=False, budget=True)
            retry_after = None
            if status == 429 and (raw := response.headers.get("retry-after")):
                with contextlib.suppress(ValueError):
                    retry_after = float(raw)
            retryable = status in (408, 409, 429) or status >= 500
            raise ModelError(f"the model answered {status}: {message}", retryable=retryable, retry_after=retry_after)
        try:
            data = response.json()
            message = data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(
                f"the model's answer is not a chat completion ({type(exc).__name__}): {response.text[:200]!r}",
                retryable=True,
            ) from None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return Completion(message, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))

    def close(self) -> None:
        self._http.close()


# -- the task container -----------------------------------------------------------


class Environment(Protocol):
    """What the agent needs from the task container; the SDK and MCP there, fakes in tests."""

    def prompt(self) -> str: ...

    def source(self) -> Path: ...

    def bash(self, command: str) -> tuple[int, str, str]: ...

    def test_patch(self, timeout: float) -> str: ...


class ContainerEnvironment:
    """The real thing: the daemon through the SDK, test_patch through the MCP server."""

    def __init__(self, mcp_url: str) -> None:
        self.mcp_url = mcp_url

    def prompt(self) -> str:
        from sse.prompt import task_prompt

        return task_prompt()

    def source(self) -> Path:
        from sse import project

        return Path(project.source)

    def bash(self, command: str) -> tuple[int, str, str]:
        from sse.tools import bash

        result = bash.execute(command)
        return result.code, result.stdout, result.stderr

    def test_patch(self, timeout: float) -> str:
        import anyio
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def call() -> str:
            # A check can take longer than the MCP client's default 300 s read timeout.
            async with (
                httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=timeout)) as http,
                Client(streamable_http_client(self.mcp_url, http_client=http), read_timeout_seconds=timeout) as client,
            ):
                result = await client.call_tool("test_patch", {})
            text = "\n".join(str(getattr(part, "text", "")) for part in result.content)
            if result.is_error:
                raise RuntimeError(text or "test_patch failed")
            return text

        return anyio.run(call)


# -- the tools -------------------------------------------------------------------


class ToolError(Exception):
    """A tool that could not do what it was asked; the model reads the message."""


@dataclass
class Tools:
    env: Environment
    source: Path
    output_cap: int
    test_timeout: Callable[[], float]

    def _path(self, raw: object) -> Path:
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path must be a non-empty string")
        path = Path(raw)
        return path if path.is_absolute() else self.source / path

    def bash(self, args: dict[str, Any]) -> tuple[str, int | None]:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        try:
            code, stdout, stderr = self.env.bash(command)
        except Exception as exc:  # the daemon refused or failed: the model should know
            raise ToolError(f"the shell failed: {exc}") from exc
        text = stdout + (("\n" if stdout and not stdout.endswith("\n") else "") + stderr if stderr else "")
        return f"{cap(text, self.output_cap)}\n[exit code {code}]", code

    def view_file(self, args: dict[str, Any]) -> tuple[str, int | None]:
        path = self._path(args.get("path"))
        if path.is_dir():
            entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
            more = f"\n[... {len(entries) - LIST_MAX_ENTRIES} more entries]" if len(entries) > LIST_MAX_ENTRIES else ""
            return "\n".join(entries[:LIST_MAX_ENTRIES]) + more, None
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ToolError(f"cannot read {args.get('path')}: {exc.strerror or exc}") from None
        if b"\0" in raw[:8192]:
            return f"{args.get('path')} is a binary file of {len(raw)} bytes", None
        lines = raw.decode("utf-8", errors="replace").splitlines()
        start, end = args.get("start_line"), args.get("end_line")
        if (start is not None and not isinstance(start, int)) or (end is not None and not isinstance(end, int)):
            raise ToolError("start_line and end_line must be integers")
        first = max(1, start or 1)
        last = min(len(lines), end if end is not None else first + VIEW_MAX_LINES - 1)
        last = min(last, first + VIEW_MAX_LINES - 1)
        shown = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(first, last + 1))
        note = ""
        if first > 1 or last < len(lines):
            note = f"\n[lines {first}-{last} of {len(lines)}; ask for start_line/end_line to see others]"
        return cap(shown, self.output_cap) + note, None

    def edit_file(self, args: dict[str, Any]) -> tuple[str, int | None]:
        path = self._path(args.get("path"))
        old, new = args.get("old_str"), args.get("new_str")
        if not isinstance(new, str):
            raise ToolError("new_str must be a string")
        if old is None or old == "":
            if path.exists():
                raise ToolError(f"{args.get('path')} exists; give old_str to change it")
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8", newline="") as out:
                out.write(new)
            return f"created {args.get('path')} ({len(new.splitlines())} lines)", None
        if not isinstance(old, str):
            raise ToolError("old_str must be a string")
        try:
            with path.open(encoding="utf-8", newline="") as src:
                text = src.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"cannot read {args.get('path')}: {getattr(exc, 'strerror', None) or exc}") from None
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"old_str is not in {args.get('path')}; view the file and copy the text exactly, whitespace included"
            )
        if count > 1:
            raise ToolError(f"old_str occurs {count} times in {args.get('path')}; include more lines so it occurs once")
        at = text.index(old)
        updated = text[:at] + new + text[at + len(old) :]
        with path.open("w", encoding="utf-8", newline="") as out:
            out.write(updated)
        first = text[:at].count("\n") + 1
        lines = updated.splitlines()
        last = first + max(new.count("\n"), 0)
        lo, hi = max(1, first - 3), min(len(lines), last + 3)
        snippet = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(lo, hi + 1))
        return cap(f"edited {args.get('path')}; lines {lo}-{hi} now read:\n{snippet}", self.output_cap), None

    def test_patch(self, args: dict[str, Any]) -> tuple[str, int | None]:
        try:
            return cap(self.env.test_patch(self.test_timeout()), self.output_cap), None
        except Exception as exc:  # the MCP server failed or timed out
            raise ToolError(f"test_patch failed: {type(exc).__name__}: {exc}") from exc


# -- the loop --------------------------------------------------------------------


class Stop(Exception):
    """The session ends with this status and reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Agent:
    settings: Settings
    env: Environment
    dialog: Dialog
    client: ModelClient
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    messages: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0
    turns: int = 0
    _started: float = 0.0
    _tool_ids: set[str] = field(default_factory=set)

    def remaining(self) -> float:
        """Seconds left before the agent must stop (TIMEOUT less the margin)."""
        return self.settings.timeout - self.settings.margin - (self.clock() - self._started)

    def run(self) -> str:
        """Work the task; return the status written to the dialog's complete record."""
        self._started = self.clock()
        self.dialog.init(agent=AGENT, model=self.settings.model, version=VERSION, max_turns=self.settings.max_turns)
        status, reason = "error", "the agent stopped unexpectedly"
        source: Path | None = None
        try:
            prompt = self.env.prompt()
        except Exception as exc:  # no daemon: the dialog still has its prompt record, saying why
            self.dialog.prompt(f"(no task prompt: {type(exc).__name__}: {exc})")
            self.dialog.complete("error", f"cannot read the task: {exc}")
            return "error"
        self.dialog.prompt(prompt)
        try:
            source = self.env.source()
            tools = Tools(self.env, source, self.settings.output_cap, lambda: max(1.0, self.remaining()))
            self.messages = [
                {"role": "system", "content": SYSTEM.format(source=source)},
                {"role": "user", "content": prompt},
            ]
            status, reason = self.loop(tools)
        except Stop as stop:
            status, reason = stop.status, stop.reason
        except Exception as exc:
            status, reason = "error", f"the agent failed: {type(exc).__name__}: {exc}"
        finally:
            if source is not None:
                self.commit(source, reason)
            self.dialog.complete(status, reason)
        return status

    def loop(self, tools: Tools) -> tuple[str, str]:
        while True:
            if self.turns >= self.settings.max_turns:
                return "turns", f"the turn limit ({self.settings.max_turns}) is reached"
            completion = self.call_model()
            self.turns += 1
            message = completion.message
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.dialog.thinking(reasoning)
            raw_content = message.get("content")
            content = raw_content if isinstance(raw_content, str) else ""
            self.dialog.message(content, tokens={"input": completion.input_tokens, "output": completion.output_tokens})
            calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
            self.messages.append(
                {"role": "assistant", "content": content or None, **({"tool_calls": calls} if calls else {})}
            )
            if not calls:
                return "done", "the model answered without calling a tool"
            finished: str | None = None
            for call in calls:
                summary = self.run_tool(tools, call)
                if summary is not None:
                    finished = summary
            if finished is not None:
                return "done", f"finish: {finished}"[:2000]
            if self.malformed > self.settings.max_malformed:
                return "error", f"the model sent {self.malformed} tool calls whose arguments are not JSON objects"
            if self.remaining() <= 0:
                return "timeout", f"TIMEOUT ({self.settings.timeout:.0f} s) is near: stopped with a margin"

    def call_model(self) -> Completion:
        """One completion, retried with exponential backoff. Raises Stop."""
        attempts = 1 + self.settings.max_retries
        last: ModelError | None = None
        for attempt in range(attempts):
            left = self.remaining()
            if left <= 1:
                raise Stop("timeout", f"TIMEOUT ({self.settings.timeout:.0f} s) is near: stopped with a margin")
            try:
                return self.client.complete(self.messages, timeout=min(600.0, left))
            except ModelError as exc:
                if exc.budget:
                    raise Stop("budget", str(exc)) from None
                if not exc.retryable:
                    raise Stop("error", f"the model call failed: {exc}") from None
                last = exc
            if attempt + 1 < attempts:
                delay = min(self.settings.backoff * 2**attempt, self.settings.backoff_cap)
                if last.retry_after is not None:
                    delay = max(delay, min(last.retry_after, 60.0))
                if delay >= self.remaining():
                    raise Stop("timeout", f"TIMEOUT is near while retrying the model; last error: {last}")
                self.sleep(delay)
        raise Stop("error", f"the model failed {attempts} times in a row; last: {last}")

    def _dialog_id(self, raw: object) -> str:
        tool_id = raw if isinstance(raw, str) and raw else f"tool-{self.turns}"
        while tool_id in self._tool_ids:
            tool_id = f"{tool_id}+"
        self._tool_ids.add(tool_id)
        return tool_id

    def run_tool(self, tools: Tools, call: dict[str, Any]) -> str | None:
        """Run one tool call and answer it; return the summary when it is finish."""
        raw_function = call.get("function")
        function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
        name = str(function.get("name") or "")
        raw = function.get("arguments")
        call_id = str(call.get("id") or "")
        tool_id = self._dialog_id(call.get("id"))
        try:
            args = json.loads(raw) if isinstance(raw, str) and raw.strip() else ({} if raw in (None, "") else raw)
            if not isinstance(args, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            self.malformed += 1
            self.dialog.tool_call(tool_id, name or "(none)", raw if isinstance(raw, str) else repr(raw))
            error = (
                f"the arguments are not a JSON object ({exc}); call {name or 'the tool'} again with "
                "valid JSON arguments"
            )
            self.dialog.tool_result(tool_id, "", error=error)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": f"error: {error}"})
            return None
        self.dialog.tool_call(tool_id, name, args)
        summary: str | None = None
        code: int | None = None
        try:
            if name == "finish":
                summary = str(args.get("summary") or "")
                output = "The session ends now."
            elif name in ("bash", "view_file", "edit_file", "test_patch"):
                output, code = getattr(tools, name)(args)
            else:
                raise ToolError(f"there is no tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
        except ToolError as exc:
            self.dialog.tool_result(tool_id, "", error=str(exc))
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": f"error: {exc}"})
            return None
        self.dialog.tool_result(tool_id, output, code=code)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        return summary

    def commit(self, source: Path, reason: str) -> None:
        """Commit whatever is in the tree (recorded as the agent's own `git` tool call)."""
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": AGENT,
            "GIT_AUTHOR_EMAIL": f"{AGENT}@localhost",
            "GIT_COMMITTER_NAME": AGENT,
            "GIT_COMMITTER_EMAIL": f"{AGENT}@localhost",
        }
        script = "git add -A && git commit --quiet --no-verify -F -"
        tool_id = self._dialog_id("commit")
        self.dialog.tool_call(tool_id, "git", {"command": script})
        try:
            done = subprocess.run(
                ["sh", "-c", script],
                cwd=source,
                env=env,
                input=f"{AGENT}: {reason}"[:500],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.dialog.tool_result(tool_id, "", error=f"git failed: {exc}")
            return
        self.dialog.tool_result(tool_id, cap(done.stdout + done.stderr, 2000), code=done.returncode)


def main() -> int:
    dialog = Dialog()
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        dialog.init(agent=AGENT, model=os.environ.get("SSE_MODEL_NAME") or "none", version=VERSION)
        try:
            from sse.prompt import task_prompt

            dialog.prompt(task_prompt())
        except Exception as prompt_error:  # no daemon either: the record still says why
            dialog.prompt(f"(no prompt: {prompt_error})")
        dialog.complete("error", str(exc))
        print(f"{AGENT}: {exc}", file=sys.stderr)
        return 1
    client = ModelClient(settings)
    try:
        status = Agent(settings, ContainerEnvironment(settings.mcp_url), dialog, client).run()
    finally:
        client.close()
    print(f"{AGENT}: {status}", file=sys.stderr)
    return 1 if status == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
