"""The plugin's options: declared once, validated once, with usage errors that name the option."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ssebench.limits import Limits, LimitsError, parse_limits
from ssebench.run import EGRESS

DIFFICULTIES = range(0, 5)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("ssebench", "SSEBench runs (every run is a test item)")
    group.addoption("--agent", action="append", default=[], metavar="NAME",
                    help="agent to run on each collected task; repeatable (ini: ssebench_agents)")
    group.addoption("--model", action="append", default=[], metavar="NAME",
                    help="model for the agents that need one; repeatable. dummy and reference record 'none'")
    group.addoption("--difficulty", default=None, metavar="LEVELS",
                    help="comma-separated levels 0-4 (default 2; ini: ssebench_difficulty)")
    group.addoption("--mode", default=None, metavar="MODES", help="comma-separated modes: sandbox (default)")
    # Names chosen not to clash with popular plugins: pytest-timeout owns
    # --timeout, pytest-retry owns --retries.
    group.addoption("--agent-timeout", dest="ssebench_timeout", default=None, metavar="SECONDS", type=float,
                    help="the agent's time limit per run (default 3600; env SSEBENCH_TIMEOUT)")
    group.addoption("--egress", default=None, choices=EGRESS,
                    help="restricted (default): an internal network with no route out; open: a normal bridge")
    group.addoption("--results", default=None, metavar="DIR",
                    help="where run directories go (default results/; env SSEBENCH_RESULTS)")
    group.addoption("--infra-retries", dest="ssebench_retries", default=None, metavar="N", type=int,
                    help="retry a run N times after an infrastructure error (never after a failed grade)")
    group.addoption("--run-limits", dest="ssebench_limits", default=None, metavar="LIMITS",
                    help="resource limits of every run container, overriding settings and tasks: "
                         "pids=N,memory=SIZE,cpus=N,file_size=SIZE (e.g. pids=512,memory=2g)")
    group.addoption("--model-budget", dest="ssebench_budget", default=None, metavar="BUDGET",
                    help="what one run may use of its model, overriding the model file: tokens=N,cost=USD "
                         "(e.g. tokens=2000000,cost=5)")
    group.addoption("--keep-containers", action="store_true", default=False,
                    help="leave each run's container in place after it ends (for debugging)")
    group.addoption("--rebuild", action="store_true", default=False,
                    help="rebuild every image of the collected tasks before running, ignoring Docker's cache")
    parser.addini("ssebench_agents", "default --agent values", type="args", default=[])
    parser.addini("ssebench_models", "default --model values", type="args", default=[])
    parser.addini("ssebench_difficulty", "default --difficulty", default="2")
    parser.addini("ssebench_results", "default --results", default="results")
    parser.addini("ssebench_retries", "default --infra-retries", default="0")


@dataclass(frozen=True)
class Options:
    agents: tuple[str, ...]
    models: tuple[str, ...]
    difficulties: tuple[int, ...]
    modes: tuple[str, ...]
    timeout: float
    egress: str
    results: Path
    retries: int
    keep_containers: bool
    rebuild: bool
    limits: dict[str, str]
    budget: dict[str, float] | None


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_options(config: pytest.Config) -> Options:
    """Read and check every option; a bad value raises pytest.UsageError naming it."""
    opt = config.option
    agents = tuple(opt.agent or config.getini("ssebench_agents"))
    models = tuple(opt.model or config.getini("ssebench_models"))

    raw = opt.difficulty or os.environ.get("SSEBENCH_DIFFICULTY") or config.getini("ssebench_difficulty")
    try:
        levels = tuple(dict.fromkeys(int(x) for x in _csv(str(raw))))
    except ValueError:
        levels = ()
    if not levels or any(level not in DIFFICULTIES for level in levels):
        raise pytest.UsageError(f"--difficulty {raw!r}: give levels 0-4 separated by commas, e.g. --difficulty 0,2,4")

    modes = tuple(dict.fromkeys(_csv(opt.mode or "sandbox")))
    for mode in modes:
        if mode == "sidecar":
            raise pytest.UsageError("--mode sidecar: sidecar mode is not available yet; use --mode sandbox")
        if mode != "sandbox":
            raise pytest.UsageError(f"--mode {mode!r}: the accepted mode is sandbox")

    timeout_raw = opt.ssebench_timeout if opt.ssebench_timeout is not None else os.environ.get("SSEBENCH_TIMEOUT", 3600)
    try:
        timeout = float(timeout_raw)
    except ValueError:
        timeout = -1
    if timeout <= 0:
        raise pytest.UsageError(f"--agent-timeout {timeout_raw!r}: give the agent's time limit in seconds, "
                                "e.g. --agent-timeout 1800")

    egress = opt.egress or os.environ.get("SSEBENCH_EGRESS") or "restricted"
    if egress not in EGRESS:
        raise pytest.UsageError(f"SSEBENCH_EGRESS {egress!r}: use restricted or open")

    retries_raw = (opt.ssebench_retries if opt.ssebench_retries is not None
                   else os.environ.get("SSEBENCH_RETRIES") or config.getini("ssebench_retries"))
    try:
        retries = int(retries_raw)
    except ValueError:
        retries = -1
    if retries < 0:
        raise pytest.UsageError(f"--infra-retries {retries_raw!r}: give a whole number of retries, e.g. --infra-retries 1")

    results = Path(opt.results or os.environ.get("SSEBENCH_RESULTS") or config.getini("ssebench_results"))
    if not results.is_absolute():
        results = config.invocation_params.dir / results
    if results.exists() and not results.is_dir():
        raise pytest.UsageError(f"--results {results}: not a directory")

    try:
        limits = parse_limits(opt.ssebench_limits or "", "--run-limits")
        if limits:
            Limits().merged(limits, "--run-limits")
    except LimitsError as exc:
        raise pytest.UsageError(str(exc)) from None

    budget = parse_budget(opt.ssebench_budget) if opt.ssebench_budget else None

    return Options(agents=agents, models=models, difficulties=levels, modes=modes, timeout=timeout,
                   egress=egress, results=results, retries=retries, keep_containers=bool(opt.keep_containers),
                   rebuild=bool(opt.rebuild), limits=limits, budget=budget)


def parse_budget(text: str) -> dict[str, float]:
    """`tokens=N,cost=USD` -> {"tokens": N, "cost": USD}; a UsageError names --model-budget."""
    budget: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1
        if key.strip() not in ("tokens", "cost") or number <= 0 or (key.strip() == "tokens" and not number.is_integer()):
            raise pytest.UsageError(f"--model-budget {text!r}: give tokens=N and/or cost=USD, both above zero, "
                                    "e.g. --model-budget tokens=2000000,cost=5")
        budget[key.strip()] = int(number) if key.strip() == "tokens" else number
    return budget
