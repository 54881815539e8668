"""Entry point of the SSEBench pytest plugin (registered under `pytest11`).

It only declares options and ini keys; the session machinery arrives with
the plugin issue and is registered only when an --agent is given.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ssebench", "SSEBench runs")
    group.addoption("--agent", action="append", default=[], metavar="NAME",
                    help="agent to run on each collected task (repeatable)")
