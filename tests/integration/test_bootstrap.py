"""The OS image without a registry: pull fails, debootstrap + docker import makes it."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from ssebench.bootstrap import DEBOOTSTRAP_HINT, ensure_os_image
from ssebench.engine import client, image_id
from ssebench.errors import BootstrapError
from ssebench.settings import Settings

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_bootstrap_when_the_image_cannot_be_pulled(tmp_path: Path) -> None:
    # A name no registry has, so the pull fails as it does offline.
    name = f"ssebench-test/os-{uuid.uuid4().hex[:8]}:bootstrap"
    settings = Settings(os_image=name, cache_dir=tmp_path / "cache")
    if shutil.which("debootstrap") is None and not os.path.exists("/usr/sbin/debootstrap"):
        with pytest.raises(BootstrapError) as info:
            ensure_os_image(settings)
        assert DEBOOTSTRAP_HINT in str(info.value)
        return
    if os.geteuid() != 0:
        with pytest.raises(BootstrapError, match="needs root"):
            ensure_os_image(settings)
        return
    try:
        made = ensure_os_image(settings)
        assert made == image_id(name)
        out = client().containers.run(name, ["bash", "-c", "cat /etc/debian_version /etc/apt/sources.list"],
                                      remove=True, network_disabled=True).decode()
        assert f"deb {settings.debian_mirror} {settings.debian_suite} main" in out
        assert ensure_os_image(settings) == made  # present now: nothing is made again
        assert not any((tmp_path / "cache" / "tmp").iterdir())  # the root fs was cleaned up
    finally:
        if image_id(name):
            client().images.remove(name, force=True)
