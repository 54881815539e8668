"""A registry that the machines of a cluster share images through (`--registry HOST:PORT`).

Images keep their local names (`ssebench/tool/c-demo:...`); in the registry
each one is `HOST:PORT/<local name>`. A build pushes what it makes there;
a machine that lacks an image (or holds a stale one) pulls it before it
would build it, and takes it only if it carries the digest the plan asks
for. Without a registry both do nothing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ssebench.engine import images
from ssebench.errors import SSEBenchError

if TYPE_CHECKING:
    from ssebench.settings import Settings

_HOST_PORT = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:]+\]):[0-9]{1,5}$")


def parse_registry(text: str) -> str:
    """`HOST:PORT` as given (lower case), or ValueError saying what to give."""
    value = text.strip().lower().rstrip("/")
    if not _HOST_PORT.match(value) or not 0 < int(value.rpartition(":")[2]) < 65536:
        raise ValueError(f"{text!r}: give the registry as HOST:PORT, e.g. 127.0.0.1:5000")
    return value


def remote_name(settings: Settings, image: str) -> str:
    return f"{settings.image_registry}/{image}"


def fetch(settings: Settings, image: str, accept: Callable[[dict[str, str]], bool] | None = None) -> str | None:
    """Pull `image` from the registry and tag it under its local name; its id, or None.

    An image whose labels `accept` refuses (another digest than the plan's) is not taken.
    """
    if not settings.image_registry:
        return None
    remote = remote_name(settings, image)
    pulled = images().pull(remote)
    if pulled is None:
        return None
    if accept is not None and not accept(images().labels(pulled) or {}):
        return None
    images().tag(pulled, image)  # the image checked, by its id: not whatever the name means by now
    return pulled


def publish(settings: Settings, image: str) -> bool:
    """Push `image` to the registry under its remote name; False without a registry.

    A refused push is an error: the machines that would pull it must not
    fall back to building silently.
    """
    if not settings.image_registry:
        return False
    remote = remote_name(settings, image)
    images().tag(image, remote)
    try:
        images().push(remote)
    except SSEBenchError as exc:
        raise SSEBenchError(f"--registry {settings.image_registry}: {exc}") from None
    print(f"pushed   {image} to {settings.image_registry}", file=sys.stderr, flush=True)
    return True
