"""The OS image: pulled when a registry answers, else made from debootstrap.

Nothing in SSEBench needs a registry. Without one, the Debian root file
system is made with `debootstrap --variant=minbase`, trimmed, and turned into
an image with `docker import`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from ssebench.engine import images
from ssebench.errors import BootstrapError
from ssebench.logs import file_tail
from ssebench.registry import fetch
from ssebench.settings import Settings

DEBOOTSTRAP_HINT = (
    "install debootstrap: `sudo apt-get install debootstrap` (Debian, Ubuntu) or "
    "`sudo dnf install debootstrap` (Fedora), then run `sudo ssebench images bootstrap`"
)

# What a Docker "slim" image leaves out; less disk in every layer above it.
_DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _sources_list(settings: Settings) -> str:
    suite, mirror = settings.debian_suite, settings.debian_mirror
    security = mirror.replace("/debian", "/debian-security") if mirror.endswith("/debian") else None
    lines = [f"deb {mirror} {suite} main", f"deb {mirror} {suite}-updates main"]
    if security and suite not in ("sid", "unstable"):
        lines.append(f"deb {security} {suite}-security main")
    return "\n".join(lines) + "\n"


def bootstrap(settings: Settings) -> str:
    """Make the OS image with debootstrap and docker import; return its id."""
    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None
    )
    if debootstrap is None:
        raise BootstrapError(f"{settings.os_image} is not present and cannot be pulled; {DEBOOTSTRAP_HINT}")
    if os.geteuid() != 0:
        raise BootstrapError(
            f"{settings.os_image} is not present and cannot be pulled; debootstrap needs root: "
            "run `sudo ssebench images bootstrap` once"
        )
    work = Path(tempfile.mkdtemp(prefix="bootstrap-", dir=_work_dir(settings)))
    root, tarball = work / "root", work / "root.tar"
    log = settings.cache_dir / "logs" / "bootstrap.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        _log(f"bootstrapping {settings.os_image} with debootstrap ({settings.debian_suite}); log: {log}")
        with log.open("w") as out:
            run = subprocess.run(
                [debootstrap, "--variant=minbase", settings.debian_suite, str(root), settings.debian_mirror],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if run.returncode != 0:
            tail = file_tail(log, 15)
            raise BootstrapError(f"debootstrap failed (exit {run.returncode}); log: {log}\n{tail}")
        (root / "etc/apt/sources.list").write_text(_sources_list(settings))
        (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
        (root / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(_DPKG_EXCLUDES)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(tarball), "."], check=True)
        images().import_tarball(tarball, settings.os_image, ['CMD ["bash"]', "ENV LANG=C.UTF-8"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    made = images().id(settings.os_image)
    if made is None:
        raise BootstrapError(f"docker import did not produce {settings.os_image}; see {log}")
    _log(f"bootstrapped {settings.os_image} ({made[:19]})")
    return made


def _work_dir(settings: Settings) -> Path:
    path = settings.cache_dir / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def ensure_os_image(settings: Settings, *, force: bool = False) -> str:
    """The OS image's id: present, else pulled (from --registry, then from its own registry), else
    bootstrapped. (`build_images` pushes it to --registry with the rest.)"""
    if not force and (present := images().id(settings.os_image)):
        return present
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(settings.cache_dir / "os-image.lock")):
        if not force and (present := images().id(settings.os_image)):
            return present
        # With a registry, the image the cluster's builds used comes first: a newer one from Debian's
        # registry would change every digest above it.
        if not force and (fetched := fetch(settings, settings.os_image)):
            return fetched
        if not force and (pulled := images().pull(settings.os_image)):
            return pulled
        return bootstrap(settings)
