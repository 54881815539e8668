"""Labels on everything a session starts, and removing what dead sessions left behind.

Every container, network and volume carries:

    ssebench.session     the pytest (or CLI) session that started it
    ssebench.host        the machine that session runs on
    ssebench.controller  pid of the session's main process
    ssebench.owner       pid of the process that started it (an xdist worker, say)

A session removes its own resources when it ends. One that dies without
ending (kill -9, a crashed worker) leaves them; the next session on the same
host removes every resource whose controller or owner process is gone.

A kept run's (--keep-containers) also carry `ssebench.kept`: no reaper removes
them, whatever became of their session; `ssebench rm` does (`remove_kept`).

The labels' names are the contract's (`ssebench.runtime.contract`), with a run's own.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ssebench.engine import cleanup
from ssebench.runtime.contract import CONTROLLER_LABEL as CONTROLLER
from ssebench.runtime.contract import HOST_LABEL as HOST
from ssebench.runtime.contract import KEPT_LABEL as KEPT
from ssebench.runtime.contract import OWNER_LABEL as OWNER
from ssebench.runtime.contract import RUN_LABEL as RUN
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


def may_live(host: str | None, *pids: str | None) -> bool:
    """Whether processes of a session may still live: False only when they ran on this machine and one of
    them is gone (another machine's session, only it knows)."""
    if host != socket.gethostname():
        return True
    return all(_alive(pid) for pid in pids)


def _orphaned(labels: dict[str, str]) -> bool:
    return not may_live(labels.get(HOST), labels.get(CONTROLLER), labels.get(OWNER))


def _remove(session: str | None, only_orphans: bool) -> int:
    engine = cleanup()
    filters = {"label": f"{SESSION}={session}" if session else SESSION}

    def reaped(labels: dict[str, str]) -> bool:
        return KEPT not in labels and (not only_orphans or _orphaned(labels))

    removed = 0
    # Each removal is False when the thing went meanwhile (its run ended, or another reaper).
    for container in engine.containers(filters):
        if reaped(container.get("Labels") or {}):
            removed += engine.remove_container(container["Id"])
    for network in engine.networks(filters):
        if reaped(network.get("Labels") or {}):
            removed += engine.remove_network(network["Id"])  # by id: names of networks need not be unique
    for volume in engine.volumes(filters):  # last: a volume goes once no container uses it
        if reaped(volume.get("Labels") or {}):
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


def remove_kept(runs: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Remove kept runs (`ssebench rm`): the named ones, every one when none is named; (run, what) for each
    container, network and volume removed, in that order (a volume goes once no container uses it).

    Only what carries both the kept label and a run's is touched, whoever started it: nothing else on the
    engine. A kept run still in flight (`ssebench ps` shows its phase) is removed all the same: its run then
    ends as an infrastructure error.
    """
    engine = cleanup()
    wanted = set(runs)
    filters = {"label": [KEPT, RUN]}

    def ours(labels: dict[str, str]) -> str | None:
        run = labels.get(RUN)
        return run if KEPT in labels and run and (not wanted or run in wanted) else None

    removed = []
    for container in engine.containers(filters):
        run = ours(container.get("Labels") or {})
        if run and engine.remove_container(container["Id"]):
            name = (container.get("Names") or [container["Id"][:12]])[0].lstrip("/")
            removed.append((run, f"container {name}"))
    for network in engine.networks(filters):
        run = ours(network.get("Labels") or {})
        if run and engine.remove_network(network["Id"]):
            removed.append((run, f"network {network.get('Name') or network['Id'][:12]}"))
    for volume in engine.volumes(filters):
        run = ours(volume.get("Labels") or {})
        if run and engine.remove_volume(volume["Name"]):
            removed.append((run, f"volume {volume['Name']}"))
    return removed
