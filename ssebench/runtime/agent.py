"""The agent's command, run as model: confined, in its own session, ended with its whole process group at
the agent's time limit (exit status `contract.TIMED_OUT`).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import IO

from ssebench.runtime.contract import TIMED_OUT, AgentEnd, RuntimeSettings, for_model
from ssebench.runtime.process import User, confined, kill_group, wait


def agent_env(settings: RuntimeSettings, model: User) -> dict[str, str]:
    """The agent's environment: the container's, without root's settings (`contract.ROOT_ONLY`), with model's identity and the
    settings the agent reads (its socket, archive, difficulty, time limit and the MCP server's URL)."""
    env = for_model(os.environ)
    env.update(HOME=model.home, USER=model.name, LOGNAME=model.name, SHELL="/bin/bash")
    # The MCP URL: the socket root bound (loopback's 127.0.0.1, not ::1; sidecar mode's task container's).
    env.update(settings.to_env("agent_socket", "archive", "difficulty", "agent_timeout", "mcp_url"))
    return env


def run_agent(command: list[str], settings: RuntimeSettings, model: User, cwd: str, log: IO[bytes]) -> AgentEnd:
    """Run the agent's command in `cwd`, its output to `log`; how it ended."""
    started = time.monotonic()
    try:
        agent = subprocess.Popen(
            confined(command, settings.file_size),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=agent_env(settings, model),
            start_new_session=True,
            **model.popen_kwargs(),
        )
    except OSError as exc:
        log.write(f"[ssebench] cannot start the agent command {command}: {exc}\n".encode())
        return AgentEnd(127, time.monotonic() - started, False)
    try:
        status = wait(agent, settings.agent_timeout)
        return AgentEnd(status, time.monotonic() - started, False)
    except subprocess.TimeoutExpired:
        kill_group(agent.pid)
        agent.wait()
        return AgentEnd(TIMED_OUT, time.monotonic() - started, True)
