"""chat-agent's loop in-process: the real agent code against the gateway app and its scripted models.

The task container is faked (the prompt, a bash that runs in a temporary
copy of a demo project, a test_patch that answers at once); the model calls
go through the gateway's model app to the scripted playback, exactly as in a
run, so the gateway's accounting can be compared with the agent's dialog.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml
from sse.dialog import Dialog, read, validate
from sse.metadata import Metadata, TaskDescription
from sse.prompt import build_prompt

from ssebench.gateway import GatewayClient, ModelConfig, Usage, load_models
from ssebench.gateway._server import Gateway
from ssebench.task import load_task
from tests.helpers import DEMO, scripted_steps
from tests.inprocess import InProcessTransport

ROOT = Path(__file__).resolve().parents[2]
HOST = "172.18.0.1"
TOKEN = "admin-token-for-agent-tests-0123"
PASSED = "All 2 checks that ran passed.\nbuild: passed\nfunction test: passed"


def _load_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chat_agent", ROOT / "agents" / "chat-agent" / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chat_agent"] = module
    spec.loader.exec_module(module)
    return module


agent = _load_agent()


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


@dataclass
class FakeEnvironment:
    """The task container's side: the prompt, a real bash in the source copy, an instant test_patch."""

    root: Path
    text: str
    commands: list[str] = field(default_factory=list)
    tests: int = 0
    clock: Any = None
    test_seconds: float = 0.0
    fail_prompt: bool = False

    def prompt(self) -> str:
        if self.fail_prompt:
            raise RuntimeError("the daemon does not answer")
        return self.text

    def source(self) -> Path:
        return self.root

    def bash(self, command: str) -> tuple[int, str, str]:
        self.commands.append(command)
        done = subprocess.run(["bash", "-c", command], cwd=self.root, capture_output=True, text=True, timeout=30)
        return done.returncode, done.stdout, done.stderr

    def test_patch(self, timeout: float) -> str:
        self.tests += 1
        if self.clock is not None:
            self.clock.now += self.test_seconds
        return PASSED


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _prompt(task_id: str) -> str:
    task = load_task(DEMO / task_id)
    reports = [(DEMO / task_id / "sse" / r).read_text() for r in task.config.task_description.crash_report]
    metadata = Metadata(
        id=task.id,
        project=task.config.project,
        language=task.language,
        source=Path(task.config.source),
        task_description=TaskDescription(
            issue=None, crash_report=reports, bug_description=task.config.task_description.bug_description
        ),
        poc=[],
        build_script=None,
        test_script=None,
    )
    return build_prompt(metadata)


def _source(tmp_path: Path, task_id: str) -> Path:
    task = load_task(DEMO / task_id)
    project = Path(task.config.source).name
    tree = tmp_path / "src" / project
    shutil.copytree(DEMO / task_id / "src" / project, tree)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "buggy commit")
    return tree


