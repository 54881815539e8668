"""Debian's docker-registry, run on 127.0.0.1 for the scale-out tests.

The package is unpacked into the cache, never installed: installing it would
start a service listening on every address.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker.errors

from ssebench.engine import client
from ssebench.settings import get_settings


def registry_binary() -> Path:
    """`docker-registry` from Debian's package (downloaded and unpacked on first use)."""
    root = get_settings().cache_dir / "tools" / "docker-registry"
    binary = root / "usr" / "bin" / "docker-registry"
    if binary.exists():
        return binary
    with tempfile.TemporaryDirectory() as tmp:
        if subprocess.run(["apt-get", "download", "-q", "docker-registry"], cwd=tmp).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "download", "-q", "docker-registry"], cwd=tmp, check=True)
        (deb,) = Path(tmp).glob("docker-registry_*.deb")
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return binary


@dataclass
class Registry:
    address: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_registry(root: Path) -> Iterator[Registry]:
    """A registry on 127.0.0.1 storing under `root`, stopped on exit, with the engine's names under it untagged."""
    root.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: {address}\n"
    )
    log_path = root / "registry.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([str(registry_binary()), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the registry did not start: {log_path.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield Registry(address, log_path)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        _untag(address)


def _untag(address: str) -> None:
    """Remove the engine's names under `address` (pushed or pulled through it): the port dies with the registry."""
    for image in client().images.list():
        for tag in image.tags:
            if tag.startswith(f"{address}/"):
                # An image in use by a container goes with that container's test.
                with contextlib.suppress(docker.errors.APIError):
                    client().api.remove_image(tag, noprune=True)
