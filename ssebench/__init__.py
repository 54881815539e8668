"""SSEBench: how well AI coding agents fix real security vulnerabilities.

The harness side: tasks, datasets, agents and images. Runs are pytest items
(see `pytest_ssebench`); what runs inside a task container is
`ssebench.runtime`, which this package never imports. Importing `ssebench`
loads no Docker client.
"""

from ssebench.agent import Agent, AgentConfig, load_agent
from ssebench.dataset import Dataset, DatasetConfig, find_datasets, load_dataset, load_tasks
from ssebench.errors import (
    BootstrapError,
    ConfigError,
    ConfigErrors,
    DockerUnavailableError,
    ImageBuildError,
    SSEBenchError,
)
from ssebench.settings import Settings, get_settings
from ssebench.task import Task, TaskConfig, load_task
from ssebench.version import __version__

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
