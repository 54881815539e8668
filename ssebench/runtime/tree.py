"""The agent's tree when a run starts: grading's original kept, the one-commit `.git`, model's to own.

A run mounts a volume of its own at the tree's path (config.yaml's
`source`), which the engine fills from the tool image: the case's tree as
the case image made it, with no `.git` (`ssebench.runtime.toollayer`). So no
task's image holds a second copy of its tree, and the agent and its checks
work on the host's file system rather than through the image's storage
driver. Before anything of model's or sse-runner's runs, root

1. copies the tree to `contract.REPO`, a directory it makes in the runner's
   area (which the entrypoint has just taken empty, and which no other user
   may write): grading's original, which the agent's patch is applied to;
2. writes capture's base (the tree's one commit, `buggy commit`) into the
   tree as its `.git`;
3. gives every entry of the tree to model, without following a link.

A tool image started without the volume (by hand) has the image's own tree
there, which is prepared the same way.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ssebench.runtime import contract
from ssebench.runtime.capture import BASE_REPO
from ssebench.runtime.files import check_root_path
from ssebench.runtime.process import NEUTRAL_CWD, ROOT_PATH, User

# Root copies only what the image holds, before any other user exists: links stay links, times are kept (a
# build compares them), owners become root's.
_COPY = ["cp", "-R", "--no-dereference", "--preserve=mode,timestamps,links"]
COPY_TIMEOUT = 1800


def _copy_into(src: Path, dst: Path) -> None:
    """Copy the entries of `src` into the existing directory `dst`."""
    done = subprocess.run(
        [*_COPY, f"{src}/.", str(dst)],
        cwd=NEUTRAL_CWD,
        env={"PATH": ROOT_PATH, "LC_ALL": "C"},
        capture_output=True,
        timeout=COPY_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"copying {src} to {dst} failed: {done.stderr.decode(errors='replace').strip()[-500:]}")


def give_to(tree: Path, user: User) -> int:
    """Make every entry of `tree` (and `tree`) `user`'s without following a link; how many."""
    os.lchown(tree, user.uid, user.gid)
    count = 1
    for dirpath, dirnames, filenames in os.walk(tree):  # never into a linked directory
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), user.uid, user.gid)
            count += 1
    return count


def prepare_tree(
    source: Path, model: User, *, repo: Path = Path(contract.REPO), base: Path = Path(contract.CAPTURE_DIR) / BASE_REPO
) -> int:
    """Keep grading's original, give the tree its `.git` and give it to model; how many entries it has.

    Raises RuntimeError when the tree is not a real directory reached through directories of root's alone,
    already has a `.git`, or a copy fails: the run cannot start then.
    """
    try:
        check_root_path(str(source))
    except ValueError as exc:
        raise RuntimeError(f"the agent's tree: {exc}") from None
    if not source.is_dir():
        raise RuntimeError(f"the agent's tree: {source} is not a directory")
    if os.path.lexists(source / ".git"):  # the tool layer removed every .git: this one is not the case's
        raise RuntimeError(f"the agent's tree: {source / '.git'} must not exist; rebuild the task's images")
    try:
        os.mkdir(repo, 0o700)  # a new directory, or no run: nothing may be there yet
        _copy_into(source, repo)
        os.chmod(repo, 0o700)  # the copy gave it the tree's own mode: sse-runner may traverse the area
        os.mkdir(source / ".git", 0o755)
        _copy_into(base, source / ".git")
    except OSError as exc:
        raise RuntimeError(f"the agent's tree: {exc}") from None
    return give_to(source, model)
