"""The packages' public faces: pinned exports, cheap imports, one version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sse
import ssebench


def test_ssebench_exports_are_pinned() -> None:
    assert ssebench.__all__ == sorted(ssebench.__all__)
    assert ssebench.__all__ == [
        "Agent", "AgentConfig", "BootstrapError", "ConfigError", "ConfigErrors", "Dataset", "DatasetConfig",
        "DockerUnavailableError", "ImageBuildError", "SSEBenchError", "Settings", "Task", "TaskConfig",
        "__version__", "find_datasets", "get_settings", "load_agent", "load_dataset", "load_task", "load_tasks",
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


def test_packages_pass_mypy_strict() -> None:
    """STYLE.md's aim, kept: `mypy --strict` over the packages, as configured in pyproject.toml."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
