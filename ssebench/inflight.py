"""The runs in flight on this engine, read from their containers' labels and the entrypoint's log lines.

`ssebench ps` prints them while a sweep runs (in another terminal, say).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any

# The entrypoint's own lines on the container's stderr, newest last:
# "[ssebench-entrypoint 12:00:01.250] agent: python3 /agent/agent.py (timeout 3600 s, difficulty 2)".
_SAYS = re.compile(r"^\[ssebench-entrypoint ([0-9:.]+)\] (.*)$", re.MULTILINE)
_PHASES = (
    ("graded:", "finishing"),
    ("agent exited", "grading"),
    ("agent:", "agent"),
    ("refusing to start", "failed"),
    ("infrastructure failure", "failed"),
)


def entrypoint_lines(log: str) -> list[tuple[str, str]]:
    """The entrypoint's own lines of a container log, as (time stamp, message), oldest first."""
    return _SAYS.findall(log)


def phase_of(log: str) -> str:
    """The phase a run is in, from the last line its entrypoint said: starting, agent, grading, finishing."""
    for _, said in reversed(entrypoint_lines(log)):
        for prefix, phase in _PHASES:
            if said.startswith(prefix):
                return phase
    return "starting"


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
    state: str


def runs_in_flight() -> list[InFlight]:
    """Every run container on this engine, oldest first (containers removed meanwhile are skipped)."""
    from ssebench.engine import NotFoundError, cleanup, containers

    found = []
    for container in sorted(cleanup().containers({"label": "ssebench.run"}), key=lambda c: c.get("Created", 0)):
        labels: dict[str, str] = container.get("Labels") or {}
        if labels.get("ssebench.role") == "agent":
            continue  # sidecar mode: its task container grades, stands for the run and says its phases
        try:
            log = containers().logs(container["Id"], "stderr", tail=200)
        except NotFoundError:
            continue  # it ended while we looked
        found.append(
            InFlight(
                run=labels.get("ssebench.run", "?"),
                task=labels.get("ssebench.task", "?"),
                agent=labels.get("ssebench.agent", "?"),
                model=labels.get("ssebench.model", "?"),
                difficulty=labels.get("ssebench.difficulty", "?"),
                mode=labels.get("ssebench.mode", "?"),
                trial=labels.get("ssebench.trial", "1"),
                phase=phase_of(log),
                elapsed=max(0.0, time.time() - float(container.get("Created") or time.time())),
                session=labels.get("ssebench.session", "?"),
                state=str(container.get("State") or "?"),
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
            r.phase if r.state == "running" else f"{r.phase} ({r.state})",
            _clock(r.elapsed),
            r.run,
            r.session,
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]


def as_json(runs: list[InFlight]) -> list[dict[str, Any]]:
    return [asdict(r) for r in runs]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
