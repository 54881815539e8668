"""A sweep: the runs one pytest session asks for. Options, agents, collection of task folders, start and end.

Words: a *sweep* is this plugin object; pytest's `Session` is pytest's own;
the *session* of `ssebench.reaper.Session` is the id that labels every
container and network the sweep starts (so that it, or the next sweep when
it crashed, can remove them).

Registered by `plugin.py` only when an agent is asked for. Items run through
a `Runner` (pytest_ssebench.runner); what they add to pytest's reports is
`pytest_ssebench.report`. Under xdist the controller owns the session id
(the labels on every container and network, `ssebench.reaper.Session`, passed
to workers), reaps what dead sessions left at start and everything of its own
session at the end, and prints the score table from the reports the workers
send.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ssebench.collect import TaskDirectory, dataset_marker
from pytest_ssebench.options import Options, parse_options
from pytest_ssebench.report import ReportHooks
from pytest_ssebench.runner import Runner
from pytest_ssebench.schedule import DurationHooks, make_scheduler, read_history
from ssebench.agent import Agent, load_agent
from ssebench.dataset import TaskLoader, looks_like_task
from ssebench.errors import ConfigError, ConfigErrors, SSEBenchError
from ssebench.logs import for_terminal
from ssebench.reaper import Session
from ssebench.run import RunConfig, limits_for
from ssebench.settings import Settings, get_settings
from ssebench.task import Task


def check_models(settings: Settings, names: tuple[str, ...]) -> None:
    """Every --model is declared in the models folder, and its provider key is exported; UsageError if not."""
    from ssebench.gateway import MODEL_NAME, load_models

    try:
        declared = load_models(settings.models_dir)
    except (ConfigError, ConfigErrors) as exc:
        raise pytest.UsageError(f"--model: {exc}") from None
    for name in names:
        model = declared.get(name)
        if model is None:
            known = ", ".join(sorted(declared)) or "none"
            where = (f"no {settings.models_dir}/{name}.yaml" if MODEL_NAME.match(name) else
                     "not a model name (letters and digits separated by '.', '_' or '-', as its file is named)")
            raise pytest.UsageError(f"--model {name}: {where} (models declared: {known}); see models/README.md")
        if model.api_key_env and not os.environ.get(model.api_key_env):
            raise pytest.UsageError(f"--model {name}: {model.api_key_env} is not set; export the provider key "
                                    f"on this host (it never enters a run's container)")


class Sweep:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options: Options = parse_options(config)
        try:
            self.settings: Settings = get_settings()
            self.agents: list[Agent] = [load_agent(self.settings.agents_dir, name) for name in self.options.agents]
        except (ConfigError, SSEBenchError) as exc:
            raise pytest.UsageError(f"--agent: {exc}") from None
        except ConfigErrors as exc:
            raise pytest.UsageError(f"--agent: {exc}") from None
        if self.options.registry:
            self.settings = self.settings.model_copy(update={"image_registry": self.options.registry})
        if self.options.dispatch == "ray" and (getattr(config.option, "numprocesses", None) or 0):
            raise pytest.UsageError("--dispatch ray: one pytest process submits every run to the cluster; "
                                    "drop -n (the cluster's resources decide how many run at once)")
        if self.options.dispatch == "ray" and self.options.egress == "open":
            raise pytest.UsageError("--egress open with --dispatch ray: an open run could reach the cluster's "
                                    "own services from its node; run open-egress sweeps locally")
        self.dispatch: Any = None
        needing = [a.name for a in self.agents if a.needs_model]
        if needing and not self.options.models:
            raise pytest.UsageError(f"--model: agent {needing[0]} needs a model; give --model NAME (repeatable)")
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            self.session = Session(id=workerinput["ssebench_session"], controller=int(workerinput["ssebench_controller"]))
        else:
            self.session = Session.new()
        self.is_controller = workerinput is None
        self._backend: Any = None
        self.loader = TaskLoader()
        # The model gateway: the controller runs it, workers reach its control API.
        self.gateway: Any = None
        self._link: Any = None
        self.gateway_access: tuple[str, str] | None = None
        if needing:
            check_models(self.settings, self.options.models)
            if self.options.dispatch == "ray":
                self.gateway_access = ("", "")  # each node serves its runs' models (ssebench.dispatch)
            elif workerinput is not None:
                self.gateway_access = (workerinput["ssebench_gateway"], workerinput["ssebench_gateway_token"])
            else:
                self.gateway_access = self._start_gateway()
        self._registered_markers: set[str] = set()
        self.runner = Runner(settings=self.settings, session=self.session, results=self.options.results,
                             retries=self.options.retries, resume=self.options.resume, backend=self.backend,
                             models=self.model_link)
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistHooks(self), "ssebench-xdist")
        self.reports = ReportHooks(self.options.results, html=config.pluginmanager.hasplugin("html"),
                                   show_table=self.is_controller, trials=self.options.trials)
        config.pluginmanager.register(self.reports, "ssebench-report")
        if self.is_controller:  # how long each item took, for the next sweep's order (pytest_ssebench.schedule)
            config.pluginmanager.register(DurationHooks(self.settings.cache_dir), "ssebench-durations")

    def _start_gateway(self) -> tuple[str, str]:
        from ssebench.gateway import GatewayError, GatewayProcess

        state = self.options.results / ".gateway" / self.session.id
        self.gateway = GatewayProcess(self.settings.models_dir, state, model_port=self.settings.gateway_port)
        try:
            self.gateway.start()
        except GatewayError as exc:
            raise pytest.UsageError(f"--model: the model gateway did not start: {exc}") from None
        assert self.gateway.control_url is not None
        return self.gateway.control_url, self.gateway.admin_token

    def model_link(self, run: RunConfig) -> Any:
        """How a run reaches its model: a plugin's link, else the session's gateway; None without a model."""
        chosen = self.config.hook.pytest_ssebench_model_link(config=self.config, run=run)
        if chosen is not None or run.model == "none" or self.gateway_access is None:
            return chosen
        if self._link is None:
            from ssebench.gateway import Budget, GatewayClient, GatewayLink

            budget = Budget.model_validate(self.options.budget) if self.options.budget else None
            self._link = GatewayLink(GatewayClient(*self.gateway_access), budget=budget)
        return self._link

    def _start_dispatch(self) -> None:
        """Connect to the Ray cluster (--dispatch ray); models are served by a gateway on each node."""
        from ssebench.dispatch import NodeModels, RayDispatch
        from ssebench.gateway import load_models

        models = None
        env: dict[str, str] = {}
        if self.gateway_access is not None:
            models = NodeModels(self.settings.models_dir, self.options.budget)
            declared = load_models(self.settings.models_dir)
            for name in self.options.models:
                key = declared[name].api_key_env
                if key and os.environ.get(key):
                    env[key] = os.environ[key]
        try:
            self.dispatch = RayDispatch(self.settings, self.session, self.options.results, self.options.ray_address,
                                        models=models, provider_env=env)
        except SSEBenchError as exc:
            raise pytest.UsageError(for_terminal(str(exc))) from None
        self.runner.dispatch = self.dispatch

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """With --dispatch ray: every run is submitted at once, and each item is reported as its run ends."""
        if self.options.dispatch != "ray" or session.config.option.collectonly:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
        from pytest_ssebench.collect import RunItem
        from ssebench.run import finished_run

        items = [item for item in session.items if isinstance(item, RunItem)]
        others = [item for item in session.items if not isinstance(item, RunItem)]
        for item in others:  # anything else collected beside the runs runs first, here, in order
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=None)
            self._check_stop(session)
        by_config = {id(item.run): item for item in items}
        for item in items:
            if not (self.options.resume and finished_run(item.run, self.options.results)):
                self.dispatch.submit(item.run)
        waiting = dict(by_config)
        while waiting:
            done = [id(config) for config in self.dispatch.ready(timeout=1.0)]
            # Runs never submitted (resumed, or fitting no node) are reported without waiting.
            done += [key for key in waiting if key not in self.dispatch.pending]
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
        if self._link is not None:
            self._link.client.close()
        if self.gateway is not None:
            self.gateway.stop()

    # -- collection ---------------------------------------------------------

    def runs_of(self, task: Task) -> list[RunConfig]:
        marker = dataset_marker(task.dataset)
        if marker not in self._registered_markers:
            self.config.addinivalue_line("markers", f"{marker}: a task of the {task.dataset} dataset")
            self._registered_markers.add(marker)
        try:
            limits = limits_for(self.settings, task, self.options.limits)
        except SSEBenchError as exc:
            raise TaskDirectory.CollectError(str(exc)) from None
        runs = []
        for agent in self.agents:
            for model in (self.options.models if agent.needs_model else ("none",)):
                for difficulty in self.options.difficulties:
                    for mode in self.options.modes:
                        for trial in range(1, self.options.trials + 1):
                            runs.append(RunConfig(task=task, agent=agent, model=model, difficulty=difficulty,
                                                  mode=mode, timeout=self.options.timeout,
                                                  egress=self.options.egress,
                                                  keep_container=self.options.keep_containers, limits=limits,
                                                  trial=trial))
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
                from ssebench.backend import DockerBackend

                chosen = DockerBackend()
            self._backend = chosen
        return self._backend

    # -- the session's start and end --------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.is_controller:
            return
        from ssebench.reaper import reap_orphans

        try:
            reap_orphans()
        except SSEBenchError as exc:
            print(for_terminal(f"ssebench: could not remove what dead sessions left: {exc}"), file=sys.stderr)
        if self.options.rebuild:
            self._rebuild()
        if self.options.dispatch == "ray" and not self.config.option.collectonly:
            self._start_dispatch()

    def _rebuild(self) -> None:
        from ssebench.build import build_images
        from ssebench.dataset import load_tasks

        paths = [Path(a.split("::")[0]) for a in self.config.args] or [Path("datasets")]
        tasks = [t for p in paths if p.exists() for t in load_tasks(p)]
        for agent in self.agents:
            outcome = build_images(self.settings, tasks, agent, modes=self.options.modes, force=True)
            for failure in outcome.failures.values():
                print(for_terminal(f"ssebench: --rebuild: {str(failure).splitlines()[0]}"), file=sys.stderr)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.dispatch is not None:
            self.dispatch.close(reap=not self.options.keep_containers)
        if not self.is_controller or self.options.keep_containers:
            return
        from ssebench.reaper import reap_session

        try:
            reap_session(self.session.id)
        except SSEBenchError:
            pass

    def pytest_report_header(self, config: pytest.Config) -> str:
        o = self.options
        trials = f"; trials {o.trials}" if o.trials > 1 else ""
        resume = "; resuming finished runs" if o.resume else ""
        ray = f"; dispatch ray ({o.ray_address or 'auto'})" if o.dispatch == "ray" else ""
        registry = f"; registry {o.registry}" if o.registry else ""
        return (f"ssebench: agents {','.join(o.agents)}; models {','.join(o.models) or 'none'}; difficulty "
                f"{','.join(map(str, o.difficulties))}; mode {','.join(o.modes)}{trials}; egress {o.egress}; "
                f"results {o.results}{resume}{ray}{registry}")


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
        if self.session.gateway_access is not None:
            node.workerinput["ssebench_gateway"], node.workerinput["ssebench_gateway_token"] = (
                self.session.gateway_access)
