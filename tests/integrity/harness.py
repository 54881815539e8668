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

A `Target` stands for the demo's images: images of any task, named by the
environment (`SSEBENCH_INTEGRITY_*`), with the task read from the image
itself, so that the bypass suite can attack a task's images as built
elsewhere (docs/integrity.md#checking-your-own-task-images).
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import tarfile
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssebench.agent import load_agent
from ssebench.archive import extract
from ssebench.defaults import Egress, Mode
from ssebench.engine import DockerBackend, NotFoundError, cleanup, client, containers, images
from ssebench.errors import ConfigErrors, SSEBenchError
from ssebench.image import LABEL_DATASET, image_names
from ssebench.live import LiveRun, ModelLink, running
from ssebench.reaper import Session, reap_session, remove_kept
from ssebench.result import make_run_dir, new_run_id, read_json_object, read_result, read_safely
from ssebench.run import collect
from ssebench.runspec import RESULTS_CAP, RESULTS_FILE_CAP, SIDECAR_AGENT_SOCKET, RunConfig, limits_for
from ssebench.runtime.contract import TASK_DIR
from ssebench.schema import read_yaml, validate
from ssebench.settings import Settings
from ssebench.task import Task, TaskConfig
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


# The images the bypass suite attacks in each mode instead of the demo's, and the source tree's path in them.
IMAGE_VARIABLES = {
    "sandbox": ("SSEBENCH_INTEGRITY_IMAGE",),
    "sidecar": ("SSEBENCH_INTEGRITY_SIDECAR_ENV_IMAGE", "SSEBENCH_INTEGRITY_SIDECAR_AGENT_IMAGE"),
}
SOURCE_VARIABLE = "SSEBENCH_INTEGRITY_SOURCE"
_BUILD_HINT = "`ssebench images build DATASET --agent dummy --mode sandbox,sidecar` builds a task's and names them"


class ImagesNotNamed(SSEBenchError):
    """The environment names images, but none for this mode: its tests are skipped (or, run as a script, the
    mode asked for cannot run)."""


@dataclass(frozen=True)
class Target:
    """Images to attack in one mode in place of the demo's, with the task they hold.

    `agent` is where the agent runs (sandbox mode's one image: a task's tool image with an agent; sidecar
    mode's agent image), `tool` where the task is (sidecar mode's task image; sandbox mode's same image).
    """

    agent: str
    tool: str
    task: Task


def target_from_environment(mode: str, tmp: Path, environ: Mapping[str, str] = os.environ) -> Target | None:
    """The images the environment names for `mode`; None when it names none at all (the demo's are used).

    Raises ImagesNotNamed when it names only the other mode's, SSEBenchError (one line naming the variable and
    the fix) for an image that is missing or holds no task.
    """
    named = {v: environ[v].strip() for vs in IMAGE_VARIABLES.values() for v in vs if environ.get(v, "").strip()}
    if not named:
        if environ.get(SOURCE_VARIABLE, "").strip():
            raise SSEBenchError(
                f"{SOURCE_VARIABLE} is the source tree's path in the images the other SSEBENCH_INTEGRITY_* "
                "variables name, and none is set: set them too, or unset it to attack the demo's images"
            )
        return None
    wanted = IMAGE_VARIABLES[mode]
    missing = [v for v in wanted if v not in named]
    if len(missing) == len(wanted):
        raise ImagesNotNamed(f"{mode} mode's images are not named: set {' and '.join(wanted)} to attack them")
    if missing:
        raise SSEBenchError(f"{missing[0]} is not set: {mode} mode attacks two images; set it beside {wanted[0]}")
    for variable in wanted:
        if images().labels(named[variable]) is None:
            raise SSEBenchError(
                f"{variable}: there is no image {named[variable]} on this engine: name one `docker images` "
                f"lists ({_BUILD_HINT})"
            )
    holder = wanted[0]  # sandbox mode's image, sidecar mode's task image
    task = task_in_image(named[holder], holder, tmp, environ.get(SOURCE_VARIABLE, "").strip() or None)
    return Target(agent=named[wanted[-1]], tool=named[holder], task=task)


def task_in_image(image: str, variable: str, tmp: Path, source: str | None = None) -> Task:
    """The task an image holds, read from its /ssebench (config.yaml, the fix, the PoCs) into `tmp`, laid out
    as a task folder's `sse/`; `source` stands for config.yaml's."""
    made = containers().create(image, command=["true"], user="root")  # never started: only read
    try:
        archive = containers().archive(made, TASK_DIR)
    except NotFoundError:
        raise SSEBenchError(
            f"{variable}: {image} holds no {TASK_DIR}: name a task's image (its tool image, with an agent in "
            f"sandbox mode; {_BUILD_HINT})"
        ) from None
    finally:
        containers().remove(made)
    unpacked = tmp / "image"
    # The harness's own extraction (regular files and folders only, within caps), not tarfile's: the image may
    # be anyone's, and tarfile's "data" filter had ways around it before Python 3.11.13.
    extract(iter([archive]), unpacked / TASK_DIR.strip("/"), file_cap=RESULTS_FILE_CAP, total_cap=RESULTS_CAP)
    for path in unpacked.rglob("*"):  # as a task folder's files are: the reference agent reads its patch as model
        path.chmod(0o755 if path.is_dir() else 0o644)
    data = read_yaml(unpacked / TASK_DIR.strip("/") / "config.yaml")
    if source is not None and isinstance(data, dict):
        data["source"] = source
    try:
        config = validate(TaskConfig, unpacked / "config.yaml", data)
    except ConfigErrors as exc:
        first = exc.errors[0]
        if source is not None and first.field == "source":
            raise SSEBenchError(f"{SOURCE_VARIABLE}: {first.problem}") from None
        raise SSEBenchError(
            f"{variable}: {image}'s {TASK_DIR}/config.yaml: {first.field}: {first.problem} (fix the task, or name "
            "another image)"
        ) from None
    folder = tmp / config.id
    folder.mkdir(parents=True, exist_ok=True)
    shutil.move(unpacked / TASK_DIR.strip("/"), folder / "sse")
    dataset = (images().labels(image) or {}).get(LABEL_DATASET) or "image"
    return Task(path=folder, config=config, dataset=dataset)


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
    # Images named by the environment in place of the demo's (the bypass suite), with their task.
    target: Target | None = None
    session: Session = field(
        default_factory=lambda: Session(id=f"integrity{uuid.uuid4().hex[:8]}", controller=os.getpid())
    )
    # What each run used of its model (filled when its run ends), by run id.
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

    def start(
        self,
        task_id: str | None = None,
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
        """A run of `task_id` (c-demo, or the target's task), held in its agent phase unless `hold` is false;
        `image` stands for the agent's; `keep`: its containers stay up once it is over (--keep-containers),
        removed as `ssebench rm` does."""
        task = self.task(task_id or (self.target.task.id if self.target else "c-demo"))
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
        if self.target is not None:  # its images in place of the ones built for the task (the runtime's is)
            names = {**names, "agent": self.target.agent, "tool": self.target.tool}
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
                # An agent with software of its own gets its volume, as a run of it does (ssebench.run).
                software=(
                    backend.agent_volume(self.settings, config.agent, names["runtime"])
                    if config.agent.software_digest
                    else None
                ),
            )
        )
        held = HeldRun(live=live, config=config, run_dir=run_dir, level=level, source=task.config.source, stack=own)
        if hold:
            wait_for_agent_phase(client().containers.get(live.handle.id))
        return held


@contextmanager
def launching(
    settings: Settings, tasks: list[Task], tmp: Path, mode: Mode = "sandbox", target: Target | None = None
) -> Iterator[Launcher]:
    with ExitStack() as stack:
        launcher = Launcher(settings=settings, tasks=tasks, tmp=tmp, stack=stack, mode=mode, target=target)
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
