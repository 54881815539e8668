"""claude-code: Anthropic's Claude Code CLI, run non-interactively on the task, talking to the run's gateway.

The CLI is the native binary bundled in the pinned `claude-agent-sdk` wheel,
installed into the agent's read-only software volume at /opt/agents/claude-code
(a venv). This launcher runs as the agent user in the task's source tree: it
writes the dialog's init and prompt, runs the CLI in print mode with its
stream-json transcript on stdout, translates each event into the dialog
($SSE_ARCHIVE/dialog.jsonl) as it arrives, keeps the transcript itself
($SSE_ARCHIVE/claude-stream.jsonl, capped), and stops the CLI with a margin
before TIMEOUT so the dialog's `complete` is always written.

Settings come from the environment: SSE_BASE_URL, SSE_API_KEY, SSE_MODEL_NAME
(set by the harness), TIMEOUT, SSE_MCP_URL, and CLAUDE_LAUNCHER_MAX_TURNS,
CLAUDE_LAUNCHER_STREAM_CAP. docs/agents.md (Claude Code) says what the CLI
sends and why each flag and variable is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sse.dialog import Dialog, cap

AGENT = "claude-code"
VERSION = "1"
SOFTWARE = Path("/opt/agents/claude-code")
BUNDLED = "claude_agent_sdk/_bundled/claude"
# Claude Code's own tools this agent offers, besides the MCP server's test_patch. Left out: Agent and
# Workflow (sub-sessions whose turns the stream does not show as the main session's), WebFetch and
# WebSearch (a run has no egress), and the scheduling, skill and tool-search tools.
TOOLS = ("Bash", "Read", "Edit", "Write", "Glob", "Grep")
MCP_SERVER = "ssebench"
TEST_PATCH = f"mcp__{MCP_SERVER}__test_patch"
# Stream events the raw transcript leaves out: each is repeated whole by the assistant event that follows.
DELTAS = frozenset({"content_block_start", "content_block_delta", "content_block_stop", "message_stop"})
STDERR_CAP = 1 << 20


# -- the translation ----------------------------------------------------------------


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _input_tokens(usage: Mapping[str, Any]) -> int:
    """Every input token the model read: fresh, written to the cache and read from it."""
    return sum(_int(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))


def _result_text(content: object) -> str:
    """A tool_result's content as text: a string, or text blocks (other blocks named in brackets)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type') or 'block'}]")
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


@dataclass
class _Turn:
    """One model call: the blocks of one API message, gathered until the message ends."""

    message_id: str
    input: int = 0
    output: int = 0
    blocks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Outcome:
    """What the transcript said about how the session ended, for the dialog's complete record."""

    result: dict[str, Any] | None = None
    malformed: int = 0
    retries: int = 0
    last_retry: str | None = None
    api_error: str | None = None


