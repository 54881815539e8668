"""`ssebench doctor`: what this machine needs, each line OK or the fix."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

from ssebench.errors import SSEBenchError
from ssebench.settings import Settings, get_settings

MIN_FREE_GIB = 20
LANGUAGES = ("c", "go", "rust")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _docker_root() -> str:
    from ssebench.engine import info

    return str(info().get("DockerRootDir") or "/var/lib/docker")


def storage_driver_check() -> Check:
    """The engine's storage driver: any works; fuse-overlayfs makes the task's scripts slower as sse-runner."""
    from ssebench.engine import info

    driver = str(info().get("Driver") or "unknown")
    if driver != "fuse-overlayfs":
        return Check("storage driver", True, driver)
    return Check(
        "storage driver",
        True,
        (
            "fuse-overlayfs: works, but the task's scripts, which run as sse-runner, take up to 2.4x as long as root's "
            "there (every permission check of a non-owner asks its daemon for an ACL; benchmarks/unprivileged.py); "
            "overlay2, where the kernel allows it, has no such cost (docs/performance.md)"
        ),
    )


def run_checks(settings: Settings | None = None) -> Iterator[Check]:
    from ssebench.bootstrap import DEBOOTSTRAP_HINT
    from ssebench.engine import images, version

    settings = settings or get_settings()
    try:
        found = version()
    except SSEBenchError as exc:
        yield Check("docker", False, str(exc))
        return
    yield Check("docker", True, f"engine {found} reachable")
    yield storage_driver_check()

    try:
        where = _docker_root()
        free = shutil.disk_usage(where).free / 2**30
    except (OSError, SSEBenchError):
        where, free = str(settings.cache_dir.parent), shutil.disk_usage(settings.cache_dir.parent).free / 2**30
    yield Check(
        "disk",
        free >= MIN_FREE_GIB,
        f"{free:.0f} GiB free at {where}"
        + (
            ""
            if free >= MIN_FREE_GIB
            else f"; free at least {MIN_FREE_GIB} GiB (docker system prune, or delete old ssebench images)"
        ),
    )

    os_present = images().id(settings.os_image) is not None
    yield Check(
        "os image",
        os_present,
        f"{settings.os_image} present"
        if os_present
        else f"{settings.os_image} missing; run `sudo ssebench images bootstrap`",
    )
    for language in LANGUAGES:
        ref = f"{settings.prefix}/base-{language}:{settings.base_version}"
        present = images().id(ref) is not None
        yield Check(
            f"base-{language}",
            present,
            f"{ref} present"
            if present
            else f"{ref} missing; run `ssebench images build datasets` (builds it from Debian packages)",
        )

    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None
    )
    if debootstrap:
        yield Check("debootstrap", True, f"{debootstrap} (needed only when the OS image must be bootstrapped)")
    else:
        yield Check(
            "debootstrap",
            os_present,
            ("not installed; not needed while the OS image is present (" + DEBOOTSTRAP_HINT + " to be ready)")
            if os_present
            else f"not installed; {DEBOOTSTRAP_HINT}",
        )
