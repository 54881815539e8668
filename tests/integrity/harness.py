"""The integrity suite's harness: runs started exactly as the plugin starts them, then attacked.

`HeldRun` starts a run through `ssebench.live.running` (the same image,
network, mounts and limits as a pytest item), with an agent that sleeps, so
the run stays in its agent phase while a test attacks it as uid 1000 with
`docker exec`. `finish()` ends the agent (the entrypoint then grades, as
after any agent), waits, and copies the results out like a real run.

Every run is in one of the two modes (the `launcher` fixtures are
parametrized over both): the attacks run where the agent runs (`container`:
sandbox mode's one container, sidecar mode's agent container); checks of
what root does to the task run where the task is (`task_container`, the same
container in sandbox mode). `agent_socket` and `daemon_url` are how the agent
reaches its daemon in that mode.
"""

from __future__ import annotations

import json
import os
import shlex
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssebench.agent import load_agent
from ssebench.defaults import Egress, Mode
from ssebench.engine import DockerBackend, cleanup, client
from ssebench.image import image_names
from ssebench.live import LiveRun, ModelLink, running
from ssebench.reaper import Session, reap_session, remove_kept
from ssebench.result import make_run_dir, new_run_id, read_json_object, read_result, read_safely
from ssebench.run import collect
from ssebench.runspec import SIDECAR_AGENT_SOCKET, RunConfig, limits_for
from ssebench.settings import Settings
from ssebench.task import Task
from tests.helpers import in_the_checks as in_the_checks  # the suite's tests import it from here
from tests.helpers import wait_for_agent_phase

PYTHON = "/opt/ssebench/venv/bin/python"
LEVELS = [0, 2, 4]
MODES = ["sandbox", "sidecar"]
SLEEP = ["sleep", "3600"]
# Ends the held agent (model's `sleep`), as its own exit would.
KILL_SLEEP = """
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        mine = os.stat(f"/proc/{pid}").st_uid == 1000
        if mine and open(f"/proc/{pid}/comm").read().strip() == "sleep":
            os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
"""


@dataclass
class HeldRun:
    """A run in its agent phase, to attack; `finish()` lets it grade."""

    live: LiveRun
    config: RunConfig
    run_dir: Path
    level: int
    source: str
    stack: ExitStack
    result: dict[str, Any] | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Remove the run's containers, volumes and network, as the end of a run does."""
        self.stack.close()

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def container(self) -> Any:
        """Where the agent runs."""
        return client().containers.get(self.live.handle.id)

    @property
    def task_container(self) -> Any:
        """Where the daemon, the task's files and the checks are (sandbox mode: the same container)."""
        return client().containers.get((self.live.task or self.live.handle).id)

    @property
    def agent_socket(self) -> str:
        return SIDECAR_AGENT_SOCKET if self.mode == "sidecar" else "/tmp/sse.sock"

    @property
    def daemon_url(self) -> str:
        """The daemon's HTTP listener as the agent reaches it."""
        if self.live.task is None:
            return "http://127.0.0.1:4263"
        return f"http://{self.task_container.name}:4263"

    def _on(self, task: bool) -> Any:
        return self.task_container if task else self.container

    def sh(self, user: str, script: str, workdir: str | None = None, check: bool = True, *, task: bool = False) -> str:
        """Run a bash script as `user` where the agent is (`task`: where the task is); its output
        (asserting exit 0 when `check`)."""
        code, out = self._on(task).exec_run(["bash", "-c", script], user=user, workdir=workdir or self.source)
        text = str(out.decode(errors="replace"))
        if check:
            assert code == 0, f"exit {code} as {user}:\n{script}\n{text}"
        return text

    def status(self, user: str, script: str, *, task: bool = False) -> int:
        code, _ = self._on(task).exec_run(["bash", "-c", script], user=user, workdir=self.source)
        return int(code)

    def py(self, user: str, code: str, env: dict[str, str] | None = None, *, task: bool = False) -> Any:
        """Run isolated Python as `user` in the agent's working directory; what it prints, as JSON.

        Isolated (-I) so that the test's own probe never imports what an attack planted there.
        """
        environment = {"SSE_DAEMON_SOCKET": self.agent_socket, "HOME": "/home/model", **(env or {})}
        exit_code, (out, err) = self._on(task).exec_run(
            [PYTHON, "-I", "-c", textwrap.dedent(code)],
            user=user,
            demux=True,
            environment=environment,
            workdir=self.source,
        )
        assert exit_code == 0, (err or b"").decode(errors="replace")
        return json.loads(out.decode())

    def finish(self, timeout: float = 600) -> dict[str, Any]:
        """End the agent as its own exit would, wait for grading, and copy the run's files out."""
        # Not pkill: only the C base image has procps.
        self.sh("root", f"{PYTHON} -I -c {shlex.quote(KILL_SLEEP)}")
        status = self.live.wait(timeout)
        self.summary["exit_code"] = status
        self.summary["files"] = collect(self.live.grader, self.run_dir)
        # result.json as the container wrote it: the tests read its fields as the file has them.
        self.result = read_json_object(self.run_dir, "result.json", limit=16 << 20)
        assert read_result(self.run_dir) is not None and self.result is not None, (
            f"no result.json (exit {status}):\n{self.logs()[-4000:]}"
        )
        return self.result

    def owner_and_mode(self, path: str) -> tuple[int, int]:
        """(uid, permission bits) of a path where the task is, read from the engine (works once it stopped)."""
        import io
        import tarfile

        stream = io.BytesIO(b"".join((self.live.task or self.live.handle).export(path)))
        with tarfile.open(fileobj=stream) as archive:
            top = archive.next()
            assert top is not None
            return top.uid, top.mode & 0o7777

    def logs(self) -> str:
        """Everything the run wrote: each container's output and every log copied out."""
        parts = [handle.logs() for _, handle in self.live.handles]
        for path in sorted(self.run_dir.glob("*.log")):
            parts.append(read_safely(self.run_dir, path.name, limit=4 << 20) or "")
        return "\n".join(parts)