@dataclass
class Harness:
    """A gateway (in-process apps) with one registered run, and the agent wired to it."""

    tmp_path: Path
    gateway: Gateway
    control: GatewayClient
    transports: list[InProcessTransport] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    def run(
        self,
        model: str,
        env: FakeEnvironment,
        *,
        run_id: str = "run-1",
        clock: Any = None,
        transport: httpx.BaseTransport | None = None,
        finish_first: bool = False,
        **settings: Any,
    ) -> tuple[str, list[Any], Usage]:
        key = self.control.register_run(run_id, model, bind_host=HOST, ttl_seconds=3600)
        if finish_first:
            self.control.finish_run(run_id)
        if transport is None:
            transport = InProcessTransport(self.gateway.model_app(HOST))
            self.transports.append(transport)
        config = agent.Settings(base_url=key.base_url, api_key=key.key, model=model, **{"timeout": 3600.0, **settings})
        client = agent.ModelClient(config, transport=transport)
        dialog_path = self.tmp_path / f"{run_id}-dialog.jsonl"
        worker = agent.Agent(
            config,
            env,
            Dialog(dialog_path),
            client,
            sleep=self.sleeps.append,
            **({"clock": clock} if clock is not None else {}),
        )
        status = worker.run()
        client.close()
        return status, read(dialog_path), self.control.finish_run(run_id)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    models = load_models(ROOT / "models")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name, steps in TEST_SCRIPTS.items():
        (scripts / f"{name}.yaml").write_text(yaml.safe_dump({"conversations": [{"match": "", "steps": steps}]}))
        models[name] = ModelConfig(name=name, script=f"{name}.yaml", source=scripts / f"{name}.yaml")

    class NoListeners:
        async def acquire(self, host: str, port: int) -> int:
            return port

        async def release(self, host: str) -> None:
            return None

    gateway = Gateway(models=models, state_dir=tmp_path / "state", listeners=NoListeners())
    control_transport = InProcessTransport(gateway.control_app(TOKEN))
    control = GatewayClient("http://control", TOKEN, transport=control_transport)
    h = Harness(tmp_path, gateway, control)
    yield h
    control.close()
    control_transport.close()
    for transport in h.transports:
        transport.close()


FINISH = {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}
TEST_SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "talker": [{"content": "I think the bug is in the parser.", "usage": {"prompt_tokens": 5, "completion_tokens": 6}}],
    "confused": [
        {"tool_calls": [{"name": "rm_rf", "arguments": {}}, {"name": "bash", "arguments": {}}]},
        {"malformed_tool_call": True, "times": 4},
    ],
    "tools": [
        {
            "tool_calls": [
                {"name": "view_file", "arguments": {"path": "."}},
                {"name": "edit_file", "arguments": {"path": "NEW.md", "new_str": "hello\n"}},
                {"name": "bash", "arguments": {"command": "cat NEW.md; exit 3"}},
            ]
        },
        FINISH,
    ],
}


def _tool_names(records: list[Any]) -> list[str]:
    return [r["name"] for r in records if r["type"] == "tool_call"]


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
def test_scripted_fix_fixes_each_demo_task(harness: Harness, tmp_path: Path, task_id: str) -> None:
    tree = _source(tmp_path, task_id)
    expected = tmp_path / "expected"
    shutil.copytree(tree, expected)
    subprocess.run(
        ["git", "apply", "-p1", str(DEMO / task_id / "sse" / "diffs" / "patch.diff")], cwd=expected, check=True
    )
    env = FakeEnvironment(tree, _prompt(task_id))
    status, records, usage = harness.run("scripted-fix", env)

    assert status == "done", records[-1]
    assert validate(records) == []
    assert _tree(tree) == _tree(expected)  # exactly the upstream fix
    assert env.tests == 1 and _tool_names(records)[-3:] == ["test_patch", "finish", "git"]
    assert "edit_file" in _tool_names(records)
    assert all(r["error"] is None for r in records if r["type"] == "tool_result"), records
    log = _git(tree, "log", "--format=%an %s")
    assert log.splitlines()[0].startswith("chat-agent chat-agent: finish: ") and log.splitlines()[1] == "t buggy commit"
    assert _git(tree, "status", "--porcelain") == ""
    # The agent's account and the gateway's agree, and both are the script's numbers.
    steps = scripted_steps(ROOT / "models" / "scripted" / "fix.yaml", _prompt(task_id), frozenset(agent.TOOL_NAMES))
    totals = records[-1]["totals"]
    assert totals == {
        "input_tokens": sum(s["usage"]["prompt_tokens"] for s in steps),
        "output_tokens": sum(s["usage"]["completion_tokens"] for s in steps),
        "turns": len(steps),
        "tool_calls": len(_tool_names(records)),
    }
    assert (usage.prompt_tokens, usage.completion_tokens, usage.calls) == (
        totals["input_tokens"],
        totals["output_tokens"],
        totals["turns"],
    )
    assert usage.cost == pytest.approx((usage.prompt_tokens * 3 + usage.completion_tokens * 15) / 1e6)


