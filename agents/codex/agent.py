"""codex: OpenAI's Codex CLI (`codex exec`) run non-interactively against the run's gateway.

The CLI is not in this image: it is the pinned `openai-codex-cli-bin` wheel
of agent.yaml, installed into the read-only volume mounted at
/opt/agents/codex. This launcher runs as the agent user in the task's source
tree. It writes Codex's configuration into a CODEX_HOME in the user's home
(the gateway as the only model provider, the run's MCP server for
test_patch, everything else that would reach the network off), gives Codex
the task prompt (`sse.prompt.task_prompt()`) on stdin, stops it before
TIMEOUT, and translates its `--json` event stream into the dialog
($SSE_ARCHIVE/dialog.jsonl, through `sse.dialog`) while it runs. The raw
events are kept beside it, up to a size cap, as codex-events.jsonl.

`translate`/`Translator` are the translation, free of any process so the
unit tests can feed it recorded streams; docs/agents.md says what Codex
sends, declares and writes.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sse.dialog import Dialog

AGENT = "codex"
# Where agent.yaml's `software` is installed (a venv), read-only, in every run of this agent.
SOFTWARE = Path("/opt/agents/codex")
# The binary inside the wheel's package; its helpers (rg) are in codex-path beside bin/.
PACKAGE = "codex_cli_bin"
DEFAULT_MCP_URL = "http://127.0.0.1:3000/mcp"
EVENTS_FILE = "codex-events.jsonl"
STDERR_FILE = "codex-stderr.log"
EVENTS_CAP = 16 * 1024 * 1024
STDERR_CAP = 64 * 1024
OUTPUT_CAP = 12_000
STOP_GRACE = 10.0
# How long the launcher waits for the run's MCP server to answer before it starts Codex.
MCP_WAIT = 60.0


def cap(text: str, limit: int = OUTPUT_CAP) -> str:
    """At most about `limit` characters: the head and the (longer) tail, with what was cut in between."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


# -- the translation ------------------------------------------------------------------


# A tool item that started but never completed in the stream: Codex was stopped, or (a command still running
# when exec_command stopped waiting for it) the command went on in the background, where --json follows it no more.
UNFINISHED = "no end of this in Codex's events: Codex stopped first, or the command went on in the background"


@dataclass
class Exit:
    """How the CLI's process ended: its exit code (None if it never started), whether the launcher stopped it
    at the time limit, and the tail of its stderr (Codex's own error lines)."""

    code: int | None
    timed_out: bool = False
    stderr: str = ""
    timeout: float = 0.0


@dataclass(frozen=True)
class Usage:
    """Tokens of a session's model calls, and how many calls there were."""

    input_tokens: int
    output_tokens: int
    calls: int