class Translator:
    """Claude Code's stream-json events, one at a time, into dialog records.

    A turn (one API message) is written when it ends: at its message_delta
    (with --include-partial-messages), at the next message or at the result.
    Its thinking blocks become thinking records, its text one message record
    carrying the call's tokens, its tool_use blocks tool_call records. The
    CLI runs a tool as soon as its block is complete, so tool results may
    come while their message still streams: those are written after the
    turn, so that every result follows its call. Lines that are not JSON
    objects are counted and skipped.
    """

    def __init__(self, dialog: Dialog, output_cap: int = 12_000) -> None:
        self.dialog = dialog
        self.output_cap = output_cap
        self.outcome = Outcome()
        self.turn: _Turn | None = None
        self.open_calls: dict[str, str] = {}
        self.answered: set[str] = set()
        # Tool results that came while their turn was still streaming (the CLI runs a tool as soon as its
        # block is complete, before the message ends): written after the turn, so each follows its call.
        self.pending: list[dict[str, Any]] = []

    def feed_line(self, line: str) -> dict[str, Any] | None:
        """Translate one line of the transcript; return its event (None for a blank or malformed line)."""
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict):
            self.outcome.malformed += 1
            return None
        self.feed(event)
        return event

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "stream_event":
            self._stream_event(event.get("event"))
        elif kind == "assistant":
            self._assistant(event)
        elif kind == "user":
            self._user(event)
        elif kind == "result":
            self.flush()
            self.outcome.result = event
        elif kind == "system" and event.get("subtype") == "api_retry":
            self.outcome.retries += 1
            self.outcome.last_retry = f"{event.get('error_status') or ''} {event.get('error') or ''}".strip()

    def _stream_event(self, raw: object) -> None:
        if not isinstance(raw, dict):
            return
        if raw.get("type") == "message_start" and isinstance(raw.get("message"), dict):
            message = raw["message"]
            self._start(str(message.get("id") or ""), message.get("usage"))
        elif raw.get("type") == "message_delta" and self.turn is not None:
            usage = _dict(raw.get("usage"))
            # The delta's counts are cumulative for the message; its output is the final one.
            if "output_tokens" in usage:
                self.turn.output = _int(usage.get("output_tokens"))
            if any(k in usage for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")):
                self.turn.input = max(self.turn.input, _input_tokens(usage))
            self.flush()

    def _start(self, message_id: str, usage: object) -> _Turn:
        self.flush()
        counts = _dict(usage)
        self.turn = _Turn(message_id, _input_tokens(counts), _int(counts.get("output_tokens")))
        return self.turn

    def _assistant(self, event: dict[str, Any]) -> None:
        message = _dict(event.get("message"))
        content = [b for b in message.get("content") or [] if isinstance(b, dict)]
        if event.get("is_api_error_message") or message.get("model") == "<synthetic>":
            # The CLI's own note of a failed call: no model answered, so no turn and no tokens.
            self.flush()
            text = "\n".join(str(b.get("text") or "") for b in content if b.get("type") == "text")
            self.outcome.api_error = text or str(event.get("error") or "API error")
            self.dialog.message(text)
            return
        message_id = str(message.get("id") or "")
        turn = self.turn
        if turn is None or (message_id and turn.message_id and message_id != turn.message_id):
            turn = self._start(message_id, message.get("usage"))
        turn.blocks.extend(content)

    def flush(self) -> None:
        """Write the turn gathered so far, if any."""
        turn, self.turn = self.turn, None
        if turn is None:
            return
        for block in turn.blocks:
            if block.get("type") == "thinking" and block.get("thinking"):
                self.dialog.thinking(str(block["thinking"]))
            elif block.get("type") == "redacted_thinking":
                self.dialog.thinking("[redacted thinking]")
        text = "\n\n".join(str(b.get("text") or "") for b in turn.blocks if b.get("type") == "text")
        self.dialog.message(text, tokens={"input": turn.input, "output": turn.output})
        for block in turn.blocks:
            if block.get("type") in ("tool_use", "server_tool_use", "mcp_tool_use"):
                self._call(str(block.get("id") or ""), str(block.get("name") or "(none)"), block.get("input"))
        pending, self.pending = self.pending, []
        for block in pending:
            self._answer(block)

    def _call(self, raw_id: str, name: str, args: object) -> str:
        tool_id = raw_id or f"tool-{self.dialog.tool_calls}"
        while tool_id in self.open_calls or tool_id in self.answered:
            tool_id += "+"
        self.open_calls[raw_id or tool_id] = tool_id
        self.dialog.tool_call(tool_id, name or "(none)", args if args is not None else {})
        return tool_id

    def _user(self, event: dict[str, Any]) -> None:
        content = _dict(event.get("message")).get("content")
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            if self.turn is not None:
                self.pending.append(block)
            else:
                self._answer(block)

    def _answer(self, block: dict[str, Any]) -> None:
        """Write the tool_result of one tool_result block (its call's placeholder first if it has none)."""
        raw_id = str(block.get("tool_use_id") or "")
        tool_id = self.open_calls.pop(raw_id, None)
        if tool_id is None:
            if raw_id in self.answered:
                return  # a second answer to one call: the first stands
            tool_id = self._call(raw_id, "(unknown)", None)
            self.open_calls.pop(raw_id, None)
        self.answered.add(raw_id)
        output = cap(_result_text(block.get("content")), self.output_cap)
        if block.get("is_error"):
            self.dialog.tool_result(tool_id, "", error=output or "the tool failed")
        else:
            self.dialog.tool_result(tool_id, output)

    def close(self, *, exit_code: int | None, timed_out: bool, stderr_tail: str = "") -> tuple[str, str]:
        """End the dialog: answer calls left open, then write complete. Return (status, reason)."""
        self.flush()
        for tool_id in list(self.open_calls.values()):
            self.dialog.tool_result(tool_id, "", error="no result: the session ended before the tool answered")
        self.open_calls.clear()
        status, reason = self.verdict(exit_code=exit_code, timed_out=timed_out, stderr_tail=stderr_tail)
        self.dialog.complete(status, reason[:2000])
        return status, reason

    def verdict(self, *, exit_code: int | None, timed_out: bool, stderr_tail: str = "") -> tuple[str, str]:
        """The status and reason the transcript and the process's end support."""
        result = self.outcome.result
        notes = []
        if self.outcome.malformed:
            notes.append(f"{self.outcome.malformed} transcript lines were not JSON objects")
        if self.outcome.retries:
            notes.append(f"{self.outcome.retries} model calls retried (last: {self.outcome.last_retry})")
        suffix = f" ({'; '.join(notes)})" if notes else ""
        if result is None:
            if timed_out:
                return "timeout", f"TIMEOUT is near: Claude Code was stopped with a margin{suffix}"
            if self.outcome.api_error and "budget" in self.outcome.api_error:
                return "budget", f"{self.outcome.api_error}{suffix}"
            last = stderr_tail.strip().splitlines()[-1:] or ["no output on stderr"]
            return "error", f"Claude Code exited ({exit_code}) without a result: {last[0][:500]}{suffix}"
        subtype = str(result.get("subtype") or "")
        terminal = str(result.get("terminal_reason") or "")
        raw_errors = result.get("errors")
        errors: list[Any] = raw_errors if isinstance(raw_errors, list) else []
        said = str(result.get("result") or "; ".join(map(str, errors)) or subtype)
        if result.get("api_error_type") == "budget_exhausted" or (
            result.get("api_error_status") == 429 and "budget" in said
        ):
            return "budget", f"{said}{suffix}"
        if subtype == "error_max_turns" or terminal == "max_turns":
            return "turns", f"{said}{suffix}"
        if timed_out:
            return "timeout", f"TIMEOUT is near: Claude Code was stopped with a margin{suffix}"
        if result.get("is_error") or subtype != "success":
            return "error", f"Claude Code ended with {subtype or 'an error'}: {said}{suffix}"
        return "done", f"{said}{suffix}"


def translate(lines: Iterable[str], dialog: Dialog, *, exit_code: int | None = 0, timed_out: bool = False) -> str:
    """Translate a whole transcript and end the dialog; return the status (what the tests and replays use)."""
    translator = Translator(dialog)
    for line in lines:
        translator.feed_line(line)
    return translator.close(exit_code=exit_code, timed_out=timed_out)[0]


# -- settings and the command ---------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str
    model: str
    timeout: float = 3600.0
    mcp_url: str = "http://localhost:3000/mcp"
    max_turns: int = 100
    stream_cap: int = 32 << 20

    @property
    def margin(self) -> float:
        """Time kept back from TIMEOUT to stop the CLI and write the last records."""
        return min(60.0, max(5.0, self.timeout * 0.05))

    @property
    def anthropic_base_url(self) -> str:
        """The gateway's root: SSE_BASE_URL ends in /v1, and the CLI appends /v1/messages itself."""
        base = self.base_url.rstrip("/")
        return base[: -len("/v1")] if base.endswith("/v1") else base

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
            if value <= 0:
                raise ValueError(f"{name}={raw!r} must be positive")
            return value

        return cls(
            base_url=environ["SSE_BASE_URL"],
            api_key=environ["SSE_API_KEY"],
            model=environ["SSE_MODEL_NAME"],
            timeout=number("TIMEOUT", 3600.0, float),
            mcp_url=environ.get("SSE_MCP_URL") or "http://localhost:3000/mcp",
            max_turns=number("CLAUDE_LAUNCHER_MAX_TURNS", 100),
            stream_cap=number("CLAUDE_LAUNCHER_STREAM_CAP", 32 << 20),
        )


def find_binary(root: Path | None = None) -> Path:
    """The bundled CLI in the software volume's venv. Raises FileNotFoundError with one line saying what is wrong."""
    root = root or SOFTWARE
    found = sorted(root.glob(f"lib/python3*/site-packages/{BUNDLED}"))
    if not found:
        raise FileNotFoundError(
            f"no Claude Code binary at {root}/lib/python3*/site-packages/{BUNDLED}: the agent's software volume "
            "is missing or lacks claude-agent-sdk (agent.yaml software: python)"
        )
    return found[-1]


def sdk_version(binary: Path) -> str | None:
    """The claude-agent-sdk version of the venv that holds `binary`, from its dist-info."""
    site = binary.parents[2]
    for info in sorted(site.glob("claude_agent_sdk-*.dist-info")):
        return info.name[len("claude_agent_sdk-") : -len(".dist-info")]
    return None


def command(binary: Path, settings: Settings, prompt: str) -> list[str]:
    """The CLI's arguments: print mode, its transcript as stream-json, no permission prompts, our tools only."""
    mcp = {"mcpServers": {MCP_SERVER: {"type": "http", "url": settings.mcp_url}}}
    return [
        str(binary),
        "--print",
        "--output-format=stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-mode=bypassPermissions",
        f"--model={settings.model}",
        f"--max-turns={settings.max_turns}",
        f"--tools={','.join(TOOLS)}",
        f"--mcp-config={json.dumps(mcp, separators=(',', ':'))}",
        "--strict-mcp-config",
        f"--allowedTools={TEST_PATCH}",
        "--setting-sources=",
        "--no-session-persistence",
        "--",
        prompt,
    ]


def environment(settings: Settings, environ: Mapping[str, str], time_left: float) -> dict[str, str]:
    """The CLI's environment: the run's gateway, key and model for every call, and no other traffic."""
    env = {k: v for k, v in environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_LAUNCHER_"))}
    model = settings.model
    env.update(
        {
            "ANTHROPIC_BASE_URL": settings.anthropic_base_url,
            "ANTHROPIC_API_KEY": settings.api_key,
            "ANTHROPIC_MODEL": model,
            # Side calls (titles, summaries, sub-agents) use these; the run's key is valid for its model only.
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
            # test_patch builds and tests the tree: it may take as long as the run has left.
            "MCP_TOOL_TIMEOUT": str(max(1000, int(time_left * 1000))),
        }
    )
    env.pop("NODE_OPTIONS", None)
    return env


# -- the run --------------------------------------------------------------------------


class StreamFile:
    """The raw transcript, minus content deltas, up to `limit` bytes (then one line saying it was cut)."""

    def __init__(self, path: Path, limit: int) -> None:
        self.out: IO[str] = path.open("w", encoding="utf-8")
        self.left = limit
        self.cut = False

    def write(self, line: str, event: dict[str, Any] | None) -> None:
        if event is not None and event.get("type") == "stream_event":
            inner = event.get("event")
            if isinstance(inner, dict) and inner.get("type") in DELTAS:
                return
        if self.cut:
            return
        data = line if line.endswith("\n") else line + "\n"
        size = len(data.encode("utf-8", errors="replace"))
        if size > self.left:
            # Nothing after the first line that does not fit: a transcript with a hole would mislead.
            self.out.write(json.dumps({"type": "ssebench_cut", "reason": "the transcript reached its cap"}) + "\n")
            self.cut = True
            return
        self.left -= size
        self.out.write(data)
        self.out.flush()

    def close(self) -> None:
        self.out.close()


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _drain(stream: IO[str], path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        written = 0
        for line in stream:
            if written < STDERR_CAP:
                out.write(line)
                out.flush()
                written += len(line)


def _stop(process: subprocess.Popen[str]) -> None:
    """End the CLI's process group: TERM then KILL while the CLI runs; KILL for what it left behind."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _version(binary: Path) -> str:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__})"
    return done.stdout.strip() or f"unknown (exit {done.returncode})"


def run(settings: Settings, dialog: Dialog, started: float) -> str:
    """Run the CLI on the task and translate its transcript; return the dialog's status."""
    archive = dialog.path.parent
    try:
        binary = find_binary()
    except FileNotFoundError as exc:
        dialog.init(agent=AGENT, model=settings.model, version=VERSION)
        _prompt_or_reason(dialog)
        dialog.complete("error", str(exc))
        return "error"
    dialog.init(
        agent=AGENT,
        model=settings.model,
        version=VERSION,
        cli_version=_version(binary),
        sdk=f"claude-agent-sdk {sdk_version(binary) or 'unknown'}",
        max_turns=settings.max_turns,
        tools=[*TOOLS, TEST_PATCH],
    )
    prompt = _prompt_or_reason(dialog)
    if prompt is None:
        dialog.complete("error", "cannot read the task from the daemon")
        return "error"
    from sse import project

    deadline = started + settings.timeout - settings.margin
    translator = Translator(dialog)
    stream = StreamFile(archive / "claude-stream.jsonl", settings.stream_cap)
    try:
        process = subprocess.Popen(
            command(binary, settings, prompt),
            cwd=str(project.source),
            env=environment(settings, os.environ, deadline - time.monotonic()),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        stream.close()
        dialog.complete("error", f"cannot start Claude Code ({binary}): {exc}")
        return "error"
    assert process.stdout is not None and process.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    pump = threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True)
    pump.start()
    err = threading.Thread(target=_drain, args=(process.stderr, archive / "claude-stderr.log"), daemon=True)
    err.start()
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            try:
                line = lines.get(timeout=min(left, 5.0))
            except queue.Empty:
                continue
            if line is None:
                break
            stream.write(line, translator.feed_line(line))
    finally:
        if not timed_out:  # its output ended: it is exiting
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        # Always, so that nothing it started (a background Bash command) outlives the session.
        _stop(process)
        # The pipes close once their readers are done; a reader still blocked (a process that left the
        # group holds the pipe) is a daemon thread, left to the end of the launcher.
        for reader, pipe in ((pump, process.stdout), (err, process.stderr)):
            reader.join(timeout=5)
            if not reader.is_alive():
                pipe.close()
        stream.close()
    tail = ""
    with contextlib.suppress(OSError):
        tail = (archive / "claude-stderr.log").read_text(encoding="utf-8", errors="replace")[-2000:]
    status, _ = translator.close(exit_code=process.returncode, timed_out=timed_out, stderr_tail=tail)
    return status


def _prompt_or_reason(dialog: Dialog) -> str | None:
    """Write the prompt record: the task prompt, or why there is none."""
    try:
        from sse.prompt import task_prompt

        prompt = task_prompt()
    except Exception as exc:  # no daemon: the dialog still has its prompt record, saying why
        dialog.prompt(f"(no task prompt: {type(exc).__name__}: {exc})")
        return None
    dialog.prompt(prompt)
    return prompt


def main() -> int:
    started = time.monotonic()
    dialog = Dialog()
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        dialog.init(agent=AGENT, model=os.environ.get("SSE_MODEL_NAME") or "none", version=VERSION)
        _prompt_or_reason(dialog)
        dialog.complete("error", str(exc))
        print(f"{AGENT}: {exc}", file=sys.stderr)
        return 1
    status = run(settings, dialog, started)
    print(f"{AGENT}: {status}", file=sys.stderr)
    return 1 if status == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
