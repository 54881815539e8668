"""The end of the agent phase is final: nothing the agent queued runs after it.

A check and a shell command of the agent are kept busy (the agent's code
sleeping in its unit tests' program, a sleeping command) while another of each waits for its turn; then the agent
phase ends. The waiting ones must be refused when they get their turn, no
process of model or sse-runner may live on, and the run must still grade.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.helpers import in_the_checks
from tests.integrity.harness import LEVELS, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

# How capture runs git as the tree's owner (ssebench.runtime.process.confined, ssebench.runtime.git).
CAPTURE_GIT = re.compile(r"/usr/bin/prlimit --fsize=\d+ --core=0 -- /usr/bin/choom -n 1000 -- /usr/bin/git --no-pager ")

# Root's client of the agent socket (agent-facing whoever connects): it must
# outlive the end of the phase, which kills every process of model.
QUEUE = """
import json, threading, time, httpx
def call(name, path, body, params=None):
    c = httpx.Client(transport=httpx.HTTPTransport(uds=SOCKET), base_url="http://d", timeout=300)
    started = time.monotonic()
    try:
        r = c.post(path, json=body, params=params)
        out[name] = [r.status_code, r.text[-300:], time.monotonic() - started]
    except Exception as exc:
        out[name] = [0, repr(exc), time.monotonic() - started]
out = {}
calls = [("bash-busy", "/tool/bash", {"command": "sleep 8"}, None),
         ("bash-queued", "/tool/bash", {"command": "touch /tmp/sse-archive/queued-bash-ran; sleep 600"}, None)]
if BENCH:
    calls += [("check-busy", "/tool/bencher", {}, {"action": "function_test"}),
              ("check-queued", "/tool/bencher", {}, {"action": "function_test"})]
threads = []
for spec in calls:
    t = threading.Thread(target=call, args=spec)
    t.start()
    threads.append(t)
    time.sleep(0.7)
open("/tmp/queued", "w").close()
for t in threads:
    t.join()
with open("/tmp/sse-archive/queue.json", "w") as f:  # model is gone by now: nothing can change it
    json.dump(out, f)
"""


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_requests_that_waited_run_nothing_after_the_phase(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level)
    bench = level <= 2  # the function test is the agent's at these levels
    # A check that lasts until 45 s from now (grading's checks, later, wait out only what is left of it, once).
    until = int(time.time()) + 45
    run.sh("1000", in_the_checks(f"t=$(({until} - $(date +%s))); [ $t -gt 0 ] && sleep $t"))
    container = run.container
    exec_id = container.client.api.exec_create(
        container.id,
        [
            "/opt/ssebench/venv/bin/python",
            "-I",
            "-c",
            QUEUE.replace("BENCH", str(bench)).replace("SOCKET", repr(run.agent_socket)),
        ],
        user="root",
    )
    container.client.api.exec_start(exec_id, detach=True)
    deadline = time.monotonic() + 60
    while run.status("root", "test -e /tmp/queued") != 0:
        assert time.monotonic() < deadline, "the requests were not sent"
        time.sleep(0.2)
    time.sleep(1)  # the busy ones run, the queued ones wait
    run.sh(
        "root",
        '/opt/ssebench/venv/bin/python -I -c "from sse.daemon import Daemon; '
        "Daemon('/run/ssebench/admin.sock').post('/admin/agent_exited', {})\"",
        task=True,
    )
    # (sse-runner's processes are grading's from now on: the check that was busy is judged by its time below.
    # So is the capture of the agent's change, which the daemon runs as the tree's owner once the agent is
    # gone: a model process whose parent is the daemon and whose program is capture's confined git.)
    # (Sidecar mode: where the task is; the agent's own container ends the agent's processes when it exits.)
    left = run.sh("root", "sleep 1; ps -o pid=,ppid=,args= -u model || true", task=True).strip().splitlines()
    daemons = set(run.sh("root", "pgrep -f 'ssebench[.]runtime[.]daemon' || true", task=True).split())
    strays = [line for line in left if line.split()[1] not in daemons or not CAPTURE_GIT.match(line.split(None, 2)[2])]
    assert strays == [], "processes of the agent outlived the phase:\n" + "\n".join(strays)
    result = run.finish()
    assert result["patch_result"]["status"] in ("passed", "failed"), result
    out = json.loads((run.run_dir / "archive" / "queue.json").read_text())
    assert out["bash-queued"][0] == 403 and "agent phase is over" in out["bash-queued"][1], out
    assert not (run.run_dir / "archive" / "queued-bash-ran").exists(), "a queued shell command ran after the phase"
    if bench:
        # It was running: it ends when the phase does (its processes killed), long before its 45 s are up
        # (the margin is for a loaded machine: the phase ends a few seconds after the check started).
        assert out["check-busy"][0] == 200 and out["check-busy"][2] < 30, out
        assert out["check-queued"][0] == 403 and "agent phase is over" in out["check-queued"][1], out
