"""The integrity bypass suite: a real run held in the agent phase, attacked as model.

At difficulty levels 0, 2 and 4, from inside the container as the agent's
user, it tries the known ways around the protections of the integrity
model and checks each fails, while the bash tool keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ssebench.runtime.contract import REPO
from tests.integrity.harness import LEVELS, HeldRun, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

ALLOWED = {0: {"build", "run_poc", "function_test", "intent_test"}, 2: {"build", "function_test"}, 4: set()}


@pytest.fixture(scope="module", params=LEVELS, ids=lambda level: f"d{level}")
def run(request: pytest.FixtureRequest, launcher: Launcher) -> Iterator[HeldRun]:
    """A c-demo run started as the plugin starts it, held in the agent phase at one level."""
    held = launcher.start(level=request.param)
    yield held
    held.close()


def as_model(run: HeldRun, code: str) -> Any:
    return run.py("1000", code)


def sh(run: HeldRun, user: str, script: str) -> tuple[int, str]:
    code, out = run.container.exec_run(["bash", "-c", script], user=user, workdir=run.source)
    return code, out.decode(errors="replace")


LISTENERS = """
import httpx, json, os
clients = {
    "socket": httpx.Client(transport=httpx.HTTPTransport(uds=os.environ["SSE_DAEMON_SOCKET"]), base_url="http://d",
                           timeout=600),
    "http": httpx.Client(base_url=os.environ["DAEMON_URL"], timeout=600),
}
out = {}
for name, c in clients.items():
    out[name] = {"reference": c.get("/reference/patch").status_code,
                 "prepare_grading": c.post("/prepare_grading").status_code,
                 "agent_exited": c.post("/admin/agent_exited").status_code,
                 "grading": c.post("/tool/bencher", params={"action": "build"}, json={"grading": True}).status_code,
                 "version": c.get("/version").status_code}
    for action in ("build", "run_poc", "function_test", "intent_test"):
        body = {"poc": "/ssebench/pocs/long_value.tlv"} if action == "run_poc" else {}
        out[name][action] = c.post("/tool/bencher", params={"action": action}, json=body).status_code
print(json.dumps(out))
"""


def test_listeners_refuse_the_answer_and_withheld_checks(run: Any) -> None:
    out = run.py("1000", LISTENERS, env={"DAEMON_URL": run.daemon_url})
    for listener in ("socket", "http"):
        codes = out[listener]
        assert codes["reference"] == 403 and codes["prepare_grading"] == 403 and codes["agent_exited"] == 403
        assert codes["grading"] == 403
        # Sidecar mode: the agent's container is a peer of the daemon's port, which serves peers (the model
        # gateway is one too) the public view only; the agent's way in is the socket volume.
        peer = listener == "http" and run.mode == "sidecar"
        for action in ("build", "run_poc", "function_test", "intent_test"):
            expected = 200 if action in ALLOWED[run.level] and not peer else 403
            assert codes[action] == expected, (listener, action, codes)
    assert "run_poc" not in ALLOWED[run.level] or out["socket"]["run_poc"] == 200  # a positive control
    assert out["http"]["version"] == 200  # and the port answers (what it refuses, it refuses)


ADMIN_AND_SOCKETS = """
import json, os, socket
agent, admin = os.environ["SSE_DAEMON_SOCKET"], "/run/ssebench/admin.sock"
out = {}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(admin); out["admin"] = "connected"
except OSError as exc:
    out["admin"] = type(exc).__name__
for name, src in (("agent", agent), ("admin", admin)):
    for dest in ("/tmp/moved.sock", os.path.join(os.path.dirname(src), "moved.sock")):
        try:
            os.rename(src, dest); out["move " + name] = "moved"
        except FileNotFoundError as exc:
            out["move " + name] = type(exc).__name__
        except PermissionError as exc:
            out["move " + name] = type(exc).__name__
        except OSError as exc:  # another file system (sidecar mode's socket volume): not a move either
            out.setdefault("move " + name, "PermissionError")
for name, path in (("agent", agent), ("admin", admin)):
    try:
        os.unlink(path); out["unlink " + name] = "removed"
    except OSError as exc:
        out["unlink " + name] = type(exc).__name__
for directory in sorted({os.path.dirname(admin), os.path.dirname(agent)} - {"/tmp"}):
    for name in ("sse.sock", "admin.sock", "planted"):
        try:
            open(os.path.join(directory, name + ".new"), "w").close(); out[f"create {directory}/{name}"] = "created"
        except OSError as exc:
            out[f"create {directory}/{name}"] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.mark.parametrize("where", ["agent", "task"])
