"""Shared helpers of the test suite: minimal task folders written on the fly."""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "datasets" / "demo"
PILOT = DEMO.parent / "pilot"

# A conftest.py that fakes the runs of a pytester sweep: each takes {seconds} s and ends as its agent says (the
# reference passes, the dummy fails); nothing reaches Docker. The plain lines of CI wait for no time (they wait
# 30 s in a real sweep).
FAKE_RUNS = """
import time

import pytest

import pytest_ssebench.progress
import ssebench.reaper
from ssebench.record import RunRecord
from ssebench.session import RunSession


def execute(self, config, *, build=True):
    time.sleep({seconds})
    run_dir = self.plan.results / config.task.id / config.agent.name
    run_dir.mkdir(parents=True, exist_ok=True)
    grade = "passed" if config.agent.name == "reference" else "failed"
    return RunRecord(config=config, run_id="r", run_dir=run_dir, started_at="now", grade=grade)


# Patched for this session only, and undone at its end: a pytester run in-process shares its modules with the
# test session that started it, whose other tests must find the real RunSession.
patched = pytest.MonkeyPatch()


def pytest_configure(config):
    patched.setattr(pytest_ssebench.progress, "LINES_EVERY", 0)
    patched.setattr(RunSession, "execute", execute)
    patched.setattr(RunSession, "check_engine", lambda self: None)
    patched.setattr(ssebench.reaper, "reap_orphans", lambda: 0)
    patched.setattr(ssebench.reaper, "reap_session", lambda session: 0)


def pytest_unconfigure(config):
    patched.undo()
"""


def failure_reports(result: pytest.RunResult) -> str:
    """An inner pytest run's output up to its short summary: each failure's report once (with CI set,
    pytest repeats each whole message in the short summary)."""
    return result.stdout.str().split("short test summary info")[0]


def task_config(task_id: str = "tiny-1", **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "id": task_id,
        "project": "tiny",
        "repository": "https://example.invalid/tiny",
        "language": "c",
        "source": "/src/tiny",
        "task_description": {"crash_report": ["reports/issue.md"], "bug_description": "it crashes", "issue": "none"},
        "scripts": {"build": "scripts/build.sh", "run": "scripts/run.sh", "test": "scripts/test.sh"},
        "files": {"patch": "diffs/patch.diff", "poc": ["pocs/crash.bin"], "future_test": "diffs/test.diff"},
        "originality": "crafted",
    }
    config.update(overrides)
    return config


def write_task(
    parent: Path, task_id: str = "tiny-1", config: dict[str, Any] | None = None, dockerfile: str = "FROM scratch\n"
) -> Path:
    """A task folder with every file its config names."""
    folder = parent / task_id
    sse = folder / "sse"
    for sub in ("pocs", "reports", "diffs"):
        (sse / sub).mkdir(parents=True, exist_ok=True)
    for name in ("build.sh", "run.sh", "test.sh"):
        (sse / name).write_text("#!/bin/sh\nexit 0\n")
        (sse / name).chmod(0o755)
    (sse / "pocs" / "crash.bin").write_bytes(b"\x00\x01")
    (sse / "reports" / "issue.md").write_text("It crashes.\n")
    (sse / "diffs" / "patch.diff").write_text("")
    (sse / "diffs" / "test.diff").write_text("")
    (folder / "Dockerfile").write_text(dockerfile)
    data = config if config is not None else task_config(task_id)
    (sse / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def unpin(dataset: Path) -> None:
    """Make a copied dataset a scratch one whose tasks a test may edit: without its pin (manifest.json), whose
    version would otherwise refuse every edited task (ssebench.manifest)."""
    (dataset / "manifest.json").unlink()


def write_dataset(root: Path, name: str = "tinyset", tasks: tuple[str, ...] = ("tiny-1",)) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "dataset.yaml").write_text("version: tiny-v1\n")
    for task_id in tasks:
        write_task(folder, task_id)
    return folder


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def scripted_upstream(script: Path, key_variable: str, key: str, model: str | None = None) -> Iterator[int]:
    """A scripted model served as a real OpenAI-compatible HTTP server on loopback that wants `key`; its port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    command = [
        sys.executable,
        "-m",
        "ssebench.gateway.scripted",
        "--script",
        str(script),
        "--port",
        str(port),
        "--api-key-env",
        key_variable,
        *(["--model", model] if model else []),
    ]
    # PYTHONPATH passes: a checkout run with PYTHONPATH=<checkout> serves its own scripted model, not the
    # one the venv's editable install points at.
    env = {"PATH": "/usr/bin:/bin", key_variable: key}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the scripted upstream did not start"
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def wait_for_agent_phase(container: Any, timeout: float = 180) -> None:
    """Wait until a run container's entrypoint started the agent; fail with its log if it stopped first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if b"] agent: " in container.logs():
            return
        container.reload()
        assert container.status == "running", container.logs().decode(errors="replace")
        time.sleep(0.2)
    raise AssertionError("the agent phase did not start:\n" + container.logs().decode(errors="replace"))


