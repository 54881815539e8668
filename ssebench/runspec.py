"""What a run is before it runs: its configuration, and the containers, environment, labels, volumes and
network it gets (the specs `ssebench.live` starts).

Each run has a network of its own (internal unless egress is open), so no
run can reach another's container. Nothing of the host is bind-mounted but
the reference patch for the reference agent, and a prediction's patch for
the predictions agent: results come out by copy when the run is over
(`ssebench.archive`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssebench.agent import Agent
from ssebench.backend import ContainerSpec, Mount, Volume
from ssebench.defaults import Egress, Mode
from ssebench.limits import Limits
from ssebench.reaper import Session
from ssebench.runtime.contract import (
    AGENT_TIMEOUT,
    ARCHIVE_CAP,
    ARCHIVE_FILE_CAP,
    ENV,
    GRADING_TIMEOUT,
    KEPT_LABEL,
    MCP_PORT,
    ROLE_LABEL,
    RUNTIME_HOME,
    SIDECAR_AGENT_SOCKET,
    SIDECAR_SOCKETS,
    RunLabels,
    RuntimeSettings,
)
from ssebench.runtime.contract import ARCHIVE as ARCHIVE_IN_CONTAINER
from ssebench.runtime.contract import PREDICTION_PATCH as PREDICTION_IN_CONTAINER
from ssebench.runtime.contract import REFERENCE_PATCH as REFERENCE_IN_CONTAINER
from ssebench.runtime.contract import RESULTS as RESULTS_IN_CONTAINER
from ssebench.settings import Settings
from ssebench.task import Task, task_file

if TYPE_CHECKING:
    from ssebench.predictions import Prediction

__all__ = [
    "ARCHIVE_CAP",
    "ARCHIVE_FILE_CAP",
    "ARCHIVE_IN_CONTAINER",
    "PREDICTION_IN_CONTAINER",
    "REFERENCE_IN_CONTAINER",
    "RESULTS_CAP",
    "RESULTS_FILE_CAP",
    "RESULTS_IN_CONTAINER",
    "SIDECAR_AGENT_SOCKET",
    "RunConfig",
    "container_spec",
    "limits_for",
    "network_name",
    "run_env",
    "run_labels",
    "sidecar_specs",
    "tree_volume",
]

# What the host keeps of a run's files: the root-written results, and the agent's archive.
RESULTS_FILE_CAP, RESULTS_CAP = 256 << 20, 1 << 30


@dataclass(frozen=True)
class RunConfig:
    task: Task
    agent: Agent
    model: str = "none"
    difficulty: int = 2
    mode: Mode = "sandbox"
    timeout: float = AGENT_TIMEOUT
    grading_timeout: float = GRADING_TIMEOUT
    egress: Egress = "restricted"
    keep_container: bool = False
    limits: Limits = field(default_factory=Limits)
    # Which of the repeated trials of the same task x agent x model x difficulty x mode this is (from 1).
    trial: int = 1
    # The run's id when it is given (`ssebench run --run-id`); else each attempt gets a new one.
    run_id: str | None = None
    # The patch the predictions agent applies (`--predictions`); None for every other agent.
    prediction: Prediction | None = None

    @property
    def reference_run(self) -> bool:
        return self.agent.gets_reference_patch

    @property
    def internal_network(self) -> bool:
        """Whether the run's network is internal: no route out (egress restricted, the default)."""
        return self.egress == "restricted"

    def describe(self) -> dict[str, Any]:
        # A prediction's patch is part of its run's identity (--resume): the same model may be graded again
        # with another patch. Other runs' summaries stay as they were.
        prediction = {"prediction": self.prediction.digest} if self.prediction is not None else {}
        return {
            "agent": self.agent.name,
            "agent_version": self.agent.config.version,
            "agent_software": self.agent.software_digest,
            "model": self.model,
            "difficulty": self.difficulty,
            "mode": self.mode,
            "trial": self.trial,
            "timeout": self.timeout,
            "grading_timeout": self.grading_timeout,
            "egress": self.egress,
            "reference_run": self.reference_run,
            "limits": self.limits.describe(),
            **prediction,
        }


