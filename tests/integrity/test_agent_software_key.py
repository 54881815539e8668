"""An agent with software of its own (Claude Code, mini-swe-agent) gets the run's key, never the provider's.

(Codex's own search is tests/integration/test_codex_runs.py's.) A session serves `remote`: the scripted
model behind a real HTTP upstream on loopback that demands a provider key held in the host's environment
(so the gateway must use it for the run to get answers). The real agent
runs c-demo on it; the script makes it search, with its own shell tool (as
uid 1000, the agent's user), every process environment and command line it
can read in /proc and every file it can read, for the provider key, and, as
the positive control, for the run's own key in the same way (written to
a file of its own first). The search
names the key only in two halves, so no command line or transcript holds it
whole.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ssebench.task import Task
from tests.helpers import DEMO, scripted_upstream

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

HALVES = ("sk-provider-key-that-stays", "-on-the-host-5d1e")
SECRET = "".join(HALVES)

# `grep -f <(pattern)` reads the pattern from a pipe: it is in no argv and no file. Root's processes'
# environ files are unreadable to uid 1000: what the agent can read is what it could leak.
SEARCH = f"""\
provider() {{ printf '%s%s\\n' {HALVES[0]} {HALVES[1]}; }}
own() {{ printf '%s\\n' "$ANTHROPIC_API_KEY"; }}
count() {{ for f in /proc/[0-9]*/$1; do {{ tr '\\0' '\\n' < "$f"; }} 2>/dev/null; done | grep -c -f <($2); }}
echo "uid $(id -u)"
echo "provider environ $(count environ provider)"
echo "provider cmdline $(count cmdline provider)"
echo "provider files $(grep -rl --exclude-dir=proc --exclude-dir=sys -f <(provider) / 2>/dev/null | wc -l)"
echo "own environ $(count environ own)"
own > /tmp/probe
echo "own files $(grep -rl --exclude-dir=proc --exclude-dir=sys -f <(own) / 2>/dev/null | wc -l)"
"""


def search_step(agent: str) -> dict[str, Any]:
    """The agent's own shell tool running SEARCH, with the variable that holds the run's key in its process."""
    own = {"claude-code": "ANTHROPIC_API_KEY", "mini-swe-agent": "SSE_API_KEY"}[agent]
    # In bash (the search takes process substitution), whatever shell the agent's tool runs (mini-swe-agent's
    # is sh): the script on bash's standard input, so that it is in no argv either.
    command = f"OWN_KEY=${own} bash <<'SEARCH'\n{SEARCH}SEARCH\n"
    if agent == "claude-code":
        return {"name": "Bash", "arguments": {"command": command, "description": "Search for API keys"}}
    return {"name": "bash", "arguments": {"command": command}}


def script_for(agent: str) -> dict[str, Any]:
    """A search, then the end of the agent's session: an answer without a tool (Claude Code), or the submit
    command (mini-swe-agent, whose task message wraps the prompt)."""
    end: dict[str, Any] = (
        {"content": "Done looking."}
        if agent == "claude-code"
        else {"tool_calls": [{"name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}
    )
    return {
        "conversations": [
            {
                "match": "# Task: " if agent == "claude-code" else "Please solve this issue: # Task: ",
                "tools": ["Bash"] if agent == "claude-code" else ["bash"],
                "steps": [
                    {
                        "content": "Let me look for keys.",
                        "tool_calls": [search_step(agent)],
                        "usage": {"prompt_tokens": 1000, "completion_tokens": 40},
                    },
                    {**end, "usage": {"prompt_tokens": 1200, "completion_tokens": 5}},
                ],
            }
        ]
    }


PROTOCOL = {"claude-code": "anthropic-messages", "mini-swe-agent": "openai-chat"}


@pytest.mark.parametrize("agent", ["claude-code", "mini-swe-agent"])
def test_an_agent_with_software_of_its_own_finds_no_provider_key_in_its_run(
    pytester: pytest.Pytester, demo_images: list[Task], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, agent: str
) -> None:
    from sse.dialog import read, validate

    shutil.copytree(DEMO / "c-demo", pytester.path / "datasets" / "demo" / "c-demo")
    shutil.copy(DEMO / "dataset.yaml", pytester.path / "datasets" / "demo" / "dataset.yaml")
    script = tmp_path / "search.yaml"
    script.write_text(yaml.safe_dump(script_for(agent)))
    models = tmp_path / "models"
    models.mkdir()
    with scripted_upstream(script, "UPSTREAM_KEY", SECRET, model="remote-upstream") as port:
        (models / "remote.yaml").write_text(
            f"name: remote\nbase_url: http://127.0.0.1:{port}/v1\nupstream_model: remote-upstream\n"
            f"api_key_env: UPSTREAM_KEY\nprotocol: {PROTOCOL[agent]}\nprice: {{input: 1, output: 2}}\n"
        )
        monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(models))
        monkeypatch.setenv("UPSTREAM_KEY", SECRET)  # the host's environment, as for a real provider
        result = pytester.runpytest_subprocess(
            "datasets/demo/c-demo", "--agent", agent, "--model", "remote", "--results", "out"
        )
    result.assert_outcomes(failed=1)  # nothing was fixed
    [run_dir] = (pytester.path / "out").glob(f"c-demo/remote/{agent}/*-d2-sandbox-*")
    usage = json.loads((run_dir / "summary.json").read_text())["usage"]
    # The positive control of the gateway: both calls went upstream with the provider key and were answered.
    assert usage["calls"] == 2 and usage["prompt_tokens"] == 2200, usage
    dialog = read(run_dir / "archive" / "dialog.jsonl")
    assert validate(dialog) == [] and dialog[-1]["status"] == "done", dialog[-1]
    output = next(r["output"] for r in dialog if r["type"] == "tool_result")
    found = dict(line.rsplit(" ", 1) for line in output.strip().splitlines())
    assert set(found) == {"uid", "provider environ", "provider cmdline", "provider files", "own environ", "own files"}
    assert found["uid"] == "1000", output
    # The positive controls of the search: it finds the run's key where the CLI holds it, and in a file.
    assert int(found["own environ"]) >= 1 and int(found["own files"]) >= 1, output
    assert (found["provider environ"], found["provider cmdline"], found["provider files"]) == ("0", "0", "0"), output
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
