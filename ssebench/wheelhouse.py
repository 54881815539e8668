"""The runtime's Python packages, downloaded on the host for the image's Python.

Task containers cannot be assumed to reach a package index, so the runtime
venv is installed with `pip install --no-index` from this wheelhouse. The
requirements file pins the whole closure, so the download needs no resolver.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from ssebench.errors import SSEBenchError
from ssebench.image import digest
from ssebench.logs import last_lines
from ssebench.settings import Settings

_MANYLINUX = ["manylinux2014"] + [f"manylinux_2_{minor}" for minor in range(17, 37)]


def requirements_file(settings: Settings) -> Path:
    return settings.images_dir / "runtime" / "requirements.txt"


def pip_args(python: str, machine: str) -> list[str]:
    """pip download options that select wheels for another interpreter."""
    major, minor = python.split(".")[:2]
    args = [
        "--only-binary=:all:",
        "--no-deps",
        "--python-version",
        f"{major}.{minor}",
        "--implementation",
        "cp",
        "--abi",
        f"cp{major}{minor}",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for tag in _MANYLINUX:
        args += ["--platform", f"{tag}_{machine}"]
    return args


def ensure_wheelhouse(settings: Settings, python: str, machine: str) -> Path:
    """A complete wheelhouse for `python` (e.g. '3.11') on `machine` (e.g. 'x86_64')."""
    reqs = requirements_file(settings)
    key = digest(reqs.read_text(), python, machine)[:16]
    root = settings.cache_dir / "wheelhouse"
    final = root / f"cp{python.replace('.', '')}-{machine}-{key}"
    if (final / ".complete").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{final.name}.lock")):
        if (final / ".complete").exists():
            return final
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=root))
        try:
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(partial),
                "-r",
                str(reqs),
                *pip_args(python, machine),
            ]
            run = subprocess.run(command, capture_output=True, text=True, check=False)
            if run.returncode != 0:
                tail = last_lines(run.stdout + run.stderr, 10)
                raise SSEBenchError(
                    f"downloading the runtime's wheels for Python {python} ({machine}) failed; "
                    f"the host needs a package index or PIP_FIND_LINKS with them:\n{tail}"
                )
            shutil.copy(reqs, partial / "requirements.txt")
            (partial / ".complete").write_text("ok\n")
            if final.exists():
                shutil.rmtree(final)
            partial.rename(final)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return final
