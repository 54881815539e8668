"""Labels on everything a session starts, and removing what dead sessions left behind.

Every container, network and volume carries:

    ssebench.session     the pytest (or CLI) session that started it
    ssebench.host        the machine that session runs on
    ssebench.controller  pid of the session's main process
    ssebench.owner       pid of the process that started it (an xdist worker, say)

A session removes its own resources when it ends. One that dies without
ending (kill -9, a crashed worker) leaves them; the next session on the same
host removes every resource whose controller or owner process is gone.

The labels' names are the contract's (`ssebench.runtime.contract`), with a run's own.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from dataclasses import dataclass

from ssebench.engine import cleanup
from ssebench.runtime.contract import CONTROLLER_LABEL as CONTROLLER
from ssebench.runtime.contract import HOST_LABEL as HOST
from ssebench.runtime.contract import OWNER_LABEL as OWNER
from ssebench.runtime.contract import SESSION_LABEL as SESSION


@dataclass(frozen=True)
class Session:
    id: str
    controller: int

    @classmethod
    def new(cls) -> Session:
        return cls(id=uuid.uuid4().hex[:12], controller=os.getpid())

    def labels(self) -> dict[str, str]:
        return {SESSION: self.id, HOST: socket.gethostname(), CONTROLLER: str(self.controller), OWNER: str(os.getpid())}


def _alive(pid: str | None) -> bool:
    try:
        os.kill(int(pid or ""), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True  # not ours to judge: another user's live process, or no pid label
    return True


def _orphaned(labels: dict[str, str]) -> bool:
    if labels.get(HOST) != socket.gethostname():
        return False  # another machine's session; only it knows whether it lives
    return not _alive(labels.get(CONTROLLER)) or not _alive(labels.get(OWNER))


def _remove(session: str | None, only_orphans: bool) -> int:
    engine = cleanup()
    filters = {"label": f"{SESSION}={session}" if session else SESSION}
    removed = 0
    # Each removal is False when the thing went meanwhile (its run ended, or another reaper).
    for container in engine.containers(filters):
        if only_orphans and not _orphaned(container.get("Labels") or {}):
            continue
        removed += engine.remove_container(container["Id"])
    for network in engine.networks(filters):
        if only_orphans and not _orphaned(network.get("Labels") or {}):
            continue
        removed += engine.remove_network(network["Id"])  # by id: names of networks need not be unique
    for volume in engine.volumes(filters):  # last: a volume goes once no container uses it
        if only_orphans and not _orphaned(volume.get("Labels") or {}):
            continue
        removed += engine.remove_volume(volume["Name"])
    return removed


def reap_session(session_id: str) -> int:
    """Remove every container, network and volume of a session; return how many."""
    return _remove(session_id, only_orphans=False)


def reap_orphans() -> int:
    """Remove what sessions on this host left when their process died."""
    removed = _remove(None, only_orphans=True)
    if removed:
        print(
            f"ssebench: removed {removed} container(s), network(s) and volume(s) left by dead sessions", file=sys.stderr
        )
    return removed
