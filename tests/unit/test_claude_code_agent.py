"""claude-code's launcher: the translation of Claude Code's stream-json transcript into the dialog, and the
command and environment it runs the CLI with.

The transcripts in tests/fixtures/claude-code were recorded from the real CLI
(2.1.332, from claude-agent-sdk 0.2.189) against a local logging server that
played a short scripted fix: fix.jsonl a whole session, interleaved.jsonl
the same with the server pausing after each content block, budget.jsonl one
whose third call was refused 429 budget_exhausted (with x-should-retry:
false), max-turns.jsonl one cut by --max-turns 2; scripted-tlvkit.jsonl is
the CLI against the gateway's scripted playback of models/scripted/fix.yaml.
Content deltas, status events and the init event's long lists were trimmed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sse.dialog import Dialog, read, validate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "claude-code"


def _load_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("claude_code_agent", ROOT / "agents" / "claude-code" / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["claude_code_agent"] = module
    spec.loader.exec_module(module)
    return module


agent = _load_agent()


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text(encoding="utf-8").splitlines()


def _translate(tmp_path: Path, lines: list[str], **kwargs: Any) -> tuple[str, list[dict[str, Any]]]:
    dialog = Dialog(tmp_path / "dialog.jsonl")
    dialog.init(agent="claude-code", model="scripted-fix")
    dialog.prompt("Fix the overflow in hello.c.")
    status = agent.translate(lines, dialog, **kwargs)
    records = read(dialog.path)
    assert validate(records) == []
    return status, records


def _of(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


def _result(lines: list[str]) -> dict[str, Any]:
    events = [json.loads(line) for line in lines]
    return next(e for e in events if e["type"] == "result")


def test_a_whole_session_becomes_every_turn_of_the_dialog(tmp_path: Path) -> None:
    lines = _lines("fix.jsonl")
    status, records = _translate(tmp_path, lines)
    assert status == "done"
    assert [r["name"] for r in _of(records, "tool_call")] == [
        "Read",
        "Grep",
        "Edit",
        "Bash",
        "Read",
        "mcp__ssebench__test_patch",
    ]
    assert _of(records, "tool_call")[2]["input"] == {
        "replace_all": False,
        "file_path": "/tmp/claude-study/src/hello.c",
        "old_string": "buf[16]",
        "new_string": "buf[64]",
    }
    assert [r["text"] for r in _of(records, "thinking")] == ["The overflow is in buf; read the file first."]
    messages = _of(records, "message")
    assert len(messages) == 6
    assert messages[0]["text"] == "I will read the file."
    assert messages[-1]["text"] == "The buffer is now large enough; test_patch passes."
    # Each turn's output count is the message_delta's final one, not message_start's 1.
    assert {m["tokens"]["output"] for m in messages} == {20}
    # The thinking comes before its turn's message, the message before the turn's tool calls.
    kinds = [r["type"] for r in records]
    assert kinds[2:6] == ["thinking", "message", "tool_call", "tool_result"]
    complete = records[-1]
    usage = _result(lines)["usage"]
    assert complete["totals"] == {
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "turns": 6,
        "tool_calls": 6,
    }
    assert complete["reason"] == "The buffer is now large enough; test_patch passes."


def test_tool_errors_are_errors_and_results_find_their_calls_out_of_order(tmp_path: Path) -> None:
    _, records = _translate(tmp_path, _lines("fix.jsonl"))
    results = {r["tool_id"]: r for r in _of(records, "tool_result")}
    # The CLI answered toolu_05 before toolu_04 (they ran at once); each result keeps its own call.
    assert results["toolu_04"]["error"] == "Exit code 1\n1"
    assert results["toolu_04"]["output"] == ""
    assert results["toolu_05"]["error"].startswith("File does not exist.")
    assert results["toolu_01"]["error"] is None
    assert "buf[16]" in results["toolu_01"]["output"]
    assert "2 of 2 checks passed" in results["toolu_06"]["output"]


def test_the_budget_refusal_ends_the_dialog_budget_without_counting_a_turn(tmp_path: Path) -> None:
    status, records = _translate(tmp_path, _lines("budget.jsonl"), exit_code=1)
    assert status == "budget"
    complete = records[-1]
    assert complete["status"] == "budget"
    assert "budget is exhausted" in complete["reason"]
    assert complete["totals"]["turns"] == 2
    # The CLI's own note of the refusal is shown, with no tokens: no model answered it.
    assert messages_with_no_tokens(records) == [
        "API Error: Request rejected (429) · the run's budget is exhausted (tokens 100 of 100)"
    ]


def messages_with_no_tokens(records: list[dict[str, Any]]) -> list[str]:
    return [m["text"] for m in _of(records, "message") if m["tokens"] is None]


def test_the_turn_limit_ends_the_dialog_turns(tmp_path: Path) -> None:
    status, records = _translate(tmp_path, _lines("max-turns.jsonl"), exit_code=1)
    assert status == "turns"
    assert "maximum number of turns (2)" in records[-1]["reason"]


def test_lines_that_are_not_json_objects_are_skipped_and_counted(tmp_path: Path) -> None:
    lines = _lines("fix.jsonl")
    broken = [lines[0], "not json", "[1, 2]", '{"type": "assistant", "message": ', "", *lines[1:], "\x00\x01"]
    status, records = _translate(tmp_path, broken)
    assert status == "done"
    assert len(_of(records, "tool_call")) == 6
    assert "4 transcript lines were not JSON objects" in records[-1]["reason"]


def _cut_after_tool_use(lines: list[str]) -> list[str]:
    """The transcript up to the assistant event holding the Edit call: its result never came."""
    at = next(i for i, line in enumerate(lines) if '"name":"Edit"' in line and '"type":"assistant"' in line)
    return lines[: at + 1]


def test_a_session_stopped_at_timeout_answers_its_open_call_and_says_timeout(tmp_path: Path) -> None:
    status, records = _translate(tmp_path, _cut_after_tool_use(_lines("fix.jsonl")), exit_code=-15, timed_out=True)
    assert status == "timeout"
    last_call = _of(records, "tool_call")[-1]
    answer = _of(records, "tool_result")[-1]
    assert last_call["name"] == "Edit"
    assert answer["tool_id"] == last_call["tool_id"]
    assert "ended before the tool answered" in answer["error"]
    assert records[-1]["totals"]["turns"] == 3


def test_a_cli_that_dies_without_a_result_is_an_error_naming_its_exit_and_stderr(tmp_path: Path) -> None:
    dialog = Dialog(tmp_path / "dialog.jsonl")
    dialog.init(agent="claude-code", model="m")
    dialog.prompt("p")
    translator = agent.Translator(dialog)
    for line in _cut_after_tool_use(_lines("fix.jsonl")):
        translator.feed_line(line)
    status, reason = translator.close(
        exit_code=1,
        timed_out=False,
        stderr_tail="starting\n--dangerously-skip-permissions cannot be used with root/sudo privileges\n",
    )
    assert status == "error"
    assert reason.startswith("Claude Code exited (1) without a result: --dangerously-skip-permissions cannot")
    assert validate(read(dialog.path)) == []


def test_without_partial_messages_turns_are_told_apart_by_message_id(tmp_path: Path) -> None:
    lines = [line for line in _lines("fix.jsonl") if '"type":"stream_event"' not in line]
    status, records = _translate(tmp_path, lines)
    assert status == "done"
    messages = _of(records, "message")
    assert len(messages) == 6
    # Without the message_delta only message_start's counts are known.
    assert [m["tokens"]["output"] for m in messages] == [1] * 6
    assert messages[3]["text"] == "Two calls at once."


def test_a_result_for_an_unknown_call_is_paired_and_a_second_result_dropped(tmp_path: Path) -> None:
    result = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "hi"}]},
    }
    done = {"type": "result", "subtype": "success", "is_error": False, "result": "ok"}
    lines = [json.dumps(result), json.dumps(result), json.dumps(done)]
    status, records = _translate(tmp_path, lines)
    assert status == "done"
    assert [(r["type"], r.get("name")) for r in records[2:-1]] == [("tool_call", "(unknown)"), ("tool_result", None)]


def test_an_error_result_is_an_error(tmp_path: Path) -> None:
    lines = [json.dumps({"type": "result", "subtype": "error_during_execution", "is_error": True, "errors": ["boom"]})]
    status, records = _translate(tmp_path, lines, exit_code=1)
    assert status == "error"
    assert records[-1]["reason"] == "Claude Code ended with error_during_execution: boom"


def test_retries_are_told_in_the_reason(tmp_path: Path) -> None:
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": 529, "error": "overloaded"}
    done = {"type": "result", "subtype": "success", "is_error": False, "result": "fixed"}
    status, records = _translate(tmp_path, [json.dumps(retry), json.dumps(done)])
    assert status == "done"
    assert records[-1]["reason"] == "fixed (1 model calls retried (last: 529 overloaded))"


# -- settings, command, environment ---------------------------------------------------------------


ENV = {"SSE_BASE_URL": "http://192.168.16.1:4080/v1", "SSE_API_KEY": "sse-run-k", "SSE_MODEL_NAME": "scripted-fix"}


def test_settings_name_what_is_missing_or_bad() -> None:
    with pytest.raises(ValueError, match=r"^SSE_API_KEY, SSE_MODEL_NAME not set"):
        agent.Settings.from_env({"SSE_BASE_URL": "http://x/v1"})
    with pytest.raises(ValueError, match=r"^CLAUDE_LAUNCHER_MAX_TURNS='many' is not a number"):
        agent.Settings.from_env({**ENV, "CLAUDE_LAUNCHER_MAX_TURNS": "many"})
    settings = agent.Settings.from_env({**ENV, "TIMEOUT": "600"})
    assert settings.anthropic_base_url == "http://192.168.16.1:4080"
    assert settings.margin == 30.0


def test_the_cli_gets_the_run_key_and_model_for_every_call_and_no_other_traffic() -> None:
    settings = agent.Settings.from_env(ENV)
    inherited = {
        "PATH": "/usr/bin",
        "HOME": "/home/model",
        "ANTHROPIC_API_KEY": "sk-ant-not-this-one",
        "ANTHROPIC_AUTH_TOKEN": "tok",
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "NODE_OPTIONS": "--require /tmp/x.js",
    }
    env = agent.environment(settings, inherited, 100.0)
    assert env["ANTHROPIC_API_KEY"] == "sse-run-k"
    assert "ANTHROPIC_AUTH_TOKEN" not in env
    assert "CLAUDE_CODE_USE_BEDROCK" not in env
    assert "NODE_OPTIONS" not in env
    assert env["ANTHROPIC_BASE_URL"] == "http://192.168.16.1:4080"
    models = [v for k, v in env.items() if k.endswith("_MODEL") and k.startswith(("ANTHROPIC_", "CLAUDE_CODE_"))]
    assert len(models) == 6
    assert set(models) == {"scripted-fix"}
    for name in ("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER"):
        assert env[name] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["MCP_TOOL_TIMEOUT"] == "100000"
    assert env["HOME"] == "/home/model"


def test_the_command_runs_print_mode_with_our_tools_and_the_mcp_server(tmp_path: Path) -> None:
    settings = agent.Settings.from_env({**ENV, "SSE_MCP_URL": "http://task:3000/mcp"})
    cmd = agent.command(tmp_path / "claude", settings, "-p looks like a flag")
    assert cmd[0] == str(tmp_path / "claude")
    assert cmd[-2:] == ["--", "-p looks like a flag"]
    for flag in (
        "--print",
        "--output-format=stream-json",
        "--verbose",
        "--permission-mode=bypassPermissions",
        "--model=scripted-fix",
        "--tools=Bash,Read,Edit,Write,Glob,Grep",
        "--strict-mcp-config",
        "--allowedTools=mcp__ssebench__test_patch",
        "--no-session-persistence",
    ):
        assert flag in cmd
    mcp = next(a for a in cmd if a.startswith("--mcp-config="))
    assert json.loads(mcp.split("=", 1)[1]) == {
        "mcpServers": {"ssebench": {"type": "http", "url": "http://task:3000/mcp"}}
    }


def test_the_binary_is_found_in_the_venv_or_its_absence_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        agent.find_binary(tmp_path)
    assert "\n" not in str(missing.value)
    assert str(tmp_path) in str(missing.value)
    site = tmp_path / "lib" / "python3.12" / "site-packages"
    binary = site / "claude_agent_sdk" / "_bundled" / "claude"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"")
    (site / "claude_agent_sdk-0.2.189.dist-info").mkdir()
    assert agent.find_binary(tmp_path) == binary
    assert agent.sdk_version(binary) == "0.2.189"


def test_the_raw_transcript_drops_deltas_and_stops_at_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "claude-stream.jsonl"
    stream = agent.StreamFile(path, 200)
    delta = {"type": "stream_event", "event": {"type": "content_block_delta", "delta": {"text": "x"}}}
    stream.write(json.dumps(delta), delta)
    start = {"type": "stream_event", "event": {"type": "message_start", "message": {"id": "m"}}}
    stream.write(json.dumps(start), start)
    big = {"type": "assistant", "message": {"content": [{"type": "text", "text": "y" * 500}]}}
    stream.write(json.dumps(big), big)
    stream.write(json.dumps(start), start)
    stream.close()
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert kept == [start, {"type": "ssebench_cut", "reason": "the transcript reached its cap"}]


def test_results_that_come_while_their_message_streams_follow_their_calls(tmp_path: Path) -> None:
    # interleaved.jsonl: fix.jsonl's session with the server pausing 0.5 s after each content block.
    # The CLI ran each tool as soon as its block was complete: the Bash call's result came before the
    # message's next block (a Read), and both before its message_delta.
    lines = _lines("interleaved.jsonl")
    kinds = [json.loads(line)["type"] for line in lines]
    start = next(i for i, line in enumerate(lines) if "message_start" in line and '"msg_11"' in line)
    delta = next(i for i, line in enumerate(lines) if "message_delta" in line and i > start)
    assert kinds[start:delta] == ["stream_event", "assistant", "assistant", "user", "assistant", "user"]
    status, records = _translate(tmp_path, lines)
    assert status == "done"
    messages = _of(records, "message")
    assert len(messages) == 6
    assert {m["tokens"]["output"] for m in messages} == {20}
    fourth = records.index(messages[3])
    assert [(r["type"], r.get("name") or r.get("error")) for r in records[fourth : fourth + 5]] == [
        ("message", None),
        ("tool_call", "Bash"),
        ("tool_call", "Read"),
        ("tool_result", "Exit code 1\n1"),
        ("tool_result", "File does not exist. Note: your current working directory is /tmp/claude-study/src."),
    ]


def test_the_scripted_fix_of_tlvkit_is_one_message_per_call_with_the_scripts_usage(tmp_path: Path) -> None:
    # scripted-tlvkit.jsonl: the CLI against `python -m ssebench.gateway.scripted` playing
    # models/scripted/fix.yaml's Claude Code conversation for tlvkit (on the host, where /src/tlvkit
    # does not exist, so the reads and edits fail).
    status, records = _translate(tmp_path, _lines("scripted-tlvkit.jsonl"))
    assert status == "done"
    assert [m["tokens"] for m in _of(records, "message")] == [
        {"input": 1850, "output": 74},
        {"input": 3120, "output": 61},
        {"input": 3890, "output": 212},
        {"input": 4420, "output": 18},
        {"input": 4630, "output": 83},
    ]
    assert [r["name"] for r in _of(records, "tool_call")] == [
        "Read",
        "Read",
        "Edit",
        "Edit",
        "Edit",
        "mcp__ssebench__test_patch",
    ]
    assert records[-1]["totals"] == {"input_tokens": 17910, "output_tokens": 448, "turns": 5, "tool_calls": 6}


# -- the launcher around a stand-in CLI -----------------------------------------------------------


FAKE_CLI = """#!/bin/sh
if [ "$1" = --version ]; then echo "2.1.332 (Claude Code)"; exit 0; fi
echo "$@" > "{root}/argv"
echo "starting" >&2
head -n {lines} "{transcript}"
if [ -n "{hang}" ]; then
    sleep 600 &
    echo $! > "{root}/child"
    sleep 600