def limits_for(settings: Settings, task: Task, overrides: dict[str, str] | None = None, *, here: bool = True) -> Limits:
    """A run's limits: the settings' defaults, then the task's config.yaml, then the run's own option.

    `here`: the run is on this machine, whose CPUs bound them; a Ray cluster's nodes bound a run of theirs.
    """
    limits = settings.default_limits()
    if task.config.limits is not None:
        limits = limits.merged(task.config.limits.overrides(), f"{task.config_path}: limits", here=here)
    if overrides:
        limits = limits.merged(overrides, "--run-limits", here=here)
    return limits


def network_name(session: Session, run_id: str) -> str:
    return f"ssebench-{session.id}-{run_id}"


def container_spec(
    config: RunConfig,
    image: str,
    session: Session,
    run_id: str,
    network: str | None,
    model_env: dict[str, str] | None = None,
    command: list[str] | None = None,
    *,
    runtime: str,
    software: str | None = None,
    prediction: Path | None = None,
) -> ContainerSpec:
    """The container the agent of a run runs in, with the `runtime` volume read-only at /opt/ssebench and the
    agent's `software` volume (`ssebench.agentvolume`), if it has one, read-only at /opt/agents/<name>.

    Only the reference agent ever gets the reference patch; only the predictions agent gets `prediction`,
    the host's file of its prediction's patch.
    """
    task = config.task
    mounts = []
    if config.reference_run and task.config.files.patch:
        mounts.append(
            Mount(task_file(task.path, task.config.files.patch).resolve(), REFERENCE_IN_CONTAINER, read_only=True)
        )
    if config.agent.grades_predictions and prediction is not None:
        mounts.append(Mount(prediction.resolve(), PREDICTION_IN_CONTAINER, read_only=True))
    env = run_env(config)
    if config.model != "none":
        env["SSE_MODEL_NAME"] = config.model
        env.update(model_env or {})
    return ContainerSpec(
        image=image,
        env=env,
        mounts=mounts,
        labels=run_labels(config, session, run_id),
        network=network,
        command=command,
        limits=config.limits,
        dns_options=RESTRICTED_DNS_OPTIONS if config.internal_network else (),
        volumes=[
            Volume(runtime, RUNTIME_HOME, read_only=True),
            *([Volume(software, config.agent.home, read_only=True)] if software else []),
        ],
    )


# On an internal network the engine's resolver answers for the network's own names and never for any other:
# each lookup of one would wait out the resolver's timeouts (20 s for getent, 75 s for one of c-ares's tests)
# where a machine without a network fails it at once. One try of one second instead, in the words of glibc,
# musl and Go (timeout, attempts) and of older c-ares (retrans in ms, retry); each ignores the others'.
RESTRICTED_DNS_OPTIONS = ("timeout:1", "attempts:1", "retrans:1000", "retry:1")


def run_env(config: RunConfig) -> dict[str, str]:
    """The runtime settings of a run's containers (`ssebench.runtime.contract.RuntimeSettings`)."""
    settings = RuntimeSettings(
        difficulty=config.difficulty,
        agent_timeout=config.timeout,
        grading_timeout=float(int(config.grading_timeout)),
        file_size=config.limits.file_size,
        keep_alive=config.keep_container,
        prediction=config.agent.grades_predictions,
    )
    # A kept run's containers stay up once the run is over, for `docker exec` (ssebench.live waits for
    # their phase instead of their exit).
    kept = ("keep_alive",) if config.keep_container else ()
    predicted = ("prediction",) if config.agent.grades_predictions else ()
    return settings.to_env(
        "agent_timeout",
        "difficulty",
        "grading_timeout",
        "file_size",
        "archive_file_cap",
        "archive_cap",
        *kept,
        *predicted,
    )


