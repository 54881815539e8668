"""The in-container runtime in real task containers of the demo dataset."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from sse.result import NO_RESULT_TEXT, SCHEMA_VERSION, VARIANT_KEYS, Signals

from ssebench.engine import client
from ssebench.image import image_names
from ssebench.settings import Settings
from ssebench.task import Task
from tests.helpers import MCP_TEST_PATCH, in_the_checks, runtime_of, wait_for_agent_phase

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LABEL = {"ssebench.session": "tests-runtime"}
PYTHON = "/opt/ssebench/venv/bin/python"
RESULT_FIELDS = {
    "patch_result": {
        "status",
        "build_success",
        "pov_passed",
        "pov_total",
        "func_test_success",
        "intent_test_success",
        "error_msg",
        "error_log",
    },
    "runtime_result": {"agent_duration", "agent_timeout", "evaluator_timeout", "agent_exit_code"},
    "signals": {f.name for f in fields(Signals)},
}


def _task(tasks: list[Task], task_id: str) -> Task:
    return next(t for t in tasks if t.id == task_id)


@contextmanager
def container(
    image: str,
    command: list[str],
    run_dir: Path,
    *,
    runtime: dict[str, dict[str, str]],
    env: dict[str, str] | None = None,
    patch: Path | None = None,
    mounts: dict[str, dict[str, str]] | None = None,
) -> Iterator[Any]:
    """A task container (with its `runtime`: tests.helpers.runtime_of) and its results and archive on the
    host; removed afterwards."""
    (run_dir / "archive").mkdir(parents=True, exist_ok=True)
    volumes = {
        **runtime,
        str(run_dir): {"bind": "/var/lib/ssebench/results", "mode": "rw"},
        str(run_dir / "archive"): {"bind": "/tmp/sse-archive", "mode": "rw"},
        **(mounts or {}),
    }
    if patch is not None:
        volumes[str(patch)] = {"bind": "/reference/patch.diff", "mode": "ro"}
    # Like a real run: on an internal network (no route out, but interfaces, so
    # name lookups of localhost behave as they do in a run).
    network = client().networks.create(f"ssebench-tests-{uuid.uuid4().hex[:10]}", internal=True, labels=LABEL)
    c = client().containers.run(
        image,
        command,
        detach=True,
        init=True,
        labels=LABEL,
        volumes=volumes,
        environment={"TIMEOUT": "600", **(env or {})},
        network=network.name,
    )
    try:
        yield c
    finally:
        c.remove(force=True)
        network.remove()


def finish(c: Any, run_dir: Path, timeout: int = 300) -> dict[str, Any]:
    status = c.wait(timeout=timeout)
    logs = c.logs().decode(errors="replace")
    assert (run_dir / "result.json").exists(), f"no result.json; exit {status}; logs:\n{logs}"
    return json.loads((run_dir / "result.json").read_text())  # type: ignore[no-any-return]


def run_as(c: Any, user: str, code: str, env: dict[str, str] | None = None) -> Any:
    """Run Python in the container as `user`; return what it prints as JSON."""
    environment = {"SSE_DAEMON_SOCKET": "/tmp/sse.sock", **(env or {})}
    exit_code, (out, err) = c.exec_run(
        [PYTHON, "-c", textwrap.dedent(code)], user=user, environment=environment, demux=True
    )
    assert exit_code == 0, f"exit {exit_code}\n{(err or b'').decode(errors='replace')}"
    return json.loads(out.decode())


def sh(c: Any, user: str, script: str, workdir: str | None = None) -> str:
    exit_code, out = c.exec_run(["bash", "-c", script], user=user, workdir=workdir)
    assert exit_code == 0, out.decode(errors="replace")
    return str(out.decode(errors="replace"))


def _apply_to_copy(src: Path, patch: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    subprocess.run(["git", "apply", "-p1", "--whitespace=nowarn", str(patch)], cwd=dst, check=True)
    return dst


def _checks(run_dir: Path) -> list[tuple[str, str]]:
    """(check, directory it ran in) of each script the bencher ran, in order."""
    logs = sorted(run_dir.glob("scriptrunner-*.log"), key=lambda p: int(p.name.split("-")[1]))
    records = [json.loads(p.read_text().split("\n", 1)[0]) for p in logs]
    return [(r["check"], r["cwd"]) for r in records]


def _same_tree(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[Path, bytes]:
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    return files(a) == files(b)


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
def test_no_change_fails_on_every_poc(
    settings: Settings, demo_images: list[Task], tmp_path: Path, task_id: str
) -> None:
    task = _task(demo_images, task_id)
    image = image_names(settings, task, "dummy")["agent"]
    with container(image, [], tmp_path, runtime=runtime_of(settings, task)) as c:
        result = finish(c, tmp_path)
    assert result.pop("schema_version") == SCHEMA_VERSION
    variants = len(task.config.files.variants)
    # A task with variants adds their keys to upstream's patch_result; the demo tasks have them.
    assert variants and {k: set(v) for k, v in result.items()} == {
        **RESULT_FIELDS,
        "patch_result": RESULT_FIELDS["patch_result"] | set(VARIANT_KEYS),
    }
    grade = result["patch_result"]
    assert grade["status"] == "failed"
    assert grade["build_success"] is True and grade["func_test_success"] is True
    assert grade["pov_passed"] == 0 and grade["pov_total"] == len(task.config.files.poc)
    assert grade["variants_passed"] == 0 and grade["variants_total"] == variants and grade["variants_decide"] is True
    assert grade["error_msg"].startswith("PoC failed: /ssebench/pocs/")
    assert result["runtime_result"]["agent_exit_code"] == 0
    assert (tmp_path / "final.patch").read_text() == ""
    for log in ("daemon.log", "mcp.log", "agent.log", "evaluator.log"):
        assert (tmp_path / log).exists()
    assert list(tmp_path.glob("scriptrunner-*.log"))
    dialog = [json.loads(line) for line in (tmp_path / "archive" / "dialog.jsonl").read_text().splitlines()]
    assert [d["type"] for d in dialog] == ["init", "prompt", "message", "complete"]


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
@pytest.mark.parametrize("committed", [False, True], ids=["uncommitted", "committed"])
def test_the_fix_passes_committed_or_not(
    settings: Settings, demo_images: list[Task], tmp_path: Path, task_id: str, committed: bool
) -> None:
    task = _task(demo_images, task_id)
    patch = task.path / "sse" / "diffs" / "patch.diff"
    apply = "git apply /reference/patch.diff"
    if committed:
        apply += " && git add -A && git -c user.name=m -c user.email=m@x commit -qm fix"
    run_dir = tmp_path / "run"
    with container(
        image_names(settings, task)["tool"],
        ["bash", "-c", apply],
        run_dir,
        patch=patch,
        runtime=runtime_of(settings, task),
    ) as c:
        result = finish(c, run_dir)
    grade = result["patch_result"]
    assert grade["status"] == "passed", grade
    assert grade["pov_passed"] == grade["pov_total"] == len(task.config.files.poc)
    assert grade["variants_passed"] == grade["variants_total"] == len(task.config.files.variants)
    assert grade["build_success"] and grade["func_test_success"] and grade["intent_test_success"]
    # final.patch is the change: applied to the original tree it gives the fixed tree.
    source = task.path / "src" / Path(task.config.source).name
    ours = _apply_to_copy(source, run_dir / "final.patch", tmp_path / "ours")
    upstream = _apply_to_copy(source, patch, tmp_path / "upstream")
    assert _same_tree(ours, upstream)
    if committed:
        assert "fix" in (run_dir / "commits.log").read_text()
    # Grading built once: the PoCs, the variants, the tests and the hidden tests ran in the graded build's tree.
    checks = _checks(run_dir)
    assert [c for c, _ in checks] == [
        "build",
        *["run_poc"] * (len(task.config.files.poc) + len(task.config.files.variants)),
        "function_test",
        "intent_test",
    ], checks
    assert len({cwd for _, cwd in checks}) == 1, checks


@pytest.fixture
def held(settings: Settings, demo_images: list[Task], tmp_path: Path) -> Iterator[Any]:
    """A c-demo container held in the agent phase (the agent sleeps)."""
    task = _task(demo_images, "c-demo")
    env = {"SSE_BASH_TIMEOUT": "3", "SSE_DIFFICULTY": "2"}
    with container(
        image_names(settings, task)["tool"], ["sleep", "600"], tmp_path, env=env, runtime=runtime_of(settings, task)
    ) as c:
        wait_for_agent_phase(c)
        yield c


BASH_CHECKS = """
import json
from sse.tools.bash import execute
out = {}
for name, command in [("printf", "printf abc"), ("cat", "cat"), ("sleep", "sleep 999"),
                      ("big", "head -c 50000000 /dev/zero | tr '\\\\0' a"), ("exit", "exit"), ("hi", "echo hi"),
                      ("cd", "cd /tmp && export SSE_T=42"), ("state", "pwd; echo $SSE_T"), ("whoami", "id -un")]:
    r = execute(command)
    out[name] = {"code": r.code, "stdout": r.stdout[-300:], "stderr": r.stderr[-300:], "len": len(r.stdout),
                 "head": r.stdout[:120]}