@dataclass
class Translator:
    """Turns Codex's `exec --json` events, one line at a time, into dialog records.

    Agent messages become `message`s, reasoning `thinking`, and every command,
    patch, MCP call, web search and plan a `tool_call` at its start answered by
    a `tool_result` at its end. Token counts come from the turn events (one per
    `codex exec` turn: the sum of its model calls) or, better, from the session
    log's record of each model answer, which a turn cut short still has
    (`finish`'s `usage`).
    """

    dialog: Dialog
    input_tokens: int = 0
    output_tokens: int = 0
    turns: int = 0
    completed_turns: int = 0
    failure: str | None = None
    notices: list[str] = field(default_factory=list)
    malformed: int = 0
    thread_id: str | None = None
    _open: dict[str, str] = field(default_factory=dict)
    _used: set[str] = field(default_factory=set)

    def feed(self, line: str) -> None:
        """One line of the stream; a line that is not a JSON object is counted, never fatal."""
        if not line.strip():
            return
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.malformed += 1
            return
        kind = event["type"]
        item = event.get("item")
        if kind == "thread.started":
            self.thread_id = str(event.get("thread_id") or "") or None
        elif kind == "turn.started":
            self.turns += 1
        elif kind == "turn.completed":
            self.completed_turns += 1
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.input_tokens += _count(usage.get("input_tokens"))
                self.output_tokens += _count(usage.get("output_tokens"))
        elif kind == "turn.failed":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            self.failure = str(message or "the turn failed")
        elif kind == "error":
            self.failure = str(event.get("message") or "Codex reported an error")
        elif kind in ("item.started", "item.updated", "item.completed") and isinstance(item, dict):
            self._item(kind, item)
        else:
            self.malformed += 1

    def _item(self, kind: str, item: dict[str, Any]) -> None:
        item_type = item.get("type")
        raw_id = item.get("id")
        item_id = raw_id if isinstance(raw_id, str) and raw_id else None
        if item_type == "agent_message":
            if kind == "item.completed":
                self.dialog.message(_text(item.get("text")))
        elif item_type == "reasoning":
            if kind == "item.completed":
                self.dialog.thinking(_text(item.get("text")))
        elif item_type == "error":
            if kind == "item.completed":
                self.notices.append(_text(item.get("message")))
        elif item_type in TOOLS:
            name, tool_input = TOOLS[item_type](item)
            if item_id is None or item_id not in self._open:
                self._start(item_id, name, tool_input)
            if kind == "item.completed":
                output, code, error = _result(item)
                self.dialog.tool_result(self._open.pop(item_id or "", ""), output, code=code, error=error)
        else:
            self.malformed += 1

    def _start(self, item_id: str | None, name: str, tool_input: Any) -> None:
        tool_id = item_id or f"item-{self.dialog.seq}"
        while tool_id in self._used:
            tool_id += "+"
        self._used.add(tool_id)
        self._open[item_id or ""] = tool_id
        self.dialog.tool_call(tool_id, name, tool_input)

    def finish(self, exit: Exit, usage: Usage | None = None) -> tuple[str, str]:
        """Answer what is still open, write `complete`, and return its (status, reason).

        `usage` is the session log's account (`rollout_usage`); without it the
        totals are the turn events', and `turns` counts Codex's turns instead
        of model calls.
        """
        for tool_id in list(self._open.values()):
            self.dialog.tool_result(tool_id, "", error=UNFINISHED)
        self._open.clear()
        status, reason = self._status(exit)
        if self.malformed:
            reason += f" ({self.malformed} lines of Codex's event stream were not events this launcher knows)"
        totals = {
            "input_tokens": usage.input_tokens if usage else self.input_tokens,
            "output_tokens": usage.output_tokens if usage else self.output_tokens,
            "turns": usage.calls if usage else self.turns,
            "tool_calls": self.dialog.tool_calls,
        }
        self.dialog.complete(status, reason, totals=totals)
        return status, reason

    def _status(self, exit: Exit) -> tuple[str, str]:
        if exit.timed_out:
            return "timeout", f"TIMEOUT ({exit.timeout:.0f} s) is near: Codex was stopped with a margin"
        if exit.code is None:
            return "error", f"Codex did not start: {exit.stderr.strip() or 'no reason given'}"
        if self.failure is not None:
            if "429" in self.failure:
                # The gateway answers 429 once the run's budget is spent; Codex keeps only the status.
                return "budget", f"Codex stopped: {self.failure} (the gateway's answer once the budget is spent)"
            return "error", f"Codex stopped: {self.failure}"
        if exit.code != 0:
            last = exit.stderr.strip().splitlines()[-1:] or ["no error line"]
            return "error", f"Codex exited with status {exit.code}: {last[0][:500]}"
        if self.completed_turns == 0:
            return "error", "Codex ended without completing its turn"
        return "done", "Codex finished its turn"


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _command(item: dict[str, Any]) -> tuple[str, Any]:
    return "exec_command", {"command": _text(item.get("command"))}


def _patch(item: dict[str, Any]) -> tuple[str, Any]:
    changes = item.get("changes")
    return "apply_patch", {"changes": changes if isinstance(changes, list) else []}


def _mcp(item: dict[str, Any]) -> tuple[str, Any]:
    server, tool = _text(item.get("server")), _text(item.get("tool"))
    arguments = item.get("arguments")
    return f"{server}.{tool}" if server else tool or "mcp", arguments if arguments is not None else {}


def _search(item: dict[str, Any]) -> tuple[str, Any]:
    return "web_search", {"query": _text(item.get("query"))}


def _plan(item: dict[str, Any]) -> tuple[str, Any]:
    steps = item.get("items")
    return "update_plan", {"items": steps if isinstance(steps, list) else []}


TOOLS = {
    "command_execution": _command,
    "file_change": _patch,
    "mcp_tool_call": _mcp,
    "web_search": _search,
    "todo_list": _plan,
}


