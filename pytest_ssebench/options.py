"""The plugin's options: each declared once (flag, environment variable, ini key, default, parser).

Every value is checked by one parser, wherever it comes from: on the
command line argparse calls it (`type=`), so a bad flag is a usage error
naming the flag; a bad environment or ini value is a usage error naming the
variable or key. Names never clash with popular plugins: pytest-timeout
owns `--timeout`, pytest-retry `--retries`, pytest-rerunfailures `--reruns`,
pytest-repeat `--count`. This module imports nothing heavy: loading the
plugin costs every pytest run of the environment almost nothing.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from ssebench.defaults import (
    AGENT_TIMEOUT,
    SKIP_MODEL_CHECK,
    SKIP_MODEL_CHECK_HELP,
    Dispatch,
    Egress,
    Mode,
    parse_budget,
    parse_count,
    parse_difficulties,
    parse_dispatch,
    parse_egress,
    parse_modes,
    parse_registry,
    parse_run_limits,
    parse_seconds,
)

ProgressMode = Literal["auto", "live", "lines", "off"]
PROGRESS_MODES: tuple[ProgressMode, ...] = ("auto", "live", "lines", "off")


def parse_progress(text: str) -> ProgressMode:
    """--sweep-progress's value (pytest_ssebench.progress says what each does)."""
    if text not in PROGRESS_MODES:
        raise argparse.ArgumentTypeError(f"{text!r}: give one of {', '.join(PROGRESS_MODES)}")
    return text


@dataclass(frozen=True)
class Setting:
    """One option: its flag, and where else its value may come from, in order of precedence."""

    flag: str
    dest: str
    parse: Callable[[str], Any] | None
    help: str
    metavar: str | None = None
    env: str | None = None
    ini: str | None = None
    default: str | None = None
    # Names the variable had before it followed its flag: still read, after `env`.
    old_env: tuple[str, ...] = ()
    # Other spellings of the flag (`ssebench run`'s, upstream's), accepted as it.
    aliases: tuple[str, ...] = ()


SETTINGS = (
    Setting(
        "--difficulty",
        "ssebench_difficulty",
        parse_difficulties,
        "comma-separated levels 0-4 (default 2)",
        "LEVELS",
        env="SSEBENCH_DIFFICULTY",
        ini="ssebench_difficulty",
        default="2",
    ),
    Setting(
        "--mode",
        "ssebench_mode",
        parse_modes,
        "comma-separated modes: sandbox (default), sidecar",
        "MODES",
        default="sandbox",
    ),
    Setting(
        "--agent-timeout",
        "ssebench_timeout",
        parse_seconds,
        f"the agent's time limit per run (default {AGENT_TIMEOUT:.0f})",
        "SECONDS",
        env="SSEBENCH_AGENT_TIMEOUT",
        old_env=("SSEBENCH_TIMEOUT",),
        default=str(AGENT_TIMEOUT),
    ),
    Setting(
        "--egress",
        "ssebench_egress",
        parse_egress,
        "restricted (default): an internal network with no route out; open: a normal bridge",
        "restricted|open",
        env="SSEBENCH_EGRESS",
        default="restricted",
    ),
    Setting(
        "--results",
        "ssebench_results",
        None,
        "where run directories go (default results/)",
        "DIR",
        env="SSEBENCH_RESULTS",
        ini="ssebench_results",
        default="results",
    ),
    Setting(
        "--infra-retries",
        "ssebench_retries",
        parse_count(0),
        "retry a run N times after an infrastructure error (never after a failed grade)",
        "N",
        env="SSEBENCH_INFRA_RETRIES",
        old_env=("SSEBENCH_RETRIES",),
        ini="ssebench_retries",
        default="0",
    ),
    Setting(
        "--trials",
        "ssebench_trials",
        parse_count(1),
        "run each task x agent x model x difficulty N times, as N items (default 1)",
        "N",
        env="SSEBENCH_TRIALS",
        ini="ssebench_trials",
        default="1",
    ),
    Setting(
        "--run-limits",
        "ssebench_limits",
        parse_run_limits,
        "resource limits of every run container, overriding settings and tasks: "
        "pids=N,memory=SIZE,cpus=N,file_size=SIZE (e.g. pids=512,memory=2g)",
        "LIMITS",
        aliases=("--limits",),
    ),
    Setting(
        "--dispatch",
        "ssebench_dispatch",
        parse_dispatch,
        "where runs execute: local (default, this machine's engine) or ray (tasks of a Ray cluster; docs/scale-out.md)",
        "local|ray",
        env="SSEBENCH_DISPATCH",
        ini="ssebench_dispatch",
        default="local",
    ),
    Setting(
        "--ray-address",
        "ssebench_ray_address",
        None,
        "the Ray cluster for --dispatch ray, HOST:PORT of its head (default: the one `ray start` left on this machine)",
        "ADDR",
        env="SSEBENCH_RAY_ADDRESS",
        ini="ssebench_ray_address",
    ),
    Setting(
        "--registry",
        "ssebench_registry",
        parse_registry,
        "a registry, HOST:PORT, that builds push images to and machines lacking one pull it from",
        "HOST:PORT",
        # The setting's own name (ssebench.settings): SSEBENCH_REGISTRY is the build argument that names
        # the image prefix in upstream Dockerfiles.
        env="SSEBENCH_IMAGE_REGISTRY",
        ini="ssebench_registry",
    ),
    Setting(
        "--predictions",
        "ssebench_predictions",
        None,
        "grade the patches in FILE (SWE-bench's predictions: JSON lines of instance_id, model_patch, "
        "model_name_or_path), one run of the predictions agent each; tasks it does not name are not collected",
        "FILE",
    ),
    Setting(
        "--sweep-progress",
        "ssebench_progress",
        parse_progress,
        "how the sweep's progress shows: auto (default: a live line on a terminal, a plain line now and then in CI "
        "or a log, nothing with -q), live, lines or off",
        "auto|live|lines|off",
        env="SSEBENCH_PROGRESS",
        default="auto",
    ),
    Setting(
        "--model-budget",
        "ssebench_budget",
        parse_budget,
        "what one run may use of its model, overriding the model file: tokens=N,cost=USD (e.g. tokens=2000000,cost=5)",
        "BUDGET",
    ),
)
FLAGS = (
    (
        ("--keep-containers", "--keep-container"),
        "ssebench_keep",
        "leave each run's container in place after it ends (for debugging)",
    ),
    (
        ("--rebuild", "--build"),
        "ssebench_rebuild",
        "rebuild every image of the collected tasks before running, ignoring Docker's cache",
    ),
    (
        ("--resume",),
        "ssebench_resume",
        "report an item from its finished run in the results directory (same task "
        "and version, agent, model, difficulty, mode and trial) instead of running it",
    ),
    ((SKIP_MODEL_CHECK,), "ssebench_skip_model_check", SKIP_MODEL_CHECK_HELP),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("ssebench", "SSEBench runs (every run is a test item)")
    group.addoption(
        "--agent",
        action="append",
        default=[],
        metavar="NAME",
        help="agent to run on each collected task; repeatable or comma-separated (ini: ssebench_agents)",
    )
    group.addoption(
        "--model",
        action="append",
        default=[],
        metavar="NAME",
        help="model for the agents that need one; repeatable or comma-separated (ini: ssebench_models). "
        "dummy and reference record 'none'",
    )
    parser.addini("ssebench_agents", "default --agent values", type="args", default=[])
    parser.addini("ssebench_models", "default --model values", type="args", default=[])
    for s in SETTINGS:
        sources = ", ".join(filter(None, (s.env and f"env {s.env}", s.ini and f"ini {s.ini}")))
        group.addoption(
            s.flag,
            *s.aliases,
            dest=s.dest,
            default=None,
            metavar=s.metavar,
            type=s.parse,
            help=s.help + (f" ({sources})" if sources else ""),
        )
        if s.ini:
            parser.addini(s.ini, f"default {s.flag}", default=s.default)
    for flags, dest, text in FLAGS:
        group.addoption(*flags, dest=dest, action="store_true", default=False, help=text)


def _value(config: pytest.Config, s: Setting) -> Any:
    """The setting's value: the flag (already parsed), else the environment, the ini file, the default."""
    given = getattr(config.option, s.dest)
    if given is not None:
        return given
    variables = [name for name in (s.env, *s.old_env) if name]
    sources = (*((name, os.environ.get(name)) for name in variables), (s.ini, s.ini and config.getini(s.ini)))
    source, raw = next(((name, value) for name, value in sources if value), (None, s.default))
    if raw is None or s.parse is None:
        return raw
    try:
        return s.parse(str(raw))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"{source or s.flag}: {exc} (or give {s.flag})") from None


