"""Build-time setup of the tool layer (run as root in a container of the case image, which is then
committed as the tool image: `ssebench.image`, with the runtime volume read-only at /opt/ssebench).

It turns a case image into a task image whose answer the agent cannot reach:

1. users `model` (uid 1000, no supplementary groups) and `sse-runner`;
2. the source tree left where the case put it, once, with every `.git`
   removed, and its one commit, `buggy commit`, made in capture's base
   (each run gives model a copy of the tree in a volume of its own);
3. /ssebench root-only, except the build and test scripts and their support
   directories, which sse-runner's group may read and execute;
4. no world-writable path that is not sticky, no setuid or setgid program;
5. the run-time directories with their owners and modes.

It reads only /ssebench/config.yaml and imports nothing of the host side.
With `--agent-base` it makes sidecar mode's agent image instead, from a
runtime image: steps 1, 4 and 5, and nothing of a task.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from ssebench.runtime import contract
from ssebench.runtime.capture import make_base
from ssebench.runtime.contract import TaskFile
from ssebench.runtime.files import check_root_path
from ssebench.runtime.taskfile import load_taskfile

MODEL_UID = 1000


def _run(*argv: str, **kwargs: object) -> None:
    subprocess.run(list(argv), check=True, **kwargs)  # type: ignore[call-overload]


def create_users() -> None:
    """Create model and sse-runner afresh, whatever the base image had."""
    for entry in pwd.getpwall():
        if entry.pw_uid == MODEL_UID or entry.pw_name in (contract.MODEL, contract.RUNNER):
            _run("userdel", "--force", entry.pw_name)
    for group in grp.getgrall():
        if group.gr_gid == MODEL_UID or group.gr_name in (contract.MODEL, contract.RUNNER):
            _run("groupdel", group.gr_name)
    _run("groupadd", "--gid", str(MODEL_UID), contract.MODEL)
    _run(
        "useradd",
        "--uid",
        str(MODEL_UID),
        "--gid",
        contract.MODEL,
        "--create-home",
        "--home-dir",
        f"/home/{contract.MODEL}",
        "--shell",
        "/bin/bash",
        contract.MODEL,
    )
    _run(
        "useradd",
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
        contract.RUNNER,
    )


def _remove_git_dirs(tree: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in list(dirnames):
            if name == ".git":
                path = Path(dirpath) / name
                path.unlink() if path.is_symlink() else shutil.rmtree(path)
                dirnames.remove(name)
        if ".git" in filenames:  # a submodule's gitdir link
            (Path(dirpath) / ".git").unlink()


def prepare_source(task: TaskFile) -> None:
    """The case's tree stays where it is, as the case image made it, once: no copy of it is made here.

    Each run mounts a volume of its own at the tree's path, which the engine
    fills from this image, and the entrypoint gives it to model and keeps a
    root-only copy for grading (`ssebench.runtime.tree`). Here every `.git`
    goes (the project's history would give the fix away), and capture's base
    is made: the tree's one commit, which each run also gives the agent as
    its `.git`. The path must be a real directory reached through directories
    of root's alone, so that the volume is mounted where the task says.
    """
    source = Path(task.source)
    try:
        check_root_path(task.source)
    except ValueError as exc:
        raise SystemExit(f"toollayer: config.yaml: source: {exc}") from None
    if not source.is_dir():
        raise SystemExit(f"toollayer: config.yaml: source: {source} is not a directory in the case image")
    _remove_git_dirs(source)
    make_base(source, Path(contract.CAPTURE_DIR))


def _chmod_tree(path: Path, *, group_readable: bool, runner_gid: int) -> None:
    """Root-owned; group sse-runner may read (and traverse) only when asked."""
    paths = [path] if not path.is_dir() else [path, *path.rglob("*")]
    for p in paths:
        if p.is_symlink():
            os.lchown(p, 0, runner_gid if group_readable else 0)
            continue
        mode = p.stat().st_mode
        executable = p.is_dir() or mode & 0o111
        os.chown(p, 0, runner_gid if group_readable else 0)
        own = 0o700 if executable else 0o600
        group = (0o050 if executable else 0o040) if group_readable else 0
        os.chmod(p, own | group)


def protect_task_files(task: TaskFile) -> None:
    """/ssebench: root-only but for what the runner must execute in place."""
    root = Path(contract.TASK_DIR)
    runner_gid = grp.getgrnam(contract.RUNNER).gr_gid
    secret = {root / p for p in task.secret_paths()}
    _chmod_tree(root, group_readable=True, runner_gid=runner_gid)
    for path in sorted(secret):
        if path.exists() or path.is_symlink():
            _chmod_tree(path, group_readable=False, runner_gid=runner_gid)
    # The top is traversable by the runner's group but not listable by it.
    os.chown(root, 0, runner_gid)
    os.chmod(root, 0o710)


def strip_world_writable() -> None:
    """No path anyone may write, unless sticky (like /tmp)."""
    out = subprocess.run(
        ["find", "/", "-xdev", "-perm", "-o+w", "!", "-type", "l", "!", "-perm", "-1000", "-print0"],
        check=False,
        capture_output=True,
    ).stdout
    for raw in filter(None, out.split(b"\0")):
        path = raw.decode(errors="surrogateescape")
        mode = os.lstat(path).st_mode
        os.chmod(path, stat.S_IMODE(mode) & ~0o002)


def strip_set_id_bits() -> None:
    """No setuid or setgid program: the container also runs with no-new-privileges, this is the second lock."""
    out = subprocess.run(
        ["find", "/", "-xdev", "-type", "f", "-perm", "/6000", "-print0"], check=False, capture_output=True
    ).stdout
    for raw in filter(None, out.split(b"\0")):
        path = raw.decode(errors="surrogateescape")
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o6000)


def make_runtime_dirs() -> None:
    """The run-time directories of the container that grades: its state and results, the admin socket's, the
    runner's (sidecar mode's agent image has none of them: nothing that grades is there)."""
    runner_gid = grp.getgrnam(contract.RUNNER).gr_gid
    dirs = [(contract.STATE_DIR, 0, 0o700), (contract.ADMIN_DIR, 0, 0o700), (contract.RUNNER_DIR, runner_gid, 0o710)]
    for path, gid, mode in dirs:
        # Runs mount the runner's volume here, and root works in them: no link of the case image's may send
        # either elsewhere (into the tree), and no directory above them may be another user's.
        try:
            check_root_path(path)
        except ValueError as exc:
            raise SystemExit(f"toollayer: {exc}") from None
        Path(path).mkdir(parents=True, exist_ok=True)
        os.chown(path, 0, gid)
        os.chmod(path, mode)


def lock_runtime() -> None:
    """The runtime venv and library: root's, writable by nobody else."""
    for dirpath, dirnames, filenames in os.walk(contract.RUNTIME_HOME):
        for name in [*dirnames, *filenames, "."]:
            p = os.path.join(dirpath, name)
            os.lchown(p, 0, 0)
            if not os.path.islink(p):
                os.chmod(p, stat.S_IMODE(os.lstat(p).st_mode) & ~0o022)


