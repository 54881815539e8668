"""The host never follows a link of a run's making; it keeps regular files and directories only, capped.

The agent fills its archive with links to host paths (a link named
dialog.jsonl among them), a fifo, a socket, a hard link, a 5 GB sparse file
and a deep tree. The run goes through `ssebench.run.execute`, as a pytest
item does; its run directory must hold regular files and directories only,
the ordinary files kept, the rest listed in summary.json.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ssebench.agent import load_agent
from ssebench.defaults import Mode
from ssebench.engine import DockerBackend
from ssebench.reaper import Session, reap_session
from ssebench.run import execute
from ssebench.runspec import RunConfig, limits_for
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import LEVELS, leftovers

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

HOSTILE = r"""
set -e
cd /tmp/sse-archive
echo keep > kept.txt
ln -s /etc/passwd host-passwd
ln -s / host-root
ln -s /etc/shadow dialog.jsonl
mkfifo pipe
/opt/ssebench/venv/bin/python -I -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'
truncate -s 5G sparse.bin
echo twice > a && ln a b
mkdir -p deep/er && echo y > deep/er/file.txt && ln -s ../../kept.txt deep/er/link
"""


def _special(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return found


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_archive_keeps_regular_files_only(
    settings: Settings, integrity_images: list[Task], tmp_path: Path, level: int, mode: Mode
) -> None:
    task = next(t for t in integrity_images if t.id == "c-demo")
    # A file-size limit above the sparse file's size, so that it exists to be dropped.
    config = RunConfig(
        task=task,
        agent=load_agent(settings.agents_dir, "dummy"),
        difficulty=level,
        timeout=300,
        limits=limits_for(settings, task, {"file_size": "6g"}),
        mode=mode,
    )
    session = Session.new()
    try:
        record = execute(
            config, settings, DockerBackend(), session, tmp_path, build=False, command=["bash", "-c", HOSTILE]
        )
        assert leftovers(f"ssebench.run={record.run_id}") == []
    finally:
        reap_session(session.id)
    assert record.infra_error is None and record.grade == "failed", record.infra_error
    run_dir = record.run_dir
    assert _special(run_dir) == [], "the run directory holds something other than files and directories"
    archive = run_dir / "archive"
    assert (archive / "kept.txt").read_text() == "keep\n"
    assert (archive / "deep" / "er" / "file.txt").read_text() == "y\n"
    assert not (archive / "sparse.bin").exists() and not (archive / "dialog.jsonl").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    dropped = {d["path"]: d for d in summary["files"]["archive"]["pruned_in_container"]["dropped"]}
    assert {"host-passwd", "host-root", "dialog.jsonl", "pipe", "sock", "sparse.bin", "deep/er/link"} <= set(dropped)
    assert dropped["sparse.bin"]["size"] == 5 << 30 and "cap" in dropped["sparse.bin"]["reason"]
    assert dropped["pipe"]["kind"] == "fifo" and dropped["host-root"]["kind"] == "symlink"
    for name in ("container.log", "summary.json", "result.json", "agent.log"):
        assert stat.S_ISREG(os.lstat(run_dir / name).st_mode), name