def _result(item: dict[str, Any]) -> tuple[str, int | None, str | None]:
    """(output, exit code, error) of a finished tool item."""
    status = item.get("status")
    item_type = item.get("type")
    if item_type == "command_execution":
        code = item.get("exit_code")
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        error = None if code is not None else f"the command did not run to an exit code (status {status})"
        if status == "declined":
            error = "Codex declined to run the command"
        return cap(_text(item.get("aggregated_output"))), code, error
    if item_type == "file_change":
        changes = item.get("changes")
        lines = [f"{c.get('kind')} {c.get('path')}" for c in _list(changes) if isinstance(c, dict)]
        failed = status != "completed"
        return "\n".join(lines), None, "the patch was not applied" if failed else None
    if item_type == "mcp_tool_call":
        result = item.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        parts = [str(p.get("text", "")) for p in content if isinstance(p, dict)] if isinstance(content, list) else []
        error = item.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message is None and status == "failed":
            message = "the MCP call failed"
        return cap("\n".join(parts)), None, None if message is None else str(message)
    if item_type == "todo_list":
        steps = _list(item.get("items"))
        marks = [f"[{'x' if s.get('completed') else ' '}] {s.get('text')}" for s in steps if isinstance(s, dict)]
        return "\n".join(marks), None, None
    return "", None, None if status in (None, "completed") else f"status {status}"


def translate(lines: Iterable[str], dialog: Dialog, exit: Exit, usage: Usage | None = None) -> tuple[str, str]:
    """A whole stream into `dialog` (after its init and prompt): the complete record's (status, reason)."""
    translator = Translator(dialog)
    for line in lines:
        translator.feed(line)
    return translator.finish(exit, usage)


# -- Codex's configuration ----------------------------------------------------------


