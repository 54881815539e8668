"""Resource limits and privileges: what a run container gets, and what an agent cannot take.

Every run container runs with no-new-privileges, only the capabilities the
entrypoint needs, and pids, memory and CPU limits, all recorded in
summary.json. A fork bomb, a memory hog and a 10 GB disk fill by the agent
each end graded, with the limit named, within the run's time limit (an
ungraded error would take a failing agent's run out of its score), while a
run started beside it still passes, and leave nothing behind.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ssebench.agent import load_agent
from ssebench.backend import RUN_CAPABILITIES
from ssebench.defaults import Mode
from ssebench.engine import DockerBackend, client
from ssebench.reaper import Session, reap_session
from ssebench.record import RunRecord
from ssebench.run import execute
from ssebench.runspec import RunConfig, limits_for
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import LEVELS, Launcher, leftovers

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

# Linux capability numbers of the ones the entrypoint keeps.
CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7}


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_run_container_is_confined_and_the_agent_gains_nothing(launcher: Launcher, level: int) -> None:
    run = launcher.start(level=level, limits={"pids": "300", "memory": "1g", "cpus": "1", "file_size": "64m"})
    for name, handle in run.live.handles:  # sidecar mode: the same for both containers
        host = client().api.inspect_container(handle.id)["HostConfig"]
        assert host["PidsLimit"] == 300 and host["Memory"] == 1 << 30 and host["NanoCpus"] == 10**9, name
        assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == sorted(RUN_CAPABILITIES), name
        assert host["SecurityOpt"] == ["no-new-privileges"], name
    assert len(run.live.handles) == (2 if run.mode == "sidecar" else 1)
    for task in (False, True):
        status = run.sh("root", "grep -E '^(CapEff|NoNewPrivs)' /proc/1/status", task=task)
        eff = int(status.split("CapEff:")[1].split()[0], 16)
        assert eff == sum(1 << bit for bit in CAP_BITS.values()), hex(eff)
        assert "NoNewPrivs:\t1" in status
    # The agent's processes (its command, and the shell of its bash tool): no capability, no way up, the
    # file-size limit, first to go when memory runs out.
    agent = run.sh(
        "root",
        "pid=$(pgrep -u model -x sleep); grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/$pid/status; "
        "cat /proc/$pid/oom_score_adj; grep 'Max file size' /proc/$pid/limits",
    )
    assert "CapEff:\t0000000000000000" in agent and "CapPrm:\t0000000000000000" in agent
    assert "NoNewPrivs:\t1" in agent and f"Max file size             {64 << 20}" in agent, agent
    assert agent.splitlines()[3] == "1000", agent
    shell = run.py(
        "1000",
        "import json; from sse.tools.bash import execute as x;"
        "print(json.dumps([x('cat /proc/self/oom_score_adj; ulimit -f').stdout,"
        " x('head -c 70m /dev/zero > /tmp/big').code, x('su -c true root </dev/null').code,"
        " x('find / -xdev -perm /6000 -type f 2>/dev/null | wc -l').stdout]))",
    )
    assert shell[0].split() == ["1000", str((64 << 20) // 1024)], shell
    assert shell[1] != 0 and shell[2] != 0, shell  # over the file-size limit; no way to root
    assert shell[3].strip() == "0", shell  # no setuid or setgid program left
    assert run.sh("1000", "find / -xdev -perm /6000 -type f 2>/dev/null | wc -l; true").strip() == "0"  # nor here


HOG = "import time\nchunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))\n"
# The change over the patch limit first: how much of the 10 GB a loaded machine
# writes before the agent's time limit must not decide what the record says.
FILL = (
    "head -c 200m /dev/urandom > big.bin; "
    "for i in $(seq 1 10); do head -c 1G /dev/zero > /tmp/fill-$i || break; done; df -h / >&2"
)
ATTACKS = {
    # name: (level, agent command, limits, what the record must say)
    "fork-bomb": (0, ["bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 20"], {"pids": "256"}, "pids"),
    "memory-hog": (2, ["/opt/ssebench/venv/bin/python", "-I", "-c", HOG], {"memory": "768m"}, "memory"),
    "disk-fill": (4, ["bash", "-c", FILL], {}, "patch limit"),
}


def _engine_bytes() -> int:
    """The disk the engine's data folder takes, in bytes: blocks, not sizes (another worker's run may hold a
    5 GB sparse file, test_host_files's, which takes next to nothing)."""
    root = client().info()["DockerRootDir"]
    # du says 1 when a file it listed is gone before it is counted (other runs' containers come and go); it
    # still prints its total.
    done = subprocess.run(["du", "-sx", "--block-size=1", root], capture_output=True, text=True, check=False)
    assert done.stdout.strip(), done.stderr
    return int(done.stdout.split()[0])


