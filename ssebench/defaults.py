"""The run vocabulary the host shares: modes, egress, the default time limits.

Kept free of imports (but argparse, and the contract with the runtime, which imports only the
standard library) so the pytest plugin can declare its options without loading the harness.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Literal, cast, get_args

from ssebench.runtime.contract import AGENT_TIMEOUT as AGENT_TIMEOUT
from ssebench.runtime.contract import GRADING_TIMEOUT as GRADING_TIMEOUT

# sandbox: one container holds the agent and the task; sidecar: the agent in a container of its own,
# with nothing of the task (docs/integrity.md, "Sidecar mode").
Mode = Literal["sandbox", "sidecar"]
MODES: tuple[Mode, ...] = get_args(Mode)
# restricted: the run's network reaches nothing but the model gateway; open: it reaches out as well.
Egress = Literal["restricted", "open"]
EGRESS: tuple[Egress, ...] = get_args(Egress)
# local: every run on this machine's engine; ray: each run a task of a Ray cluster (ssebench.dispatch).
Dispatch = Literal["local", "ray"]
DISPATCHES: tuple[Dispatch, ...] = get_args(Dispatch)
# The flag that skips the models' preflight (ssebench.session.RunSession.start_models), for the plugin and
# `ssebench run` alike, and what it says in their help.
SKIP_MODEL_CHECK = "--skip-model-check"
SKIP_MODEL_CHECK_HELP = (
    "do not check before the first run that each model's server answers and takes its key "
    "(a run whose every model call then fails upstream is an error, not a grade)"
)
# The agent's time limit per run, and grading's after it, AGENT_TIMEOUT and GRADING_TIMEOUT, are the
# contract's (the runtime in the container gets both in its environment).


def parse_modes(text: str) -> tuple[Mode, ...]:
    """Comma-separated modes, each once, in order (an argparse `type=`: bad text says what is accepted)."""
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for mode in chosen:
        if mode not in MODES:
            raise argparse.ArgumentTypeError(f"{mode!r}: the accepted modes are {', '.join(MODES)}")
    if not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: give a mode, e.g. sandbox")
    return cast("tuple[Mode, ...]", chosen)


def parse_dispatch(text: str) -> Dispatch:
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


def parse_budget(text: str) -> dict[str, float]:
    """`tokens=N,cost=USD` -> {"tokens": N, "cost": USD} (an argparse `type=`): what one run may use of its
    model, overriding the model file."""
    parsed: dict[str, float] = {}
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        key, _, value = part.partition("=")
        key = key.strip()
        try:
            number = float(value)
        except ValueError:
            number = -1
        if (
            key not in ("tokens", "cost")
            or not math.isfinite(number)
            or number <= 0
            or (key == "tokens" and not number.is_integer())
        ):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give tokens=N and/or cost=USD, both above zero, e.g. tokens=2000000,cost=5"
            )
        parsed[key] = int(number) if key == "tokens" else number
    if not parsed:
        raise argparse.ArgumentTypeError(f"{text!r}: give tokens=N and/or cost=USD")
    return parsed


# The parsers below are argparse `type=`s shared by the plugin's options and the command line: one checks
# each value wherever it comes from.

DIFFICULTIES = range(0, 5)


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_difficulties(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(dict.fromkeys(int(x) for x in _csv(text)))
    except ValueError:
        levels = ()
    if not levels or any(level not in DIFFICULTIES for level in levels):
        raise argparse.ArgumentTypeError(f"{text!r}: give levels 0-4 separated by commas, e.g. 0,2,4")
    return levels


def parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a time in seconds above zero, e.g. 1800")
    return value


def parse_count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least {minimum}")
        return value

    parse.__name__ = "count"  # argparse names a bad value by its type's name
    return parse


def parse_egress(text: str) -> str:
    if text not in EGRESS:
        raise argparse.ArgumentTypeError(f"{text!r}: use {' or '.join(EGRESS)}")
    return text


def parse_run_limits(text: str) -> dict[str, str]:
    from ssebench.limits import Limits, LimitsError, parse_limits

    try:
        parsed = parse_limits(text, "--run-limits")
        if parsed:  # this machine's CPUs bound them only for runs here: the session checks that, knowing where
            Limits().merged(parsed, "--run-limits", here=False)
    except LimitsError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--run-limits: ")) from None
    return parsed


RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def parse_run_id(text: str) -> str:
    """A run's id as given (`ssebench run --run-id`): its directory's name, and part of its network's."""
    if not RUN_ID.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give letters, digits, '.', '_' or '-' (at most 64), starting with a letter or digit"
        )
    return text
