"""The codex agent's launcher: its translation of Codex's event stream, its configuration, its process handling.

The streams in tests/fixtures/codex were recorded from the real CLI
(openai-codex-cli-bin 0.163.0, `codex exec --json`) against a local
Responses server playing a script, with this launcher's own config_toml,
command and run_codex (docs/agents.md tells how); the rollout files are the
token_usage_record lines of the session logs of those runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from sse.dialog import Dialog, read, validate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "codex"


def _load_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("codex_agent", ROOT / "agents" / "codex" / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["codex_agent"] = module
    spec.loader.exec_module(module)
    return module


agent = _load_agent()


def _lines(name: str) -> list[str]:
    return (FIXTURES / f"{name}.events.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)


def _thread(name: str) -> str:
    return str(json.loads(_lines(name)[0])["thread_id"])


def _codex_home(tmp_path: Path, name: str) -> Path:
    """A CODEX_HOME whose session log holds the recorded run's token records, where Codex writes it."""
    home = tmp_path / "codex-home"
    day = home / "sessions" / "2026" / "12" / "05"
    day.mkdir(parents=True)
    (day / f"rollout-2026-12-05T07-12-58-{_thread(name)}.jsonl").write_text(
        (FIXTURES / f"{name}.rollout.jsonl").read_text(encoding="utf-8"), encoding="utf-8"
    )
    return home


def _dialog(tmp_path: Path) -> Dialog:
    dialog = Dialog(tmp_path / "dialog.jsonl")
    dialog.init(agent="codex", model="scripted-fix", version="0.163.0")
    dialog.prompt("Make greet.c say hello.")
    return dialog


def _records(tmp_path: Path) -> list[Any]:
    records = read(tmp_path / "dialog.jsonl")
    assert validate(records) == []
    return records


