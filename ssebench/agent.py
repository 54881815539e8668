"""Agents: `agents/<name>/agent.yaml` plus a Dockerfile built on the tool image.

An agent's own software (`software:`) is not in that image: it is installed
once per agent version into a volume that every run of the agent mounts
read-only at /opt/agents/<name> (`ssebench.agentvolume`), so that each task
adds only the agent's launcher to the disk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pydantic import field_validator

from ssebench.defaults import ModelProtocol
from ssebench.errors import ConfigError, ConfigErrors
from ssebench.runtime import contract
from ssebench.schema import Strict, load
from ssebench.task import TASK_ID_PATTERN

# Where an agent's software volume is mounted in the container that runs the agent: its venv's root.
AGENTS_HOME = "/opt/agents"
# The pinned closure of an agent's Python packages, beside its agent.yaml.
PYTHON_CLOSURE = "requirements.txt"
# `name==version` and nothing else: a pin that a wheel file answers exactly (PEP 503 names, any case).
_PIN = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([A-Za-z0-9][A-Za-z0-9.+!-]*)$")


def normalized(name: str) -> str:
    """A package's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(text: str) -> tuple[str, str] | None:
    """(normalized name, version) of `name==version`; None for anything else."""
    found = _PIN.match(text.strip())
    return (normalized(found.group(1)), found.group(2)) if found else None


class Software(Strict):
    """`software:`: what the agent runs, pinned; installed on the host's download into the agent's volume."""

    python: tuple[str, ...] = ()
    """The Python packages the agent is, each name==version; their whole closure is pinned in requirements.txt
    beside agent.yaml (`ssebench agents lock NAME` makes it)."""

    @field_validator("python")
    @classmethod
    def _pins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if parse_pin(item) is None:
                raise ValueError(f"'{item}' must be pinned exactly as name==version, e.g. mini-swe-agent==2.4.6")
        return value


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
    protocol: ModelProtocol = "openai-chat"
    """The protocol it speaks to its model: openai-chat, openai-responses or anthropic-messages. A session
    refuses a model that does not serve it (a scripted model serves all three)."""
    software: Software | None = None
    """What it runs, pinned: installed once per agent version into a volume every run of it mounts read-only
    at /opt/agents/<name> (docs/agents.md)."""

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
    def protocol(self) -> ModelProtocol:
        return self.config.protocol

    @property
    def gets_reference_patch(self) -> bool:
        """Only the reference agent ever sees the answer."""
        return self.name == contract.REFERENCE_AGENT

    @property
    def grades_predictions(self) -> bool:
        """The predictions agent applies a prediction's patch (`--predictions`) and does nothing else."""
        return self.name == contract.PREDICTIONS_AGENT

    @property
    def home(self) -> str:
        """Where its software is in the container that runs it (its venv's root): /opt/agents/<name>."""
        return f"{AGENTS_HOME}/{self.name}"

    @property
    def closure(self) -> Path | None:
        """The pinned closure of its Python packages (requirements.txt beside agent.yaml), if it has software."""
        return self.path / PYTHON_CLOSURE if self.config.software and self.config.software.python else None

    @cached_property
    def software_digest(self) -> str | None:
        """What identifies its software: name, version, pins and their closure (None: it has none). Part of a
        run's identity (summary.json, --resume) and the name of its volume."""
        if self.closure is None:
            return None
        from ssebench.image import digest  # the image module imports this one

        assert self.config.software is not None
        # As pip compares them: `X_y==1` and `x-y==1` are one package.
        pins = json.dumps(sorted("==".join(parse_pin(item) or (item, "")) for item in self.config.software.python))
        return digest("agent-software", self.name, self.config.version, pins, self.closure.read_text("utf-8"))


def available_agents(agents_dir: Path) -> list[str]:
    return sorted(p.name for p in agents_dir.iterdir() if (p / "agent.yaml").is_file()) if agents_dir.is_dir() else []


def load_agent(agents_dir: Path, name: str, *, closure: bool = True) -> Agent:
    """Load `agents_dir/name`; an unknown name lists the agents there. Its software's closure is checked
    against agent.yaml unless `closure` is false (`ssebench agents lock`, which makes it)."""
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
    agent = Agent(path=path, config=config)
    if closure and agent.closure is not None:
        check_closure(agent.closure, config.software.python if config.software else ())
    return agent


# A wheel's digest in a closure line, as pip's hash-checking mode reads it.
_WHEEL_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def read_closure(path: Path) -> dict[str, str]:
    """A closure file's pins, by normalized name; ConfigErrors naming each line that is not
    `name==version --hash=sha256:HEX` (comments and blank lines aside): the wheels installed are those locked."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            path,
            "",
            "file not found; an agent with software.python pins its whole closure there, one "
            "name==version --hash=sha256:HEX a line (make it with `ssebench agents lock NAME`)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read as UTF-8 text: {exc}") from None
    pins: dict[str, str] = {}
    errors: list[ConfigError] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        first, *hashes = line.split()
        pin = parse_pin(first)
        if pin is None:
            errors.append(ConfigError(path, f"line {number}", f"'{line}' must be pinned exactly as name==version"))
        elif not hashes or not all(_WHEEL_HASH.fullmatch(h) for h in hashes):
            errors.append(
                ConfigError(
                    path,
                    f"line {number}",
                    f"'{first}' must carry its wheel's digest (--hash=sha256:HEX): make the closure again with "
                    "`ssebench agents lock NAME --keep-versions`",
                )
            )
        elif pin[0] in pins:
            errors.append(ConfigError(path, f"line {number}", f"'{line}': {pin[0]} is pinned twice; keep one"))
        else:
            pins[pin[0]] = pin[1]
    if errors:
        raise ConfigErrors(errors)
    return pins


def check_closure(path: Path, wanted: tuple[str, ...]) -> None:
    """Every package of software.python is in the closure at its version; ConfigError naming the first not."""
    pins = read_closure(path)
    for item in wanted:
        name, version = parse_pin(item) or ("", "")
        if pins.get(name) != version:
            have = f"{name}=={pins[name]}" if name in pins else "no pin of it"
            raise ConfigError(
                path,
                name,
                f"agent.yaml's software.python has {item} but this closure has {have}: make it again "
                "with `ssebench agents lock NAME`",
            )
