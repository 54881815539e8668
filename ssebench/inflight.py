"""The runs in flight on this engine, read from their containers' labels and the phase their entrypoint writes.

`ssebench ps` prints them while a sweep runs (in another terminal, say), and the kept ones
(--keep-containers), with the command that enters each of their containers; `ssebench ps --watch` again
and again, each session's under the progress line its sweep writes (`ssebench.progress`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ssebench.archive import one_file
from ssebench.logs import columns
from ssebench.progress import PROGRESS_DIR, Snapshot, status_line
from ssebench.runtime.contract import (
    KEPT_LABEL,
    PHASE_FILE,
    PHASE_FILE_CAP,
    ROLE_LABEL,
    RUN_LABEL,
    SESSION_LABEL,
    RunLabels,
    parse_phase,
)

# The entrypoint's own lines on the container's stderr, newest last:
# "[ssebench-entrypoint 12:00:01.250] agent: python3 /agent/agent.py (timeout 3600 s, difficulty 2)".
_SAYS = re.compile(r"^\[ssebench-entrypoint ([0-9:.]+)\] (.*)$", re.MULTILINE)
# The most of a phase file's archive read: its one member's header and its text, and the tar's padding.
_ARCHIVE_CAP = 16 * 1024


def entrypoint_lines(log: str) -> list[tuple[str, str]]:
    """The entrypoint's own lines of a container log, as (time stamp, message), oldest first."""
    return _SAYS.findall(log)


def phase_of(archive: bytes | None) -> str:
    """The phase a run is in, from the archive of its phase file (`contract.PHASE_FILE`) the engine gave:
    starting, agent, grading, finishing, failed, kept; `starting` before the entrypoint wrote one (None), `?`
    for an archive that is not one regular file holding a phase.

    The file is root's, in a directory of root's (0700), in the container that grades: nothing the agent
    runs writes it. It is read all the same as one regular file, small, naming one known phase, never
    extracted, and what it says is printed, nothing more.
    """
    if archive is None:
        return "starting"
    phase = parse_phase(phase_text(archive) or b"")
    return phase.value if phase is not None else "?"


def phase_text(archive: bytes) -> bytes | None:
    """The text of the one regular file a phase file's archive holds (at most PHASE_FILE_CAP bytes); None for
    an archive that is anything else (too long, a link, more than one member, not a tar)."""
    if len(archive) > _ARCHIVE_CAP:
        return None
    return one_file(archive, PHASE_FILE_CAP)


def phase_archive(container: str) -> bytes | None:
    """The engine's archive of a container's phase file (at most _ARCHIVE_CAP and a chunk); None when there
    is no such file yet. Raises NotFoundError when the container is gone."""
    from ssebench.engine import containers

    return containers().archive_of_file(container, PHASE_FILE, _ARCHIVE_CAP)


@dataclass(frozen=True)
class InFlight:
    run: str
    task: str
    agent: str
    model: str
    difficulty: str
    mode: str
    trial: str
    phase: str
    elapsed: float
    session: str
    state: str  # the engine's (running, exited...), or `kept`: a kept run's, up
    kept: bool = False
    containers: tuple[str, ...] = ()  # the names of the run's containers (sidecar mode: task's, then agent's)


def runs_in_flight() -> list[InFlight]:
    """Every run container on this engine, oldest first (containers removed meanwhile are skipped)."""
    from ssebench.engine import EngineError, NotFoundError, cleanup

    found = []
    listed = sorted(cleanup().containers({"label": RUN_LABEL}), key=lambda c: c.get("Created", 0))
    names: dict[str, list[str]] = {}
    for container in listed:
        run_id = (container.get("Labels") or {}).get(RUN_LABEL, "?")
        names.setdefault(run_id, []).append((container.get("Names") or [container["Id"][:12]])[0].lstrip("/"))
    for container in listed:
        labels: dict[str, str] = container.get("Labels") or {}
        if labels.get(ROLE_LABEL) == "agent":
            continue  # sidecar mode: its task container grades, stands for the run and writes its phase
        try:
            phase = phase_of(phase_archive(container["Id"]))
        except NotFoundError:
            continue  # it ended while we looked
        except EngineError:
            phase = "?"  # the engine would not say (the container on its way out, say): the others still show
        run = RunLabels.from_labels(labels)
        state = str(container.get("State") or "?")
        kept = KEPT_LABEL in labels
        found.append(
            InFlight(
                run=run.run,
                task=run.task,
                agent=run.agent,
                model=run.model,
                difficulty=run.difficulty,
                mode=run.mode,
                trial=run.trial,
                phase=phase,
                elapsed=max(0.0, time.time() - float(container.get("Created") or time.time())),
                session=labels.get(SESSION_LABEL, "?"),
                state="kept" if kept and state == "running" else state,
                kept=kept,
                containers=tuple(names.get(labels.get(RUN_LABEL, "?"), ())),
            )
        )
    return found


def as_rows(runs: list[InFlight]) -> list[str]:
    header = ("TASK", "AGENT", "MODEL", "DIFF", "MODE", "TRIAL", "PHASE", "ELAPSED", "RUN", "SESSION")
    table = [header] + [
        (
            r.task,
            r.agent,
            r.model,
            r.difficulty,
            r.mode,
            r.trial,
            r.phase if r.state in ("running", "kept") else f"{r.phase} ({r.state})",
            _clock(r.elapsed),
            r.run,
            r.session,
        )
        for r in runs
    ]
    entered = [(r.run, name) for r in runs if r.state == "kept" for name in r.containers]
    if not entered:
        return columns(table)
    return [
        *columns(table),
        "",
        "kept runs (enter one with its line; `ssebench rm RUN_ID` removes it):",
        *columns([(f"  {run}", f"docker exec -it {name} bash") for run, name in entered]),
    ]


def as_json(runs: list[InFlight]) -> list[dict[str, Any]]:
    return [asdict(r) for r in runs]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def as_watch(runs: list[InFlight], snapshots: Mapping[str, Snapshot], *, now: float, results: Path) -> list[str]:
    """`ssebench ps --watch`'s screen: per session, its sweep's progress line (from the snapshot the sweep
    writes under `results`), then its runs in flight. A session whose sweep wrote no snapshot there says
    so; a snapshot whose sweep died on this machine is left out."""
    from ssebench.reaper import may_live

    by_session: dict[str, list[InFlight]] = {}
    for run in runs:
        by_session.setdefault(run.session, []).append(run)
    for session, found in snapshots.items():
        if session not in by_session and may_live(found.host, str(found.pid)):
            by_session[session] = []
    if not by_session:
        return ["no runs in flight"]
    lines: list[str] = []
    for session, in_flight in by_session.items():
        if lines:
            lines.append("")
        if session in snapshots:
            lines.append(status_line(snapshots[session], now=now, label=f"session {session}"))
        else:
            lines.append(
                f"session {session}: done and left unknown: its sweep wrote no {results / PROGRESS_DIR / session}"
                ".json (give --results its results directory)"
            )
        lines += as_rows(in_flight) if in_flight else ["(no run in flight: between runs, or building images)"]
    return lines