def _of(records: list[Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


# -- the translation of recorded streams -------------------------------------------------


def test_a_recorded_fix_becomes_every_step_of_the_dialog(tmp_path: Path) -> None:
    usage = agent.rollout_usage(_codex_home(tmp_path, "fix"), _thread("fix"))
    status, reason = agent.translate(_lines("fix"), _dialog(tmp_path), agent.Exit(code=0), usage)
    assert (status, reason) == ("done", "Codex finished its turn")
    records = _records(tmp_path)
    assert [r["type"] for r in records] == [
        "init",
        "prompt",
        "thinking",
        "message",
        "tool_call",
        "tool_result",
        "message",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "message",
        "complete",
    ]
    assert _of(records, "thinking")[0]["text"] == "The greeting is in greet.c. Read it first."
    assert [m["text"] for m in _of(records, "message")] == [
        "Let me read greet.c.",
        "I change the greeting.",
        "greet.c now prints hello; test_patch passes.",
    ]
    calls = _of(records, "tool_call")
    assert [c["name"] for c in calls] == ["exec_command", "apply_patch", "exec_command", "ssebench.test_patch"]
    assert calls[0]["input"] == {"command": "/bin/bash -lc 'cat greet.c'"}
    assert calls[1]["input"] == {"changes": [{"path": "/tmp/codexlab/work2/greet.c", "kind": "update"}]}
    results = {r["tool_id"]: r for r in _of(records, "tool_result")}
    assert 'puts("hi");' in results[calls[0]["tool_id"]]["output"]
    assert results[calls[0]["tool_id"]]["code"] == 0
    assert results[calls[1]["tool_id"]] | {"ts": 0, "seq": 0} == {
        "seq": 0,
        "ts": 0,
        "type": "tool_result",
        "tool_id": "item_5",
        "output": "update /tmp/codexlab/work2/greet.c",
        "code": None,
        "error": None,
    }
    # A command that fails is a result with its exit code, not a tool error.
    failed = results[calls[2]["tool_id"]]
    assert (failed["code"], failed["error"]) == (1, None)
    assert "missing.c: No such file or directory" in failed["output"]
    assert results[calls[3]["tool_id"]]["output"].startswith("All 1 checks that ran passed.")
    # The session log counts each of the five model calls; the turn event only their sum.
    assert records[-1]["totals"] == {"input_tokens": 6000, "output_tokens": 115, "turns": 5, "tool_calls": 4}


def test_without_the_session_log_the_totals_are_the_turn_events(tmp_path: Path) -> None:
    agent.translate(_lines("fix"), _dialog(tmp_path), agent.Exit(code=0))
    totals = _records(tmp_path)[-1]["totals"]
    assert totals == {"input_tokens": 6000, "output_tokens": 115, "turns": 1, "tool_calls": 4}


def test_lines_that_are_not_events_are_counted_and_skipped(tmp_path: Path) -> None:
    lines = _lines("fix")
    garbage = ["not json at all\n", "[1, 2]\n", '{"type": 5}\n', '{"type": "mystery.event"}\n', '{"item": {}}\n']
    mixed = lines[:5] + garbage + lines[5:] + ['{"type":"item.completed","item":{"id":"x","type":"unknown_kind"}}\n']
    status, reason = agent.translate(mixed, _dialog(tmp_path), agent.Exit(code=0))
    assert status == "done"
    assert "(6 lines of Codex's event stream were not events this launcher knows)" in reason
    records = _records(tmp_path)
    assert len(_of(records, "tool_call")) == 4


def test_a_stream_cut_short_answers_the_open_call_and_says_why(tmp_path: Path) -> None:
    lines = _lines("fix")
    started = next(i for i, line in enumerate(lines) if '"item.started"' in line and "file_change" in line)
    exit = agent.Exit(code=-15, timed_out=True, timeout=600)
    status, reason = agent.translate(lines[: started + 1], _dialog(tmp_path), exit)
    assert (status, reason) == ("timeout", "TIMEOUT (600 s) is near: Codex was stopped with a margin")
    records = _records(tmp_path)
    assert records[-2] | {"ts": 0} == {
        "seq": records[-2]["seq"],
        "ts": 0,
        "type": "tool_result",
        "tool_id": "item_5",
        "output": "",
        "code": None,
        "error": agent.UNFINISHED,
    }
    # No turn event came: no tokens are claimed.
    assert records[-1]["totals"]["input_tokens"] == 0


def test_the_recorded_timeout_keeps_the_tokens_of_the_session_log(tmp_path: Path) -> None:
    usage = agent.rollout_usage(_codex_home(tmp_path, "timeout"), _thread("timeout"))
    status, _ = agent.translate(_lines("timeout"), _dialog(tmp_path), agent.Exit(-15, True, timeout=60), usage)
    assert status == "timeout"
    records = _records(tmp_path)
    assert _of(records, "tool_call")[0]["input"] == {"command": "/bin/bash -lc 'sleep 30'"}
    assert records[-1]["totals"] == {"input_tokens": 1000, "output_tokens": 20, "turns": 1, "tool_calls": 1}


def test_a_refusal_of_the_budget_ends_with_status_budget(tmp_path: Path) -> None:
    usage = agent.rollout_usage(_codex_home(tmp_path, "budget"), _thread("budget"))
    status, reason = agent.translate(_lines("budget"), _dialog(tmp_path), agent.Exit(code=1), usage)
    assert status == "budget"
    assert "429 Too Many Requests" in reason
    # The call before the refusal was answered and counted; the turn event never came.
    assert _records(tmp_path)[-1]["totals"] == {"input_tokens": 1000, "output_tokens": 20, "turns": 1, "tool_calls": 1}


def test_a_stream_the_model_broke_off_is_an_error(tmp_path: Path) -> None:
    status, reason = agent.translate(_lines("cut"), _dialog(tmp_path), agent.Exit(code=1))
    assert status == "error"
    assert reason == "Codex stopped: stream disconnected before completion: stream closed before response.completed"
    assert _of(_records(tmp_path), "message")[0]["text"] == "partial"


@pytest.mark.parametrize(
    ("lines", "exit", "expected"),
    [
        ([], agent.Exit(code=None, stderr="codex: Permission denied"), "Codex did not start: codex: Permission denied"),
        (
            [],
            agent.Exit(code=2, stderr="warning\nError: bad config key\n"),
            "Codex exited with status 2: Error: bad config key",
        ),
        (['{"type":"turn.started"}\n'], agent.Exit(code=0), "Codex ended without completing its turn"),
    ],
)
def test_runs_that_end_without_a_finished_turn_are_errors(
    tmp_path: Path, lines: list[str], exit: Any, expected: str
) -> None:
    assert agent.translate(lines, _dialog(tmp_path), exit) == ("error", expected)
    _records(tmp_path)


def test_a_failed_mcp_call_and_a_failed_patch_are_tool_errors(tmp_path: Path) -> None:
    events = [
        {"type": "turn.started"},
        {
            "type": "item.started",
            "item": {"id": "m", "type": "mcp_tool_call", "server": "ssebench", "tool": "test_patch"},
        },
        {
            "type": "item.completed",
            "item": {
                "id": "m",
                "type": "mcp_tool_call",
                "server": "ssebench",
                "tool": "test_patch",
                "result": None,
                "error": {"message": "tool call timed out"},
                "status": "failed",
            },
        },
        {"type": "item.completed", "item": {"id": "p", "type": "file_change", "changes": [], "status": "failed"}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
    ]
    agent.translate([json.dumps(e) for e in events], _dialog(tmp_path), agent.Exit(code=0))
    results = _of(_records(tmp_path), "tool_result")
    assert [(r["tool_id"], r["error"]) for r in results] == [
        ("m", "tool call timed out"),
        ("p", "the patch was not applied"),
    ]


# -- configuration and the binary ---------------------------------------------------------


def test_the_config_names_the_gateway_and_turns_off_what_leaves_the_container() -> None:
    text = agent.config_toml('odd "model"\\name', "http://192.168.16.1:4080/v1", "http://127.0.0.1:3000/mcp")
    config = tomllib.loads(text)
    assert config["model"] == 'odd "model"\\name'
    assert config["model_provider"] == "sse"
    assert config["model_providers"]["sse"] | {"name": ""} == {
        "name": "",
        "base_url": "http://192.168.16.1:4080/v1",
        "env_key": "SSE_API_KEY",
        "wire_api": "responses",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    assert (config["approval_policy"], config["sandbox_mode"]) == ("never", "danger-full-access")
    assert config["check_for_update_on_startup"] is False
    assert config["web_search"] == "disabled"
    assert config["analytics"] == {"enabled": False}
    assert config["otel"] == {"exporter": "none", "trace_exporter": "none", "metrics_exporter": "none"}
    assert config["features"]["plugins"] is False and config["features"]["apps"] is False
    assert config["mcp_servers"]["ssebench"]["url"] == "http://127.0.0.1:3000/mcp"
    assert "mcp_servers" not in tomllib.loads(agent.config_toml("m", "http://h/v1", None))


def test_the_binary_is_found_in_the_venv_or_named_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no Codex CLI under .*agent.yaml's software was not installed"):
        agent.find_binary(tmp_path)
    binary = tmp_path / "lib" / "python3.11" / "site-packages" / "codex_cli_bin" / "bin" / "codex"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho 'codex-cli 9.8.7'\n")
    binary.chmod(0o755)
    assert agent.find_binary(tmp_path) == binary
    assert agent.cli_version(binary) == "9.8.7"
    (binary.parent.parent / "codex-path").mkdir()
    env = agent.codex_environment(binary, tmp_path / "home", {"PATH": "/usr/bin", "SSE_API_KEY": "k"})
    assert env["PATH"] == f"{binary.parent.parent / 'codex-path'}:/usr/bin"
    assert (env["CODEX_HOME"], env["SSE_API_KEY"]) == (str(tmp_path / "home"), "k")


def test_the_session_log_is_read_once_per_answer(tmp_path: Path) -> None:
    home = _codex_home(tmp_path, "fix")
    log = next(home.glob("sessions/*/*/*/*.jsonl"))
    text = log.read_text(encoding="utf-8")
    log.write_text(text + text.splitlines(keepends=True)[0] + "not json\n", encoding="utf-8")
    assert agent.rollout_usage(home, _thread("fix")) == agent.Usage(6000, 115, 5)
    assert agent.rollout_usage(home, "another-thread") is None
    assert agent.rollout_usage(home, None) is None


def test_settings_name_what_is_missing() -> None:
    with pytest.raises(ValueError, match="SSE_API_KEY, SSE_MODEL_NAME not set"):
        agent.Settings.from_env({"SSE_BASE_URL": "http://h/v1"})
    base = {"SSE_BASE_URL": "http://h/v1/", "SSE_API_KEY": "k", "SSE_MODEL_NAME": "m"}
    with pytest.raises(ValueError, match="TIMEOUT='soon' is not a number"):
        agent.Settings.from_env({**base, "TIMEOUT": "soon"})
    settings = agent.Settings.from_env({**base, "TIMEOUT": "600"})
    assert (settings.base_url, settings.timeout, settings.mcp_url) == ("http://h/v1", 600.0, agent.DEFAULT_MCP_URL)
    assert settings.margin == 40.0


# -- the process ----------------------------------------------------------------------


def _fake_codex(tmp_path: Path, events: str, then: str) -> Path:
    """A stand-in CLI: reads its prompt, prints recorded events, then does `then` (shell)."""
    script = tmp_path / "fake-codex"
    (tmp_path / "events").write_text(events, encoding="utf-8")
    script.write_text(f"#!/bin/sh\ncat > {tmp_path / 'prompt'}\ncat {tmp_path / 'events'}\n{then}\n")
    script.chmod(0o755)
    return script


def test_run_codex_feeds_events_as_they_come_and_keeps_them(tmp_path: Path) -> None:
    fake = _fake_codex(tmp_path, "".join(_lines("fix")), "echo 'a warning' >&2")
    archive = tmp_path / "archive"
    archive.mkdir()
    translator = agent.Translator(_dialog(tmp_path))
    exit = agent.run_codex([str(fake)], dict(os.environ), "the prompt", translator, archive, time.monotonic() + 30)
    assert (exit.code, exit.timed_out, exit.stderr) == (0, False, "a warning\n")
    assert (tmp_path / "prompt").read_text() == "the prompt"
    assert (archive / agent.EVENTS_FILE).read_text() == "".join(_lines("fix"))
    assert (archive / agent.STDERR_FILE).read_text() == "a warning\n"
    assert translator.finish(exit)[0] == "done"
    assert len(_of(_records(tmp_path), "tool_call")) == 4


def test_run_codex_stops_the_cli_and_its_commands_at_the_deadline(tmp_path: Path) -> None:
    lines = _lines("timeout")
    fake = _fake_codex(tmp_path, "".join(lines), f"sleep 60 & echo $! > {tmp_path / 'child'}; wait")
    archive = tmp_path / "archive"
    archive.mkdir()
    translator = agent.Translator(_dialog(tmp_path))
    began = time.monotonic()
    exit = agent.run_codex([str(fake)], dict(os.environ), "p", translator, archive, began + 2)
    assert exit.timed_out and exit.code is not None and exit.code < 0
    assert time.monotonic() - began < 2 + agent.STOP_GRACE
    child = int((tmp_path / "child").read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    exit.timeout = 100
    assert translator.finish(exit)[0] == "timeout"
    assert _of(_records(tmp_path), "tool_result")[0]["error"] == agent.UNFINISHED


def test_the_events_file_stops_at_its_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "EVENTS_CAP", 1000)
    fake = _fake_codex(tmp_path, "".join(_lines("fix")), "")
    archive = tmp_path / "archive"
    archive.mkdir()
    translator = agent.Translator(_dialog(tmp_path))
    agent.run_codex([str(fake)], dict(os.environ), "p", translator, archive, time.monotonic() + 30)
    kept = (archive / agent.EVENTS_FILE).read_text().splitlines()
    assert len("\n".join(kept[:-1])) <= 1000
    assert json.loads(kept[-1]) == {"type": "ssebench.cut", "message": "the size cap is reached"}
    # The dialog is whole all the same: the cap is the copy's, not the translation's.
    assert translator.finish(agent.Exit(code=0))[0] == "done"


def test_a_cli_that_cannot_start_is_an_exit_without_code(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    translator = agent.Translator(_dialog(tmp_path))
    exit = agent.run_codex([str(tmp_path / "absent")], {}, "p", translator, archive, time.monotonic() + 5)
    assert exit.code is None and "No such file or directory" in exit.stderr


# -- the scripted model's Codex conversations ---------------------------------------------


def _codex_request(prompt: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The body of Codex's first request (recorded, long texts cut) with `prompt` as the task, and `history`."""
    body: dict[str, Any] = json.loads((FIXTURES / "request.json").read_text(encoding="utf-8"))["body"]
    body["input"][-1]["content"][0]["text"] = prompt
    body["input"] += history or []
    body["stream"] = False
    return body


def _output(reply: Any) -> list[dict[str, Any]]:
    assert reply.status == 200, reply.body
    return list(reply.json()["output"])


def test_the_recorded_request_is_what_the_launcher_relies_on() -> None:
    recorded = json.loads((FIXTURES / "request.json").read_text(encoding="utf-8"))
    body = recorded["body"]
    assert (body["store"], body["stream"], body["model"]) == (False, True, "scripted-fix")
    assert recorded["headers"]["authorization"].startswith("Bearer ")
    assert [(t["type"], t["name"]) for t in body["tools"]] == [
        ("function", "exec_command"),
        ("function", "write_stdin"),
        ("function", "list_mcp_resources"),
        ("function", "list_mcp_resource_templates"),
        ("function", "read_mcp_resource"),
        ("function", "request_user_input"),
        ("namespace", "mcp__ssebench"),
    ]
    assert [t["name"] for t in body["tools"][-1]["tools"]] == ["test_patch"]


def test_fix_yaml_answers_codex_with_its_own_tools_and_chat_agent_with_chat_agents() -> None:
    from ssebench.gateway.scripted import Playback

    playback = Playback.from_file(ROOT / "models" / "scripted" / "fix.yaml")
    prompt = "# Task: tlvkit (C)\n\nFix the security vulnerability described below."
    first = _output(playback.respond(_codex_request(prompt), "codex", "openai-responses"))
    assert [i["type"] for i in first] == ["reasoning", "message", "function_call"]
    assert (first[2]["name"], json.loads(first[2]["arguments"])) == ("exec_command", {"cmd": "sed -n 1,70p tlv.c"})
    # Three turns of Codex (each a run of model output, answered by function_call_output) later: test_patch,
    # a function of the MCP server's namespace, as Codex declares it.
    history: list[dict[str, Any]] = []
    for turn in range(3):
        history += [
            {"type": "function_call", "call_id": f"c{turn}", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{turn}", "output": "ok"},
        ]
    fourth = _output(playback.respond(_codex_request(prompt, history), "codex", "openai-responses"))
    assert [(i["type"], i.get("namespace"), i.get("name")) for i in fourth][-1] == (
        "function_call",
        "mcp__ssebench",
        "test_patch",
    )
    chat = {
        "model": "scripted-fix",
        "messages": [{"role": "user", "content": prompt}],
        "tools": [{"type": "function", "function": {"name": n}} for n in ("bash", "view_file", "edit_file")],
    }
    answer = playback.respond(chat, "chat", "openai-chat").json()["choices"][0]["message"]
    assert answer["tool_calls"][0]["function"]["name"] == "view_file"


def test_the_launcher_waits_for_the_mcp_server_to_answer(tmp_path: Path) -> None:
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    began = time.monotonic()
    said = agent.wait_for_mcp(url, began + 1.0, pause=0.1)
    assert said.startswith(f"unreachable at {url} (ConnectionRefusedError") and time.monotonic() - began < 3

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # any answer will do, a refusal too
            self.send_response(405)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    def serve_later() -> None:
        time.sleep(0.5)
        server = HTTPServer(("127.0.0.1", port), Refuse)
        server.handle_request()
        server.server_close()

    thread = threading.Thread(target=serve_later)
    thread.start()
    assert agent.wait_for_mcp(url, time.monotonic() + 10, pause=0.1) == "ready"
    thread.join()


def test_agent_yaml_pins_the_cli_its_version_names() -> None:
    config = yaml.safe_load((ROOT / "agents" / "codex" / "agent.yaml").read_text())
    assert config["software"]["python"] == [f"openai-codex-cli-bin=={config['version']}"]
    assert config["protocol"] == "openai-responses"
    closure = (ROOT / "agents" / "codex" / "requirements.txt").read_text().splitlines()
    assert [line.split()[0] for line in closure if line and not line.startswith("#")] == config["software"]["python"]


def test_a_run_without_the_cli_ends_its_dialog_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sse.prompt

    def no_daemon() -> str:
        raise ConnectionRefusedError("no daemon here")

    monkeypatch.setattr(agent, "SOFTWARE", tmp_path / "empty")
    monkeypatch.setattr(sse.prompt, "task_prompt", no_daemon)
    monkeypatch.setenv("SSE_ARCHIVE", str(tmp_path))
    monkeypatch.setenv("SSE_MODEL_NAME", "scripted-fix")
    assert agent.main() == 1
    said = capsys.readouterr().err.splitlines()
    assert said == [
        f"codex: no Codex CLI under {tmp_path / 'empty'} (looked for lib/python3*/site-packages/codex_cli_bin/bin/"
        "codex): agent.yaml's software was not installed for this run"
    ]
    records = _records(tmp_path)
    assert [r["type"] for r in records] == ["init", "prompt", "complete"]
    assert records[1]["text"] == "(no task prompt: ConnectionRefusedError: no daemon here)"
    assert records[-1]["status"] == "error" and records[-1]["reason"] == said[0].removeprefix("codex: ")