def _execute(
    settings: Settings,
    task: Task,
    agent: str,
    level: int,
    results: Path,
    session: Session,
    command: list[str] | None = None,
    limits: dict[str, str] | None = None,
    mode: Mode = "sandbox",
) -> RunRecord:
    config = RunConfig(
        task=task,
        agent=load_agent(settings.agents_dir, agent),
        difficulty=level,
        timeout=180,
        grading_timeout=600,
        limits=limits_for(settings, task, limits),
        mode=mode,
    )
    return execute(config, settings, DockerBackend(), session, results, build=False, command=command)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_on_resources_ends_graded_and_spares_its_neighbour(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, attack: str, mode: Mode
) -> None:
    level, command, limits, said = ATTACKS[attack]
    tasks = {t.id: t for t in integrity_images}
    # One attack at a time on the engine, whichever xdist worker runs it: the disk check below weighs the
    # engine's whole folder, which another worker's 10 GB fill would swell meanwhile (seen at -n 2).
    lock = (Path(tempfile.gettempdir()) / "ssebench-resource-attacks.lock").open("a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        _attack(settings, tasks, tmp_path, attack, mode, level, command, limits, said)
    finally:
        lock.close()


def _attack(
    settings: Settings,
    tasks: dict[str, Task],
    tmp_path: Path,
    attack: str,
    mode: Mode,
    level: int,
    command: list[str],
    limits: dict[str, str],
    said: str,
) -> None:
    session = Session.new()
    held_before = _engine_bytes()
    neighbour: dict[str, Any] = {}

    def beside() -> None:
        time.sleep(5)  # while the attack is under way
        neighbour["record"] = _execute(settings, tasks["go-demo"], "reference", 2, tmp_path, session, mode=mode)

    thread = threading.Thread(target=beside)
    started = time.monotonic()
    try:
        thread.start()
        record = _execute(settings, tasks["c-demo"], "dummy", level, tmp_path, session, command, limits, mode)
        thread.join(900)
        elapsed = time.monotonic() - started
        assert leftovers(f"ssebench.session={session.id}") == [], "containers or networks left behind"
    finally:
        thread.join(900)
        reap_session(session.id)
    assert elapsed < 180 + 600 + 300, elapsed
    text = f"{record.infra_error} {record.limits_hit} {record.patch_result}"
    # Always graded: whatever the pids, the OOM killer or the full disk ended, they were the agent's to take.
    assert record.grade in ("passed", "failed"), text
    named = " ".join(record.limits_hit) if said != "patch limit" else str(record.patch_result.error_log)
    assert said in named, f"the record does not name the limit ({said}): {text}"
    print(
        f"{attack}: grade {record.grade}, limits hit {record.limits_hit}, "
        f"{record.patch_result.error_msg}: {str(record.patch_result.error_log)[:200]}"
    )
    summary = json.loads((record.run_dir / "summary.json").read_text())
    assert summary["config"]["limits"]["pids"] == record.config.limits.pids
    assert summary["network"] and summary["network"].startswith("ssebench-")
    assert neighbour["record"].grade == "passed", neighbour["record"].infra_error
    # The agent's files went with its container (the engine's own folder, not the disk's free space: on a
    # shared host that moves with what others write).
    assert _engine_bytes() < held_before + (2 << 30)
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) < 512 << 20


# Every pid the container has, taken from the agent's first instant and kept taken for six seconds:
# children that sleep, forked again the moment any slot frees; then the agent ends (its children with it).
HOLD_PIDS = """
import os, time
end, children = time.time() + 6, 0
while time.time() < end:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.0005)
        continue
    if pid == 0:
        time.sleep(7)
        os._exit(0)
    children += 1
print(f"held the pids with {children} processes", flush=True)
time.sleep(2)
"""