def rendered_text(page: Path) -> str:
    """An HTML file's text as a person sees it: Debian's Chromium runs its scripts, then the DOM's text."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is missing: `make test` installs Debian's chromium package (apt-get install chromium)"
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=15000",
            "--dump-dom",
            f"file://{page}?collapsed=",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def runtime_of(settings: Any, task: Any) -> dict[str, dict[str, str]]:
    """docker-py `volumes=` giving a container of a task's tool (or agent) image its runtime, as a run has it."""
    from ssebench.image import image_names
    from ssebench.runtimevolume import ensure_runtime_volume, runtime_binds

    return runtime_binds(ensure_runtime_volume(settings, image_names(settings, task)["runtime"]))


# Python that calls the MCP server's test_patch as a client and prints its text as JSON (run as model).
MCP_TEST_PATCH = """
import anyio, json, os
from mcp import Client
async def main():
    # Sidecar mode's agent container is given the task container's address; sandbox mode's agent, loopback's.
    async with Client(os.environ.get("SSE_MCP_URL", "http://127.0.0.1:3000/mcp")) as client:
        result = await client.call_tool("test_patch", {})
        print(json.dumps(result.content[0].text))
anyio.run(main)
"""


def in_the_checks(script: str) -> str:
    """A shell script for model, in c-demo's tree, that makes every program of the checks run `script` first.

    The agent's code that a check runs: grading takes the Makefile, the tests and the harness from the
    original (ssebench.runtime.protection), so the code under repair is the agent's way into a check. tlv.c
    is linked into the unit tests (the function and hidden tests) and into the PoC's tlvdump: a constructor
    there runs `script` with /bin/sh, as sse-runner, in the check's tree, its output the check's.
    """
    code = (
        "#include <stdlib.h>\n"
        f"__attribute__((constructor)) static void in_the_checks(void) {{ system({json.dumps(script)}); }}\n"
    )
    return f"cat >> tlv.c <<'EOF'\n{code}EOF\ngrep -q in_the_checks tlv.c\n"


# The tools chat-agent declares (agents/chat-agent/agent.py), which pick its conversations in a script.
CHAT_AGENT_TOOLS = frozenset({"bash", "view_file", "edit_file", "test_patch", "finish"})
# The function tools Codex declares for a model outside its catalog (docs/agents.md), which pick its conversations.
CODEX_TOOLS = frozenset({"exec_command", "write_stdin"})


def scripted_steps(script: Path, prompt: str, tools: frozenset[str] = CHAT_AGENT_TOOLS) -> list[dict[str, Any]]:
    """The steps (as written in the YAML) of the conversation a scripted model plays for an agent declaring
    `tools` on a task with `prompt`: the playback's own choice."""
    from ssebench.gateway.scripted import load_script

    found = load_script(script).conversation_for(prompt, set(tools))
    assert found is not None, f"{script}: no conversation for this prompt and tools"
    steps: list[dict[str, Any]] = yaml.safe_load(script.read_text())["conversations"][found[0]]["steps"]
    return steps


