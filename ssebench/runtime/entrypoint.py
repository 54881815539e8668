"""The entrypoint of every container that runs the runtime, as root: the container's role, as steps.

The container that grades (sandbox mode's one container, `sandbox`; sidecar
mode's task container, `task`):

1. results (0755 in its 0700 parent) and archive (model's) prepared; the
   runner's area taken empty, and the agent's tree prepared in its volume:
   grading's original kept, its `.git` written, given to model
   (`ssebench.runtime.tree`); a container unfit for a run refuses to start
   (`RefusedStart`);
2. the daemon started on its three listeners, bound here first, and awaited:
   it says on a pipe once it serves (SSE_DAEMON_TIMEOUT); nothing of the agent
   runs while it starts, so nothing the agent does can starve its start-up;
   the MCP server's socket bound, the server started when its first client
   connects (`ssebench.runtime.servers`; one that fails, `ServerError`);
3. the agent phase (`AgentPhase`): in sandbox mode the agent command (the
   image's CMD) run as model, in its own session, stdin /dev/null, output to
   agent.log, killed with its whole process group at TIMEOUT seconds (exit
   status 124; `ssebench.runtime.agent`); in sidecar mode's task container,
   waiting for the host to say the agent container is done
   (`ssebench.runtime.phase.await_agent`);
4. POST /admin/agent_exited on the admin socket;
5. the evaluator, started with the agent, handed the agent phase's figures,
   grades (`ssebench.runtime.grader`; a run it cannot grade, `NotGraded`,
   gets an error result);
6. the archive pruned, the cgroup's counts in limits.json; exit with the
   agent's status. SSE_KEEP_ALIVE=1 (--keep-containers) keeps the container
   up instead: the phase `kept`, with that status, then a wait for its stop
   (`stay_up`).

Each step it enters is written for the host (`contract.Phase`,
`ssebench.runtime.phase.write_phase`), and said on the container's log.
Every component logs to its own file in the results directory. Root starts
in `/` and every runtime process is an isolated Python (`-I`) started from
`/`, so a module the agent writes into its tree (where an image's WORKDIR
usually points) is never imported by root.

Sidecar mode's agent container (`agent`) holds nothing that grades: it
waits until the daemon answers on the shared agent socket, runs the agent as
model (its output on the container's own log), ends every process of model,
and exits with the agent's status (kept: says so in its phase, and stays up). It has no /ssebench, no admin socket, no
results: an agent that became root there can change nothing of its grade.
The tree's path comes in SSE_SOURCE.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ssebench.runtime import contract, phase
from ssebench.runtime.agent import run_agent
from ssebench.runtime.console import say, tail
from ssebench.runtime.container import (
    RefusedStart,
    finish_archive,
    limits_report,
    mounted,
    prepare_dirs,
    prepare_results,
    prepare_runner_area,
    prepare_sockets,
    wait_for_stop,
    write_limits,
)
from ssebench.runtime.contract import AgentEnd, Phase, RuntimeSettings, SettingsError, load_settings
from ssebench.runtime.grader import NotGraded, evaluate, start_evaluator, write_error
from ssebench.runtime.process import NEUTRAL_CWD, User, clear_user
from ssebench.runtime.servers import (
    OnDemand,
    Served,
    ServerError,
    admin_post,
    end,
    http_status,
    start_daemon,
    start_mcp,
    wait_for,
)


class AgentPhase(Protocol):
    """How the container that grades spends the agent phase."""

    # The agent socket's directory is shared with another container (the agent's).
    shares_sockets: bool

    def prepare(self, settings: RuntimeSettings) -> None:
        """Before the daemon starts."""

    def describe(self, settings: RuntimeSettings) -> str:
        """The line that says where the agent runs."""

    def run(self, settings: RuntimeSettings, model: User, source: str) -> AgentEnd:
        """The agent phase, to its end."""


@dataclass
class RunHere:
    """Sandbox mode: the agent's command runs here, as model, in its tree, its output in agent.log."""

    command: list[str]
    shares_sockets: bool = False

    def prepare(self, settings: RuntimeSettings) -> None:
        pass

    def describe(self, settings: RuntimeSettings) -> str:
        return f"{' '.join(self.command)} (timeout {settings.agent_timeout:.0f} s, difficulty {settings.difficulty})"

    def run(self, settings: RuntimeSettings, model: User, source: str) -> AgentEnd:
        with (Path(settings.results) / "agent.log").open("ab") as log:
            return run_agent(self.command, settings, model, source, log)


