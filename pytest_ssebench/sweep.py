"""A sweep: the runs one pytest session asks for. Options, agents, collection of task folders, start and end.

Words: a *sweep* is this plugin object; pytest's `Session` is pytest's own;
the *session* of `ssebench.reaper.Session` is the id that labels every
container and network the sweep starts (so that it, or the next sweep when
it crashed, can remove them).

Registered by `plugin.py` only when an agent is asked for. The session's
life (checks, gateway, Ray, clean-up) is `ssebench.session.RunSession`, the
same as `ssebench run`'s; items run through it; what they add to pytest's
reports is `pytest_ssebench.report`. Under xdist the controller owns the
session id (the labels on every container and network, passed to workers),
its gateway, and the clean-up at start and end, and prints the score table
from the reports the workers send.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ssebench.collect import CollectError, TaskDirectory, dataset_marker
from pytest_ssebench.options import Options, parse_options
from pytest_ssebench.report import ReportHooks
from pytest_ssebench.schedule import DurationHooks, make_scheduler, read_history
from ssebench.agent import Agent, load_agent
from ssebench.dataset import TaskLoader, looks_like_task
from ssebench.errors import ConfigError, ConfigErrors, SSEBenchError
from ssebench.logs import for_terminal
from ssebench.predictions import PREDICTIONS_AGENT, Prediction, Predictions, load_predictions
from ssebench.reaper import Session
from ssebench.runspec import RunConfig, limits_for
from ssebench.session import OptionError, Plan, RunSession
from ssebench.settings import Settings, get_settings
from ssebench.task import Task


class Sweep:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options: Options = parse_options(config)
        try:
            self.settings: Settings = get_settings()
        except SSEBenchError as exc:  # names its variable
            raise pytest.UsageError(for_terminal(str(exc))) from None
        try:
            self.agents: list[Agent] = [load_agent(self.settings.agents_dir, name) for name in self.options.agents]
        except (ConfigError, ConfigErrors, SSEBenchError) as exc:
            raise pytest.UsageError(f"--agent: {exc}") from None
        self.predictions = self._load_predictions()
        if self.options.registry:
            self.settings = self.settings.model_copy(update={"image_registry": self.options.registry})
        needing = next((a.name for a in self.agents if a.needs_model), None)
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            session = Session(id=workerinput["ssebench_session"], controller=int(workerinput["ssebench_controller"]))
            gateway = (
                (workerinput["ssebench_gateway"], workerinput["ssebench_gateway_token"])
                if "ssebench_gateway" in workerinput
                else None
            )
        else:
            session, gateway = Session.new(), None
        self.is_controller = workerinput is None
        self._backend: Any = None
        self.loader = TaskLoader()
        o = self.options
        plan = Plan(
            results=o.results,
            needs_model=needing,
            models=o.models,
            agents=tuple(self.agents),
            budget=o.budget,
            model_check=o.model_check and not config.option.collectonly,  # collecting runs nothing: no call
            dispatch=o.dispatch,
            ray_address=o.ray_address,
            egress=o.egress,
            workers=getattr(config.option, "numprocesses", None) or 0,
            keep=o.keep_containers,
            retries=o.retries,
            resume=o.resume,
        )
        try:
            # The session's life (ssebench.session): the gateway starts here, so that xdist's workers get it.
            self.lifecycle = RunSession(
                self.settings,
                plan,
                session=session,
                controller=workerinput is None,
                gateway=gateway,
                backend=self.backend,
                link=lambda run: config.hook.pytest_ssebench_model_link(config=config, run=run),
            )
            self.lifecycle.start_models()
        except OptionError as exc:
            raise pytest.UsageError(for_terminal(str(exc))) from None
        self.session = self.lifecycle.session
        self._registered_markers: set[str] = set()
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistHooks(self), "ssebench-xdist")
        self.reports = ReportHooks(
            self.options.results,
            html=config.pluginmanager.hasplugin("html"),
            show_table=self.is_controller,
            trials=self.options.trials,
        )
        config.pluginmanager.register(self.reports, "ssebench-report")
        if self.is_controller:  # how long each item took, for the next sweep's order (pytest_ssebench.schedule)
            config.pluginmanager.register(DurationHooks(self.settings.cache_dir), "ssebench-durations")
            config.pluginmanager.register(self._progress(), "ssebench-progress")

    def _progress(self) -> Any:
        """The controller's progress line (pytest_ssebench.progress), its estimate from the same history as
        the order of runs, its model use from the session's gateway when it runs here."""
        from pytest_ssebench.progress import ProgressHooks
        from ssebench.progress import Progress

        gateway = self.lifecycle.gateway
        progress = Progress(
            self.session.id,
            history=read_history(self.settings.cache_dir),
            workers=getattr(self.config.option, "numprocesses", None) or 1,
            all_at_once=self.options.dispatch == "ray",
            metered=any(agent.needs_model for agent in self.agents) and bool(self.options.models),
        )
        return ProgressHooks(
            self.config,
            progress,
            asked=self.options.progress,
            results=self.options.results,
            usage_dir=gateway.state_dir / "usage" if gateway is not None else None,
        )

    def _load_predictions(self) -> Predictions | None:
        """--predictions: the file, loaded, and the predictions agent among the agents (it runs only with it)."""
        path = self.options.predictions
        given = any(agent.grades_predictions for agent in self.agents)
        if path is None:
            if given:
                raise pytest.UsageError(
                    f"--agent {PREDICTIONS_AGENT}: give the patches it applies with --predictions FILE "
                    "(SWE-bench's predictions format)"
                )
            return None
        try:
            predictions = load_predictions(path)
        except ConfigError as exc:
            raise pytest.UsageError(for_terminal(f"--predictions: {exc}")) from None
        if not given:
            try:
                self.agents.append(load_agent(self.settings.agents_dir, PREDICTIONS_AGENT))
            except (ConfigError, ConfigErrors, SSEBenchError) as exc:
                raise pytest.UsageError(for_terminal(f"--predictions: {exc}")) from None
        return predictions

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """With --dispatch ray: every run is submitted at once, and each item is reported as its run ends."""
        if self.options.dispatch != "ray" or session.config.option.collectonly:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
        from pytest_ssebench.collect import RunItem
        from ssebench.record import finished_run

        items = [item for item in session.items if isinstance(item, RunItem)]
        others = [item for item in session.items if not isinstance(item, RunItem)]
        for item in others:  # anything else collected beside the runs runs first, here, in order
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=None)
            self._check_stop(session)
        executor = self.lifecycle.executor
        by_config = {id(item.run): item for item in items}
        for item in items:
            if not (self.options.resume and finished_run(item.run, self.options.results)):
                executor.submit(item.run)
        waiting = dict(by_config)
        while waiting:
            done = [id(config) for config in executor.ready(timeout=1.0)]
            # Runs never submitted (resumed, or fitting no node) are reported without waiting.
            done += [key for key, item in waiting.items() if not executor.is_pending(item.run)]
            for key in dict.fromkeys(done):
                if key in waiting:
                    item = waiting.pop(key)
                    item.config.hook.pytest_runtest_protocol(item=item, nextitem=None)
                    self._check_stop(session)
        return True

    @staticmethod
    def _check_stop(session: pytest.Session) -> None:
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.lifecycle.close()  # when the session never started; else a no-op

    # -- collection ---------------------------------------------------------

    def load_task(self, path: Path) -> Task:
        """The task in folder `path`, loaded with its dataset (once per dataset)."""
        return self.loader.load(path)

    def runs_of(self, task: Task) -> list[RunConfig]:
        marker = dataset_marker(task.dataset)
        if marker not in self._registered_markers:
            self.config.addinivalue_line("markers", f"{marker}: a task of the {task.dataset} dataset")
            self._registered_markers.add(marker)
        try:
            limits = limits_for(self.settings, task, self.options.limits, here=self.options.dispatch == "local")
        except SSEBenchError as exc:
            raise CollectError(str(exc)) from None
        runs = []
        for agent in self.agents:
            # The predictions agent runs once per prediction of the task, under the prediction's model name.
            predicted: list[Prediction | None] = (
                list(self.predictions.for_task(task)) if agent.grades_predictions and self.predictions else [None]
            )
            for prediction in predicted:
                if prediction is not None:
                    models: tuple[str, ...] = (prediction.model,)
                else:
                    models = self.options.models if agent.needs_model else ("none",)
                for model in models:
                    for difficulty in self.options.difficulties:
                        for mode in self.options.modes:
                            for trial in range(1, self.options.trials + 1):
                                runs.append(
                                    RunConfig(
                                        task=task,
                                        agent=agent,
                                        model=model,
                                        difficulty=difficulty,
                                        mode=mode,
                                        timeout=self.options.timeout,
                                        egress=self.options.egress,
                                        keep_container=self.options.keep_containers,
                                        limits=limits,
                                        trial=trial,
                                        prediction=prediction,
                                    )
                                )
        return runs

    def item_name(self, run: RunConfig) -> str:
        """`reference[none-d2-sandbox]`, with `-t2` for the second of several trials."""
        trial = f"-t{run.trial}" if self.options.trials > 1 else ""
        return f"{run.agent.name}[{run.model}-d{run.difficulty}-{run.mode}{trial}]"

    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(self, path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if looks_like_task(path):
            return TaskDirectory.from_parent(parent, path=path, sweep=self)
        return None

    # -- running --------------------------------------------------------------

    def backend(self) -> Any:
        if self._backend is None:
            chosen = self.config.hook.pytest_ssebench_backend(config=self.config)
            if chosen is None:
                from ssebench.engine import DockerBackend

                chosen = DockerBackend()
            self._backend = chosen
        return self._backend

    # -- the session's start and end --------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        try:
            self.lifecycle.start(connect=not self.config.option.collectonly)
        except SSEBenchError as exc:
            raise pytest.UsageError(for_terminal(str(exc))) from None
        if self.is_controller and self.options.rebuild:
            self._rebuild()
        if self.is_controller and self.predictions is not None:
            self._say_unnamed_tasks(self.predictions)

    def _say_unnamed_tasks(self, predictions: Predictions) -> None:
        """One line on the predictions that name no task under the paths given: not graded, said once (a
        predictions file often covers a whole dataset and is graded a part at a time, so it is no error)."""
        from ssebench.dataset import argument_path, load_tasks

        paths = [Path(argument_path(a)) for a in self.config.args] or [self.config.invocation_params.dir]
        tasks: list[Task] = []
        for path in paths:
            with contextlib.suppress(ConfigError, ConfigErrors):  # collection says what is wrong with a task
                tasks += load_tasks(path, check_files=False)
        unnamed = predictions.naming_none_of(tasks)
        if unnamed:
            shown = ", ".join(f"{p.instance_id} ({p.where})" for p in unnamed[:5])
            more = f" and {len(unnamed) - 5} more" if len(unnamed) > 5 else ""
            print(
                for_terminal(
                    f"ssebench: --predictions {predictions.path}: {len(unnamed)} of {len(predictions.items)} "
                    f"prediction(s) name no task under the paths given and are not graded: {shown}{more}"
                ),
                file=sys.stderr,
            )

    def _rebuild(self) -> None:
        from ssebench.build import build_images
        from ssebench.dataset import argument_path, load_tasks

        paths = [Path(argument_path(a)) for a in self.config.args] or [Path("datasets")]
        tasks = [t for p in paths if p.exists() for t in load_tasks(p)]
        for agent in self.agents:
            outcome = build_images(self.settings, tasks, agent, modes=self.options.modes, force=True)
            for failure in outcome.failures.values():
                print(for_terminal(f"ssebench: --rebuild: {str(failure).splitlines()[0]}"), file=sys.stderr)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.lifecycle.close()

    def pytest_report_header(self, config: pytest.Config) -> str:
        o = self.options
        trials = f"; trials {o.trials}" if o.trials > 1 else ""
        resume = "; resuming finished runs" if o.resume else ""
        ray = f"; dispatch ray ({o.ray_address or 'auto'})" if o.dispatch == "ray" else ""
        registry = f"; registry {o.registry}" if o.registry else ""
        predictions = ""
        if self.predictions is not None:
            named = dict.fromkeys(p.model for p in self.predictions.items)
            predictions = f"; predictions {o.predictions} ({len(self.predictions.items)}, models {','.join(named)})"
        agents = ",".join(agent.name for agent in self.agents)  # the predictions agent too, when implied
        return (
            f"ssebench: agents {agents}; models {','.join(o.models) or 'none'}; difficulty "
            f"{','.join(map(str, o.difficulties))}; mode {','.join(o.modes)}{trials}; egress {o.egress}; "
            f"results {o.results}{resume}{ray}{registry}{predictions}"
        )


class _XdistHooks:
    """Hooks that exist only with pytest-xdist: hand the session id to each worker; send the longest runs
    first."""

    def __init__(self, session: Sweep) -> None:
        self.session = session

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return make_scheduler(config, log, read_history(self.session.settings.cache_dir))

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["ssebench_session"] = self.session.session.id
        node.workerinput["ssebench_controller"] = str(self.session.session.controller)
        access = self.session.lifecycle.gateway_access
        if access is not None:
            node.workerinput["ssebench_gateway"], node.workerinput["ssebench_gateway_token"] = access