def test_the_transcript_of_c_demo_shows_thinking_and_tokens(harness: Harness, tmp_path: Path) -> None:
    from ssebench.transcript import render_transcript

    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    _, records, _ = harness.run("scripted-fix", env)
    html = render_transcript(records)
    assert "thinking" in html and "tokens: 1850 in / 74 out" in html and "TLV_ERR_TOO_LONG" in html
    assert "invalid record" not in html


def test_scripted_wander_changes_nothing(harness: Harness, tmp_path: Path) -> None:
    tree = _source(tmp_path, "go-demo")
    before = _tree(tree)
    env = FakeEnvironment(tree, _prompt("go-demo"))
    status, records, usage = harness.run("scripted-wander", env)
    assert status == "done" and validate(records) == []
    assert _tree(tree) == before
    assert env.commands == ["ls -la", "git log --oneline | head -5"]
    assert records[-1]["reason"].startswith("finish: I looked around")
    assert _git(tree, "log", "--format=%s").splitlines() == ["buggy commit"]  # nothing to commit
    assert usage.calls == 4 and records[-1]["totals"]["turns"] == 4


def test_scripted_garbage_ends_in_error_after_bounded_retries(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "rust-demo"), _prompt("rust-demo"))
    status, records, usage = harness.run("scripted-garbage", env)
    assert status == "error" and validate(records) == []
    assert records[-1]["reason"].startswith(
        "the model failed 6 times in a row; last: the model's answer is not a chat completion"
    )
    # Three faults before the first answer, five retries before giving up: exponential, capped.
    assert harness.sleeps == [1.0, 2.0, 4.0, 1.0, 2.0, 4.0, 8.0, 16.0]
    malformed = [r for r in records if r["type"] == "tool_result" and r["error"]]
    assert len(malformed) == 2 and all("not a JSON object" in r["error"] for r in malformed)
    assert records[-1]["totals"] == {
        "input_tokens": 1500 + 2 * 1700,
        "output_tokens": 20 + 2 * 30,
        "turns": 3,
        "tool_calls": 4,
    }
    statuses = [r.status for r in usage.records]
    assert statuses == [500, 200, 429, 200, 200, 200] + [200] * 6
    assert (usage.prompt_tokens, usage.completion_tokens) == (1500 + 2 * 1700, 20 + 2 * 30)


def test_the_budget_stops_the_agent(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    status, records, usage = harness.run("scripted-budget", env)
    assert status == "budget" and validate(records) == []
    assert records[-1]["reason"] == (
        "the run's budget is exhausted (5105 of 5000 tokens used); no more calls are forwarded"
    )
    assert records[-1]["totals"]["turns"] == 2 and harness.sleeps == []
    assert usage.stopped == "budget exhausted: 5105 of 5000 tokens used" and usage.refused == 1


def test_the_turn_limit_stops_the_agent(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    status, records, usage = harness.run("scripted-fix", env, max_turns=2)
    assert status == "turns" and validate(records) == []
    assert records[-1]["reason"] == "the turn limit (2) is reached" and usage.calls == 2


def test_the_agent_stops_before_timeout(harness: Harness, tmp_path: Path) -> None:
    clock = Clock()
    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"), clock=clock, test_seconds=100)
    status, records, usage = harness.run("scripted-fix", env, clock=clock, timeout=100.0)  # margin 5 s
    assert status == "timeout" and validate(records) == []
    assert env.tests == 1 and usage.calls == 4  # test_patch took the time left: no call after it
    assert _tool_names(records)[-1] == "git"  # the work is still committed


def test_a_revoked_key_is_an_error_without_retries(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    status, records, _ = harness.run("scripted-fix", env, finish_first=True)
    assert status == "error" and validate(records) == []
    assert records[-1]["reason"].startswith("the model call failed: the model answered 401")
    assert harness.sleeps == []


def test_transport_errors_and_rate_limits_are_retried(harness: Harness, tmp_path: Path) -> None:
    calls: list[int] = []
    answer = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "finish", "arguments": '{"summary": "ok"}'},
                        }
                    ],
                }
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            return httpx.Response(429, headers={"retry-after": "7"}, json={"error": {"type": "rate_limit_error"}})
        if len(calls) == 3:
            return httpx.Response(502, text="bad gateway")
        return httpx.Response(200, json=answer)

    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    status, records, _ = harness.run("scripted-fix", env, transport=httpx.MockTransport(handler))
    assert status == "done" and validate(records) == []
    assert harness.sleeps == [1.0, 7.0, 4.0]  # Retry-After wins over a shorter backoff
    assert records[-1]["totals"] == {"input_tokens": 3, "output_tokens": 4, "turns": 1, "tool_calls": 2}


