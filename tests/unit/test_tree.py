"""The agent's tree at the start of a run (ssebench.runtime.tree), on this host's file system.

Real containers are in tests/integrity (test_runner_area.py: the tree as a run's volume, its original's
owner and mode; test_bypass.py and test_root_links.py: what model and sse-runner can do to either).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ssebench.runtime import tree
from ssebench.runtime.capture import BASE_REPO, make_base
from ssebench.runtime.process import User

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the tree is given to another user: needs root")

OWNER = User(name="someone", uid=54321, gid=54321, home="/nonexistent")


def _case_tree(path: Path) -> Path:
    """A small tree as a case image leaves it: nested folders, an executable, a link out of the tree, old times."""
    (path / "src" / "lib").mkdir(parents=True)
    (path / "src" / "lib" / "a.c").write_text("int a;\n")
    (path / "configure").write_text("#!/bin/sh\n")
    (path / "configure").chmod(0o755)
    (path / "out").symlink_to("/etc/hostname")
    for p in (path / "src" / "lib" / "a.c", path / "configure"):
        os.utime(p, (946684800, 946684800))
    return path


@pytest.fixture
def prepared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(source, repo, base): a case tree, its capture base made as the tool layer makes it, an area for repo."""
    source = _case_tree(tmp_path / "src" / "proj")
    capture = tmp_path / "capture"
    make_base(source, capture)
    area = tmp_path / "area"
    area.mkdir()
    # tmp_path is under /tmp, which everyone may write: the path check is the subject of its own test below.
    monkeypatch.setattr(tree, "check_root_path", lambda path: None)
    return source, area / "repo", capture / BASE_REPO


def test_the_original_is_kept_the_git_written_and_the_tree_given_to_model(prepared: tuple[Path, Path, Path]) -> None:
    source, repo, base = prepared
    hostname = os.lstat("/etc/hostname")
    entries = tree.prepare_tree(source, OWNER, repo=repo, base=base)
    # Grading's original: root's alone, the same files with their modes and times, links left links.
    assert (repo.stat().st_uid, repo.stat().st_mode & 0o777) == (0, 0o700)
    assert (repo / "src" / "lib" / "a.c").read_text() == "int a;\n"
    assert (repo / "src" / "lib" / "a.c").stat().st_mtime == 946684800
    assert (repo / "configure").stat().st_mode & 0o777 == 0o755
    assert os.readlink(repo / "out") == "/etc/hostname" and not (repo / ".git").exists()
    # The tree: every entry the owner's, its .git capture's one commit; the link's target untouched.
    owners = {p.lstat().st_uid for p in [source, *source.rglob("*")]}
    assert owners == {OWNER.uid} and entries == len(list(source.rglob("*"))) + 1
    assert (os.lstat("/etc/hostname").st_uid, os.lstat("/etc/hostname").st_mode) == (hostname.st_uid, hostname.st_mode)
    log = subprocess.run(
        ["git", "-C", str(source), "-c", f"safe.directory={source}", "log", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert log == "buggy commit\n"
    status = subprocess.run(
        ["git", "-C", str(source), "-c", f"safe.directory={source}", "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert status == ""  # the commit is exactly the tree


@pytest.mark.parametrize("planted", ["a .git of the image's", "a repo already there"])
def test_a_tree_or_an_area_not_as_the_tool_layer_left_them_refuses_the_run(
    prepared: tuple[Path, Path, Path], planted: str
) -> None:
    source, repo, base = prepared
    if planted == "a repo already there":
        repo.symlink_to(source)
    else:
        (source / ".git").symlink_to("/ssebench")
    with pytest.raises(RuntimeError, match=r"the agent's tree: .*(File exists|must not exist)"):
        tree.prepare_tree(source, OWNER, repo=repo, base=base)
    assert source.lstat().st_uid == 0  # nothing given away


def test_a_tree_reached_through_a_directory_others_may_write_refuses_the_run(tmp_path: Path) -> None:
    source = _case_tree(tmp_path / "proj")  # under /tmp, which everyone may write
    with pytest.raises(RuntimeError, match=r"the agent's tree: /tmp .* must be a directory of root's"):
        tree.prepare_tree(source, OWNER, repo=tmp_path / "repo", base=tmp_path / "base")
    assert not (tmp_path / "repo").exists()