print(json.dumps(out))
"""


def test_bash_tool(held: Any) -> None:
    out = run_as(held, "1000", BASH_CHECKS)
    assert out["printf"] == {"code": 0, "stdout": "abc", "stderr": "", "len": 3, "head": "abc"}
    assert out["cat"]["code"] == 0 and out["cat"]["stdout"] == ""
    assert out["sleep"]["code"] == 124 and "did not finish within 3 s" in out["sleep"]["stderr"]
    assert out["big"]["code"] == 0 and out["big"]["head"].startswith("[ssebench: output capped: ")
    assert out["big"]["len"] < 1_000_000
    assert "fresh shell" in out["exit"]["stderr"]
    assert out["hi"]["stdout"] == "hi\n" and out["hi"]["code"] == 0
    assert out["state"]["stdout"] == "/tmp\n42\n"
    assert out["whoami"]["stdout"] == "model\n"


RUNNER_PIDS = (
    "import json; from ssebench.runtime.process import User, pids_of;"
    "print(json.dumps(len(pids_of(User.named('sse-runner').uid))))"
)


def test_checks_leave_no_runner_process_and_grading_starts_clean(held: Any) -> None:
    # The agent's code in its unit tests' program (the code under repair, which the check runs as sse-runner):
    # it daemonises and drops a file in the runner's home.
    sh(held, "1000", in_the_checks("setsid sleep 1000 >/dev/null 2>&1 & touch $HOME/marker"), workdir="/src/tlvkit")
    tested = run_as(
        held, "1000", "import json; from sse import project; print(json.dumps(project.function_test().code))"
    )
    assert tested == 0
    assert run_as(held, "root", RUNNER_PIDS) == 0
    [marked] = sh(held, "root", "ls /var/lib/ssebench-runner/session-*/home/marker").split()
    prepared = run_as(
        held,
        "root",
        "import json; from sse.daemon import Daemon;"
        "print(json.dumps(Daemon('/run/ssebench/admin.sock').prepare_grading()))",
    )
    assert prepared["applied"] is True
    # The agent's session is gone with what its checks left. (Ending the agent phase ended the held agent,
    # so grading itself may already be testing in a session of its own, where the agent's code marks again.)
    old_session = marked.removesuffix("/home/marker")
    assert sh(held, "root", f"test -e {old_session} && echo left || echo gone").strip() == "gone"


PLANT = r"""
set -e
cd /src/tlvkit
git config core.fsmonitor 'touch /tmp/m-fsmonitor; false'
git config core.pager 'touch /tmp/m-pager; cat'
git config diff.external 'touch /tmp/m-external'
git config filter.evil.clean 'touch /tmp/m-filter; cat'
git config filter.evil.smudge 'touch /tmp/m-filter; cat'
git config diff.evil.textconv 'touch /tmp/m-textconv; cat'
git config alias.diff '!touch /tmp/m-alias'
git config alias.add '!touch /tmp/m-alias'
for hook in pre-commit post-index-change reference-transaction pre-auto-gc post-checkout fsmonitor-watchman; do
  printf '#!/bin/sh\ntouch /tmp/m-hook-%s\n' "$hook" > .git/hooks/$hook
  chmod +x .git/hooks/$hook
