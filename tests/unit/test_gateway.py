"""Model files and scripted playback: what the gateway serves, read strictly, played back without state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import ssebench.gateway
from ssebench.errors import ConfigError, ConfigErrors
from ssebench.gateway import MODEL_PROTOCOLS, Budget, Price, Usage, UsageRecord, load_model, load_models
from ssebench.gateway.scripted import MALFORMED_ARGUMENTS, Playback, Script, load_script

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_exports_are_pinned() -> None:
    # The order is ruff's (RUF022): constants, then classes and functions.
    assert ssebench.gateway.__all__ == [
        "MODEL_NAME",
        "MODEL_PROTOCOLS",
        "Budget",
        "GatewayClient",
        "GatewayError",
        "GatewayLink",
        "GatewayProcess",
        "ModelCheck",
        "ModelConfig",
        "ModelProtocol",
        "Price",
        "RunKey",
        "Usage",
        "UsageRecord",
        "load_model",
        "load_models",
        "read_models",
    ]


# -- model files ------------------------------------------------------------------


def test_the_shipped_models_load_and_the_example_is_ignored() -> None:
    models = load_models(MODELS)
    assert sorted(models) == ["scripted-budget", "scripted-fix", "scripted-garbage", "scripted-wander"]
    fix = models["scripted-fix"]
    assert fix.script_path == MODELS / "scripted" / "fix.yaml"
    assert fix.upstream_id == "scripted-fix" and fix.base_url is None
    assert fix.price == Price(input=3.0, output=15.0)
    assert models["scripted-budget"].budget == Budget(tokens=5000)
    assert (MODELS / "example-openai.yaml.example").is_file()


def test_the_example_is_a_valid_model_once_copied(tmp_path: Path) -> None:
    target = tmp_path / "gpt-4o-mini.yaml"
    target.write_text((MODELS / "example-openai.yaml.example").read_text())
    model = load_model(target)
    assert model.base_url == "https://api.openai.com/v1" and model.api_key_env == "OPENAI_API_KEY"
    assert model.max_output_tokens == 4096 and model.budget == Budget(tokens=2_000_000, cost=2.0)


def _write(folder: Path, name: str, data: dict[str, Any]) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises((ConfigError, ConfigErrors)) as caught:
        load_model(path)
    error = caught.value
    return [str(e) for e in (error.errors if isinstance(error, ConfigErrors) else [error])]


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"name": "other", "base_url": "http://x/v1"}, "name", "differs from the file name"),
        ({"name": "m", "base_url": "http://x/v1", "script": "s.yaml"}, "", "exactly one of base_url"),
        ({"name": "m"}, "", "exactly one of base_url"),
        ({"name": "m", "base_url": "ftp://x/v1"}, "base_url", "must be an http(s) URL"),
        ({"name": "m", "base_url": "http://x/v1?key=1"}, "base_url", "must not carry a query"),
        ({"name": "m", "base_url": "http://x/v1", "api_key": "sk-123"}, "", "never write a provider key into a file"),
        ({"name": "m", "base_url": "http://x/v1", "api_key_env": "sk-123"}, "api_key_env", "NAME of an environment"),
        ({"name": "m", "base_url": "http://x/v1", "prices": {}}, "prices", "unknown key"),
        ({"name": "m", "base_url": "http://x/v1", "price": {"input": -1}}, "price.input", "greater than or equal"),
        ({"name": "m", "base_url": "http://x/v1", "budget": {"tokens": 0}}, "budget.tokens", "greater than 0"),
        ({"name": "m", "base_url": "http://x/v1", "budget": {"tokens": "many"}}, "budget.tokens", "integer"),
        ({"name": "m", "script": "/etc/passwd"}, "script", "must be relative to the model file"),
        ({"name": "m", "script": "missing.yaml"}, "script", "not found"),
        ({"name": "m", "base_url": "http://x/v1", "protocol": "anthropic"}, "protocol", "'anthropic-messages'"),
        ({"name": "m", "script": "s.yaml", "protocol": "openai-chat"}, "", "speaks every protocol"),
        ({"name": "m", "base_url": "http://x/v1", "price": {"cache_read": -1}}, "price.cache_read", "greater than"),
    ],
)
def test_a_bad_model_file_names_file_field_and_fix(
    tmp_path: Path, data: dict[str, Any], field: str, words: str
) -> None:
    path = _write(tmp_path, "m", data)
    problems = _problems(path)
    assert any(p.startswith(f"{path}: {field}") and words in p for p in problems), problems


def test_a_bad_script_fails_when_its_model_loads(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("conversations:\n  - match: x\n    steps:\n      - times: 2\n")
    path = _write(tmp_path, "m", {"name": "m", "script": "s.yaml"})
    problems = _problems(path)
    assert any(str(tmp_path / "s.yaml") in p and "conversations[0].steps[0]" in p for p in problems), problems


def test_load_models_reports_every_bad_file_and_ignores_the_rest(tmp_path: Path) -> None:
    _write(tmp_path, "good", {"name": "good", "base_url": "http://127.0.0.1:8000/v1"})
    _write(tmp_path, "bad1", {"name": "bad1"})
    _write(tmp_path, "bad2", {"name": "wrong", "base_url": "http://x/v1"})
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub", "deep", {"name": "deep"})
    (tmp_path / "notes.yml").write_text("not: a model")
    with pytest.raises(ConfigErrors) as caught:
        load_models(tmp_path)
    assert sorted(e.path.name for e in caught.value.errors) == ["bad1.yaml", "bad2.yaml"]
    (tmp_path / "bad1.yaml").unlink()
    (tmp_path / "bad2.yaml").unlink()
    assert list(load_models(tmp_path)) == ["good"]
    assert load_models(tmp_path / "absent") == {}


def test_the_anthropic_example_is_a_valid_model_once_copied(tmp_path: Path) -> None:
    target = tmp_path / "claude-sonnet-4-5.yaml"
    target.write_text((MODELS / "example-anthropic.yaml.example").read_text())
    model = load_model(target)
    assert model.protocols == {"anthropic-messages"} and model.api_key_env == "ANTHROPIC_API_KEY"
    assert model.price == Price(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75)


def test_the_responses_example_is_a_valid_model_once_copied(tmp_path: Path) -> None:
    target = tmp_path / "gpt-5-codex.yaml"
    target.write_text((MODELS / "example-openai-responses.yaml.example").read_text())
    model = load_model(target)
    assert model.protocols == {"openai-responses"} and model.api_key_env == "OPENAI_API_KEY"
    assert model.price == Price(input=1.25, output=10.0, cache_read=0.125)


def test_a_model_serves_its_upstreams_protocol_and_a_script_every_one(tmp_path: Path) -> None:
    claude = _write(
        tmp_path,
        "claude",
        {"name": "claude", "base_url": "https://api.anthropic.com/v1"} | {"protocol": "anthropic-messages"},
    )
    assert load_model(claude).protocols == frozenset({"anthropic-messages"})
    plain = _write(tmp_path, "plain", {"name": "plain", "base_url": "http://127.0.0.1:8000/v1"})
    assert load_model(plain).protocol == "openai-chat" and load_model(plain).protocols == {"openai-chat"}
    assert load_models(MODELS)["scripted-fix"].protocols == frozenset(MODEL_PROTOCOLS)
    assert MODEL_PROTOCOLS == ("openai-chat", "openai-responses", "anthropic-messages")


def test_price_and_budget_arithmetic() -> None:
    assert Price(input=3.0, output=15.0).cost(1_000_000, 100_000) == pytest.approx(4.5)
    # Cached input at its own prices; left out, it costs what input costs.
    cached = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert cached.cost(1_000_000, 0, 600_000, 300_000) == pytest.approx(0.3 + 0.18 + 1.125)
    assert Price(input=3.0).cost(1_000_000, 0, 600_000, 300_000) == pytest.approx(3.0)
    assert Budget(tokens=100).exhausted(99, 0.0) is None
    assert Budget(tokens=100).exhausted(100, 0.0) == "100 of 100 tokens used"
    assert Budget(cost=1.0).exhausted(10**9, 0.99) is None
    assert "spent" in (Budget(cost=1.0).exhausted(0, 1.0) or "")
    assert Budget().exhausted(10**12, 10**6) is None


# -- scripted playback ---------------------------------------------------------------


SCRIPT = {
    "conversations": [
        {
            "match": "# Task: alpha",
            "steps": [
                {
                    "content": "first",
                    "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2},
                    "reasoning": "thinking first",
                },
                {"error": {"status": 503, "body": "busy"}, "times": 2},
                {"garbage": "<html>"},
                {"content": "second", "usage": {"prompt_tokens": 20, "completion_tokens": 3}},
                {"malformed_tool_call": True, "times": 2, "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
                {"error": {"status": 429, "body": '{"error": {"type": "rate_limit_error", "message": "slow"}}'}},
            ],
        },
        {"match": "", "steps": [{"content": "anything else"}]},
    ],
}


def _playback(tmp_path: Path, script: dict[str, Any] = SCRIPT) -> Playback:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(script))
    return Playback.from_file(path)


def _request(text: str, assistants: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]
    for i in range(assistants):
        messages += [{"role": "assistant", "content": f"a{i}"}, {"role": "tool", "content": "r"}]
    return {"model": "m", "messages": messages}


def test_the_answer_follows_the_number_of_assistant_messages(tmp_path: Path) -> None:
    playback = _playback(tmp_path)
    first = playback.respond(_request("# Task: alpha (C)", 0), "k")
    assert first.status == 200 and first.usage == (10, 2, 0, 0)
    message = first.json()["choices"][0]["message"]
    assert message["content"] == "first" and message["reasoning_content"] == "thinking first"
    assert message["tool_calls"] == [
        {"id": "call_0_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ]
    assert first.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert first.json()["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    # The same request again is the same answer: no state for answers.
    assert playback.respond(_request("# Task: alpha (C)", 0), "k").json()["choices"] == first.json()["choices"]


def test_faults_are_served_times_times_per_caller_before_their_answer(tmp_path: Path) -> None:
    playback = _playback(tmp_path)
    at_one = _request("# Task: alpha", 1)
    seen = [(r.status, r.body) for r in (playback.respond(at_one, "k1") for _ in range(4))]
    assert seen[:3] == [(503, b"busy"), (503, b"busy"), (200, b"<html>")]
    assert json.loads(seen[3][1])["choices"][0]["message"]["content"] == "second"
    # Another caller gets the faults afresh.
    assert playback.respond(at_one, "k2").status == 503


def test_malformed_tool_calls_take_positions_and_trailing_faults_end_the_script(tmp_path: Path) -> None:
    playback = _playback(tmp_path)
    for position in (2, 3):
        reply = playback.respond(_request("# Task: alpha", position), "k")
        call = reply.json()["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["arguments"] == MALFORMED_ARGUMENTS and reply.usage == (5, 1, 0, 0)
        with pytest.raises(ValueError):
            json.loads(call["function"]["arguments"])
    at_four = _request("# Task: alpha", 4)
    assert playback.respond(at_four, "k").status == 429
    ended = playback.respond(at_four, "k")
    assert ended.status == 500 and "ends in faults" in ended.json()["error"]["message"]
    beyond = playback.respond(_request("# Task: alpha", 5), "k")
    assert beyond.status == 500 and "no step for assistant turn 6" in beyond.json()["error"]["message"]


def test_the_first_matching_conversation_plays(tmp_path: Path) -> None:
    playback = _playback(tmp_path)
    reply = playback.respond(_request("something else", 0), "k")
    assert reply.json()["choices"][0]["message"]["content"] == "anything else"
    assert reply.json()["choices"][0]["finish_reason"] == "stop"
    only_alpha = _playback(tmp_path, {"conversations": SCRIPT["conversations"][:1]})
    refused = only_alpha.respond(_request("something else", 0), "k")
    assert refused.status == 400 and "no conversation matches" in refused.json()["error"]["message"]
    assert only_alpha.respond({"messages": "x"}, "k").status == 400


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ({"content": "x", "error": {"status": 500}}, "either an answer"),
        ({"garbage": "x", "malformed_tool_call": True}, "either an answer"),
        ({"usage": {"prompt_tokens": 1}}, "needs content or tool_calls"),
        ({"content": "x", "times": 3}, "times applies to faults only"),
        ({"error": {"status": 200}}, "greater than or equal to 400"),
        ({"content": "x", "tool_calls": [{"name": "bash", "arguments": "ls"}]}, "valid dictionary"),
        ({"tool_calls": [{"name": "apply_patch", "custom": True}]}, "custom tool call has input"),
        ({"tool_calls": [{"name": "apply_patch", "input": "*** Begin"}]}, "add custom: true"),
        ({"content": "x", "usage": {"prompt_tokens": 5, "cache_read_tokens": 6}}, "prompt_tokens is all the input"),
    ],
)
def test_a_bad_step_is_refused(tmp_path: Path, step: dict[str, Any], words: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"conversations": [{"match": "x", "steps": [step]}]}))
    with pytest.raises(ConfigErrors) as caught:
        load_script(path)
    assert any(words in str(e) for e in caught.value.errors), str(caught.value)


def test_a_repeat_conversation_is_one_answer() -> None:
    with pytest.raises(ValueError, match="one step, an answer"):
        Script.model_validate({"conversations": [{"match": "", "repeat": True, "steps": [{"content": "a"}] * 2}]})
    with pytest.raises(ValueError, match="one step, an answer"):
        Script.model_validate({"conversations": [{"match": "", "repeat": True, "steps": [{"garbage": "x"}]}]})


def test_a_conversation_applies_only_to_requests_declaring_its_tools(tmp_path: Path) -> None:
    script = {
        "conversations": [
            {"match": "# Task", "tools": ["shell", "apply_patch"], "steps": [{"content": "codex"}]},
            {"match": "# Task", "tools": ["Bash"], "steps": [{"content": "claude"}]},
            {"match": "# Task", "steps": [{"content": "any agent"}]},
        ]
    }
    playback = _playback(tmp_path, script)
    codex = {
        "input": "# Task",
        "tools": [{"type": "function", "name": "shell"}, {"type": "custom", "name": "apply_patch"}],
    }
    assert playback.respond(codex, "k", "openai-responses").json()["output"][0]["content"][0]["text"] == "codex"
    only_shell = {"input": "# Task", "tools": [{"type": "function", "name": "shell"}]}
    assert "any agent" in playback.respond(only_shell, "k", "openai-responses").body.decode()
    claude = {"messages": [{"role": "user", "content": "# Task"}], "tools": [{"name": "Bash", "input_schema": {}}]}
    assert playback.respond(claude, "k", "anthropic-messages").json()["content"][0]["text"] == "claude"
    chat = _request("# Task", 0) | {"tools": [{"type": "function", "function": {"name": "Bash"}}]}
    assert playback.respond(chat, "k").json()["choices"][0]["message"]["content"] == "claude"


def test_a_responses_position_counts_runs_of_model_output(tmp_path: Path) -> None:
    steps = [{"content": f"turn {n}"} for n in range(4)]
    playback = _playback(tmp_path, {"conversations": [{"match": "go", "steps": steps}]})

    def turn(items: list[dict[str, Any]]) -> str:
        request = {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]}
        reply = playback.respond({"input": request["input"] + items}, "k", "openai-responses")
        return str(reply.json()["output"][0]["content"][0]["text"])

    call = {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c", "output": "ok"}
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hm"}]}
    assert turn([]) == "turn 0"
    assert turn([{"type": "reasoning", "summary": []}, said, call, output]) == "turn 1"
    assert turn([call, output, {"type": "custom_tool_call", "call_id": "d", "name": "p", "input": ""}]) == "turn 2"
    assert turn([call, output, said, {"role": "user", "content": "more"}, call]) == "turn 3"


def test_old_usage_files_and_summaries_still_load() -> None:
    old = {"ts": 1.0, "run": "r", "model": "m", "status": 200, "prompt_tokens": 5, "completion_tokens": 2, "cost": 0.1}
    assert UsageRecord.model_validate(old).cache_read_tokens == 0
    summary = {"run_id": "r", "model": "m", "calls": 1, "prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert Usage.model_validate(summary).cache_write_tokens == 0


def test_the_shipped_scripts_have_a_conversation_per_demo_project() -> None:
    fix = load_script(MODELS / "scripted" / "fix.yaml")
    projects = ["# Task: tlvkit", "# Task: kvrec", "# Task: pakfile"]
    # mini-swe-agent's first (its task message holds the others' match), then Claude Code's and Codex's (their
    # tools pick them), then chat-agent's (which ask for none): the first that applies plays.
    assert [(c.match, c.tools) for c in fix.conversations] == [
        *((f"Please solve this issue: {p}", []) for p in projects),
        *((p, ["Read", "Edit", "Bash"]) for p in projects),
        *((p, ["exec_command", "write_stdin"]) for p in projects),
        *((p, []) for p in projects),
    ]
    for conversation in fix.conversations[3:6]:
        names = [c.name for s in conversation.steps for c in s.tool_calls]
        assert names[-1] == "mcp__ssebench__test_patch" and "Edit" in names
        assert not conversation.steps[-1].tool_calls  # an answer without a tool ends Claude Code's session
    for conversation in fix.conversations[:3]:
        commands = [c.arguments["command"] for s in conversation.steps for c in s.tool_calls]
        assert {c.name for s in conversation.steps for c in s.tool_calls} == {"bash"}
        assert commands[1].startswith("patch -p1 <<'EOF'\ndiff --git ")
        assert commands[-1] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    for conversation in fix.conversations[6:9]:
        calls = [c for s in conversation.steps for c in s.tool_calls]
        assert any(c.name == "exec_command" and "apply_patch <<'EOF'" in c.arguments["cmd"] for c in calls)
        assert (calls[-1].name, calls[-1].namespace) == ("test_patch", "mcp__ssebench")
        assert not conversation.steps[-1].tool_calls  # Codex's turn ends with an answer that calls no tool
    for conversation in fix.conversations[9:]:
        names = [c.name for s in conversation.steps for c in s.tool_calls]
        assert names[-2:] == ["test_patch", "finish"] and "edit_file" in names
    for name in ("wander", "garbage"):
        assert isinstance(load_script(MODELS / "scripted" / f"{name}.yaml"), Script)