def _toml(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, for every character json.dumps emits."""
    return json.dumps(value)


def config_toml(model: str, base_url: str, mcp_url: str | None) -> str:
    """$CODEX_HOME/config.toml: the gateway as the one provider, and nothing else that leaves the container.

    Each switch below was checked against the pinned CLI with a local server
    and strace (docs/agents.md): with them, the run's only connections are
    the gateway and the MCP server.
    """
    lines = [
        f"model = {_toml(model)}",
        'model_provider = "sse"',
        # The container is the sandbox: Codex's own (bubblewrap, landlock) is off, and nothing asks.
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        'trace_exporter = "none"',
        'metrics_exporter = "none"',
        "",
        "[history]",
        'persistence = "none"',
        "",
        # Plugins and apps sync from github.com and chatgpt.com; the rest are tools that are not the task's.
        "[features]",
        "plugins = false",
        "remote_plugin = false",
        "apps = false",
        "multi_agent = false",
        "goals = false",
        "memories = false",
        "image_generation = false",
        "tool_suggest = false",
        "skill_search = false",
        "view_image = false",
        "",
        "[skills.bundled]",
        "enabled = false",
        "",
        "[model_providers.sse]",
        'name = "ssebench gateway"',
        f"base_url = {_toml(base_url)}",
        'env_key = "SSE_API_KEY"',
        'wire_api = "responses"',
        # The gateway retries nothing for the agent; a refusal (the budget) must end the run at once.
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    if mcp_url:
        lines += [
            "",
            "[mcp_servers.ssebench]",
            f"url = {_toml(mcp_url)}",
            "startup_timeout_sec = 30",
            # A build and its tests can take long; TIMEOUT bounds the whole run anyway.
            "tool_timeout_sec = 3600",
        ]
    return "\n".join(lines) + "\n"


def find_binary(root: Path | None = None) -> Path:
    """The codex executable of the venv at `root` (SOFTWARE). Raises FileNotFoundError with one line saying what
    is missing."""
    root = SOFTWARE if root is None else root
    found = sorted(root.glob(f"lib/python3*/site-packages/{PACKAGE}/bin/codex"))
    if not found:
        raise FileNotFoundError(
            f"no Codex CLI under {root} (looked for lib/python3*/site-packages/{PACKAGE}/bin/codex): "
            "agent.yaml's software was not installed for this run"
        )
    return found[-1]


def cli_version(binary: Path) -> str:
    """`codex --version` says `codex-cli 0.163.0`: the version alone."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False)
    words = done.stdout.split()
    return words[-1] if done.returncode == 0 and words else f"unknown ({done.stderr.strip()[:200]})"


def rollout_usage(codex_home: Path, thread_id: str | None) -> Usage | None:
    """The session log's account: one token_usage_record per model answer, which a cut turn's events lack.

    None without a log (or without a record in it).
    """
    if not thread_id:
        return None
    seen: dict[str, tuple[int, int]] = {}
    for path in codex_home.glob(f"sessions/*/*/*/rollout-*{thread_id}.jsonl"):
        with path.open(encoding="utf-8", errors="replace") as log:
            for number, line in enumerate(log):
                if '"token_usage_record"' not in line:
                    continue
                try:
                    payload = json.loads(line)["payload"]
                    usage = payload["usage"]
                    key = str(payload.get("response_id") or f"line-{number}")
                    seen[key] = (_count(usage["input_tokens"]), _count(usage["output_tokens"]))
                except (ValueError, KeyError, TypeError):
                    continue
    if not seen:
        return None
    return Usage(sum(i for i, _ in seen.values()), sum(o for _, o in seen.values()), len(seen))


# -- running it -----------------------------------------------------------------------


def wait_for_mcp(url: str, deadline: float, pause: float = 0.5) -> str:
    """Wait until the MCP server answers HTTP at `url` (any status), or `deadline` (monotonic) passes.

    Codex connects to its MCP servers once, as it starts, and leaves out the
    tools of one it cannot reach (saying so only on stderr): a run that
    started Codex before the server answered had no test_patch. Returns
    "ready", or why not.
    """
    parts = urllib.parse.urlsplit(url)
    last = "no answer"
    while True:
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=5)
        try:
            # A JSON-RPC ping: answered at once (a GET would open an event stream that stays open).
            connection.request(
                "POST",
                parts.path or "/",
                body=json.dumps({"jsonrpc": "2.0", "id": 0, "method": "ping"}),
                headers={"content-type": "application/json", "accept": "application/json, text/event-stream"},
            )
            connection.getresponse().read()
            return "ready"
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()
        if time.monotonic() + pause >= deadline:
            return f"unreachable at {url} ({last})"
        time.sleep(pause)


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str
    model: str
    timeout: float = 3600.0
    mcp_url: str = DEFAULT_MCP_URL

    @property
    def margin(self) -> float:
        """Time kept back from TIMEOUT to stop Codex and write the last record."""
        return min(60.0, max(5.0, self.timeout * 0.05)) + STOP_GRACE

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Raises ValueError naming the variable that is missing or bad."""
        missing = [n for n in ("SSE_BASE_URL", "SSE_API_KEY", "SSE_MODEL_NAME") if not environ.get(n)]
        if missing:
            raise ValueError(f"{', '.join(missing)} not set: this agent needs a model (run it with --model)")
        raw = environ.get("TIMEOUT") or "3600"
        try:
            timeout = float(raw)
        except ValueError:
            raise ValueError(f"TIMEOUT={raw!r} is not a number of seconds") from None
        if timeout <= 0:
            raise ValueError(f"TIMEOUT={raw!r} must be positive")
        return cls(
            base_url=environ["SSE_BASE_URL"].rstrip("/"),
            api_key=environ["SSE_API_KEY"],
            model=environ["SSE_MODEL_NAME"],
            timeout=timeout,
            mcp_url=environ.get("SSE_MCP_URL") or DEFAULT_MCP_URL,
        )


def codex_environment(binary: Path, codex_home: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The CLI's environment: ours, its CODEX_HOME, and its bundled helpers (rg) on PATH."""
    helpers = binary.parent.parent / "codex-path"
    path = environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
    env = {**environ, "CODEX_HOME": str(codex_home), "NO_COLOR": "1"}
    env["PATH"] = f"{helpers}:{path}" if helpers.is_dir() else path
    return env


def command(binary: Path, source: Path) -> list[str]:
    """`codex exec`, its events as JSON lines, the prompt on stdin (`-`), in the source tree."""
    return [
        str(binary),
        "exec",
        "--json",
        "--strict-config",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "--color",
        "never",
        "-C",
        str(source),
        "-",
    ]


class _Capped:
    """A file that takes lines up to `limit` bytes, then one line saying the rest was left out."""

    def __init__(self, path: Path, limit: int) -> None:
        self.out: IO[str] = path.open("w", encoding="utf-8")
        self.left = limit
        self.cut = False

    def write(self, line: str) -> None:
        size = len(line.encode("utf-8", errors="replace"))
        if size <= self.left:
            self.out.write(line)
            self.left -= size
        elif not self.cut:
            self.cut = True
            self.out.write(json.dumps({"type": "ssebench.cut", "message": "the size cap is reached"}) + "\n")

    def close(self) -> None:
        self.out.close()