fi
"""


def _software(tmp_path: Path, lines: int, hang: bool) -> Path:
    """A software volume whose `claude` plays the first `lines` of fix.jsonl (then hangs, with a child)."""
    root = tmp_path / "opt"
    site = root / "lib" / "python3.11" / "site-packages"
    binary = site / "claude_agent_sdk" / "_bundled" / "claude"
    binary.parent.mkdir(parents=True)
    (site / "claude_agent_sdk-0.2.189.dist-info").mkdir()
    text = FAKE_CLI.format(root=tmp_path, lines=lines, transcript=FIXTURES / "fix.jsonl", hang="1" if hang else "")
    binary.write_text(text)
    binary.chmod(0o755)
    return root


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The task container's side: a prompt and a source tree, without a daemon."""
    import sse.prompt

    source = tmp_path / "src"
    source.mkdir()
    monkeypatch.setattr(sse.prompt, "task_prompt", lambda: "# Task: tlvkit (C)\n")
    monkeypatch.setitem(sys.modules, "sse.project", ModuleType("sse.project"))
    monkeypatch.setattr(sys.modules["sse.project"], "source", str(source), raising=False)
    import sse

    monkeypatch.setattr(sse, "project", sys.modules["sse.project"], raising=False)
    return source


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


def test_the_launcher_translates_a_whole_session_and_keeps_its_transcript(
    tmp_path: Path, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent, "SOFTWARE", _software(tmp_path, 1000, hang=False))
    dialog = Dialog(tmp_path / "dialog.jsonl")
    status = agent.run(agent.Settings.from_env({**ENV, "TIMEOUT": "600"}), dialog, agent.time.monotonic())
    assert status == "done"
    records = read(dialog.path)
    assert validate(records) == []
    assert records[0]["cli_version"] == "2.1.332 (Claude Code)" and records[0]["sdk"] == "claude-agent-sdk 0.2.189"
    assert records[1]["text"] == "# Task: tlvkit (C)\n"
    assert len(_of(records, "tool_call")) == 6
    assert "--permission-mode=bypassPermissions" in (tmp_path / "argv").read_text()
    kept = (tmp_path / "claude-stream.jsonl").read_text().splitlines()
    assert kept == _lines("fix.jsonl")  # the fixture has no content deltas to leave out
    assert (tmp_path / "claude-stderr.log").read_text() == "starting\n"


