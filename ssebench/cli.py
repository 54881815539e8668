"""The `ssebench` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssebench.defaults import (
    AGENT_TIMEOUT,
    EGRESS,
    MODES,
    SKIP_MODEL_CHECK,
    SKIP_MODEL_CHECK_HELP,
    parse_budget,
    parse_dispatch,
    parse_modes,
    parse_registry,
    parse_run_id,
    parse_run_limits,
    parse_seconds,
)
from ssebench.errors import ConfigError, ConfigErrors, SSEBenchError
from ssebench.logs import columns, for_terminal, shown_path
from ssebench.runtime.contract import PREDICTIONS_AGENT
from ssebench.version import __version__

if TYPE_CHECKING:
    from ssebench.agent import Agent
    from ssebench.defaults import Mode
    from ssebench.predictions import Prediction
    from ssebench.record import RunRecord
    from ssebench.settings import Settings
    from ssebench.task import Task

DEFAULT_PATH = Path("datasets")


def _problems(exc: BaseException) -> list[str]:
    if isinstance(exc, ConfigErrors):
        return [str(e) for e in exc.errors]
    return [str(exc)]


def cmd_tasks_list(args: argparse.Namespace) -> int:
    from ssebench.dataset import load_tasks

    tasks = load_tasks(args.path, check_files=False)
    if args.json:
        rows = [
            {
                "id": t.id,
                "dataset": t.dataset,
                "dataset_version": t.dataset_version,
                "language": t.language,
                "project": t.config.project,
                "advisories": t.advisories(),
                "path": str(t.path),
                "checks": t.checks(),
                "originality": t.config.originality,
            }
            for t in tasks
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(t.id) for t in tasks), default=4)
    adv = max((len(", ".join(t.advisories())) for t in tasks), default=8)
    print(f"{'TASK':<{width}}  {'DATASET':<10} {'LANG':<5} {'PROJECT':<18} {'ADVISORY':<{adv}}  CHECKS")
    for t in tasks:
        print(
            for_terminal(
                f"{t.id:<{width}}  {t.dataset:<10} {t.language:<5} {t.config.project:<18} "
                f"{', '.join(t.advisories()) or '-':<{adv}}  {','.join(t.checks())}"
            )
        )
    print(f"{len(tasks)} task(s)")
    return 0


def cmd_task_new(args: argparse.Namespace) -> int:
    from ssebench import authoring

    def say(message: str) -> None:
        print(for_terminal(message), file=sys.stderr, flush=True)

    if args.debian and args.crate:
        raise authoring.AuthoringError("give --debian PKG=VERSION or --crate NAME, not both")
    if args.debian:
        name, sep, version = args.debian.partition("=")
        if not (sep and name and version):
            raise authoring.AuthoringError(
                f"--debian {args.debian}: give it as PKG=VERSION, e.g. libcue=2.2.1-4+deb12u1"
            )
        scaffold = authoring.new_from_debian(
            args.dataset,
            name,
            version,
            patch=args.patch,
            advisory=args.advisory,
            task_id=args.id,
            language=args.language,
            say=say,
        )
    elif args.crate:
        if not (args.vulnerable and args.fixed):
            raise authoring.AuthoringError("--crate needs --vulnerable VERSION and --fixed VERSION")
        scaffold = authoring.new_from_crate(
            args.dataset, args.crate, args.vulnerable, args.fixed, advisory=args.advisory, task_id=args.id, say=say
        )
    else:
        raise authoring.AuthoringError("give --debian PKG=VERSION (with --patch or --advisory) or --crate NAME")
    for path in scaffold.files:
        print(f"wrote {shown_path(path)}")
    print("left to do:")
    for item in scaffold.todo:
        print(f"  - {item}")
    return 0


def cmd_dataset_validate(args: argparse.Namespace) -> int:
    from ssebench.dataset import load_tasks

    try:
        tasks = load_tasks(args.path)
    except (ConfigError, ConfigErrors) as exc:
        problems = _problems(exc)
        for line in problems:
            print(for_terminal(line))
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return 1
    print(f"{len(tasks)} task(s): config.yaml and files OK")
    if not args.build:
        return 0
    from ssebench.build import build_images
    from ssebench.settings import get_settings

    outcome = build_images(get_settings(), tasks)
    for task_id, failure in outcome.failures.items():
        last = failure.tail.strip().splitlines()[-1] if failure.tail.strip() else "no output"
        print(
            for_terminal(f"{task_id}: the {failure.layer} layer does not build: {last} (full log: {failure.log_path})")
        )
    if outcome.failures:
        print(f"{len(outcome.failures)} of {len(tasks)} task(s) do not build", file=sys.stderr)
        return 1
    print(f"{len(tasks)} task(s): images build")
    return 0


def cmd_dataset_verify(args: argparse.Namespace) -> int:
    from ssebench.dataset import DATASET_FILE, load_dataset_config, load_tasks, select_tasks
    from ssebench.manifest import pinned_state
    from ssebench.settings import get_settings
    from ssebench.verify import flake_table, record_images, summary, verify, write_reports

    started = time.monotonic()
    tasks: list[Task] = []
    problems: list[str] = []
    for path in args.path or [DEFAULT_PATH]:
        try:
            tasks += [t for t in load_tasks(path) if t.path.resolve() not in {k.path.resolve() for k in tasks}]
        except (ConfigError, ConfigErrors) as exc:
            problems += _problems(exc)
    if problems:
        for line in problems:
            print(for_terminal(line))
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return 1
    if args.keyword is not None:
        try:
            tasks = select_tasks(tasks, args.keyword)
        except ValueError as exc:
            print(for_terminal(f"error: {exc}"), file=sys.stderr)
            return 2
    if not tasks:
        print(for_terminal(f"error: -k {args.keyword!r} selects none of the tasks there"), file=sys.stderr)
        return 2
    # What the summary is named after: the datasets of the tasks it verifies, each with its version.
    datasets = dict.fromkeys((t.dataset, t.dataset_version) for t in tasks)
    name = ",".join(d for d, _ in datasets)
    version = ",".join(v for _, v in datasets if v) or None
    results = args.results.resolve()
    verdicts = verify(
        get_settings(),
        tasks,
        results,
        jobs=args.jobs,
        repeat=args.repeat,
        resume=args.resume,
        say=lambda m: print(for_terminal(m), file=sys.stderr, flush=True),
    )
    report = summary(verdicts, name, version, time.monotonic() - started, repeat=args.repeat)
    md, js = write_reports(report, results)
    if args.repeat > 1:
        print(for_terminal("\n".join(flake_table(report))))
    for recorded in record_images(get_settings(), verdicts):
        print(for_terminal(f"image ids recorded in {recorded}"), file=sys.stderr)
    for folder in sorted({t.path.resolve().parent for t in tasks}):
        if not (folder / DATASET_FILE).is_file():
            continue  # a folder of task folders: no dataset to pin
        state = pinned_state(folder, load_dataset_config(folder).version)
        if state != "pinned":
            print(for_terminal(f"{folder} is {state}: pin it with `ssebench dataset pin {folder}`"), file=sys.stderr)
    for verdict in verdicts:
        for problem in verdict.problems:
            print(for_terminal(f"INVALID {problem}"))
    valid = sum(v.valid for v in verdicts)
    resumed = f" ({report['resumed']} run(s) resumed)" if report["resumed"] else ""
    print(f"{valid} of {len(verdicts)} task(s) valid in {report['seconds']:.0f} s{resumed}; summary: {md} and {js}")
    return 0 if valid == len(verdicts) else 1


def cmd_dataset_pin(args: argparse.Namespace) -> int:
    from ssebench import manifest
    from ssebench.dataset import find_datasets, load_dataset_config, task_dirs

    datasets = find_datasets(args.path)
    if not datasets:
        raise ConfigError(args.path, "", "holds no dataset.yaml; give a dataset folder, e.g. datasets/pilot")
    refused = 0
    for folder in datasets:
        version = load_dataset_config(folder).version
        dirs = task_dirs(folder)
        problems, per_task = manifest.check(folder, version, dirs)
        changed = problems + [per_task[name] for name in sorted(per_task)]
        if changed and not args.keep_version:
            for problem in changed:
                print(for_terminal(str(problem)))
            print(
                for_terminal(
                    f"{folder}: not pinned again: {version} is pinned with other files; bump version in "
                    f"{folder / 'dataset.yaml'} first (or give --keep-version for a version not yet released)"
                ),
                file=sys.stderr,
            )
            refused += 1
            continue
        path, written, files = manifest.pin(folder, version, dirs)
        print(
            for_terminal(
                f"{folder}: {version} pinned: {len(dirs)} task(s), {files} file(s) in {path}"
                + ("" if written else " (unchanged)")
            )
        )
    return 1 if refused else 0


def cmd_dataset_schema(args: argparse.Namespace) -> int:
    from ssebench.formats import write_schemas

    out: Path = args.out
    if out.exists() and not out.is_dir():
        print(for_terminal(f"error: --out {out}: is a file; give a folder to write the schemas into"), file=sys.stderr)
        return 2
    try:
        written = write_schemas(out)
    except OSError as exc:
        print(
            for_terminal(f"error: --out {out}: cannot write there ({exc.strerror}); give a folder you can write"),
            file=sys.stderr,
        )
        return 2
    for path in written:
        print(for_terminal(str(path)))
    print(f"{len(written)} JSON Schema(s) (draft 2020-12) written; the formats are described in docs/formats.md")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 16:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 16, got {text!r}")
    return value


def cmd_images_build(args: argparse.Namespace) -> int:
    from ssebench.agent import load_agent
    from ssebench.build import build_images
    from ssebench.dataset import load_tasks
    from ssebench.settings import get_settings

    started = time.monotonic()
    settings = _with_registry(get_settings(), args.registry)
    tasks = load_tasks(args.path)
    agents: list[Agent | None] = [load_agent(settings.agents_dir, name) for name in args.agent] or [None]
    failures = 0
    built: list[str] = []
    reused: set[str] = set()
    pushed: set[str] = set()
    for agent in agents:
        outcome = build_images(
            settings,
            tasks,
            agent,
            modes=args.mode,
            force=args.force,
            jobs=args.jobs,
            push=bool(settings.image_registry),
        )
        built += outcome.report.built
        reused |= set(outcome.report.reused) | set(outcome.report.pulled)
        pushed |= set(outcome.report.pushed)
        for failure in outcome.failures.values():
            print(for_terminal(f"error: {failure}"), file=sys.stderr)
        failures += len(outcome.failures)
    elapsed = time.monotonic() - started
    if failures:
        print(f"{failures} task(s) failed to build; built {len(built)} image(s) ({elapsed:.0f}s)")
    elif not built:
        print(f"nothing to build: all {len(reused)} images are current ({elapsed:.1f}s)")
    else:
        print(f"built {len(built)} image(s), reused {len(reused - set(built))} ({elapsed:.0f}s)")
    if pushed:
        print(f"pushed {len(pushed)} image(s) to {settings.image_registry}")
    return 1 if failures else 0


def _with_registry(settings: Settings, registry: str | None) -> Settings:
    """The settings with --registry, when given, as their image registry."""
    return settings.model_copy(update={"image_registry": registry}) if registry else settings


def cmd_images_bootstrap(args: argparse.Namespace) -> int:
    from ssebench.bootstrap import ensure_os_image
    from ssebench.settings import get_settings

    settings = get_settings()
    image = ensure_os_image(settings, force=args.force)
    print(f"{settings.os_image} is present ({image[:19]})")
    return 0


def _find_task(spec: str, search: Path) -> Path:
    from ssebench.dataset import load_tasks

    path = Path(spec)
    if path.exists():
        return path
    matches = [t.path for t in load_tasks(search, check_files=False) if t.id.lower() == spec.lower()]
    if not matches:
        raise ConfigError(search, "", f"--task {spec}: no task folder at that path and no task with that id here")
    if len(matches) > 1:
        raise ConfigError(
            search, "", f"--task {spec}: several datasets have it ({', '.join(map(str, matches))}); give the path"
        )
    return matches[0]


def cmd_run(args: argparse.Namespace) -> int:
    from ssebench.agent import load_agent
    from ssebench.dataset import load_task_in_place
    from ssebench.result import path_component, runs_parent
    from ssebench.runspec import RunConfig, limits_for
    from ssebench.session import OptionError, Plan, RunSession
    from ssebench.settings import get_settings

    settings = _with_registry(get_settings(), args.registry)
    # With its dataset's name and version, and refused when it differs from the dataset's pin (manifest.json).
    task = load_task_in_place(_find_task(args.task, args.datasets))
    prediction = _prediction_of(task, args.predictions, args.model, args.agent) if args.predictions else None
    if prediction is None and not args.agent:
        raise SSEBenchError("--agent: give the agent to run (or --predictions FILE, to grade a patch made elsewhere)")
    agent = load_agent(settings.agents_dir, PREDICTIONS_AGENT if prediction else args.agent)
    if agent.grades_predictions and prediction is None:
        raise SSEBenchError(f"--agent {PREDICTIONS_AGENT}: give the patch it applies with --predictions FILE")
    model = prediction.model if prediction else (args.model or "") if agent.needs_model else "none"
    limits = limits_for(settings, task, args.limits, here=args.dispatch == "local")
    results = args.results.resolve()
    if args.run_id and (runs_parent(results, task.id, model, agent.name) / path_component(args.run_id)).exists():
        print(
            for_terminal(f"error: --run-id {args.run_id}: {task.id}'s run of that id is in {results}; give another id"),
            file=sys.stderr,
        )
        return 2
    config = RunConfig(
        task=task,
        agent=agent,
        model=model,
        difficulty=args.difficulty,
        timeout=args.agent_timeout,
        mode=args.mode,
        egress=args.egress,
        keep_container=args.keep_container,
        limits=limits,
        run_id=args.run_id,
        prediction=prediction,
    )
    plan = Plan(
        results=results,
        needs_model=agent.name if agent.needs_model else None,
        models=(model,) if agent.needs_model and model else (),
        agents=(agent,),
        budget=args.model_budget,
        model_check=not args.skip_model_check,
        dispatch=args.dispatch,
        ray_address=args.ray_address,
        egress=args.egress,
        keep=args.keep_container,
    )
    try:
        with RunSession(settings, plan) as session:
            if args.build and not _rebuilt(settings, task, agent, args.mode):
                return 1
            record = session.run(config)
    except OptionError as exc:
        print(for_terminal(f"error: {exc}"), file=sys.stderr)
        return 2
    return _report_run(record, args.require_pass)


def _prediction_of(task: Task, path: Path, model: str | None, agent: str | None) -> Prediction:
    """`ssebench run --predictions`: the one prediction of `task` in the file (by `model`, when given)."""
    from ssebench.predictions import load_predictions

    if agent and agent != PREDICTIONS_AGENT:
        raise SSEBenchError(f"--agent {agent}: --predictions runs the {PREDICTIONS_AGENT} agent; leave --agent out")
    found = [p for p in load_predictions(path).for_task(task) if model is None or p.model == model]
    by = f" by model {model!r}" if model is not None else ""
    if not found:
        raise SSEBenchError(f"--predictions {path}: no prediction of {task.id}{by}")
    if len(found) > 1:
        models = ", ".join(p.model for p in found)
        raise SSEBenchError(
            f"--predictions {path}: {len(found)} predictions of {task.id} (models {models}): pick one with --model"
        )
    return found[0]


def _rebuilt(settings: Settings, task: Task, agent: Agent, mode: Mode) -> bool:
    """--build: the task's images for `agent` rebuilt without Docker's cache; False (said) when one fails."""
    from ssebench.build import build_images

    outcome = build_images(settings, [task], agent, modes=(mode,), force=True)
    for failure in outcome.failures.values():
        print(for_terminal(f"error: --build: {str(failure).splitlines()[0]}"), file=sys.stderr)
    return not outcome.failures


def _report_run(record: RunRecord, require_pass: bool) -> int:
    patch = record.patch_result
    if record.infra_error:
        print(for_terminal(f"grade: error ({record.infra_error})"))
    else:
        detail = f" ({patch.error_msg})" if patch.error_msg else ""
        print(for_terminal(f"grade: {record.grade}{detail}"))
    print(for_terminal(f"run directory: {record.run_dir}" + (f" (ran on {record.node})" if record.node else "")))
    if require_pass:
        return 0 if record.grade == "passed" else 1
    return 0 if record.infra_error is None else 1


def _table(header: list[str], rows: list[list[str]]) -> None:
    print(for_terminal("\n".join(columns([header, *rows]))))


def cmd_results_predictions(args: argparse.Namespace) -> int:
    from ssebench.predictions import past_runs, prediction_line

    root = args.results  # a directory, no link (`_results_dir`)
    count = 0
    for run in past_runs(root):
        print(prediction_line(run.instance_id, run.model, run.patch))
        count += 1
    print(
        for_terminal(f"{count} prediction(s): the newest run of each task x model x agent in {root}"), file=sys.stderr
    )
    return 0


def cmd_agents_list(args: argparse.Namespace) -> int:
    from ssebench.agent import available_agents, load_agent
    from ssebench.settings import get_settings

    folder = get_settings().agents_dir
    agents = [load_agent(folder, name) for name in available_agents(folder)]
    rows: list[dict[str, Any]] = [
        {
            "name": a.name,
            "version": a.config.version,
            "needs_model": a.needs_model,
            "protocol": a.protocol if a.needs_model else None,
            "software": list(a.config.software.python) if a.config.software else [],
            "description": a.config.description,
        }
        for a in agents
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    _table(
        ["AGENT", "VERSION", "MODEL", "SOFTWARE", "DESCRIPTION"],
        [
            [
                r["name"],
                r["version"],
                r["protocol"] or "none",
                ",".join(r["software"]) or "-",
                r["description"] or "",
            ]
            for r in rows
        ],
    )
    return 0


def _kept_pins(closure: Path) -> list[str]:
    """The name==version of each line of a closure, with its digests or without (one locked before closures
    carried them)."""
    lines = (line.split("#", 1)[0].split() for line in closure.read_text("utf-8").splitlines())
    return [words[0] for words in lines if words]


def cmd_agents_lock(args: argparse.Namespace) -> int:
    """Write an agent's pinned closure (requirements.txt) for the image's Python, resolved on this host."""
    from ssebench.agent import PYTHON_CLOSURE, load_agent
    from ssebench.settings import get_settings
    from ssebench.wheelhouse import resolve_closure

    settings = get_settings()
    agent = load_agent(settings.agents_dir, args.name, closure=False)
    if agent.config.software is None or not agent.config.software.python:
        raise SSEBenchError(f"{agent.path / 'agent.yaml'}: software.python: agent {agent.name} pins no packages")
    python, machine = args.python, args.machine
    if python is None or machine is None:
        from ssebench.build import probe_python

        probed = probe_python(f"{settings.prefix}/base-c:{settings.base_version}")
        python, machine = python or probed[0], machine or probed[1]
    if args.keep_versions:
        if agent.closure is None or not agent.closure.is_file():
            raise SSEBenchError(f"{agent.path / PYTHON_CLOSURE}: --keep-versions needs a closure to keep")
        pins = resolve_closure(_kept_pins(agent.closure), python, machine, exact=True)
    else:
        pins = resolve_closure(agent.config.software.python, python, machine)
    header = (
        f"# The whole closure of agents/{agent.name}'s software.python for Python {python} ({machine}), pinned:\n"
        f"# made by `ssebench agents lock {agent.name}`; downloaded and installed (--no-deps) only as these wheels.\n"
    )
    (agent.path / PYTHON_CLOSURE).write_text(header + "".join(f"{pin}\n" for pin in pins), encoding="utf-8")
    load_agent(settings.agents_dir, args.name)  # the closure now bears agent.yaml's pins out
    print(f"{shown_path(agent.path / PYTHON_CLOSURE)}: {len(pins)} packages")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    from ssebench.gateway import read_models
    from ssebench.settings import get_settings

    # A broken file is said (and the status is 1), without hiding the models that can be used.
    models, broken = read_models(get_settings().models_dir)
    for problem in broken:
        print(for_terminal(f"ssebench models list: {problem}"), file=sys.stderr)
    rows: list[dict[str, Any]] = [
        {
            "name": m.name,
            "served_by": "script" if m.script else (m.base_url or ""),
            "protocols": sorted(m.protocols),
            "upstream_model": m.upstream_model,
            "price_per_mtok": {"input": m.price.input, "output": m.price.output},
            "budget": None if m.budget is None else m.budget.model_dump(),
        }
        for m in sorted(models.values(), key=lambda m: m.name)
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 1 if broken else 0

    def budget(m: dict[str, Any]) -> str:
        given = m["budget"] or {}
        said = [
            f"{given['tokens']:,} tokens" if given.get("tokens") else "",
            f"${given['cost']:g}" if given.get("cost") else "",
        ]
        return ", ".join(filter(None, said)) or "none"

    _table(
        ["MODEL", "SERVED BY", "PROTOCOL", "PRICE IN/OUT (USD per Mtok)", "BUDGET PER RUN"],
        [
            [
                m["name"],
                m["served_by"],
                "any" if len(m["protocols"]) > 1 else m["protocols"][0],
                f"{m['price_per_mtok']['input']:g} / {m['price_per_mtok']['output']:g}",
                budget(m),
            ]
            for m in rows
        ],
    )
    return 1 if broken else 0


def cmd_ps(args: argparse.Namespace) -> int:
    from ssebench.inflight import as_json, as_rows, runs_in_flight

    if args.watch:
        return _watch_runs(args.results, args.interval)
    runs = runs_in_flight()
    if args.json:
        print(json.dumps(as_json(runs), indent=2))
    elif not runs:
        print("no runs in flight")
    else:
        print(for_terminal("\n".join(as_rows(runs))))
    return 0


def _watch_runs(results: Path, interval: float) -> int:
    """`ssebench ps --watch`: the runs in flight under their sweeps' progress, again every `interval` seconds
    until Ctrl-C. On a terminal each look replaces the last; elsewhere (a file, a pipe) they follow one
    another, plain text."""
    from ssebench.inflight import as_watch, runs_in_flight
    from ssebench.progress import read_snapshots

    tty = sys.stdout.isatty()
    try:
        while True:
            try:
                runs, problem = runs_in_flight(), None
            except SSEBenchError as exc:  # the engine went away: say so, and look again
                runs, problem = [], f"error: {exc}"
            lines = [
                f"ssebench ps --watch: {time.strftime('%H:%M:%S')}, every {interval:g} s, Ctrl-C to stop",
                *([problem] if problem else []),
                *as_watch(runs, read_snapshots(results), now=time.time(), results=results),
            ]
            text = for_terminal("\n".join(lines))
            if tty:  # home, each line over the last look's, then the rest of the screen cleared
                sys.stdout.write("\x1b[H" + "".join(f"{line}\x1b[K\n" for line in text.split("\n")) + "\x1b[J")
            else:
                sys.stdout.write(text + "\n\n")
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from ssebench.reaper import remove_kept

    if bool(args.runs) == args.all_kept:
        print("error: ssebench rm: name the runs to remove (RUN_ID ...) or give --all-kept, not both", file=sys.stderr)
        return 2
    removed = remove_kept(args.runs)
    for run, what in removed:
        print(for_terminal(f"removed {what} (run {run})"))
    missing = [run for run in dict.fromkeys(args.runs) if run not in {found for found, _ in removed}]
    for run in missing:
        print(
            for_terminal(f"error: no kept run {run} on this engine (`ssebench ps` lists the kept ones)"),
            file=sys.stderr,
        )
    if args.all_kept and not removed:
        print("no kept runs on this engine")
    return 1 if missing else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ssebench.doctor import run_checks

    failed = 0
    for check in run_checks():
        print(f"{'OK  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
        failed += not check.ok
    return 1 if failed else 0


def _results_dir(text: str) -> Path:
    path = Path(text)
    if path.is_symlink() or not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: not a directory; give the folder a run's --results wrote")
    return path


def _filters(args: argparse.Namespace) -> dict[str, list[str]]:
    from ssebench.runs import FILTERS

    return {name: getattr(args, name) or [] for name in FILTERS}


def cmd_results_export(args: argparse.Namespace) -> int:
    from ssebench.runs import RUN_COLUMNS, export_csv, matching, read_runs, score_table
    from ssebench.scores import SCORE_COLUMNS

    runs = matching(read_runs(args.results), _filters(args))
    table = score_table(runs)
    rows = [run.row() for run in runs] if args.table == "runs" else table.records()
    out = sys.stdout if args.out is None else args.out.open("w", encoding="utf-8", newline="")
    try:
        if args.format == "json":
            out.write(json.dumps(rows, indent=2) + "\n")
        else:
            export_csv(
                rows, out, RUN_COLUMNS if args.table == "runs" else [c for c in SCORE_COLUMNS if c != "pass_at_K"]
            )
    finally:
        if args.out is not None:
            out.close()
    if args.out is not None:
        print(for_terminal(f"{len(rows)} row(s) of {len(runs)} run(s) written to {args.out}"), file=sys.stderr)
    if args.table == "scores" and (note := table.left_out_line()):
        print(note, file=sys.stderr)
    return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: give a port from 1 to 65535, or 0 for any free one")
    return port


def cmd_view(args: argparse.Namespace) -> int:
    from ssebench.viewer import serve

    serve(args.results, host=args.host, port=args.port, allowed_hosts=args.allow_host, sessions=args.session)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="ssebench",
        description="SSEBench: run AI coding agents on real vulnerabilities and grade their patches.",
        epilog="Runs themselves are pytest items: pytest datasets/demo --agent reference",
    )
    top.add_argument("--version", action="version", version=f"ssebench {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tasks = sub.add_parser("tasks", help="list tasks", description="Look at the tasks of datasets.")
    tasks_sub = tasks.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = tasks_sub.add_parser(
        "list",
        help="list the tasks under PATH",
        description="List the tasks under PATH (a task, a dataset, or a folder above datasets).",
    )
    listing.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH, help="default: ./datasets")
    listing.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    listing.set_defaults(func=cmd_tasks_list)

    task = sub.add_parser("task", help="make tasks", description="Make a task.")
    task_sub = task.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = task_sub.add_parser(
        "new",
        help="scaffold a task from a Debian source package or two crate versions",
        description=(
            "Fetch the source (on this host: Debian's mirror, crates.io), split the fix into sse/diffs/patch.diff "
            "(code) and sse/diffs/test.diff (tests), and write config.yaml, the Dockerfile and script skeletons "
            "in DATASET/ID; print what is left to the author (PoC, harness, report)."
        ),
    )
    new.add_argument("dataset", type=Path, metavar="DATASET", help="the dataset folder to add the task to")
    new.add_argument("--debian", metavar="PKG=VERSION", help="a Debian source package at an exact version")
    new.add_argument(
        "--patch",
        metavar="NAME",
        action="append",
        help="the fix: its name in debian/patches/series (repeat, in series order, for a fix in several entries)",
    )
    new.add_argument("--advisory", metavar="ID", help="the advisory (CVE-..., RUSTSEC-...); finds --patch by it")
    new.add_argument("--crate", metavar="NAME", help="a crate on crates.io (with --vulnerable and --fixed)")
    new.add_argument("--vulnerable", metavar="VERSION", help="the crate's last vulnerable version")
    new.add_argument("--fixed", metavar="VERSION", help="the crate's first fixed version")
    new.add_argument("--id", metavar="ID", help="the task's id (default: PROJECT-ADVISORY)")
    new.add_argument("--language", choices=("c", "go", "rust"), help="default: from the package's build tools")
    new.set_defaults(func=cmd_task_new)

    dataset = sub.add_parser("dataset", help="check datasets", description="Check datasets.")
    dataset_sub = dataset.add_subparsers(dest="action", required=True, metavar="ACTION")
    validate = dataset_sub.add_parser(
        "validate",
        help="check every task's config and files (and, with --build, that its images build)",
        description="Check every task under PATH: config.yaml against its format (docs/formats.md) and the files "
        "it names; with --build, that its images build too. Prints one line per problem; exits 1 if there is any.",
    )
    validate.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH, help="default: ./datasets")
    validate.add_argument("--build", action="store_true", help="also build every task's images (can take an hour)")
    # The old default built the images; --no-build asked it not to, and is still accepted (it is now the default).
    validate.add_argument("--no-build", action="store_true", help=argparse.SUPPRESS)
    validate.set_defaults(func=cmd_dataset_validate)

    check = dataset_sub.add_parser(
        "verify",
        help="run reference, dummy and hollow on every task and check the task is valid",
        description="Run the reference, dummy and hollow agents on every task under PATH: the reference must pass "
        "every check with nothing of its fix set aside, the dummy must build, pass the function test and fail every "
        "PoC, and the hollow agent (which leaves the bug and edits only build files, tests and harnesses) must fail "
        "with its edits set aside. Also searches what the agent can read for names of the fix and for its answer "
        "(hunks of the fix and hidden tests, PoCs, variants). Records the ids of valid tasks' images in images.json "
        "beside the dataset. Writes a summary "
        "(markdown and JSON) beside the runs; exits 1 naming each task and check that disagrees. With --repeat N, "
        "runs reference and dummy N times each and prints the flake table: per task and check, how many runs "
        "disagree with the others or with what a valid task gives.",
    )
    check.add_argument(
        "path",
        nargs="*",
        type=Path,
        help="task folders, dataset folders or folders above them (default: ./datasets)",
    )
    check.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="only the tasks whose id EXPR matches, as pytest's -k: a word matches the ids containing it (any "
        "case), joined with and, or, not and parentheses, e.g. -k 'libcue or jwt-go'",
    )
    check.add_argument("-n", "--jobs", type=_positive, default=1, metavar="N", help="runs at a time (default 1)")
    check.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        metavar="N",
        help="run reference and dummy N times each (hollow once) and print each task's flakes per check",
    )
    check.add_argument(
        "--resume",
        action="store_true",
        help="read back the runs an earlier verify already graded in --results (same task files, agent and "
        "trial) and run only the rest",
    )
    check.add_argument("--results", type=Path, default=Path("results"), metavar="DIR", help="default ./results")
    check.set_defaults(func=cmd_dataset_verify)

    pinning = dataset_sub.add_parser(
        "pin",
        help="write the dataset's manifest (the SHA-256 of every task file) under its version",
        description="Write manifest.json beside each dataset.yaml under PATH: the dataset's version and the SHA-256 "
        "of every file of every task, sorted (a second pin of the same files writes the same bytes). Loading the "
        "dataset then refuses a task that differs from it under that version. Refuses to pin other files under a "
        "version already pinned unless --keep-version is given; bump the version instead.",
    )
    pinning.add_argument("path", type=Path, help="a dataset folder (or a folder above datasets)")
    pinning.add_argument(
        "--keep-version",
        action="store_true",
        help="pin changed tasks under the version already pinned (for a version not yet released)",
    )
    pinning.set_defaults(func=cmd_dataset_pin)

    schema = dataset_sub.add_parser(
        "schema",
        help="write JSON Schemas of the file formats, for editors",
        description="Write JSON Schemas (draft 2020-12) of dataset.yaml, a task's config.yaml, agent.yaml, "
        "model files and their scripts, result.json and summary.json into DIR, one file each "
        "(e.g. config.schema.json), made from the models that read them; print each file written. "
        "docs/formats.md describes the formats.",
    )
    schema.add_argument(
        "--out", type=Path, default=Path("schemas"), metavar="DIR", help="default ./schemas (made if missing)"
    )
    schema.set_defaults(func=cmd_dataset_schema)

    images = sub.add_parser("images", help="build images", description="Build and bootstrap images.")
    images_sub = images.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = images_sub.add_parser(
        "build",
        help="build the images of the tasks under PATH",
        description="Build the base, runtime, case and tool images of every task under PATH (and the agent "
        "images with --agent). Images whose inputs are unchanged are reused.",
    )
    build.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH, help="default: ./datasets")
    build.add_argument(
        "--agent", action="append", default=[], metavar="NAME", help="also build agents/NAME on each task (repeatable)"
    )
    build.add_argument(
        "--mode",
        type=parse_modes,
        default=("sandbox",),
        metavar="MODES",
        help="comma-separated modes to build the agents' images for: sandbox (default: one image "
        "per agent and task), sidecar (one image per agent, for every task)",
    )
    build.add_argument("--force", action="store_true", help="rebuild every layer, ignoring Docker's cache")
    build.add_argument(
        "--registry",
        type=parse_registry,
        metavar="HOST:PORT",
        help="push every image to this registry (machines lacking one pull it from there)",
    )
    build.add_argument(
        "--jobs",
        "-j",
        type=_positive,
        metavar="N",
        help="tasks whose images build at once (default: SSEBENCH_BUILD_JOBS, else 2)",
    )
    build.set_defaults(func=cmd_images_build)
    boot = images_sub.add_parser(
        "bootstrap",
        help="make the OS image without a registry",
        description="Make the OS image (default debian:bookworm-slim): pull it if a registry answers, "
        "else build it with debootstrap and docker import (needs root and debootstrap).",
    )
    boot.add_argument("--force", action="store_true", help="bootstrap again even if the image is present")
    boot.set_defaults(func=cmd_images_bootstrap)

    run = sub.add_parser(
        "run",
        help="one run outside pytest",
        description="Run one agent on one task through the same code as the pytest plugin; print the grade "
        "and the run directory.",
    )
    run.add_argument("--task", required=True, metavar="PATH|ID", help="a task folder, or a task id under --datasets")
    run.add_argument("--agent", metavar="NAME", help="an agent under agents/")
    run.add_argument(
        "--model", metavar="NAME", help="the model, for agents that need one (with --predictions: whose prediction)"
    )
    run.add_argument(
        "--predictions",
        type=Path,
        metavar="FILE",
        help="grade the task's prediction in FILE (SWE-bench's predictions format) instead of running an agent",
    )
    run.add_argument(
        "--model-budget",
        type=parse_budget,
        metavar="BUDGET",
        help="what the run may use of its model, overriding the model file: tokens=N,cost=USD",
    )
    run.add_argument("--difficulty", type=int, default=2, choices=range(5), metavar="0-4", help="default 2")
    # One spelling per concept with the plugin; the CLI also takes upstream's (--timeout, --limits,
    # --keep-container, --local, --build): it has no plugin to clash with.
    run.add_argument(
        "--agent-timeout",
        "--timeout",
        dest="agent_timeout",
        type=parse_seconds,
        default=AGENT_TIMEOUT,
        metavar="SECONDS",
        help=f"the agent's time limit (default {AGENT_TIMEOUT:.0f})",
    )
    run.add_argument(
        "--run-limits",
        "--limits",
        dest="limits",
        type=parse_run_limits,
        default={},
        metavar="LIMITS",
        help="resource limits of the run container: pids=N,memory=SIZE,cpus=N,file_size=SIZE",
    )
    run.add_argument("--mode", choices=MODES, default="sandbox", help="default sandbox")
    run.add_argument("--egress", choices=EGRESS, default="restricted")
    run.add_argument("--results", type=Path, default=Path("results"), metavar="DIR", help="default ./results")
    run.add_argument("--datasets", type=Path, default=DEFAULT_PATH, metavar="DIR", help="where to look up a task id")
    run.add_argument(
        "--run-id",
        type=parse_run_id,
        metavar="ID",
        help="the run's id, the name of its directory under RESULTS/TASK/MODEL/AGENT/ (default: the time, "
        "difficulty, mode and a random suffix)",
    )
    run.add_argument(
        "--keep-containers",
        "--keep-container",
        dest="keep_container",
        action="store_true",
        help="leave the container in place afterwards",
    )
    run.add_argument("--require-pass", action="store_true", help="exit 1 unless the grade is passed")
    run.add_argument(SKIP_MODEL_CHECK, action="store_true", help=SKIP_MODEL_CHECK_HELP)
    run.add_argument(
        "--build",
        "--rebuild",
        dest="build",
        action="store_true",
        help="rebuild the task's images for this agent before the run, ignoring Docker's cache",
    )
    run.add_argument(
        "--backend", choices=("docker",), default="docker", help="the container engine (docker, the only one)"
    )
    where = run.add_mutually_exclusive_group()
    where.add_argument(
        "--dispatch",
        type=parse_dispatch,
        default="local",
        metavar="local|ray",
        help="run here (default) or as a task of a Ray cluster (docs/scale-out.md)",
    )
    where.add_argument("--local", dest="dispatch", action="store_const", const="local", help="run here (the default)")
    run.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster's head (default: auto)")
    run.add_argument(
        "--registry",
        type=parse_registry,
        metavar="HOST:PORT",
        help="pull missing images from this registry, push built ones to it",
    )
    run.set_defaults(func=cmd_run)

    for noun, what, func in (
        ("agents", "the agents under agents/ (their agent.yaml)", cmd_agents_list),
        (
            "models",
            "the models the gateway serves (models/*.yaml): who serves each, its price and budget",
            cmd_models_list,
        ),
    ):
        group = sub.add_parser(noun, help=f"list {noun}", description=f"Look at {what}.")
        actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
        shown = actions.add_parser("list", help=f"list {what}", description=f"List {what}.")
        shown.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
        shown.set_defaults(func=func)
        if noun == "agents":
            lock = actions.add_parser(
                "lock",
                help="pin an agent's software closure",
                description="Resolve an agent's software.python on this host for the images' Python and write "
                "the whole closure, pinned, to agents/NAME/requirements.txt.",
            )
            lock.add_argument("name", metavar="NAME", help="an agent under agents/")
            lock.add_argument("--python", metavar="X.Y", help="the images' Python (default: asked of base-c)")
            lock.add_argument("--machine", metavar="ARCH", help="the images' machine, e.g. x86_64 (default: asked)")
            lock.add_argument(
                "--keep-versions",
                action="store_true",
                help="keep the closure's versions and only fetch their wheels' digests again (no new resolve)",
            )
            lock.set_defaults(func=cmd_agents_lock)

    results = sub.add_parser(
        "results", help="export or re-grade past runs", description="Use the runs of a results directory."
    )
    results_sub = results.add_subparsers(dest="action", required=True, metavar="ACTION")
    as_predictions = results_sub.add_parser(
        "predictions",
        help="print past runs' patches as a predictions file",
        description="Print the final.patch of the newest run of each task x model x agent under RESULTS_DIR as "
        "SWE-bench predictions (JSON lines; model_name_or_path is AGENT/MODEL), to grade them again with "
        "pytest DATASET --predictions FILE.",
    )
    as_predictions.add_argument("results", type=_results_dir, metavar="RESULTS_DIR", help="a --results directory")
    as_predictions.set_defaults(func=cmd_results_predictions)

    ps = sub.add_parser(
        "ps",
        help="list the runs in flight and the kept ones",
        description="List the runs in flight on this Docker engine (task, agent, model, phase, "
        "elapsed), from their containers' labels and the phase their entrypoint writes, and the runs kept "
        "with --keep-containers, with the command that enters each of their containers.",
    )
    watched = ps.add_mutually_exclusive_group()
    watched.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    watched.add_argument(
        "--watch",
        action="store_true",
        help="look again every --interval seconds until Ctrl-C, each session's runs under its sweep's progress "
        "(runs done, running and left, time to go, model use), read from --results",
    )
    ps.add_argument(
        "--interval", type=parse_seconds, default=2.0, metavar="SECONDS", help="with --watch: how often (default 2)"
    )
    ps.add_argument(
        "--results",
        type=Path,
        default=Path(os.environ.get("SSEBENCH_RESULTS") or "results"),
        metavar="DIR",
        help="with --watch: the sweeps' results directory, where each writes its progress "
        "(default: $SSEBENCH_RESULTS, else ./results)",
    )
    ps.set_defaults(func=cmd_ps)

    rm = sub.add_parser(
        "rm",
        help="remove kept runs",
        description="Remove the containers, network and volumes of runs kept with --keep-containers (`ssebench "
        "ps` lists them), by their labels; nothing else.",
    )
    rm.add_argument("runs", nargs="*", metavar="RUN_ID", help="the kept runs to remove (the RUN column of ps)")
    rm.add_argument("--all-kept", action="store_true", help="remove every kept run on this engine")
    rm.set_defaults(func=cmd_rm)

    doctor = sub.add_parser(
        "doctor",
        help="check this machine",
        description="Check Docker, disk, the OS and base images and debootstrap; print OK or the fix for each.",
    )
    doctor.set_defaults(func=cmd_doctor)

    export = results_sub.add_parser(
        "export",
        help="write the runs or the score table as CSV or JSON",
        description="Write every run of a results directory (one row a run), or the score table (one row per "
        "agent x model x difficulty x mode), as CSV or JSON; docs/viewer.md describes the columns.",
    )
    export.add_argument("results", type=_results_dir, metavar="RESULTS_DIR", help="a --results directory")
    export.add_argument("--table", choices=("runs", "scores"), default="runs", help="what to write (default: runs)")
    export.add_argument("--format", choices=("csv", "json"), default="csv", help="default: csv")
    export.add_argument("--out", type=Path, metavar="FILE", help="write here rather than to standard output")
    view = sub.add_parser(
        "view",
        help="look at results in a browser",
        description="Serve a results directory as a local web app (score table, runs, one run, two agents "
        "side by side, runs in flight), on 127.0.0.1 unless told otherwise; docs/viewer.md.",
    )
    view.add_argument(
        "results",
        type=_results_dir,
        nargs="?",
        default=Path("results"),
        metavar="RESULTS_DIR",
        help="a --results directory (default: results)",
    )
    view.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    view.add_argument("--port", type=_port, default=8765, help="default: 8765")
    view.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header to answer besides localhost's (needed with --host other than loopback); repeatable",
    )
    for each in (export, view):
        for name in ("task", "language", "agent", "model", "difficulty", "mode", "grade", "session"):
            if each is view and name != "session":
                continue
            each.add_argument(
                f"--{name}", action="append", metavar=name.upper(), help=f"only runs of this {name}; repeatable"
            )
    view.set_defaults(func=cmd_view)
    export.set_defaults(func=cmd_results_export)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigError, ConfigErrors) as exc:
        for line in _problems(exc):
            print(for_terminal(f"error: {line}"), file=sys.stderr)
        return 1
    except SSEBenchError as exc:
        print(for_terminal(f"error: {exc}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def stoppable() -> None:
    """Give a command Ctrl-C's meaning on SIGINT and SIGTERM alike: its runs are stopped and reaped and what
    it wrote is kept, as on Ctrl-C. SIGINT gets that meaning back where the shell that started the command
    ignored it (a background job, `ssebench dataset verify ... &`, inherits SIGINT ignored, and Python then
    never raises KeyboardInterrupt); SIGTERM (`kill`, a CI's cancel) would otherwise end it at once."""
    import signal

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop)


def entry() -> int:
    """The `ssebench` command: main() as a process of its own, stoppable by SIGINT and SIGTERM."""
    stoppable()
    return main()


if __name__ == "__main__":
    sys.exit(entry())