def test_admin_socket_cannot_be_reached_nor_sockets_moved(run: Any, where: str) -> None:
    """From where the agent runs, and through its bash tool (where the task is, in sidecar mode). In sidecar
    mode's agent container the admin socket and its directory do not exist at all: they never leave the task
    container, which grades."""
    out = run.py("1000", ADMIN_AND_SOCKETS, task=where == "task")
    absent = run.mode == "sidecar" and where == "agent"
    for key, value in out.items():
        admins = "admin" in key.split("/")[0] or key.startswith("create /run/ssebench/")
        assert value == ("FileNotFoundError" if absent and admins else "PermissionError"), (key, out)
    assert len(out) == (8 if run.mode == "sandbox" else 11), out


SECRETS = [
    "/ssebench/diffs/patch.diff",
    "/ssebench/diffs/test.diff",
    "/ssebench/pocs/long_value.tlv",
    "/ssebench/config.yaml",
    "/ssebench/scripts/run.sh",
    f"{REPO}/tlv.c",
]


def test_hidden_material_cannot_be_read_directly_or_through_the_bash_tool(run: Any) -> None:
    # The control: each is there, where the task is, for root to read (a path that is not there proves nothing).
    assert [p for p in SECRETS if run.status("root", f"test -s {p} && head -c1 {p} >/dev/null", task=True)] == []
    for path in SECRETS:
        code, out = sh(run, "1000", f"cat {path}")
        assert code != 0, (path, out)
    out = as_model(
        run,
        f"""
    import json
    from sse.tools.bash import execute
    print(json.dumps([execute("cat " + p).code for p in {SECRETS!r}]))
    """,
    )
    assert all(code != 0 for code in out)


def test_the_reference_fix_is_mounted_for_the_reference_agent_alone(run: Any, launcher: Launcher) -> None:
    """The fix is in no container of a run but the reference agent's (which applies it); the control is that
    agent's run, where the same probe finds it."""
    probe = "test -e /reference/patch.diff"
    assert run.status("root", probe) != 0 and run.status("root", probe, task=True) != 0
    if run.level != 2:
        return  # one reference run is control enough
    reference = launcher.start(agent="reference", level=2)
    try:
        assert reference.status("1000", "test -s /reference/patch.diff && grep -q '^+++ ' /reference/patch.diff") == 0
    finally:
        reference.close()


def test_history_has_at_most_one_commit(run: Any) -> None:
    code, out = sh(run, "1000", "git rev-list --all | wc -l; git log --format=%s")
    assert code == 0 and out.split() == ["1", "buggy", "commit"]


def test_bash_tool_still_works(run: Any) -> None:
    out = as_model(
        run,
        "import json; from sse.tools.bash import execute; r = execute('id -un; pwd');"
        "print(json.dumps([r.code, r.stdout]))",
    )
    assert out == [0, "model\n/src/tlvkit\n"]


def test_nothing_the_runner_writes_can_reach_model(run: Any) -> None:
    """Code run by a check (as sse-runner, where the task is) finds no directory it can write and model can
    enter, there or (sidecar mode) through the volumes where the agent runs."""
    writable = run.sh(
        "root",
        "runuser -u sse-runner -- find / /dev/shm -xdev -type d -writable 2>/dev/null; "
        "runuser -u sse-runner -- find /src /run/ssebench /tmp/sse-archive -type d -writable "
        "2>/dev/null; true",
        task=True,
    )
    # The positive control: the same probe finds what model may write (its tree).
    assert run.source in run.sh(
        "root", f"runuser -u model -- find {run.source} -maxdepth 0 -type d -writable", task=True
    )
    channels = [
        d
        for d in writable.split()
        for task in (True, False)
        if run.status("root", f"runuser -u model -- test -x '{d}'", task=task) == 0
        and run.status("root", f"test -d '{d}'", task=task) == 0
    ]
    assert channels == []


def test_the_agent_container_holds_nothing_of_the_task(run: Any) -> None:
    """Sidecar mode: /ssebench, grading's original and the case image's files do not exist where the agent runs,
    for uid 1000 nor for root; they do where the task is (the positive control)."""
    if run.mode != "sidecar":
        pytest.skip("sandbox mode: the agent shares the task's container (the other tests cover it)")
    # The case image's own files: what it added to the base (its tree's original, the build it made).
    case_only = [
        "/ssebench",
        "/ssebench/config.yaml",
        "/ssebench/diffs/patch.diff",
        "/ssebench/pocs/long_value.tlv",
        "/var/lib/ssebench-capture",
        "/var/lib/ssebench-runner",
        REPO,
        f"{REPO}/tlv.c",
    ]
    probe = "for p in " + " ".join(case_only) + '; do [ -e "$p" ] || [ -L "$p" ] && echo "$p"; done; true'
    for user in ("1000", "root"):
        assert run.sh(user, probe).split() == [], user
    assert run.sh("root", probe, task=True).split() == case_only
    # No line of the fix anywhere in the agent container's files; the positive control finds it where the task is.
    fix = "grep -rlF 'len > TLV_VALUE_MAX' {} --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null; true"
    assert run.sh("root", fix.format("/")).split() == []
    assert "/ssebench/diffs/patch.diff" in run.sh("root", fix.format("/"), task=True).split()
