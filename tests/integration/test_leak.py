"""The leak scan in real tool images: nothing of the answer in the demo's, and every planted copy found.

The positive control builds a throwaway image from c-demo's tool image with copies planted where uid 1000
can read them: a hunk of the fix (indented otherwise), the hidden tests' text, a PoC and a variant under
other names, a PoC's text inside another file, the whole fix gzipped, an advisory id, and a root-owned git
history inside the vulnerable tree whose commit holds the fix (git refuses another user's repository unless
told otherwise; the agent can tell it); and one copy of a PoC where only root can read it, as /ssebench holds
them, which must not be found.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssebench.dataset import load_tasks
from ssebench.engine import client
from ssebench.image import image_names
from ssebench.leak import answer_pieces, diff_hunks, name_pieces, scan, task_leaks
from ssebench.reaper import Session, reap_session
from ssebench.settings import Settings
from ssebench.task import Task, task_file
from tests.helpers import PILOT

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PLANTED_DOCKERFILE = """\
ARG TOOL
FROM ${TOOL}
COPY planted/ /
RUN chmod 0700 /root-only && chmod 0600 /root-only/secret.tlv
"""


@pytest.fixture
def session() -> Iterator[Session]:
    session = Session.new()
    yield session
    reap_session(session.id)


def _demo(demo_images: list[Task], task_id: str) -> Task:
    return next(t for t in demo_images if t.id == task_id)


@pytest.mark.parametrize("task_id", ["c-demo", "go-demo", "rust-demo"])
def test_a_demo_tool_image_holds_nothing_the_agent_could_read_of_the_answer(
    demo_images: list[Task], settings: Settings, session: Session, task_id: str
) -> None:
    task = _demo(demo_images, task_id)
    assert answer_pieces(task), task_id
    assert task_leaks(image_names(settings, task)["tool"], task, session) == []


@pytest.fixture
def planted(demo_images: list[Task], settings: Settings, tmp_path: Path) -> Iterator[str]:
    """c-demo's tool image with copies of its answer planted (and libcue's PoC, whose text has windows)."""
    task = _demo(demo_images, "c-demo")
    libcue = next(t for t in load_tasks(PILOT) if t.id == "libcue-CVE-2023-43641")
    files = task.config.files
    assert files.patch and files.future_test and files.variants
    patch = task_file(task.path, files.patch).read_bytes()
    tests = task_file(task.path, files.future_test).read_bytes()
    root = tmp_path / "planted"

    def plant(path: str, data: bytes) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)

    _, added = diff_hunks(patch)[0]
    # The first hunk of the fix indented with spaces, not tabs, inside other code.
    plant(
        "home/notes/fix.c",
        b"int other(void) {\n" + b"".join(b"        " + line.lstrip(b"\t") + b"\n" for line in added) + b"}\n",
    )
    # The hidden tests' text as a file of tests would hold it (the diff's added lines).
    plant("var/tmp/tests/test_copy.c", b"".join(line + b"\n" for _, lines in diff_hunks(tests) for line in lines))
    plant("opt/copies/renamed.bin", task_file(task.path, files.poc[0]).read_bytes())
    plant("usr/share/doc/x/variant.tlv", task_file(task.path, files.variants[-1]).read_bytes())
    cue = task_file(libcue.path, libcue.config.files.poc[0]).read_bytes()
    plant("srv/corpus/embedded.txt", b"REM a corpus of cue sheets\n" + cue + b"\nREM the end\n")
    plant("etc/leaked.gz", gzip.compress(patch))
    plant("usr/share/doc/names.txt", b"fixed upstream, see CVE-2023-43641\n")
    plant("root-only/secret.tlv", task_file(task.path, files.poc[0]).read_bytes())
    history = tmp_path / "history"
    history.mkdir()
    (history / "fixed.c").write_bytes(b"".join(line + b"\n" for _, lines in diff_hunks(patch) for line in lines))
    git = ["git", "-C", str(history), "-c", "user.name=m", "-c", "user.email=m@x"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "later work"], check=True)
    assert task.config.source
    shutil.copytree(history / ".git", root / task.config.source.lstrip("/") / ".git")
    (tmp_path / "Dockerfile").write_text(PLANTED_DOCKERFILE)
    tag = f"{settings.prefix}/leak-control:{uuid.uuid4().hex[:12]}"
    tool = image_names(settings, task)["tool"]
    client().images.build(path=str(tmp_path), tag=tag, buildargs={"TOOL": tool}, rm=True, forcerm=True)
    try:
        yield tag
    finally:
        client().images.remove(tag, force=True)


def test_every_planted_copy_of_the_answer_is_found_and_nothing_else(
    planted: str, demo_images: list[Task], session: Session
) -> None:
    task = _demo(demo_images, "c-demo")
    libcue = next(t for t in load_tasks(PILOT) if t.id == "libcue-CVE-2023-43641")
    pieces = (
        name_pieces(["CVE-2023-43641"]) + answer_pieces(task) + [p for p in answer_pieces(libcue) if p.kind == "poc"]
    )
    found = {(h.path, h.piece.kind, h.piece.where) for h in scan(planted, pieces, session, task.config.source)}
    fix = [p.where for p in pieces if p.kind == "fix"]
    assert len(fix) == 3
    assert found == {
        ("/home/notes/fix.c", "fix", fix[0]),
        ("/var/tmp/tests/test_copy.c", "test", "diffs/test.diff hunk 1 (test_tlv.c)"),
        ("/opt/copies/renamed.bin", "poc", "pocs/long_value.tlv"),
        ("/usr/share/doc/x/variant.tlv", "variant", "variants/third_record_long.tlv"),
        ("/srv/corpus/embedded.txt", "poc", "pocs/negative_index.cue"),
        *(("/etc/leaked.gz (compressed)", "fix", where) for where in fix),
        ("/usr/share/doc/names.txt", "name", "CVE-2023-43641"),
        *((f"{task.config.source}/.git (history)", "fix", where) for where in fix),
    }