def _root_alone(path: str) -> bool:
    st = os.lstat(path)
    return st.st_uid == 0 and (stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o022)


def check_runtime_locked() -> None:
    """A tool layer runs with the runtime volume: it must be read-only here, and root's alone, or no tool
    image is made (images/runtime/Dockerfile makes it so before the volume is filled from it).

    What root's Python runs from the image itself must be root's alone too: the interpreter and its standard
    library, and the directories above them and above the volume (a case image's files of uid 1000 become
    model's when model is made).
    """
    # Every run mounts the volume here: no link of the case image's may send it elsewhere (into the tree).
    for path in ("/", "/usr", "/opt", contract.RUNTIME_HOME):
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or not _root_alone(path):
            raise SystemExit(f"toollayer: {path} must be a directory of root's that nobody else may write")
    interpreter = os.path.realpath(sys.executable)
    paths = sysconfig.get_paths()
    trees = [paths["stdlib"], paths["platstdlib"]]
    for path in [interpreter, os.path.dirname(interpreter)]:
        if not _root_alone(path):
            raise SystemExit(f"toollayer: {path} (root's Python) must be root's and writable by nobody else")
    for tree in dict.fromkeys(trees):
        for dirpath, dirnames, filenames in os.walk(tree):
            for name in [*dirnames, *filenames, "."]:
                if not _root_alone(os.path.join(dirpath, name)):
                    raise SystemExit(
                        f"toollayer: {os.path.join(dirpath, name)} (root's Python library) must be "
                        "root's and writable by nobody else"
                    )
    if not os.statvfs(contract.RUNTIME_HOME).f_flag & os.ST_RDONLY:
        raise SystemExit(f"toollayer: {contract.RUNTIME_HOME} must be the runtime volume, mounted read-only")
    for dirpath, dirnames, filenames in os.walk(contract.RUNTIME_HOME):
        for name in [*dirnames, *filenames, "."]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            writable = not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022
            if st.st_uid != 0 or st.st_gid != 0 or writable:
                raise SystemExit(f"toollayer: {p} in the runtime must be root's and writable by nobody else")


def agent_base() -> None:
    """Sidecar mode's agent image (no task in it, nothing that grades): the same users and locks."""
    if Path(contract.TASK_DIR).exists():
        raise SystemExit(f"toollayer: an agent image must hold nothing of a task, but {contract.TASK_DIR} exists")
    create_users()
    lock_runtime()
    strip_world_writable()
    strip_set_id_bits()
    print("toollayer: agent base ready", file=sys.stderr)


def main() -> None:
    if sys.argv[1:] == ["--agent-base"]:
        agent_base()
        return
    task = load_taskfile(Path(contract.TASK_DIR) / "config.yaml")
    create_users()
    prepare_source(task)
    protect_task_files(task)
    make_runtime_dirs()
    check_runtime_locked()
    strip_world_writable()
    strip_set_id_bits()
    print(
        f"toollayer: {task.id} ready: source {task.source}, its one commit in {contract.CAPTURE_DIR}", file=sys.stderr
    )


if __name__ == "__main__":
    main()