@dataclass(frozen=True)
class Options:
    agents: tuple[str, ...]
    models: tuple[str, ...]
    difficulties: tuple[int, ...]
    modes: tuple[Mode, ...]
    timeout: float
    egress: Egress
    results: Path
    retries: int
    trials: int
    keep_containers: bool
    rebuild: bool
    resume: bool
    limits: dict[str, str]
    budget: dict[str, float] | None
    model_check: bool = True
    dispatch: Dispatch = "local"
    ray_address: str | None = None
    registry: str | None = None
    predictions: Path | None = None
    progress: ProgressMode = "auto"


def _names(given: list[str]) -> tuple[str, ...]:
    """--agent and --model values, repeated or comma-separated (`--agent a,b` is `--agent a --agent b`), each
    once and in the order first given: a name given twice makes its runs once."""
    return tuple(dict.fromkeys(name.strip() for value in given for name in value.split(",") if name.strip()))


def parse_options(config: pytest.Config) -> Options:
    """Every option's value; a bad one raises pytest.UsageError naming where it came from."""
    opt = config.option
    value = {s.dest: _value(config, s) for s in SETTINGS}
    if value["ssebench_limits"] and value["ssebench_dispatch"] == "local":
        # Runs here: this machine's CPUs bound them, said once rather than for every task.
        from ssebench.limits import Limits, LimitsError

        try:
            Limits().merged(value["ssebench_limits"], "--run-limits")
        except LimitsError as exc:
            raise pytest.UsageError(f"argument {exc}") from None
    results = Path(value["ssebench_results"])
    if not results.is_absolute():
        results = config.invocation_params.dir / results
    predictions = Path(value["ssebench_predictions"]) if value["ssebench_predictions"] else None
    if predictions is not None and not predictions.is_absolute():
        predictions = config.invocation_params.dir / predictions
    return Options(
        agents=_names(opt.agent or config.getini("ssebench_agents")),
        models=_names(opt.model or config.getini("ssebench_models")),
        difficulties=value["ssebench_difficulty"],
        modes=value["ssebench_mode"],
        timeout=value["ssebench_timeout"],
        egress=value["ssebench_egress"],
        results=results,
        retries=value["ssebench_retries"],
        trials=value["ssebench_trials"],
        keep_containers=bool(opt.ssebench_keep),
        rebuild=bool(opt.ssebench_rebuild),
        resume=bool(opt.ssebench_resume),
        limits=value["ssebench_limits"] or {},
        budget=value["ssebench_budget"],
        model_check=not opt.ssebench_skip_model_check,
        dispatch=value["ssebench_dispatch"],
        ray_address=value["ssebench_ray_address"] or None,
        registry=value["ssebench_registry"] or None,
        predictions=predictions,
        progress=value["ssebench_progress"],
    )
