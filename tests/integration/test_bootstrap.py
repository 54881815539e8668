"""The OS image without a registry: pull fails, debootstrap + docker import makes it."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from ssebench.bootstrap import DEBOOTSTRAP_HINT, ensure_os_image
from ssebench.engine import client, images
from ssebench.errors import BootstrapError
from ssebench.settings import Settings

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _unpullable(tmp_path: Path) -> Settings:
    # A name no registry has, so the pull fails as it does offline.
    return Settings(os_image=f"ssebench-test/os-{uuid.uuid4().hex[:8]}:bootstrap", cache_dir=tmp_path / "cache")


def test_without_debootstrap_the_error_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ssebench.bootstrap.shutil.which", lambda name: None)
    monkeypatch.setattr("ssebench.bootstrap.os.path.exists", lambda path: False)
    with pytest.raises(BootstrapError) as info:
        ensure_os_image(_unpullable(tmp_path))
    assert DEBOOTSTRAP_HINT in str(info.value)


def test_bootstrap_when_the_image_cannot_be_pulled(tmp_path: Path) -> None:
    # `make test` installs debootstrap and CI runs as root: this test bootstraps for real, or fails saying why.
    assert shutil.which("debootstrap") or os.path.exists("/usr/sbin/debootstrap"), (
        "debootstrap is missing: run make bootstrap (it installs it)"
    )
    assert os.geteuid() == 0, "debootstrap needs root: run the suite as root (CI does)"
    settings = _unpullable(tmp_path)
    name = settings.os_image
    try:
        made = ensure_os_image(settings)
        assert made == images().id(name)
        out = (
            client()
            .containers.run(
                name,
                ["bash", "-c", "cat /etc/debian_version /etc/apt/sources.list"],
                remove=True,
                network_disabled=True,
            )
            .decode()
        )
        assert f"deb {settings.debian_mirror} {settings.debian_suite} main" in out
        assert ensure_os_image(settings) == made  # present now: nothing is made again
        assert not any((tmp_path / "cache" / "tmp").iterdir())  # the root fs was cleaned up
    finally:
        if images().id(name):
            client().images.remove(name, force=True)
