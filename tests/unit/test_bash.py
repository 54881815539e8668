"""The bash tool's shell, on this machine: what a command sees and what survives between commands."""

from __future__ import annotations

import asyncio
import os
import pwd
from pathlib import Path

import pytest

from ssebench.runtime.bash import BashTool
from ssebench.runtime.process import User


def _user() -> User:
    entry = pwd.getpwuid(os.getuid())
    return User(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)


def _run(tmp_path: Path, *commands: str) -> list[tuple[int, str, str]]:
    async def go() -> list[tuple[int, str, str]]:
        tool = BashTool(_user(), tmp_path, {"PATH": os.environ["PATH"]}, 10, 1 << 20)
        try:
            return [(r.code, r.stdout, r.stderr) for r in [await tool.run(c) for c in commands]]
        finally:
            await tool.close()

    return asyncio.run(go())


@pytest.mark.parametrize(
    "command, stdout",
    [
        ("echo hi", "hi\n"),
        ("printf '%s\\n' 'a\\\\b'", "a\\\\b\n"),  # backslashes reach the shell as written
        ("   echo leading", "leading\n"),
        ("echo one\n\necho two\n\n\n", "one\ntwo\n"),  # several lines, and newlines at the end
        ("cat <<'EOF'\n$HOME `x`\nEOF", "$HOME `x`\n"),  # a here-document of the command's own
        ("echo __SSE_CMD_0123__; echo after", "__SSE_CMD_0123__\nafter\n"),  # the end word's look-alike
        ('read -r line; echo "[$line] $?"', "[] 1\n"),  # the command's stdin is empty
    ],
)
def test_a_command_runs_as_written(tmp_path: Path, command: str, stdout: str) -> None:
    [(code, out, err)] = _run(tmp_path, command)
    assert (code, out, err) == (0, stdout, "")


def test_state_and_set_e_carry_to_the_next_command(tmp_path: Path) -> None:
    """`set -e` in one command must not end the shell at the next (reading a command ends with status 1)."""
    results = _run(tmp_path, "set -e; cd /; export SSE_T=7", "echo $SSE_T $PWD", "false", "echo still")
    assert results[1] == (0, "7 /\n", "")
    assert results[2][0] == 1 and "fresh shell" in results[2][2]  # `set -e` and a failure: bash exits, as before
    assert results[3] == (0, "still\n", "")
    assert _run(tmp_path, "set -e", "echo alive")[1] == (0, "alive\n", "")


def test_status_and_stderr_come_back(tmp_path: Path) -> None:
    [(code, out, err)] = _run(tmp_path, "echo out; echo err >&2; (exit 3)")
    assert (code, out, err) == (3, "out\n", "err\n")


def test_a_command_the_shell_cannot_read_whole_runs_nothing_not_the_one_before(tmp_path: Path) -> None:
    """A command longer than a pipe goes through a temporary file; with no room for it, nothing runs."""

    async def go() -> list[tuple[int, str, str]]:
        tool = BashTool(
            _user(), tmp_path, {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}, 10, 1 << 20, file_size=4096
        )
        try:
            first = await tool.run("echo PREVIOUS")
            big = await tool.run("echo BIG # " + "x" * 200_000)
            small = await tool.run("echo small")
            return [(r.code, r.stdout, r.stderr) for r in (first, big, small)]
        finally:
            await tool.close()

    first, big, small = asyncio.run(go())
    assert first == (0, "PREVIOUS\n", "")
    assert big[0] == 126 and "PREVIOUS" not in big[1] and "BIG" not in big[1], big
    assert "could not read the command whole; nothing ran" in big[2]
    assert small == (0, "small\n", "")


@pytest.mark.parametrize(
    "setup", ["readonly __sse_cmd", "declare -u __sse_cmd", "__sse_cmd='echo old'", "set -u", "set -o pipefail"]
)
def test_what_a_command_sets_in_the_shell_does_not_change_how_the_next_is_read(tmp_path: Path, setup: str) -> None:
    results = _run(tmp_path, setup, "echo next", "echo again")
    assert results[1:] == [(0, "next\n", ""), (0, "again\n", "")]