def run_codex(
    argv: list[str], env: dict[str, str], prompt: str, translator: Translator, archive: Path, deadline: float
) -> Exit:
    """Run the CLI until it ends or `deadline` (monotonic) passes, feeding its events to `translator` as they come."""
    events = _Capped(archive / EVENTS_FILE, EVENTS_CAP)
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        events.close()
        return Exit(code=None, stderr=f"{argv[0]}: {exc.strerror or exc}")
    lines: queue.Queue[str | None] = queue.Queue()
    stderr_tail: list[str] = []

    def pump_stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    def pump_stderr() -> None:
        assert process.stderr is not None
        kept = 0
        for line in process.stderr:
            stderr_tail.append(line)
            kept += len(line)
            while kept > STDERR_CAP and len(stderr_tail) > 1:
                kept -= len(stderr_tail.pop(0))

    readers = [threading.Thread(target=f, daemon=True) for f in (pump_stdout, pump_stderr)]
    for reader in readers:
        reader.start()
    assert process.stdin is not None
    try:
        process.stdin.write(prompt)
        process.stdin.close()
    except OSError:  # it ended before reading its prompt: its stderr says why
        pass
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0 and not timed_out:
            timed_out = True
            # What it prints while it stops is still read, so the dialog keeps every finished step.
            _stop(process)
        try:
            line = lines.get(timeout=min(left, 1.0) if not timed_out else 2.0)
        except queue.Empty:
            if timed_out:
                break
            continue
        if line is None:
            break
        events.write(line if line.endswith("\n") else line + "\n")
        translator.feed(line)
    events.close()
    try:
        code = process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        _stop(process)
        code = process.wait()
    for reader in readers:
        reader.join(timeout=2.0)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    stderr = "".join(stderr_tail)
    (archive / STDERR_FILE).write_text(stderr, encoding="utf-8")
    return Exit(code=code, timed_out=timed_out, stderr=stderr)


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the CLI's process group (it and the commands it runs), SIGKILL if it lingers."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=STOP_GRACE / 2)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def main() -> int:
    started = time.monotonic()
    dialog = Dialog()
    archive = dialog.path.parent
    model = os.environ.get("SSE_MODEL_NAME") or "none"
    try:
        binary = find_binary()
        settings = Settings.from_env()
    except (FileNotFoundError, ValueError) as exc:
        dialog.init(agent=AGENT, model=model)
        _prompt_or_reason(dialog)
        dialog.complete("error", str(exc))
        print(f"{AGENT}: {exc}", file=sys.stderr)
        return 1
    version = cli_version(binary)
    deadline = started + settings.timeout - settings.margin
    mcp = wait_for_mcp(settings.mcp_url, min(deadline, time.monotonic() + MCP_WAIT))
    dialog.init(agent=AGENT, model=settings.model, version=version, cli=str(binary), mcp=mcp)
    prompt = _prompt_or_reason(dialog)
    if prompt is None:
        dialog.complete("error", "cannot read the task: the daemon did not answer")
        return 1
    from sse import project

    source = Path(project.source)
    codex_home = Path.home() / ".codex"
    codex_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        config_toml(settings.model, settings.base_url, settings.mcp_url), encoding="utf-8"
    )
    translator = Translator(dialog)
    exit = run_codex(
        command(binary, source),
        codex_environment(binary, codex_home, os.environ),
        prompt,
        translator,
        archive,
        deadline,
    )
    exit.timeout = settings.timeout
    status, _ = translator.finish(exit, rollout_usage(codex_home, translator.thread_id))
    print(f"{AGENT}: {status}", file=sys.stderr)
    return 1 if status == "error" else 0


def _prompt_or_reason(dialog: Dialog) -> str | None:
    """Write the prompt record: the task prompt, or why there is none."""
    try:
        from sse.prompt import task_prompt

        prompt = task_prompt()
    except Exception as exc:  # no daemon: the record still says why
        dialog.prompt(f"(no task prompt: {type(exc).__name__}: {exc})")
        return None
    dialog.prompt(prompt)
    return prompt


if __name__ == "__main__":
    sys.exit(main())
