"""SSEBench: how well AI coding agents fix real security vulnerabilities.

The harness side: tasks, datasets, agents and images. Runs are pytest items
(see `pytest_ssebench`); what runs inside a task container is
`ssebench.runtime`, which this package never imports. Importing `ssebench`
(or one of its light modules, such as `ssebench.limits`) loads nothing
heavy: the names below are imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ssebench.agent import Agent, AgentConfig, load_agent
    from ssebench.dataset import Dataset, DatasetConfig, find_datasets, load_dataset, load_tasks
    from ssebench.engine import DockerUnavailableError
    from ssebench.errors import BootstrapError, ConfigError, ConfigErrors, ImageBuildError, SSEBenchError
    from ssebench.settings import Settings, get_settings
    from ssebench.task import Task, TaskConfig, load_task

from ssebench.version import __version__

_HOMES = {
    "Agent": "agent",
    "AgentConfig": "agent",
    "load_agent": "agent",
    "Dataset": "dataset",
    "DatasetConfig": "dataset",
    "find_datasets": "dataset",
    "load_dataset": "dataset",
    "load_tasks": "dataset",
    "BootstrapError": "errors",
    "ConfigError": "errors",
    "ConfigErrors": "errors",
    "DockerUnavailableError": "engine",
    "ImageBuildError": "errors",
    "SSEBenchError": "errors",
    "Settings": "settings",
    "get_settings": "settings",
    "Task": "task",
    "TaskConfig": "task",
    "load_task": "task",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ssebench' has no attribute {name!r}")
    return getattr(import_module(f"ssebench.{home}"), name)


__all__ = [
    "Agent",
    "AgentConfig",
    "BootstrapError",
    "ConfigError",
    "ConfigErrors",
    "Dataset",
    "DatasetConfig",
    "DockerUnavailableError",
    "ImageBuildError",
    "SSEBenchError",
    "Settings",
    "Task",
    "TaskConfig",
    "__version__",
    "find_datasets",
    "get_settings",
    "load_agent",
    "load_dataset",
    "load_task",
    "load_tasks",
]
