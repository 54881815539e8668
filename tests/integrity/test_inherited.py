"""Nothing of root's reaches the agent's processes or the checks' by inheritance.

Root binds the runtime's listening sockets and hands them to the daemon and
the MCP server, talks to the evaluator over a pipe, and learns on pipes that
its servers serve. None of those descriptors, and no variable that names one
or the admin socket, may reach a process of model (the agent's command, the
bash tool's shell) or of sse-runner (a check's script): with one, the agent
could accept the daemon's connections, or answer for it.
"""

from __future__ import annotations

import pytest

from tests.helpers import in_the_checks
from tests.integrity.harness import Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

# What a command of the bash tool inherits: the descriptors of `ls` itself (a child of the shell, which
# passes on what it was given; the shell's own saved copy of its command stream is close-on-exec) and
# the runtime's variables in its environment.
LOOK = "ls -l /proc/self/fd | awk 'NR > 1 {print $9, $11}'; env | grep -E '^SSE_(LISTEN_FDS|READY_FD|ADMIN_SOCKET)=' || true"
# The agent's code prints the same from inside a check, as sse-runner (in_the_checks: its unit tests' program).
CHECK_LOOK = (
    "echo INHERITED-FDS $(ls -l /proc/self/fd | awk 'NR > 1 {printf \"%s=%s;\", $9, $11}'); "
    "echo INHERITED-ENV $(env | grep -E '^SSE_(LISTEN_FDS|READY_FD|ADMIN_SOCKET)=' | tr '\\n' ';')"
)


def _beyond_stdio(listing: str) -> list[str]:
    """Descriptors past 0-2 that are neither a listing's own directory handle nor a tty."""
    extra = []
    for line in listing.splitlines():
        fd, _, target = line.partition(" ")
        if fd.isdigit() and int(fd) > 2 and not target.startswith("/proc/"):
            extra.append(line)
    return extra


def test_the_agent_its_shell_and_the_checks_inherit_no_descriptor_or_variable_of_roots(launcher: Launcher) -> None:
    run = launcher.start(level=2)
    # The agent's own command (the held `sleep`, started by the entrypoint), seen by its own user (root
    # here has no CAP_SYS_PTRACE to read another user's descriptors).
    agent = run.sh(
        "1000",
        "pid=$(pgrep -u model -x sleep | head -1); ls -l /proc/$pid/fd | awk 'NR > 1 {print $9, $11}';"
        " tr '\\0' '\\n' < /proc/$pid/environ | grep -E '^SSE_(LISTEN_FDS|READY_FD|ADMIN_SOCKET)=' || true",
    )
    assert "0 /dev/null" in agent  # the control: the listing is read right
    assert _beyond_stdio(agent) == [] and "SSE_" not in agent, agent
    # The bash tool's shell (the daemon's child, as model): what its command inherits.
    shell = run.py(
        "1000", f"import json; from sse.tools.bash import execute; print(json.dumps(execute({LOOK!r}).stdout))"
    )
    assert any(line.startswith("0 ") for line in shell.splitlines()), shell
    assert _beyond_stdio(shell) == [] and "SSE_" not in shell, shell
    # A check's script (the daemon's child, as sse-runner), through the agent's code in the unit tests' program.
    run.sh("1000", in_the_checks(CHECK_LOOK))
    built = run.py(
        "1000", "import json; from sse.tools import bencher; r = bencher.function_test(); print(json.dumps(r.stdout))"
    )
    [fds] = [line for line in built.splitlines() if line.startswith("INHERITED-FDS")]
    [env] = [line for line in built.splitlines() if line.startswith("INHERITED-ENV")]
    listed = [entry.replace("=", " ", 1) for entry in fds.split(" ", 1)[1].split(";") if entry]
    assert any(entry.startswith("0 ") for entry in listed), fds
    assert _beyond_stdio("\n".join(listed)) == [], fds
    assert "SSE_" not in env, env
    run.finish()