done
echo '* filter=evil diff=evil' > .gitattributes
echo '/* changed by the agent */' >> tlv.c
"""


def test_an_agents_own_checks_each_get_a_fresh_copy(held: Any, tmp_path: Path) -> None:
    """Only grading shares a tree between checks: the agent's tree may change between its own."""
    ran = run_as(
        held,
        "1000",
        "import json; from sse import project;"
        "print(json.dumps([project.build().code, project.function_test().code, project.build().code]))",
    )
    assert ran == [0, 0, 0]
    checks = _checks(tmp_path)
    assert [c for c, _ in checks] == ["build", "function_test", "build"], checks
    assert len({cwd for _, cwd in checks}) == 3, checks


def test_planted_git_configuration_runs_nothing(held: Any) -> None:
    sh(held, "1000", PLANT)
    listing = run_as(
        held,
        "1000",
        "import json; from sse.daemon import _default as d;"
        "print(json.dumps([d().get('/diff')['diff'], d().get('/files')['files']]))",
    )
    diff, files = listing
    assert "changed by the agent" in diff
    assert {f["path"] for f in files} == {".gitattributes", "tlv.c"}
    run_as(
        held,
        "root",
        "import json; from sse.daemon import Daemon;"
        "print(json.dumps(Daemon('/run/ssebench/admin.sock').prepare_grading()))",
    )
    markers = sh(held, "root", "ls /tmp | grep '^m-' || true").split()
    assert markers == []