@dataclass
class AwaitHost:
    """Sidecar mode's task container: the agent runs in a container of its own; the host says when it is
    done, through a fifo of root's made before the daemon starts."""

    shares_sockets: bool = True
    done: int | None = None

    def prepare(self, settings: RuntimeSettings) -> None:
        prepare_sockets(settings)
        self.done = phase.make_fifo()

    def describe(self, settings: RuntimeSettings) -> str:
        return f"in its own container (timeout {settings.agent_timeout:.0f} s, difficulty {settings.difficulty})"

    def run(self, settings: RuntimeSettings, model: User, source: str) -> AgentEnd:
        assert self.done is not None, "prepare() makes the fifo"
        try:
            return phase.await_agent(settings, self.done)
        finally:
            os.close(self.done)


def enter(step: Phase, line: str) -> None:
    """Write the phase for the host, and say the line on the log."""
    phase.write_phase(step)
    say(line)


def prepare_task(settings: RuntimeSettings, model: User) -> str:
    """Step 1 of the container that grades: the results, the runner's area and the agent's tree; the tree's
    path. Raises RefusedStart."""
    from ssebench.runtime.taskfile import load_taskfile
    from ssebench.runtime.tree import prepare_tree

    prepare_results(settings)
    prepare_dirs(settings, model)
    try:
        say(f"the runner's area is {prepare_runner_area(User.named(contract.RUNNER).gid)}")
        source = load_taskfile(Path(contract.TASK_DIR) / "config.yaml").source
        started = time.monotonic()
        entries = prepare_tree(Path(source), model)
    except (RuntimeError, OSError, ValueError) as exc:  # OSError, ValueError: no readable config.yaml
        raise RefusedStart(str(exc)) from exc
    say(
        f"the agent's tree is {mounted(source)}, model's: {entries} entries, its original kept for "
        f"grading, in {time.monotonic() - started:.2f} s"
    )
    return source


def end_agent_phase(settings: RuntimeSettings) -> bool:
    """Step 4: tell the daemon the agent phase is over (it ends model's processes and captures the change);
    whether it confirmed."""
    for attempt in range(3):
        try:
            admin_post(settings, "/admin/agent_exited")
            return True
        except ServerError as exc:
            say(f"agent_exited failed (attempt {attempt + 1} of 3): {exc}")
            time.sleep(1)
    return False


def close_mcp(mcp: OnDemand) -> bool:
    """End the MCP server; whether it failed the run: one that never served failed it, not the agent (one that
    served and then ended is the agent's lookout, as any tool that failed it; one that no client asked for
    was never started)."""
    served = mcp.close()
    if served is None:
        say(
            f"the MCP server could not be started ({mcp.failures} attempt(s)); see above"
            if mcp.failures
            else "the MCP server was not started: no client connected"
        )
        return False
    unserved = served.failed_to_start()
    if served.process.poll() is not None:
        say(
            f"the MCP server exited with status {served.process.returncode} "
            + ("before it served" if unserved else "before the agent did")
            + "; see mcp.log"
        )
    end(served.process)
    os.close(served.ready)
    return unserved


def grading_container(settings: RuntimeSettings, model: User, agent: AgentPhase) -> int:
    """The container that grades, and where the task is: sandbox mode's one, sidecar mode's task container;
    the agent's exit status."""
    phase.write_phase(Phase.STARTING)
    try:
        source = prepare_task(settings, model)
    except RefusedStart as exc:
        enter(Phase.FAILED, f"refusing to start: {exc}")
        write_error(settings, f"the runtime failed to start: {exc}")
        return 1
    results = Path(settings.results)
    env = {**os.environ, **settings.to_env("results")}
    daemon: Served | None = None
    try:
        agent.prepare(settings)
        daemon = start_daemon(settings, env)
        mcp = start_mcp(settings, env, shared_sockets=agent.shares_sockets)
    except (ServerError, OSError) as exc:
        enter(Phase.FAILED, f"infrastructure failure: {exc}")
        write_error(settings, f"the runtime failed to start: {exc}")
        if daemon is not None:
            end(daemon.process)
        write_limits(settings, "limits.json")
        return 1
    say(contract.SERVING)

    with (results / "evaluator.log").open("ab") as evaluator_log:
        evaluator = start_evaluator(settings, env, evaluator_log)
        enter(Phase.AGENT, f"agent: {agent.describe(settings)}")
        ended = agent.run(settings, model, source)
        enter(Phase.GRADING, agent_exited(ended))
        confirmed = end_agent_phase(settings)
        try:
            if close_mcp(mcp):
                end(evaluator)
                raise NotGraded(f"the MCP server failed to start:\n{tail(results / 'mcp.log')}")
            evaluate(settings, env, evaluator, evaluator_log, results / "evaluator.log", ended)
            enter(Phase.FINISHING, "graded: " + tail(results / "evaluator.log", 1))
        except NotGraded as exc:
            write_error(settings, str(exc))
            enter(Phase.FINISHING, f"not graded: {str(exc).splitlines()[0]}")
    finish(settings, confirmed)

    if settings.keep_alive:
        stay_up(settings, ended.status, "graded; the daemon still answers")
    end(daemon.process)
    return ended.status


