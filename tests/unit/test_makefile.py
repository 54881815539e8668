"""`make bootstrap` installs debootstrap only when the OS image cannot be had without it.

The recipe is run for real by make, with stand-ins for what it calls: `ssebench`
(as `BIN`), `sudo` (as `SUDO`, which records what would be installed) and the
test for debootstrap (`has`). No package is installed and no engine is asked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ssebench.bootstrap import DEBOOTSTRAP_HINT

ROOT = Path(__file__).resolve().parents[2]

# What `ssebench images bootstrap` does in each case, as the real one says it.
STAND_IN = """#!/bin/sh
echo "ssebench $*" >> "$CALLS"
case "$CASE" in
  present) echo "debian:bookworm-slim is present (sha256:0123456789ab)";;
  no-engine) echo "ssebench: no engine answers at DOCKER_HOST=unix:///nowhere.sock: start the Docker engine" >&2; exit 1;;
  no-registry)
    if [ -f "$INSTALLED" ]; then echo "debian:bookworm-slim is present (sha256:made)"; exit 0; fi
    echo "ssebench: debian:bookworm-slim is not present and cannot be pulled; $HINT" >&2; exit 1;;
esac
"""
SUDO = """#!/bin/sh
echo "sudo $*" >> "$CALLS"
case "$*" in *"install -y"*) touch "$INSTALLED";; esac
"""


def bootstrap(tmp_path: Path, case: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run `make bootstrap` with debootstrap absent until the stand-in sudo installs it."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ssebench", STAND_IN), ("sudo", SUDO)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # Newer than pyproject.toml and the Makefile, so `install` has nothing to do.
    later = max(os.stat(ROOT / name).st_mtime for name in ("pyproject.toml", "sdk/pyproject.toml", "Makefile")) + 60
    os.utime(bin_dir / "ssebench", (later, later))
    calls, installed = tmp_path / "calls", tmp_path / "installed"
    env = {**os.environ, "CASE": case, "CALLS": str(calls), "INSTALLED": str(installed), "HINT": DEBOOTSTRAP_HINT}
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "bootstrap",
            f"BIN={bin_dir}",
            f"VENV={tmp_path}",
            f"SUDO={bin_dir / 'sudo'}",
            f"has={{ [ -f {installed} ]; }}",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_an_image_present_or_pulled_needs_no_debootstrap(tmp_path: Path) -> None:
    done, calls = bootstrap(tmp_path, "present")
    assert done.returncode == 0, done.stderr
    assert calls == ["ssebench images bootstrap"]
    assert "debian:bookworm-slim is present" in done.stdout


def test_without_a_registry_debootstrap_is_installed_and_the_image_made(tmp_path: Path) -> None:
    done, calls = bootstrap(tmp_path, "no-registry")
    assert done.returncode == 0, done.stderr
    assert calls[0] == "ssebench images bootstrap"
    assert "sudo apt-get install -y -q debootstrap" in calls
    assert calls[-1] == "ssebench images bootstrap"
    assert "installing debootstrap" in done.stdout
    # The first attempt's advice to install debootstrap is not shown: make did it.
    assert "install debootstrap:" not in done.stderr


def test_an_engine_that_does_not_answer_is_said_and_installs_nothing(tmp_path: Path) -> None:
    done, calls = bootstrap(tmp_path, "no-engine")
    assert done.returncode != 0
    assert calls == ["ssebench images bootstrap"]
    assert "no engine answers at DOCKER_HOST=unix:///nowhere.sock" in done.stderr
