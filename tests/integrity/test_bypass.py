"""The integrity bypass suite: a real run held in the agent phase, attacked as model.

At difficulty levels 0, 2 and 4, from inside the container as the agent's
user, it tries the known ways around the protections of the integrity
model and checks each fails, while the bash tool keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

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
import httpx, json
clients = {
    "socket": httpx.Client(transport=httpx.HTTPTransport(uds="/tmp/sse.sock"), base_url="http://d", timeout=600),
    "http": httpx.Client(base_url="http://127.0.0.1:4263", timeout=600),
}
out = {}
for name, c in clients.items():
    out[name] = {"reference": c.get("/reference/patch").status_code,
                 "prepare_grading": c.post("/prepare_grading").status_code,
                 "agent_exited": c.post("/admin/agent_exited").status_code,
                 "grading": c.post("/tool/bencher", params={"action": "build"}, json={"grading": True}).status_code}
    for action in ("build", "run_poc", "function_test", "intent_test"):
        body = {"poc": "/ssebench/pocs/long_value.tlv"} if action == "run_poc" else {}
        out[name][action] = c.post("/tool/bencher", params={"action": action}, json=body).status_code
print(json.dumps(out))
"""


def test_listeners_refuse_the_answer_and_withheld_checks(run: Any) -> None:
    out = as_model(run, LISTENERS)
    for listener in ("socket", "http"):
        codes = out[listener]
        assert codes["reference"] == 403 and codes["prepare_grading"] == 403 and codes["agent_exited"] == 403
        assert codes["grading"] == 403
        for action in ("build", "run_poc", "function_test", "intent_test"):
            assert codes[action] == (200 if action in ALLOWED[run.level] else 403), (listener, action, codes)
    assert "run_poc" not in ALLOWED[run.level] or out["socket"]["run_poc"] == 200  # a positive control


def test_admin_socket_cannot_be_reached_nor_sockets_moved(run: Any) -> None:
    out = as_model(run, """
    import json, os, socket
    out = {}
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("/run/ssebench/admin.sock"); out["admin"] = "connected"
    except OSError as exc:
        out["admin"] = type(exc).__name__
    for src in ("/tmp/sse.sock", "/run/ssebench/admin.sock"):
        try:
            os.rename(src, "/tmp/moved.sock"); out[src] = "moved"
        except OSError as exc:
            out[src] = type(exc).__name__
    try:
        os.unlink("/tmp/sse.sock"); out["unlink"] = "removed"
    except OSError as exc:
        out["unlink"] = type(exc).__name__
    print(json.dumps(out))
    """)
    assert out == {"admin": "PermissionError", "/tmp/sse.sock": "PermissionError",
                   "/run/ssebench/admin.sock": "PermissionError", "unlink": "PermissionError"}


SECRETS = ["/ssebench/diffs/patch.diff", "/ssebench/diffs/test.diff", "/ssebench/pocs/long_value.tlv",
           "/ssebench/config.yaml", "/ssebench/scripts/run.sh", "/ssebench-repo/tlv.c", "/reference/patch.diff",
           "/var/lib/ssebench/results/result.json"]


def test_hidden_material_cannot_be_read_directly_or_through_the_bash_tool(run: Any) -> None:
    for path in SECRETS:
        code, out = sh(run, "1000", f"cat {path}")
        assert code != 0, (path, out)
    out = as_model(run, f"""
    import json
    from sse.tools.bash import execute
    print(json.dumps([execute("cat " + p).code for p in {SECRETS!r}]))
    """)
    assert all(code != 0 for code in out)


def test_history_has_at_most_one_commit(run: Any) -> None:
    code, out = sh(run, "1000", "git rev-list --all | wc -l; git log --format=%s")
    assert code == 0 and out.split() == ["1", "buggy", "commit"]


def test_bash_tool_still_works(run: Any) -> None:
    out = as_model(run, "import json; from sse.tools.bash import execute; r = execute('id -un; pwd');"
                        "print(json.dumps([r.code, r.stdout]))")
    assert out == [0, "model\n/src/tlvkit\n"]


def test_nothing_the_runner_writes_can_reach_model(run: Any) -> None:
    """Code run by a check (as sse-runner) finds no directory it can write and model can enter."""
    code, writable = sh(run, "root", "runuser -u sse-runner -- find / /dev/shm -xdev -type d -writable 2>/dev/null")
    channels = [d for d in writable.split() if sh(run, "root", f"runuser -u model -- test -x '{d}'")[0] == 0]
    assert channels == []
