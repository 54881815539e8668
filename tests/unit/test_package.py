"""The packages' public faces: pinned exports, cheap imports, one version."""

from __future__ import annotations

import subprocess
import sys

import sse

import ssebench


def test_ssebench_exports_are_pinned() -> None:
    assert ssebench.__all__ == sorted(ssebench.__all__)
    assert ssebench.__all__ == [
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


def test_sdk_and_harness_share_one_version() -> None:
    assert sse.__version__ == ssebench.__version__


HEAVY = ("docker", "testcontainers", "uvicorn", "mcp", "starlette", "httpx", "requests")


def test_imports_are_cheap() -> None:
    code = (
        "import sys, ssebench, sse, pytest_ssebench.plugin, ssebench.cli;"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_sse_loads_no_event_loop_machinery() -> None:
    """Every agent and the evaluator start with `import sse`; asyncio alone cost them 60 ms each."""
    code = "import sys, sse, sse.dialog, sse.grading; print(sorted(m for m in sys.modules if m.startswith('asyncio')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    control = subprocess.run(
        [sys.executable, "-c", "import sys, asyncio; print('asyncio' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert control.strip() == "True"  # the listing sees asyncio when it is loaded


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    """Every pytest process of the environment loads the plugin: it must cost nothing until agents are asked for."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest_ssebench.plugin"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "pytest_ssebench.options" in imported  # the control: the listing is read right
    heavy = sorted(
        m
        for m in imported
        if m.split(".")[0] in {*HEAVY, "pydantic", "pydantic_core", "yaml"}
        or m in {"ssebench.run", "ssebench.task", "ssebench.settings", "pytest_ssebench.sweep"}
    )
    assert heavy == []


def test_every_export_resolves() -> None:
    for name in ssebench.__all__:
        assert getattr(ssebench, name) is not None, name
