"""The container's own state, as root leaves it for a run and reads it after: its directories, the runner's
area, what its cgroup counted, the archive once the agent is done.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from ssebench.runtime import contract
from ssebench.runtime.console import say
from ssebench.runtime.contract import RuntimeSettings
from ssebench.runtime.files import check_root_path, prune_tree, write_atomic
from ssebench.runtime.process import User

LOG_DIR = Path(contract.MCP_LOG_DIR)
# Shared scratch directories: model's alone, so nothing sse-runner runs can
# leave a file there for the agent to pick up.
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


class RefusedStart(Exception):
    """The container is not fit for a run (its runner's area, the agent's tree, config.yaml); the message says
    what, and no process of model's or sse-runner's has run."""


def prepare_results(settings: RuntimeSettings) -> None:
    """The results directory (0755 in its 0700 parent): the container that grades only."""
    results = Path(settings.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    os.chown(results.parent, 0, 0)
    os.chmod(results.parent, 0o700)
    results.mkdir(exist_ok=True)
    os.chmod(results, 0o755)


def prepare_sockets(settings: RuntimeSettings) -> None:
    """Sidecar mode's task container: the agent socket's directory, a volume the agent container mounts too."""
    sockets = Path(settings.agent_socket).parent
    sockets.mkdir(parents=True, exist_ok=True)
    os.chown(sockets, 0, 0)
    os.chmod(sockets, 0o755)


def prepare_dirs(settings: RuntimeSettings, model: User) -> None:
    """The archive (model's), the shared scratch directories and the MCP server's log directory: every
    container that runs the runtime."""
    archive = Path(settings.archive)
    if archive.is_symlink():
        archive.unlink()
    archive.mkdir(parents=True, exist_ok=True)
    os.chown(archive, model.uid, model.gid)
    os.chmod(archive, 0o755)
    for shared in SHARED_TMP:
        if os.path.isdir(shared) and not os.path.islink(shared):
            os.chown(shared, 0, model.gid)
            os.chmod(shared, 0o1770)
    if not LOG_DIR.is_dir() or LOG_DIR.is_symlink():
        LOG_DIR.unlink(missing_ok=True)
        LOG_DIR.mkdir(mode=0o755)
    os.chown(LOG_DIR, 0, 0)
    os.chmod(LOG_DIR, 0o755)


def prepare_runner_area(runner_gid: int) -> str:
    """Where grading builds (contract.RUNNER_DIR), made root's and traversable by sse-runner; what it is.

    A run mounts a volume of its own there, which the engine makes empty and root's; without one (a tool
    image started by hand) it is the image's directory. Either way it is taken only as an empty, real
    directory reached through no link: nothing in it may have been prepared for root to find (the
    bencher's names are random, but nothing else is expected there either). Raises RefusedStart.
    """
    path = contract.RUNNER_DIR
    try:
        check_root_path(path)
        if entries := os.listdir(path):
            raise ValueError(f"{path} must be empty when a run starts, but holds " + ", ".join(sorted(entries)[:5]))
    except (ValueError, OSError) as exc:
        raise RefusedStart(f"the runner's area: {exc}") from None
    os.chown(path, 0, runner_gid)
    os.chmod(path, 0o710)
    return mounted(path)


def mounted(path: str) -> str:
    """What is at `path`: a volume (with its file system's type), or the image's own directory."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 4 and fields[4] == path:
                return f"a volume ({fields[fields.index('-') + 1]})"
    return "the image's directory"


def _cgroup_file(*names: str) -> dict[str, int]:
    """`key value` lines of the first cgroup file that exists (v1 or v2 layout)."""
    for name in names:
        try:
            text = Path("/sys/fs/cgroup", name).read_text()
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                values[key] = int(value)
        return values
    return {}


def _cgroup_value(*names: str) -> int | None:
    for name in names:
        try:
            text = Path("/sys/fs/cgroup", name).read_text().strip()
        except OSError:
            continue
        return int(text) if text.isdigit() else None
    return None


def limits_report() -> dict[str, object]:
    """What the container's cgroup counted: OOM kills, forks refused at the pids limit, CPU throttling."""
    memory = _cgroup_file("memory/memory.oom_control", "memory.events")
    pids = _cgroup_file("pids/pids.events", "pids.events")
    cpu = _cgroup_file("cpu/cpu.stat", "cpu,cpuacct/cpu.stat", "cpu.stat")
    report: dict[str, object] = {
        "memory": {
            "oom_kills": memory.get("oom_kill"),
            "limit": _cgroup_value("memory/memory.limit_in_bytes", "memory.max"),
            "peak": _cgroup_value("memory/memory.max_usage_in_bytes", "memory.peak"),
        },
        "pids": {"refused": pids.get("max"), "limit": _cgroup_value("pids/pids.max", "pids.max")},
        "cpu": {"throttled": cpu.get("nr_throttled")},
    }
    hit = []
    if memory.get("oom_kill"):
        hit.append(f"memory: the OOM killer ended {memory['oom_kill']} process(es)")
    if pids.get("max"):
        hit.append(f"pids: {pids['max']} fork(s) refused at the limit")
    report["hit"] = hit
    return report


def finish_archive(settings: RuntimeSettings) -> None:
    """Leave the archive regular files and directories under their caps (model no longer runs)."""
    pruned = prune_tree(
        Path(settings.archive),
        file_cap=settings.archive_file_cap,
        total_cap=settings.archive_cap,
        max_entries=settings.archive_entries,
    )
    record = {
        "kept_files": pruned.kept_files,
        "kept_bytes": pruned.kept_bytes,
        "dropped": pruned.dropped,
        "dropped_count": pruned.dropped_count,
        "unfinished": pruned.unfinished,
    }
    write_atomic(Path(settings.results), "archive.json", json.dumps(record, indent=2) + "\n")


def write_limits(settings: RuntimeSettings, name: str) -> None:
    report = limits_report()
    write_atomic(Path(settings.results), name, json.dumps(report, indent=2) + "\n")
    for line in report["hit"]:  # type: ignore[attr-defined]
        say(f"limit hit: {line}")


def wait_for_stop() -> None:
    """Block until SIGTERM or SIGINT."""
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    while signal.sigtimedwait(signals, 1.0) is None:
        pass
