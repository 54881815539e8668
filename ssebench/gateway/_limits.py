"""What one run can take of the gateway process, which serves every run of a session.

The run's agent is hostile: whatever it sends to its model listener, the
other runs keep their model and the harness keeps the control API. The
tunable limits come from the settings (`SSEBENCH_GATEWAY_*`, docs/gateway.md);
the fixed ones are here.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ssebench.limits import parse_size
from ssebench.settings import Settings

log = logging.getLogger("ssebench.gateway")

# A request body: its bytes, its JSON values (a value costs the parser 50-100 bytes whatever its size
# in the body, so a body of `[{},{},...]` would take 20 times its size), and its nesting.
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_JSON_VALUES = 1_000_000
MAX_DEPTH = 64
# Per run: refused calls kept as records (and lines of its usage file), and logged; the rest are counted.
KEPT_REFUSALS = 20
# Per run: requests out of its network (a path not served, a media fetch) kept as entries of its usage.
KEPT_NETWORK_REFUSALS = 20
LOGGED_REFUSALS = 10
# Descriptors kept for what is not a model connection: the control API, usage files, upstream calls.
RESERVED_FDS = 256
# A model listener's accept queue. asyncio accepts that many connections in a turn of its loop and
# closes one refused at the limit three turns later, so a flood holds up to about four queues of
# descriptors beyond the run's connections, for an instant: small, yet more than an agent opens at once.
MODEL_BACKLOG = 16


@dataclass(frozen=True)
class GatewayLimits:
    """The tunable limits, from the settings (see `Settings.gateway_*`)."""

    memory: int | None
    connections: int
    run_connections: int
    run_requests: int
    idle_timeout: float
    body_timeout: float
    finish_wait: float

    @classmethod
    def from_settings(cls, settings: Settings) -> GatewayLimits:
        memory = None if settings.gateway_memory.strip() == "0" else parse_size(settings.gateway_memory, "memory")
        return cls(
            memory=memory,
            connections=settings.gateway_connections,
            run_connections=settings.gateway_run_connections,
            run_requests=settings.gateway_run_requests,
            idle_timeout=settings.gateway_idle_timeout,
            body_timeout=settings.gateway_body_timeout,
            finish_wait=settings.gateway_finish_wait,
        )


def limit_process(limits: GatewayLimits) -> GatewayLimits:
    """Cap this process's address space; take every descriptor it may have.

    Returns the limits with `connections` lowered to what the descriptors
    allow, so the gateway refuses connections before the kernel refuses it
    a descriptor (then nothing, not even the control API, could accept).
    """
    if limits.memory is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        ceiling = limits.memory if hard == resource.RLIM_INFINITY else min(limits.memory, hard)
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:  # the hard limit is the kernel's ceiling for this process: take it all
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    wanted = limits.connections + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        allowed = max(1, soft - RESERVED_FDS)
        log.warning(
            "only %d descriptors: at most %d model connections in all, not %d", soft, allowed, limits.connections
        )
        return replace(limits, connections=allowed)
    return limits


class LogQuota(logging.Filter):
    """At most `burst` lines of each kind (logger and message template) per `window` seconds.

    For what a client can make a library log once per request (uvicorn's
    'Invalid HTTP request received.', asyncio's accept errors): the lines
    held back are counted, and the count is logged with the first line of
    that kind after the window.
    """

    def __init__(self, burst: int = 20, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self.kinds: dict[tuple[str, str], list[float]] = {}  # kind -> [window start, let through, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, str(record.msg))
        now = self.clock()
        state = self.kinds.setdefault(kind, [now, 0, 0])
        if now - state[0] >= self.window:
            if state[2]:
                log.warning(
                    "%d more lines of %s like %r in %.0f s were not logged",
                    state[2],
                    kind[0],
                    kind[1][:80],
                    now - state[0],
                )
            state[:] = [now, 0, 0]
        if state[1] < self.burst:
            state[1] += 1
            return True
        state[2] += 1
        return False