def stay_up(settings: RuntimeSettings, status: int, what: str) -> None:
    """Keep-alive (--keep-containers): say the run is over, with the status this container would exit with
    and the run's token, and wait for the container's stop. The host reads that phase
    (`contract.kept_status`), brings the run's files home and leaves the container to `docker exec` and
    `ssebench rm`. A kept phase that cannot be written would leave the host waiting to the run's time limit:
    the container exits instead, not kept."""
    if not phase.write_phase(Phase.KEPT, status=status, token=settings.keep_token):
        say(f"SSE_KEEP_ALIVE=1: the kept phase could not be written, so the container exits with {status}, not kept")
        return
    say(f"SSE_KEEP_ALIVE=1: the container stays up ({what}); its status would be {status}")
    wait_for_stop()


def finish(settings: RuntimeSettings, confirmed: bool) -> None:
    """Step 6: the archive pruned (once the agent phase's end is confirmed) and the cgroup's counts kept."""
    if not confirmed:
        # Processes of model may live on: the archive is left as it is, and the host keeps regular files
        # only, under its caps, whatever is in it.
        say("the archive is not pruned: the end of the agent phase was not confirmed")
    else:
        try:
            finish_archive(settings)
        except Exception as exc:  # a prune that fails leaves the archive to the host's caps; never the grade
            say(f"pruning the archive failed: {type(exc).__name__}: {exc}")
    write_limits(settings, "limits.json")


def agent_exited(ended: AgentEnd) -> str:
    return f"agent exited with status {ended.status} after {ended.duration:.1f} s" + (
        " (timed out)" if ended.timed_out else ""
    )


def agent_socket_ready(settings: RuntimeSettings) -> bool:
    """Whether the daemon answers on the agent socket (sidecar mode's agent container: the shared one)."""
    return os.path.exists(settings.agent_socket) and http_status(settings.agent_socket, "GET", "/version", 2) == 200


def agent_container(settings: RuntimeSettings, model: User, command: list[str]) -> int:
    """Sidecar mode's agent container: once the daemon answers, the agent as model; its status.

    Nothing here grades or writes what grading reads (nor a phase: the task container's stands for the
    run): the agent's output goes to this container's log, and the host tells the task container when this
    container has exited.
    """
    prepare_dirs(settings, model)
    try:
        wait_for("daemon", lambda: agent_socket_ready(settings), settings.daemon_timeout, Path(os.devnull))
    except ServerError as exc:
        say(f"infrastructure failure: {exc}")
        return 1
    say(f"agent: {RunHere(command).describe(settings)}")
    sys.stdout.flush()
    ended = run_agent(command, settings, model, settings.source, sys.stdout.buffer)
    say(agent_exited(ended))
    try:  # nothing of the agent may go on changing the shared tree while it is captured and graded
        say(f"ended {clear_user(model)} leftover process(es) and IPC object(s) of {model.name}")
    except OSError as exc:
        say(f"ending {model.name}'s processes failed: {exc}")
    for line in limits_report()["hit"]:  # type: ignore[attr-defined]
        say(f"limit hit: {line}")  # on this stream of the container's log, which the agent's output is not on
    if settings.keep_alive:  # the host freezes this container before the task container captures and grades
        stay_up(settings, ended.status, "the agent has ended")
    return ended.status


# Each role's steps, from its settings, model and the image's command.
ROLES: dict[str, Callable[[RuntimeSettings, User, list[str]], int]] = {
    "sandbox": lambda settings, model, command: grading_container(settings, model, RunHere(command)),
    "task": lambda settings, model, command: grading_container(settings, model, AwaitHost()),
    "agent": agent_container,
}


def main(argv: list[str]) -> int:
    os.chdir(NEUTRAL_CWD)  # never work in a directory an image's WORKDIR (the agent's tree) names
    try:
        settings = load_settings()
    except SettingsError as exc:
        say(f"refusing to start: {exc}")
        return 2
    say(f"starting ({settings.role})")
    return ROLES[settings.role](settings, User.named(contract.MODEL), argv or ["true"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
