"""Entry point of the SSEBench pytest plugin (registered under `pytest11`).

It declares options, ini keys and hooks; the session machinery
(`pytest_ssebench.sweep`) is registered only when an agent (or predictions to grade) is asked for,
so `pytest tests` and other projects' runs pay nothing for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ssebench import hookspecs
from pytest_ssebench.options import add_options

MARKERS = {
    "c": "a task in C",
    "go": "a task in Go",
    "rust": "a task in Rust",
    "sandbox": "a run in sandbox mode",
    "sidecar": "a run in sidecar mode (the agent in a container of its own)",
    "ssebench": "an SSEBench run",
    "long": "a run of a task over the cost ceiling (dataset.yaml: long); -m 'not long' runs the quick set",
}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """`TASK_FOLDER::RUN` means the run of that task: the arguments name its file (`sse/config.yaml`, where
    runs are collected), since pytest refuses `::` after a folder. xdist's workers get the arguments so
    rewritten."""
    from ssebench.dataset import run_argument

    args[:] = [run_argument(arg, early_config.invocation_params.dir) for arg in args]


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if not (config.option.agent or config.getini("ssebench_agents") or config.option.ssebench_predictions):
        _say_how_to_pick_an_agent(config)
        return
    from pytest_ssebench.sweep import Sweep

    config.pluginmanager.register(Sweep(config), "ssebench-sweep")


def _holds_tasks(path: Path, depth: int = 2) -> bool:
    """Whether `path` is a task folder, or holds one within `depth` levels (a dataset, a folder of datasets)."""
    from ssebench.dataset import looks_like_task

    if looks_like_task(path):
        return True
    if depth == 0 or not path.is_dir():
        return False
    try:
        children = [child for child in path.iterdir() if child.is_dir() and not child.name.startswith(".")]
    except OSError:
        return False
    return any(_holds_tasks(child, depth - 1) for child in children)


def _say_how_to_pick_an_agent(config: pytest.Config) -> None:
    """Tasks asked for with no agent to run them: a usage error that says how to pick one, rather than a
    session that collects nothing."""
    from ssebench.dataset import argument_path

    given = [argument_path(arg) for arg in config.args]
    holding = [arg for arg in given if _holds_tasks(config.invocation_params.dir / arg)]
    if not holding:
        return
    from ssebench.agent import available_agents
    from ssebench.settings import get_settings

    try:
        agents = ", ".join(available_agents(get_settings().agents_dir)) or "none found"
    except Exception:  # the settings' own error is said when an agent is given
        agents = "see the agents/ folder"
    raise pytest.UsageError(
        f"{holding[0]} holds tasks, but no agent is given: add --agent NAME (agents: {agents}), "
        f"e.g. pytest {holding[0]} --agent reference"
    )