def run_labels(config: RunConfig, session: Session, run_id: str) -> dict[str, str]:
    run = RunLabels(
        run=run_id,
        task=config.task.id,
        agent=config.agent.name,
        model=config.model,
        difficulty=str(config.difficulty),
        mode=config.mode,
        trial=str(config.trial),
    )
    return {**session.labels(), **run.to_labels(), **kept_labels(config)}


def kept_labels(config: RunConfig) -> dict[str, str]:
    """What marks a kept run's containers, network and volumes (--keep-containers): the reaper leaves them,
    `ssebench ps` shows them and `ssebench rm` removes them."""
    return {KEPT_LABEL: "1"} if config.keep_container else {}


def tree_volume(config: RunConfig, prefix: str) -> Volume:
    """The agent's tree: a volume of the run's own at the task's source path, which the container that holds
    the task fills from its image (the case's tree) and its entrypoint prepares (ssebench.runtime.tree)."""
    return Volume(f"{prefix}-src", config.task.config.source, fill=True)


def sidecar_specs(
    config: RunConfig, agent: ContainerSpec, task_image: str, run_id: str, session: Session
) -> tuple[ContainerSpec, ContainerSpec, list[str]]:
    """Sidecar mode: (task container, agent container, volume names) from the agent's container spec.

    The task container (the tool image) does everything that grades, as
    sandbox mode's one container does but for running the agent: the daemon,
    the MCP server, the evaluator, the tree, the hidden files and the
    results. The agent container (no task in its image) runs the agent
    alone. They share three volumes of the run: the source tree
    (`tree_volume`, prepared by the task container), the agent socket's
    directory and the agent's archive; never the results or the admin
    socket. The agent reaches the daemon through the socket volume and the
    MCP server at the task container's name on the run's network; the
    daemon's HTTP port there serves it, as any peer, the public view only.
    """
    prefix = network_name(session, run_id)
    shared = {"sockets": SIDECAR_SOCKETS, "archive": ARCHIVE_IN_CONTAINER}
    tree = tree_volume(config, prefix)
    # Only the tree comes from an image (the task's); nothing of either image enters the other volumes.
    filled = [tree, *(Volume(f"{prefix}-{key}", path) for key, path in shared.items())]
    volumes = [replace(v, fill=False) for v in filled]
    # Its name is a host name on the run's network: one DNS label (63 characters at most), unique on the engine.
    task_name = "ssebench-task-" + hashlib.sha256(prefix.encode()).hexdigest()[:16]
    sockets = RuntimeSettings(agent_socket=SIDECAR_AGENT_SOCKET, mcp_url=f"http://{task_name}:{MCP_PORT}/mcp").to_env(
        "agent_socket", "mcp_url"
    )
    # The task container gets the runtime's settings and nothing else of the agent's environment (no model
    # access: its bash tool is the agent's, but the key is the agent container's alone).
    settings = {k: v for k, v in agent.env.items() if k in ENV.values()}
    task_env = RuntimeSettings(role="task", mcp_bind="0.0.0.0").to_env("role", "mcp_bind")
    agent_env = RuntimeSettings(role="agent", source=config.task.config.source).to_env("role", "source")
    # The task container (a tool image) keeps the runtime volume; the agent's image holds a runtime of its own,
    # and the agent's container alone gets the agent's software.
    software = [v for v in agent.volumes if v.container == config.agent.home]
    task = replace(
        agent,
        image=task_image,
        name=task_name,
        mounts=[],
        command=None,
        volumes=[*(v for v in agent.volumes if v not in software), *filled],
        env={**settings, **sockets, **task_env},
        labels={**agent.labels, ROLE_LABEL: "task"},
    )
    agent = replace(
        agent,
        volumes=[*volumes, *software],
        env={**agent.env, **sockets, **agent_env},
        labels={**agent.labels, ROLE_LABEL: "agent"},
    )
    return task, agent, [v.name for v in volumes]