def test_the_launcher_stops_the_cli_and_what_it_started_before_timeout(
    tmp_path: Path, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent, "SOFTWARE", _software(tmp_path, 13, hang=True))
    settings = agent.Settings.from_env({**ENV, "TIMEOUT": "100"})  # a 5 s margin
    # Started 93 s ago: the margin is reached 2 s from now.
    dialog = Dialog(tmp_path / "dialog.jsonl")
    began = agent.time.monotonic()
    status = agent.run(settings, dialog, began - 93)
    assert agent.time.monotonic() - began < 30
    assert status == "timeout"
    records = read(dialog.path)
    assert validate(records) == []
    assert records[-1]["status"] == "timeout"
    assert [r["name"] for r in _of(records, "tool_call")] == ["Read", "Grep", "Edit"]
    assert not _alive(int((tmp_path / "child").read_text()))


def test_a_long_tool_output_keeps_its_head_and_tail(tmp_path: Path) -> None:
    output = "head " + "x" * 50_000 + " tail"
    result = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": output}]},
    }
    _, records = _translate(tmp_path, [json.dumps(result)])
    [recorded] = _of(records, "tool_result")
    assert len(recorded["output"]) < 12_100
    assert recorded["output"].startswith("head ") and recorded["output"].endswith(" tail")
    assert "characters cut" in recorded["output"]