def test_an_agent_that_takes_every_pid_from_its_first_instant_is_graded(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, mode: Mode
) -> None:
    """Nothing the harness needs to grade may depend on a fork, a thread or a process of its own that the
    agent could starve while it runs: an agent that holds every pid from the moment it starts (the
    daemon's start-up still forking beside it, if it could) is graded on its patch, never an ungraded
    error, and its record names the limit it hit."""
    tasks = {t.id: t for t in integrity_images}
    session = Session.new()
    try:
        record = _execute(
            settings,
            tasks["c-demo"],
            "dummy",
            2,
            tmp_path,
            session,
            ["/opt/ssebench/venv/bin/python", "-I", "-c", HOLD_PIDS],
            mode=mode,
        )
    finally:
        reap_session(session.id)
    text = f"{record.infra_error} {record.limits_hit} {record.patch_result}"
    assert record.grade == "failed" and (record.patch_result.error_msg or "").startswith("PoC failed"), text
    # (Sidecar mode: the agent holds its own container's pids, which its entrypoint counts.)
    assert any(line.removeprefix("agent container: ").startswith("pids") for line in record.limits_hit), text
    agent_log = (record.run_dir / "agent.log").read_text(errors="replace")
    assert "held the pids" in agent_log, agent_log  # the control: it did take them


# Memory spread over many processes that each lower their OOM score back to 0 (no process here holds
# CAP_SYS_RESOURCE, without which a score is a default, not a floor): the kernel then ends the biggest,
# which a root process of the runtime (the daemon, the evaluator) may be.
HOG_SPREAD = """
import os, time
def unmark():
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
unmark()
for _ in range(90):  # smaller each than the daemon (about 30 MB) and the evaluator (25 MB), 900 MB in all
    if os.fork() == 0:
        unmark()
        chunks = []
        for _ in range(10):  # 10 MB each, every page touched
            chunks.append(bytearray(1 << 20))
        time.sleep(20)
        os._exit(0)
time.sleep(25)
"""


def test_an_agent_that_spreads_its_memory_and_unmarks_itself_is_graded(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, mode: Mode
) -> None:
    """Whatever the OOM killer ends once the agent took the run's memory, a run whose grade could not be
    completed is the agent's failure, named as the memory limit, never an ungraded error."""
    tasks = {t.id: t for t in integrity_images}
    session = Session.new()
    try:
        record = _execute(
            settings,
            tasks["c-demo"],
            "dummy",
            2,
            tmp_path,
            session,
            ["/opt/ssebench/venv/bin/python", "-I", "-c", HOG_SPREAD],
            {"memory": "768m"},
            mode=mode,
        )
    finally:
        reap_session(session.id)
    text = f"{record.infra_error} {record.limits_hit} {record.patch_result}"
    assert record.grade in ("passed", "failed"), text
    assert any("memory" in line for line in record.limits_hit), text
    if (record.patch_result.error_msg or "").startswith("Memory limit"):  # the harness's processes were ended
        assert json.loads((record.run_dir / "result.json").read_text())["patch_result"]["status"] == "failed"


# Memory filled where the task is, through the bash tool (which runs there, in both modes): many processes of
# 4 MB each, smaller than every root process of the runtime, each with its OOM score lowered back to 0, so
# that the kernel ends a process of the harness (in sidecar mode, the task container's whole: its init).
HOG_BESIDE_THE_TASK = r"""
import os, time
def unmark():
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
unmark()
for _ in range(200):
    if os.fork() == 0:
        unmark()
        chunks = [bytearray(1 << 20) for _ in range(4)]
        time.sleep(90)
        os._exit(0)
    time.sleep(0.02)
time.sleep(95)
"""
AGENT_HOGS_THROUGH_ITS_SHELL = f"""
import shlex, time
from sse.tools import bash
started = bash.execute("nohup python3 -c " + shlex.quote({HOG_BESIDE_THE_TASK!r}) + " >/dev/null 2>&1 &")
print("the hog started:", started.code, flush=True)
time.sleep(40)
"""


def test_memory_filled_where_the_task_is_leaves_the_run_graded(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, mode: Mode
) -> None:
    """Before, in sidecar mode, the task container died of it and the host made the run an ungraded error
    (found by review); sandbox mode graded it failed ("Memory limit") already."""
    tasks = {t.id: t for t in integrity_images}
    session = Session.new()
    try:
        record = _execute(
            settings,
            tasks["c-demo"],
            "dummy",
            2,
            tmp_path,
            session,
            ["/opt/ssebench/venv/bin/python", "-I", "-c", AGENT_HOGS_THROUGH_ITS_SHELL],
            {"memory": "512m"},
            mode=mode,
        )
    finally:
        reap_session(session.id)
    text = f"{record.infra_error} {record.limits_hit} {record.patch_result}"
    assert record.grade == "failed" and record.infra_error is None, text
    assert any(line.startswith("memory") for line in record.limits_hit), text  # the control: it filled it
    assert "the hog started: 0" in (record.run_dir / "agent.log").read_text(errors="replace")
