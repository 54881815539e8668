"""The resource limits of a run container: defaults, per task, per run, recorded with the run.

    pids        most processes and threads in the container (a fork bomb stops there)
    memory      bytes of memory, no swap beyond it (the OOM killer ends the agent's processes first)
    cpus        CPU quota, in cores
    file_size   the largest file a process of the agent or of a check may write

Defaults come from the settings (`SSEBENCH_LIMIT_*`); a task may raise or
lower them in its config.yaml (`limits:`), and a run's option
(`--run-limits pids=512,memory=2g`) overrides both.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from ssebench.errors import SSEBenchError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
FIELDS = ("pids", "memory", "cpus", "file_size")


class LimitsError(SSEBenchError):
    """A limit given in a setting, a task or an option is malformed; the message names it."""


def parse_size(text: str | int, what: str) -> int:
    """Bytes from `123`, `512m`, `4g`, `1.5GiB`; LimitsError naming `what` otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise LimitsError(f"{what}: {text!r} is not a size; give bytes or a number with k, m, g (e.g. 4g)")
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise LimitsError(f"{what}: {text!r} must be more than zero")
    return value


def host_cpus() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Limits:
    pids: int = 1024
    memory: int = 4 << 30
    cpus: float = 2.0
    file_size: int = 4 << 30

    def check(self, where: str, *, here: bool = True) -> Limits:
        """Raise LimitsError naming `where` when a value cannot work; return self.

        `here`: the run is on this machine, so its CPUs bound `cpus`; a run of a Ray cluster's is bounded by
        the cluster's nodes instead (`ssebench.dispatch`, before it is submitted).
        """
        if self.pids < 64:
            raise LimitsError(f"{where}: pids={self.pids} is too low for the runtime itself; give at least 64")
        if self.memory < 128 << 20:
            raise LimitsError(f"{where}: memory={self.memory} is below 128m, too little for the runtime itself")
        if not here and not (0.01 <= self.cpus < float("inf")):
            raise LimitsError(f"{where}: cpus={self.cpus:g}: give 0.01 or more (the cluster's nodes bound it)")
        if here and not 0.01 <= self.cpus <= host_cpus():
            raise LimitsError(f"{where}: cpus={self.cpus:g}: give 0.01 to {host_cpus()} (the CPUs of this machine)")
        if self.file_size < 1 << 20:
            raise LimitsError(f"{where}: file_size={self.file_size} is below 1m")
        return self

    def merged(self, overrides: dict[str, Any], where: str, *, here: bool = True) -> Limits:
        """These limits with `overrides` (field -> value as written) applied; LimitsError names `where`."""
        values: dict[str, Any] = {}
        for key, raw in overrides.items():
            if key not in FIELDS:
                raise LimitsError(f"{where}: unknown limit {key!r}; use {', '.join(FIELDS)}")
            try:
                if key == "pids":
                    values[key] = int(raw)
                elif key == "cpus":
                    values[key] = float(raw)
                else:
                    values[key] = parse_size(raw, f"{where}: {key}")
            except ValueError:
                raise LimitsError(f"{where}: {key}={raw!r} is not a number") from None
        return replace(self, **values).check(where, here=here)

    def describe(self) -> dict[str, Any]:
        """What summary.json records."""
        return asdict(self)


def parse_limits(text: str, where: str) -> dict[str, str]:
    """`pids=512,memory=2g` -> {"pids": "512", "memory": "2g"}; LimitsError names `where`."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise LimitsError(f"{where}: {part!r} is not name=value; e.g. pids=512,memory=2g,cpus=1,file_size=1g")
        out[key.strip()] = value.strip()
    return out