def test_test_patch_over_mcp(held: Any) -> None:
    text = run_as(held, "1000", MCP_TEST_PATCH)
    lines = text.splitlines()
    assert lines[0] == "All 2 checks that ran passed."
    assert "build: passed" in lines and "function test: passed" in lines
    assert any(line.startswith("PoCs: not run (difficulty 2") for line in lines)


FIRST_THING = """
import socket, sys, time
time.sleep(float(sys.argv[1]))
with socket.create_connection(("127.0.0.1", 3000)) as s:  # at once: before the MCP stack could have loaded
    s.sendall(b"GET /mcp HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n")
    print("RAW-ANSWER " + s.recv(100).split(b"\\r\\n")[0].decode())
import anyio, json
from mcp import Client
async def main():
    async with Client("http://localhost:3000/mcp") as client:
        result = await client.call_tool("test_patch", {})
        print("MCP-ANSWER " + json.dumps(result.content[0].text))
anyio.run(main)
"""


@pytest.mark.parametrize("delay", ["0", "1.5"], ids=["at-once", "later"])
def test_an_agent_that_calls_mcp_first_thing_is_served(
    settings: Settings, demo_images: list[Task], tmp_path: Path, delay: str
) -> None:
    """The MCP server starts when its first client connects: its socket is bound before the agent starts,
    so a call made at once (or later) waits for the server instead of failing."""
    task = _task(demo_images, "c-demo")
    with container(
        image_names(settings, task)["tool"],
        [PYTHON, "-c", FIRST_THING, delay],
        tmp_path,
        runtime=runtime_of(settings, task),
    ) as c:
        finish(c, tmp_path)
        said = c.logs().decode(errors="replace")
    assert "daemon ready; MCP server listening" in said, said
    assert "the MCP server was not started" not in said, said
    agent_log = (tmp_path / "agent.log").read_text(errors="replace")
    assert "RAW-ANSWER HTTP/1.1 " in agent_log, agent_log  # queued, then answered (no refusal)
    assert 'MCP-ANSWER "All 2 checks that ran passed.' in agent_log, agent_log


def test_an_agent_that_never_calls_mcp_starts_no_mcp_server(
    settings: Settings, demo_images: list[Task], tmp_path: Path
) -> None:
    """The MCP server is the heaviest runtime process to start; no client, no start, and the run is graded."""
    task = _task(demo_images, "c-demo")
    with container(
        image_names(settings, task)["tool"], ["sleep", "1"], tmp_path, runtime=runtime_of(settings, task)
    ) as c:
        grade = finish(c, tmp_path)["patch_result"]
        said = c.logs().decode(errors="replace")
    assert "the MCP server was not started: no client connected" in said, said
    assert (tmp_path / "mcp.log").read_bytes() == b""  # no server ever wrote to it
    assert grade["status"] == "failed" and grade["error_msg"].startswith("PoC failed"), grade


# The agent of the stand-in tests: a client of the MCP server's socket, which starts the server.
CONNECTS_TO_MCP = ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3000 && sleep 2"]
NEVER_SERVES = "import sys\nsys.exit(1)\n"
SERVES_THEN_ENDS = "import os\nos.write(int(os.environ['SSE_READY_FD']), b'1')\n"


