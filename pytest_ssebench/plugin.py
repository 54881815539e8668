"""Entry point of the SSEBench pytest plugin (registered under `pytest11`).

It declares options, ini keys and hooks; the session machinery
(`pytest_ssebench.sweep`) is registered only when an agent is asked for,
so `pytest tests` and other projects' runs pay nothing for it.
"""

from __future__ import annotations

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
}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if not (config.option.agent or config.getini("ssebench_agents")):
        return
    from pytest_ssebench.sweep import Sweep

    config.pluginmanager.register(Sweep(config), "ssebench-sweep")
