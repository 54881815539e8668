"""The run vocabulary the host shares: modes, egress, the default time limits.

Kept free of imports (but argparse) so the pytest plugin can declare its options without
loading the harness.
"""

from __future__ import annotations

import argparse

# sandbox: one container holds the agent and the task; sidecar: the agent in a container of its own,
# with nothing of the task (SPEC §7).
MODES = ("sandbox", "sidecar")
EGRESS = ("restricted", "open")
# local: every run on this machine's engine; ray: each run a task of a Ray cluster (ssebench.dispatch).
DISPATCHES = ("local", "ray")
# The agent's time limit per run, and grading's after it (the runtime in the
# container gets both in its environment: SSE_* overrides its own defaults).
AGENT_TIMEOUT = 3600.0
GRADING_TIMEOUT = 7200.0


def parse_modes(text: str) -> tuple[str, ...]:
    """Comma-separated modes, each once, in order (an argparse `type=`: bad text says what is accepted)."""
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for mode in chosen:
        if mode not in MODES:
            raise argparse.ArgumentTypeError(f"{mode!r}: the accepted modes are {', '.join(MODES)}")
    if not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: give a mode, e.g. sandbox")
    return chosen


def parse_dispatch(text: str) -> str:
    """`local` or `ray` (an argparse `type=`)."""
    if text not in DISPATCHES:
        raise argparse.ArgumentTypeError(f"{text!r}: use {' or '.join(DISPATCHES)}")
    return text


def parse_registry(text: str) -> str:
    """A registry as HOST:PORT (an argparse `type=`)."""
    from ssebench.registry import parse_registry as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
