"""The run vocabulary the host shares: modes, egress, the default time limits.

Kept free of imports (but argparse, and the contract with the runtime, which imports only the
standard library) so the pytest plugin can declare its options without loading the harness.
"""

from __future__ import annotations

import argparse
import math
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
# The wire protocol an agent speaks to its model, and a model serves (agent.yaml `protocol`, a model file's
# `protocol`): OpenAI's Chat Completions and Responses, Anthropic's Messages.
ModelProtocol = Literal["openai-chat", "openai-responses", "anthropic-messages"]
MODEL_PROTOCOLS: tuple[ModelProtocol, ...] = get_args(ModelProtocol)
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
