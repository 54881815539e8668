"""The codex agent end to end: the pinned Codex CLI in real runs of the demo dataset, through the gateway.

Each test is a whole pytest session (pytester): the agent's software volume
is filled from the wheel downloaded on the host, the gateway serves a
scripted model in the Responses protocol, and the CLI runs as the agent
user in the task container. What the run leaves is checked against the
script it played.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from sse.dialog import read, validate

from ssebench.settings import PROJECT_ROOT
from ssebench.task import Task
from tests.helpers import CODEX_TOOLS, DEMO, scripted_steps, scripted_upstream

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]

MODELS = PROJECT_ROOT / "models"
SECRET_HEAD, SECRET_TAIL = "sk-provider-key-codex", "-stays-on-the-host-42b9"


@pytest.fixture
def demo(pytester: pytest.Pytester, demo_images: list[Task]) -> pytest.Pytester:
    """A project holding a copy of the demo dataset (same content, so the same images)."""
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _runs(root: Path, model: str, mode: str = "sandbox") -> list[Path]:
    """The run directories (not the `latest` links beside them)."""
    return sorted((root / "out").glob(f"*/{model}/codex/*-d2-{mode}-*"))


def _dialog(run_dir: Path) -> list[dict[str, Any]]:
    dialog = read(run_dir / "archive" / "dialog.jsonl")
    assert validate(dialog) == [], run_dir
    return dialog


def _usage(run_dir: Path) -> dict[str, Any]:
    usage: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())["usage"]
    return usage


# Sidecar mode's is left out of CI (README, Tests): its agent's container mounts the same volume.
@pytest.mark.parametrize("mode", ["sandbox", pytest.param("sidecar", marks=pytest.mark.exhaustive)])
def test_codex_fixes_every_demo_task_with_the_scripts_usage(demo: pytest.Pytester, mode: str) -> None:
    result = demo.runpytest_subprocess(
        "datasets/demo",
        "--agent",
        "codex",
        "--model",
        "scripted-fix",
        "--mode",
        mode,
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
    runs = _runs(demo.path, "scripted-fix", "*")
    assert len(runs) == 3
    for run_dir in runs:
        dialog = _dialog(run_dir)
        init, complete = dialog[0], dialog[-1]
        assert (init["agent"], init["version"]) == ("codex", "0.163.0")  # the CLI's own --version
        assert init["cli"].startswith("/opt/agents/codex/lib/python3") and init["mcp"] == "ready"
        assert (complete["status"], complete["reason"]) == ("done", "Codex finished its turn"), complete
        names = [r["name"] for r in dialog if r["type"] == "tool_call"]
        assert "apply_patch" in names and names[-1] == "ssebench.test_patch", names
        results = [r for r in dialog if r["type"] == "tool_result"]
        assert all(r["error"] is None for r in results) and results[-1]["output"].startswith("All "), results
        prompt = dialog[1]["text"]
        steps = scripted_steps(MODELS / "scripted" / "fix.yaml", prompt, CODEX_TOOLS)
        expected = (
            sum(s["usage"]["prompt_tokens"] for s in steps),
            sum(s["usage"]["completion_tokens"] for s in steps),
        )
        usage = _usage(run_dir)
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == expected, run_dir
        assert usage["calls"] == len(steps) and usage["stopped"] is None and usage["rejected"] == 0
        # The agent's account (from Codex's session log) is the gateway's.
        totals = complete["totals"]
        assert (totals["input_tokens"], totals["output_tokens"], totals["turns"]) == (*expected, len(steps))
        events = (run_dir / "archive" / "codex-events.jsonl").read_text().splitlines()
        assert json.loads(events[0])["type"] == "thread.started" and json.loads(events[-1])["type"] == "turn.completed"
        assert (run_dir / "archive" / "codex-stderr.log").read_text() == ""


# CI leaves it out (README, Tests): chat-agent's budget and wander runs are CI's; this agent's, `make test TESTS=`.
@pytest.mark.exhaustive
def test_codex_stops_at_the_budget_and_a_wandering_model_changes_nothing(demo: pytest.Pytester) -> None:
    for model in ("scripted-budget", "scripted-wander"):
        result = demo.runpytest_subprocess(
            "datasets/demo/c-demo", "--agent", "codex", "--model", model, "--results", "out", "-p", "no:cacheprovider"
        )
        result.assert_outcomes(failed=1)
    [budget] = _runs(demo.path, "scripted-budget")
    complete = _dialog(budget)[-1]
    assert complete["status"] == "budget" and "429" in complete["reason"], complete
    usage = _usage(budget)
    # The first answer (6150 + 78 tokens) spends the 5,000-token budget; the next call is refused, free.
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (1, 6150, 78), usage
    assert usage["refused"] == 1 and usage["stopped"].startswith("budget exhausted"), usage
    assert (complete["totals"]["input_tokens"], complete["totals"]["output_tokens"]) == (6150, 78)
    [wander] = _runs(demo.path, "scripted-wander")
    dialog = _dialog(wander)
    assert dialog[-1]["status"] == "done"
    assert [r["input"]["command"] for r in dialog if r["type"] == "tool_call"] == [
        "/bin/bash -lc 'ls -la'",
        "/bin/bash -lc 'git log --oneline | head -5'",
    ]
    assert (wander / "final.patch").read_text() == ""
    assert _usage(wander)["calls"] == 3


# The key is put together at run time: no file or command line of the run holds it whole but where it leaked.
KEY = f"k={SECRET_HEAD}; k=$k{SECRET_TAIL}; "
SEARCH_PROC = (
    KEY + "id -u; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f 2>/dev/null | tr '\\0' '\\n'; done "
    '> /tmp/seen; echo "provider key in /proc: $(grep -c -- "$k" /tmp/seen)"; '
    # The positive control: the run's own key, in Codex's environment, is found the same way.
    'echo "run key in /proc: $(grep -c -- ^SSE_API_KEY=sse- /tmp/seen)"; rm /tmp/seen; '
    # Every file takes longer than a command may (30 s): in the background, its end marked, devices, FIFOs and
    # sockets skipped (a read of one can block for good). The positive control: a text the task's source holds,
    # which the same scan must find.
    'setsid sh -c \'grep -rlF -D skip --exclude-dir=proc --exclude-dir=sys -e "$0" -e TLV_VALUE_MAX / > /tmp/found '
    '2>/dev/null; touch /tmp/found.done\' "$k" < /dev/null > /dev/null 2>&1 &'
)
# Polls of up to 25 s each: the scan took 20 s on an idle machine, over 100 s on a busy one, and once over 300 s
# (a new machine's `make test` right after `make bench`). A poll answers as soon as the scan is done, so the
# polls left after it cost a model call each and no waiting.
POLLS = 24
POLL = (
    KEY + "for i in $(seq 25); do [ -e /tmp/found.done ] && break; sleep 1; done; "
    "if [ -e /tmp/found.done ]; then "
    'echo "provider key in files: $(xargs -r grep -lF -- "$k" < /tmp/found 2>/dev/null | head -3)"; '
    'grep -qx /src/tlvkit/tlv.h /tmp/found && echo "control text found in /src/tlvkit/tlv.h"; '
    "else echo still searching; fi"
)


def test_a_codex_run_holds_no_provider_key_anywhere_its_user_can_look(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex itself searches, as the agent user and while it runs: every process's environment and command
    line, and every file it can read, for the provider key the gateway adds upstream."""
    script = demo.path / "models" / "scripted" / "search.yaml"
    script.parent.mkdir(parents=True)
    poll = {"name": "exec_command", "arguments": {"cmd": POLL, "yield_time_ms": 30000}}
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": SEARCH_PROC}}], "usage": {"prompt_tokens": 10}},
        *({"tool_calls": [poll], "usage": {"prompt_tokens": 10}} for _ in range(POLLS)),
        {"content": "Searched.", "usage": {"prompt_tokens": 20, "completion_tokens": 2}},
    ]
    conversation = {"match": "# Task: tlvkit", "tools": sorted(CODEX_TOOLS), "steps": steps}
    script.write_text(json.dumps({"conversations": [conversation]}))
    secret = SECRET_HEAD + SECRET_TAIL
    monkeypatch.setenv("UPSTREAM_KEY", secret)  # the host's environment, where the gateway reads it
    with scripted_upstream(script, "UPSTREAM_KEY", secret, model="remote-upstream") as port:
        (demo.path / "models" / "remote.yaml").write_text(
            f"name: remote\nbase_url: http://127.0.0.1:{port}/v1\nupstream_model: remote-upstream\n"
            "api_key_env: UPSTREAM_KEY\nprotocol: openai-responses\n"
        )
        monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(demo.path / "models"))
        result = demo.runpytest_subprocess(
            "datasets/demo/c-demo",
            "--agent",
            "codex",
            "--model",
            "remote",
            "--results",
            "out",
            "-p",
            "no:cacheprovider",
        )
    result.assert_outcomes(failed=1)  # it changed nothing
    [run_dir] = _runs(demo.path, "remote")
    dialog = _dialog(run_dir)
    assert dialog[-1]["status"] == "done", dialog[-1]
    outputs = [r["output"] for r in dialog if r["type"] == "tool_result"]
    proc = outputs[0].splitlines()
    assert proc[:2] == ["1000", "provider key in /proc: 0"] and len(proc) == 3, outputs
    assert int(proc[2].removeprefix("run key in /proc: ")) >= 1, outputs
    assert "provider key in files: \ncontrol text found in /src/tlvkit/tlv.h\n" in outputs[1:], outputs
    assert _usage(run_dir)["calls"] == 2 + POLLS  # the upstream that wants the key answered every call
