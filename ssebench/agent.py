"""Agents: `agents/<name>/agent.yaml` plus a Dockerfile built on the tool image."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import field_validator

from ssebench.errors import ConfigError
from ssebench.runtime import contract
from ssebench.schema import Strict, load
from ssebench.task import TASK_ID_PATTERN


class AgentConfig(Strict):
    """`agent.yaml`."""

    name: str
    """The agent's name, `--agent NAME`: its folder's name, in lower case."""
    version: str = "0"
    """Bump it when the agent changes: results record it, and `--resume` reruns runs of another version."""
    description: str | None = None
    """One line for `ssebench agents list`."""
    needs_model: bool = True
    """Whether the agent calls a model; one that does not (dummy, reference) runs once, with model "none"."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TASK_ID_PATTERN.match(value) or value != value.lower():
            raise ValueError(f"'{value}' must be lower-case letters and digits separated by '.', '_' or '-'")
        return value


@dataclass(frozen=True)
class Agent:
    path: Path
    config: AgentConfig

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def needs_model(self) -> bool:
        return self.config.needs_model

    @property
    def gets_reference_patch(self) -> bool:
        """Only the reference agent ever sees the answer."""
        return self.name == contract.REFERENCE_AGENT


def available_agents(agents_dir: Path) -> list[str]:
    return sorted(p.name for p in agents_dir.iterdir() if (p / "agent.yaml").is_file()) if agents_dir.is_dir() else []


def load_agent(agents_dir: Path, name: str) -> Agent:
    """Load `agents_dir/name`; an unknown name lists the agents there."""
    path = agents_dir / name
    if not (path / "agent.yaml").is_file():
        known = ", ".join(available_agents(agents_dir)) or "none"
        raise ConfigError(path, "", f"no agent '{name}' here (agents available: {known})")
    config = load(AgentConfig, path / "agent.yaml")
    if config.name != name:
        raise ConfigError(path / "agent.yaml", "name", f"'{config.name}' differs from the folder name '{name}'")
    if not (path / "Dockerfile").is_file():
        raise ConfigError(
            path / "Dockerfile", "", "file not found; an agent image is built from it FROM ${SSEBENCH_TOOL}"
        )
    return Agent(path=path, config=config)