def interruptible() -> None:
    """A child's `preexec_fn` that gives it Ctrl-C's default action back: a session started in the background
    of a non-interactive shell (a CI's, `cmd &`) ignores SIGINT, and ignored signals are inherited, so a
    test that sends one would wait for nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A results directory as the harness writes it (three real runs: tests/fixtures/results/README.md).
RESULTS_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results" / "v0"
# What a hostile run writes into the files it controls (its transcript, its patch, its logs): markup, an event
# attribute, a script, and links at a host file; the viewer must show each as text and follow none.
HOSTILE = (
    '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
    '<a href="/etc/passwd">passwd</a><a href="file:///etc/passwd">file</a>'
)
HOSTILE_RUN = "c-demo/evil%3Cscript%3E/chat-agent/20261205T120000-d2-sandbox-e0e0e0"


def hostile_results(root: Path) -> Path:
    """A copy of the results fixture with the hostile run (`add_hostile_run`); returns the results directory."""
    results = root / "results"
    shutil.copytree(RESULTS_FIXTURE, results, symlinks=True)
    add_hostile_run(results, root / "outside")
    return results


def add_hostile_run(results: Path, outside_root: Path) -> None:
    """A run whose every file an agent could shape is hostile, and links planted where a careless reader would
    follow them: a run folder and a task folder linked out of `results` (to runs under `outside_root`), a log
    and an archive file linked to /etc/passwd."""
    run = results / HOSTILE_RUN
    (run / "archive").mkdir(parents=True)
    reference = json.loads(next(RESULTS_FIXTURE.glob("c-demo/none/reference/*/summary.json")).read_text())
    summary = reference | {
        "run_id": run.name,
        "grade": "failed",
        "started_at": "2026-12-05T12:00:00+00:00",
        "session": "hostile",
        "config": reference["config"] | {"agent": "chat-agent", "model": "evil<script>", "reference_run": False},
        "usage": {"calls": 2, "prompt_tokens": 300, "completion_tokens": 40, "cost": 0.0015, "stopped": HOSTILE},
        "limits_hit": [HOSTILE],
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "result.json").write_text(
        json.dumps({"patch_result": {"status": "failed", "build_success": True, "error_msg": HOSTILE}})
    )
    records = [
        {"seq": 0, "ts": 1796472000.0, "type": "init", "agent": "chat-agent", "model": HOSTILE},
        {"seq": 1, "ts": 1796472000.1, "type": "prompt", "text": "fix it " + HOSTILE},
        {"seq": 2, "ts": 1796472001.0, "type": "message", "text": HOSTILE, "tokens": {"input": 150, "output": 20}},
        {"seq": 3, "ts": 1796472001.1, "type": "tool_call", "tool_id": "t1", "name": "bash", "input": {"c": HOSTILE}},
        {"seq": 4, "ts": 1796472001.5, "type": "tool_result", "tool_id": "t1", "output": HOSTILE, "code": 0},
        {"seq": 5, "ts": 1796472002.0, "type": "complete", "status": "done", "reason": HOSTILE},
    ]
    (run / "archive" / "dialog.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "final.patch").write_text(f"--- a/tlv.c\n+++ b/tlv.c\n@@ -1 +1 @@\n-old\n+{HOSTILE}\n")
    (run / "agent.log").write_text(HOSTILE + "\n")
    os.symlink("/etc/passwd", run / "evaluator.log")
    os.symlink("/etc/passwd", run / "archive" / "passwd.txt")
    (run / "scriptrunner-1-a.log").write_text(json.dumps({"check": "build", "code": 0}) + "\n" + HOSTILE + "\n")
    # Links where runs are looked for: a run folder and a task folder pointing out of the results directory.
    outside = outside_root / "x" / "y" / "z"
    outside.mkdir(parents=True)
    (outside / "summary.json").write_text(json.dumps(summary | {"run_id": "outside-run"}))
    os.symlink(outside, run.parent / "linked-run")
    os.symlink(outside_root, results / "linked-task")


@functools.cache
def mirror_reachable() -> bool:
    """Debian's mirror answers from this host (`task new` fetches from it); asked once per process."""
    from ssebench.authoring import MIRROR

    try:
        with urllib.request.urlopen(f"{MIRROR}/dists/bullseye/Release", timeout=10):
            return True
    except OSError:
        return False