def test_an_answer_without_a_tool_call_ends_the_session(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    status, records, _ = harness.run("talker", env)
    assert status == "done" and validate(records) == []
    assert records[-1]["reason"] == "the model answered without calling a tool"
    assert [r["text"] for r in records if r["type"] == "message"] == ["I think the bug is in the parser."]


def test_unknown_tools_and_malformed_arguments_are_answered_then_bounded(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "c-demo"), _prompt("c-demo"))
    status, records, _ = harness.run("confused", env, max_malformed=3)
    assert status == "error" and validate(records) == []
    errors = [r["error"] for r in records if r["type"] == "tool_result" and r["error"]]
    assert errors[0].startswith("there is no tool 'rm_rf'") and errors[1] == "command must be a non-empty string"
    assert len(errors) == 2 + 4
    assert records[-1]["reason"] == "the model sent 4 tool calls whose arguments are not JSON objects"
    assert env.commands == []


def test_tool_results_reach_the_dialog(harness: Harness, tmp_path: Path) -> None:
    tree = _source(tmp_path, "c-demo")
    env = FakeEnvironment(tree, _prompt("c-demo"))
    status, records, _ = harness.run("tools", env)
    assert status == "done" and validate(records) == []
    results = [r for r in records if r["type"] == "tool_result"]
    assert "tlv.c" in results[0]["output"].splitlines()
    assert results[1]["output"] == "created NEW.md (1 lines)"
    assert results[2]["code"] == 3 and results[2]["output"] == "hello\n\n[exit code 3]"
    assert (tree / "NEW.md").read_text() == "hello\n" and "NEW.md" in _git(tree, "show", "--stat", "HEAD")


def test_a_task_that_cannot_be_read_still_ends_the_dialog(harness: Harness, tmp_path: Path) -> None:
    env = FakeEnvironment(_source(tmp_path, "c-demo"), "", fail_prompt=True)
    status, records, usage = harness.run("scripted-fix", env)
    assert status == "error" and validate(records) == []
    assert records[1]["text"].startswith("(no task prompt: RuntimeError") and usage.calls == 0


# -- the tools on their own -----------------------------------------------------------


@pytest.fixture
def tools(tmp_path: Path) -> Any:
    (tmp_path / "a.c").write_text("int x;\nint y;\nint x;\n")
    (tmp_path / "bin").write_bytes(b"\x7fELF\x00\x01")
    (tmp_path / "sub").mkdir()
    return agent.Tools(FakeEnvironment(tmp_path, ""), tmp_path, 1000, lambda: 60.0)