@dataclass
class Launcher:
    """Starts runs of the demo's tasks for the integrity suite, and cleans up every one."""

    settings: Settings
    tasks: list[Task]
    tmp: Path
    stack: ExitStack
    mode: Mode = "sandbox"
    session: Session = field(
        default_factory=lambda: Session(id=f"integrity{uuid.uuid4().hex[:8]}", controller=os.getpid())
    )
    # What each run used of its model (filled when its run ends), by run id.
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

    def start(
        self,
        task_id: str = "c-demo",
        *,
        agent: str = "dummy",
        level: int = 2,
        command: list[str] | None = None,
        limits: dict[str, str] | None = None,
        timeout: float = 3600,
        egress: Egress = "restricted",
        hold: bool = True,
        model: str = "none",
        models: ModelLink | None = None,
        env: dict[str, str] | None = None,
        grading_timeout: float = 3600,
        backend: DockerBackend | None = None,
        image: str | None = None,
        keep: bool = False,
    ) -> HeldRun:
        """A run of `task_id`, held in its agent phase unless `hold` is false; `image` stands for the agent's;
        `keep`: its containers stay up once it is over (--keep-containers), removed as `ssebench rm` does."""
        task = self.task(task_id)
        config = RunConfig(
            task=task,
            agent=load_agent(self.settings.agents_dir, agent),
            difficulty=level,
            model=model,
            timeout=timeout,
            egress=egress,
            limits=limits_for(self.settings, task, limits),
            grading_timeout=grading_timeout,
            mode=self.mode,
            keep_container=keep,
        )
        run_id = new_run_id(level, config.mode)
        run_dir = make_run_dir(self.tmp / "results", task.id, config.model, agent, run_id)
        names = image_names(self.settings, task, agent, config.mode)
        own = ExitStack()
        self.stack.callback(own.close)
        if keep:  # the last step: once the run's block has ended (and left its containers up)
            own.callback(remove_kept, [run_id])
        backend = backend or DockerBackend()
        live = own.enter_context(
            running(
                config,
                backend,
                self.session,
                run_id,
                image or names["agent"],
                models=models,
                usage=self.usage.setdefault(run_id, {}),
                env=env,
                task_image=names["tool"],
                command=command if command is not None else SLEEP,
                runtime=backend.runtime_volume(self.settings, names["runtime"]),
            )
        )
        held = HeldRun(live=live, config=config, run_dir=run_dir, level=level, source=task.config.source, stack=own)
        if hold:
            wait_for_agent_phase(client().containers.get(live.handle.id))
        return held


@contextmanager
def launching(settings: Settings, tasks: list[Task], tmp: Path, mode: Mode = "sandbox") -> Iterator[Launcher]:
    with ExitStack() as stack:
        launcher = Launcher(settings=settings, tasks=tasks, tmp=tmp, stack=stack, mode=mode)
        try:
            yield launcher
        finally:
            stack.close()
            reap_session(launcher.session.id)


def leftovers(label: str) -> list[str]:
    """Containers, networks and volumes that carry `label` (e.g. ssebench.run=<id>)."""
    label_filter = {"label": label}
    return (
        [c["Names"][0] for c in cleanup().containers(label_filter)]
        + [n.name for n in client().networks.list(filters=label_filter)]
        + [v["Name"] for v in cleanup().volumes(label_filter)]
    )