@pytest.mark.parametrize("stand_in", [NEVER_SERVES, SERVES_THEN_ENDS], ids=["never-serves", "serves-then-ends"])
def test_an_mcp_server_that_never_served_makes_the_run_an_error(
    settings: Settings, demo_images: list[Task], tmp_path: Path, stand_in: str
) -> None:
    """The agent no longer waits for the MCP server. One that exits before it ever served is the harness's
    failure: the run is an error, not graded. One that served and then ended is the agent's lookout, as any
    tool: the run is graded (the dummy's c-demo fails on its PoC)."""
    task = _task(demo_images, "c-demo")
    module = tmp_path / "mcp_server.py"
    module.write_text(stand_in)
    mounted = {str(module): {"bind": "/opt/ssebench/lib/ssebench/runtime/mcp_server.py", "mode": "ro"}}
    run_dir = tmp_path / "run"
    with container(
        image_names(settings, task)["tool"],
        CONNECTS_TO_MCP,
        run_dir,
        mounts=mounted,
        runtime=runtime_of(settings, task),
    ) as c:
        grade = finish(c, run_dir)["patch_result"]
        said = c.logs().decode(errors="replace")
    if stand_in == NEVER_SERVES:
        assert grade["status"] == "error" and grade["error_msg"].startswith(
            f"{NO_RESULT_TEXT} (the MCP server failed to start"
        ), grade
        assert "exited with status 1 before it served" in said and "not graded" in said, said
    else:
        assert grade["status"] == "failed" and grade["error_msg"].startswith("PoC failed"), grade
        assert "exited with status 0 before the agent did" in said, said


# Stand-ins for the daemon: one that exits at once, and one that never serves nor exits.
DAEMON_EXITS = "import sys\nprint('the stand-in daemon gives up', file=sys.stderr)\nsys.exit(1)\n"
DAEMON_HANGS = "import time\ntime.sleep(600)\n"


@pytest.mark.parametrize("stand_in", [DAEMON_EXITS, DAEMON_HANGS], ids=["exits", "never-serves"])
def test_a_daemon_that_never_serves_makes_the_run_an_error_and_no_agent_runs(
    settings: Settings, demo_images: list[Task], tmp_path: Path, stand_in: str
) -> None:
    """The agent starts once the daemon says it serves (one byte on a pipe). One that exits first, or is
    not ready within SSE_DAEMON_TIMEOUT, makes the run an error: not graded, not the agent's failure, and
    the agent never started (nothing of it can have starved the daemon's start)."""
    task = _task(demo_images, "c-demo")
    module = tmp_path / "daemon.py"
    module.write_text(stand_in)
    mounted = {str(module): {"bind": "/opt/ssebench/lib/ssebench/runtime/daemon.py", "mode": "ro"}}
    run_dir = tmp_path / "run"
    with container(
        image_names(settings, task)["tool"],
        ["true"],
        run_dir,
        mounts=mounted,
        env={"SSE_DAEMON_TIMEOUT": "5"},
        runtime=runtime_of(settings, task),
    ) as c:
        grade = finish(c, run_dir, timeout=90)["patch_result"]
        said = c.logs().decode(errors="replace")
    assert grade["status"] == "error" and grade["error_msg"].startswith(
        f"{NO_RESULT_TEXT} (the runtime failed to start"
    ), grade
    if stand_in == DAEMON_EXITS:
        assert "the daemon exited with status 1 while starting" in grade["error_msg"], grade
        assert "the stand-in daemon gives up" in grade["error_msg"], grade  # its log's tail
    else:
        assert "the daemon did not become ready within 5 s" in grade["error_msg"], grade
    assert "agent:" not in said and "graded:" not in said, said
    assert not (run_dir / "agent.log").exists()  # the agent never started
    assert (run_dir / "limits.json").exists()  # what the cgroup counted is kept on this path too


def test_a_tree_the_agent_made_unreadable_is_graded_failed(
    settings: Settings, demo_images: list[Task], tmp_path: Path
) -> None:
    """Making the change uncapturable must not turn a failure into an ungraded error."""
    task = _task(demo_images, "c-demo")
    hide = "echo 'int hidden;' > hidden.c && chmod 000 hidden.c"
    with container(
        image_names(settings, task)["tool"], ["bash", "-c", hide], tmp_path, runtime=runtime_of(settings, task)
    ) as c:
        result = finish(c, tmp_path)
    assert result["patch_result"]["status"] == "failed"
    assert result["patch_result"]["error_msg"] == "Patch capture failed"