def test_edit_file_needs_an_exact_unique_match(tools: Any, tmp_path: Path) -> None:
    with pytest.raises(agent.ToolError, match="occurs 2 times"):
        tools.edit_file({"path": "a.c", "old_str": "int x;", "new_str": "long x;"})
    with pytest.raises(agent.ToolError, match=r"is not in a\.c"):
        tools.edit_file({"path": "a.c", "old_str": "int  y;", "new_str": "z"})
    output, _ = tools.edit_file({"path": "a.c", "old_str": "int y;\n", "new_str": "int y;\nint z;\n"})
    assert (tmp_path / "a.c").read_text() == "int x;\nint y;\nint z;\nint x;\n"
    assert output.startswith("edited a.c; lines 1-") and "     3\tint z;" in output
    with pytest.raises(agent.ToolError, match="exists; give old_str"):
        tools.edit_file({"path": "a.c", "new_str": "x"})
    tools.edit_file({"path": "new/dir/b.h", "new_str": "#pragma once\n"})
    assert (tmp_path / "new" / "dir" / "b.h").read_text() == "#pragma once\n"
    with pytest.raises(agent.ToolError, match="cannot read"):
        tools.edit_file({"path": "missing.c", "old_str": "a", "new_str": "b"})
    with pytest.raises(agent.ToolError, match="new_str must be a string"):
        tools.edit_file({"path": "a.c", "old_str": "a"})


def test_edit_file_keeps_line_endings(tools: Any, tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    tools.edit_file({"path": "w.txt", "old_str": "two", "new_str": "three"})
    assert (tmp_path / "w.txt").read_bytes() == b"one\r\nthree\r\n"


def test_view_file_numbers_lines_ranges_and_lists(tools: Any, tmp_path: Path) -> None:
    assert tools.view_file({"path": "a.c"})[0] == "     1\tint x;\n     2\tint y;\n     3\tint x;"
    ranged, _ = tools.view_file({"path": "a.c", "start_line": 2, "end_line": 2})
    assert ranged.startswith("     2\tint y;\n[lines 2-2 of 3;")
    assert tools.view_file({"path": "."})[0].splitlines() == ["a.c", "bin", "sub/"]
    assert tools.view_file({"path": "bin"})[0] == "bin is a binary file of 6 bytes"
    with pytest.raises(agent.ToolError, match="cannot read nope"):
        tools.view_file({"path": "nope"})
    with pytest.raises(agent.ToolError, match="path must be a non-empty string"):
        tools.view_file({})
    (tmp_path / "long.txt").write_text("".join(f"{i}\n" for i in range(1, 1001)))
    long, _ = tools.view_file({"path": str(tmp_path / "long.txt")})
    assert "[lines 1-400 of 1000;" in long


def test_long_outputs_are_capped_head_and_tail() -> None:
    text = "".join(f"{i:05}\n" for i in range(10_000))
    capped = agent.cap(text, 1000)
    assert capped.startswith("00000\n") and capped.endswith("09999\n") and "characters cut" in capped
    assert len(capped) < 1100 and agent.cap("short", 1000) == "short"


def test_settings_come_from_the_environment() -> None:
    with pytest.raises(ValueError, match="SSE_BASE_URL, SSE_API_KEY, SSE_MODEL_NAME not set"):
        agent.Settings.from_env({})
    base = {"SSE_BASE_URL": "http://172.18.0.1:4000/v1/", "SSE_API_KEY": "k", "SSE_MODEL_NAME": "m"}
    settings = agent.Settings.from_env({**base, "TIMEOUT": "600", "CHAT_AGENT_MAX_TURNS": "7"})
    assert (settings.base_url, settings.timeout, settings.max_turns, settings.margin) == (
        "http://172.18.0.1:4000/v1",
        600.0,
        7,
        30.0,
    )
    assert settings.mcp_url == "http://localhost:3000/mcp" and agent.Settings.from_env(base).margin == 60.0
    with pytest.raises(ValueError, match="CHAT_AGENT_MAX_RETRIES='lots' is not a number"):
        agent.Settings.from_env({**base, "CHAT_AGENT_MAX_RETRIES": "lots"})
    with pytest.raises(ValueError, match="must not be negative"):
        agent.Settings.from_env({**base, "TIMEOUT": "-1"})


def test_the_tools_offered_are_the_five_of_the_brief() -> None:
    assert agent.TOOL_NAMES == ["bash", "view_file", "edit_file", "test_patch", "finish"]
    assert json.loads(json.dumps(agent.TOOLS)) == agent.TOOLS
