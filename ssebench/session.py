"""A session's life, written once: what the pytest plugin, `ssebench run` and `dataset verify` all go through.

A session is the runs one command asks for. Its life is always the same:
check that the options make sense together and that every model is declared
with its provider key exported, remove what dead sessions left, start the
model gateway (here) and have it call each model once (its server answers
and takes the key; `--skip-model-check` skips this), or connect to the Ray
cluster (whose nodes each start one, with the provider keys and budget sent
along), run, then stop the gateway or the connection and remove everything
labelled with the session.
`RunSession` is that life; its `run` is one run with its retries and
`--resume`, here or through the cluster.

Words: `ssebench.reaper.Session` is the session's id (the label on every
container, network and volume it starts); `RunSession` is its life.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from sse.result import grade

from ssebench.defaults import SKIP_MODEL_CHECK, Dispatch, Egress
from ssebench.errors import ConfigError, ConfigErrors, SSEBenchError
from ssebench.executor import Executor, LocalExecutor
from ssebench.live import ModelLink
from ssebench.logs import for_terminal, shown_path
from ssebench.reaper import Session
from ssebench.record import RunRecord, resumable
from ssebench.runspec import RunConfig
from ssebench.settings import Settings

if TYPE_CHECKING:
    from ssebench.agent import Agent
    from ssebench.backend import Backend
    from ssebench.gateway import GatewayClient, GatewayLink, GatewayProcess


class OptionError(SSEBenchError):
    """Options that cannot run together, or a model that cannot be reached; one line naming the flag and the fix."""


@dataclass(frozen=True)
class Plan:
    """What a session is asked for, as its command's options gave it."""

    results: Path
    # Whether any agent of the session needs a model, and the first that does (for the message when none is given).
    needs_model: str | None = None
    models: tuple[str, ...] = ()
    # The agents of the session: each that needs a model must speak a protocol each model serves.
    agents: tuple[Agent, ...] = ()
    budget: dict[str, float] | None = None
    model_check: bool = True  # call each model once before the first run (not with --skip-model-check)
    dispatch: Dispatch = "local"
    ray_address: str | None = None
    egress: Egress = "restricted"
    workers: int = 0  # pytest-xdist's -n: processes that each run items
    keep: bool = False  # leave containers in place (--keep-containers)
    retries: int = 0  # attempts after the first when a run hits an infrastructure error (never after a grade)
    resume: bool = False  # a run already finished in `results` is read back, not run again

    def check(self) -> None:
        """Raise OptionError for the first combination that cannot run."""
        if self.dispatch == "ray" and self.workers:
            raise OptionError(
                "--dispatch ray: one pytest process submits every run to the cluster; drop -n (the "
                "cluster's resources decide how many run at once)"
            )
        if self.dispatch == "ray" and self.egress == "open":
            raise OptionError(
                "--egress open with --dispatch ray: an open run could reach the cluster's own "
                "services from its node; run open-egress runs locally"
            )
        if self.needs_model and not self.models:
            raise OptionError(f"--model: agent {self.needs_model} needs a model; give --model NAME")
        check_results(self.results)


def check_results(results: Path) -> None:
    """The results directory is one, or can be made, and can be written; OptionError naming it if not (before
    anything starts, rather than an error for every run)."""
    if results.exists() and not results.is_dir():
        raise OptionError(f"--results {results}: not a directory; give a directory for the run results")
    there = results
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise OptionError(f"--results {results}: {there} is not a directory; give a directory for the run results")
    if not os.access(there, os.W_OK | os.X_OK):
        raise OptionError(f"--results {results}: {there} cannot be written by this user; give a directory it can write")


def check_models(settings: Settings, names: Iterable[str], agents: Iterable[Agent] = ()) -> None:
    """Every model is declared in the models folder, its provider key is exported, and it serves the protocol
    of each agent of `agents` that needs a model; OptionError for the first that does not."""
    from ssebench.gateway import MODEL_NAME, load_models

    names = list(names)
    try:
        declared = load_models(settings.models_dir, names)
    except (ConfigError, ConfigErrors) as exc:
        raise OptionError(f"--model: {exc}") from None
    for name in names:
        model = declared.get(name)
        if model is None:
            known = ", ".join(sorted(path.stem for path in settings.models_dir.glob("*.yaml"))) or "none"
            where = (
                f"no {settings.models_dir}/{name}.yaml"
                if MODEL_NAME.match(name)
                else "not a model name (letters and digits separated by '.', '_' or '-', as its file is named)"
            )
            raise OptionError(f"--model {name}: {where} (models declared: {known}); see models/README.md")
        if model.api_key_env and not os.environ.get(model.api_key_env):
            raise OptionError(
                f"--model {name}: {model.api_key_env} is not set; export the provider key on this "
                f"host (it never enters a run's container)"
            )
        for agent in agents:
            if agent.needs_model and agent.protocol not in model.protocols:
                serves = " and ".join(sorted(model.protocols))
                raise OptionError(
                    f"--agent {agent.name} speaks {agent.protocol}; model {name} ({shown_path(model.source)}) serves "
                    f"{serves} only: pick a model that serves {agent.protocol}"
                )


def check_upstreams(client: GatewayClient, names: Iterable[str]) -> None:
    """Each model's server answers and takes its provider key, by the gateway's call; OptionError (one line:
    the model, the URL, the cause, the fix) for the first that does not."""
    from ssebench.gateway import GatewayError

    for name in names:
        try:
            found = client.check_model(name)
        except GatewayError as exc:
            raise OptionError(f"--model {name}: the model gateway could not check it: {exc}") from None
        if not found.ok:
            raise OptionError(f"--model {name}: {found.url} {found.cause}; {found.fix}, or pass {SKIP_MODEL_CHECK}")


def provider_env(settings: Settings, names: Iterable[str]) -> dict[str, str]:
    """The provider keys `names` need, from this host's environment: what a Ray node's gateway is sent."""
    from ssebench.gateway import load_models

    names = list(names)
    declared = load_models(settings.models_dir, names)
    keys = {declared[name].api_key_env for name in names if name in declared}
    return {key: os.environ[key] for key in sorted(k for k in keys if k) if os.environ.get(key)}


class RunSession:
    """One session's life: `with RunSession(settings, plan) as session: session.run(config)`.

    The plugin calls the steps at its own hooks (`start_models` when it is
    configured, so that xdist's workers are handed the gateway; `start` when
    pytest's session starts; `close` when it finishes); the commands use it
    as a context manager. A worker of an xdist controller is made with
    `controller=False` and the controller's `gateway` (control URL and
    token): it starts nothing and removes nothing, its controller does.
    """

    def __init__(
        self,
        settings: Settings,
        plan: Plan,
        *,
        session: Session | None = None,
        controller: bool = True,
        gateway: tuple[str, str] | None = None,
        backend: Callable[[], Backend] | None = None,
        link: Callable[[RunConfig], ModelLink | None] = lambda run: None,
    ) -> None:
        plan.check()
        self.settings, self.plan = settings, plan
        self.session = session or Session.new()
        self.is_controller = controller
        self._backend = backend
        self._backend_lock = threading.Lock()  # the backend's and the link's: verify runs from threads
        self._chosen_link = link  # a plugin's own link for a run, tried first
        self.gateway: GatewayProcess | None = None
        self.gateway_access: tuple[str, str] | None = gateway
        # Where runs execute: here until `start` connects to a Ray cluster, and again after `close`.
        self._local = LocalExecutor(settings, self.session, plan.results, self.backend, self.model_link)
        self.executor: Executor = self._local
        self._link: GatewayLink | None = None
        self._started = False

    # -- start ----------------------------------------------------------------

    def start_models(self) -> None:
        """Check every model, then start the gateway that serves them (here; with Ray each node starts its own)
        and have it call each once (`check_upstream`): a server that does not answer or refuses the key stops
        the session before its first run, with the gateway it started."""
        if not (self.is_controller and self.plan.needs_model) or self.gateway_access is not None:
            return
        check_models(self.settings, self.plan.models, self.plan.agents)
        if self.plan.dispatch == "ray":
            return
        from ssebench.gateway import GatewayError, GatewayProcess

        state = self.plan.results / ".gateway" / self.session.id
        self.gateway = GatewayProcess(
            self.settings.models_dir, state, model_port=self.settings.gateway_port, serve=self.plan.models
        )
        try:
            self.gateway.start()
        except (GatewayError, OSError) as exc:
            self.gateway = None
            raise OptionError(f"--model: the model gateway did not start: {exc}") from None
        if self.plan.model_check:
            client = self.gateway.client()
            try:
                check_upstreams(client, self.plan.models)
            except BaseException:
                self.gateway.stop()
                self.gateway = None
                raise
            finally:
                client.close()
        assert self.gateway.control_url is not None
        self.gateway_access = (self.gateway.control_url, self.gateway.admin_token)

    def check_engine(self) -> None:
        """Stop the session, before anything runs, when no engine answers: one line (DOCKER_HOST's value and
        the fix) rather than an error per run. Raises OptionError."""
        from ssebench.engine import DockerUnavailableError, EngineError, version

        try:
            version()
        except DockerUnavailableError as exc:
            raise OptionError(f"ssebench: {exc}") from None
        except EngineError:
            pass  # it answered: what it refused is each run's to say

    def start(self, *, connect: bool = True) -> None:
        """Remove what dead sessions left, and with Ray connect to the cluster (its nodes get the provider keys
        and the budget; not when `connect` is false: pytest --collect-only runs nothing). The controller's
        step: a worker of it has nothing to start."""
        self._started = True
        if not self.is_controller:
            return
        if connect and self.plan.dispatch == "local":
            self.check_engine()
        from ssebench.reaper import reap_orphans

        try:
            reap_orphans()
        except SSEBenchError as exc:
            print(for_terminal(f"ssebench: could not remove what dead sessions left: {exc}"), file=sys.stderr)
        if self.plan.dispatch == "ray" and connect:
            from ssebench.dispatch import NodeModels, RayDispatch

            needs = bool(self.plan.needs_model)
            self.executor = RayDispatch(
                self.settings,
                self.session,
                self.plan.results,
                self.plan.ray_address,
                models=NodeModels(self.settings.models_dir, self.plan.budget, tuple(self.plan.models))
                if needs
                else None,
                provider_env=provider_env(self.settings, self.plan.models) if needs else None,
            )

    def __enter__(self) -> RunSession:
        try:
            self.start_models()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------

    def backend(self) -> Backend:
        with self._backend_lock:  # dataset verify runs from several threads
            if self._backend is None:
                from ssebench.engine import DockerBackend

                backend = DockerBackend()
                self._backend = lambda: backend
        return self._backend()

    def model_link(self, run: RunConfig) -> ModelLink | None:
        """How a run reaches its model: a plugin's link, else the session's gateway; None without a model."""
        chosen = self._chosen_link(run)
        if chosen is not None or run.model == "none" or self.gateway_access is None:
            return chosen
        with self._backend_lock:
            if self._link is None:
                from ssebench.gateway import Budget, GatewayClient, GatewayLink

                budget = Budget.model_validate(self.plan.budget) if self.plan.budget else None
                self._link = GatewayLink(GatewayClient(*self.gateway_access), budget=budget)
            return self._link

    def execute(self, config: RunConfig, *, build: bool = True) -> RunRecord:
        """One attempt of the run, here or on a node of the cluster (`executor`)."""
        return self.executor.run(config, build=build)

    def run(
        self, config: RunConfig, on_attempt: Callable[[RunRecord], None] = lambda record: None, *, build: bool = True
    ) -> RunRecord:
        """The run's record, after at most `plan.retries` more attempts when one hits an infrastructure error;
        `on_attempt` sees every attempt's (a resumed run makes none)."""
        rerun: str | None = None
        if self.plan.resume:
            found, rerun = resumable(config, self.plan.results)
            if found is not None:
                return found
        attempts = 1 + self.plan.retries
        attempt = 0
        while True:
            try:
                record = self.execute(config, build=build)
            except (SSEBenchError, OSError) as exc:
                # Before the run had a directory (a link in the results directory, a name too long): an error
                # all the same, recorded in the item's report (the results root stands for its directory).
                record = RunRecord(
                    config=config,
                    run_id="",
                    run_dir=self.plan.results,
                    started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                    session=self.session.id,
                )
                record.judged(grade(infrastructure=str(exc)))
            record.rerun = rerun
            on_attempt(record)
            attempt += 1
            if record.infra_error is None or attempt == attempts:
                return record
            # Shown in the item's captured stderr; not a warning, which the
            # project's warnings-as-errors setting would turn into an error.
            print(
                for_terminal(
                    f"ssebench: attempt {attempt} of {attempts} hit an infrastructure error, retrying: "
                    f"{record.infra_error}"
                ),
                file=sys.stderr,
            )

    # -- end ------------------------------------------------------------------

    def close(self) -> None:
        """Stop the link, the gateway and the cluster's connection; the controller removes what the session
        started (unless asked to keep it). Safe to call more than once."""
        link, self._link = self._link, None
        gateway, self.gateway = self.gateway, None
        executor, self.executor = self.executor, self._local
        started, self._started = self._started, False
        with ExitStack() as steps:  # each step runs whatever the others raise; the last pushed runs first
            if self.is_controller and started and not self.plan.keep:
                from ssebench.reaper import reap_session

                steps.callback(_quietly, reap_session, self.session.id)
            if executor is not self._local:
                steps.callback(executor.close, reap=not self.plan.keep)
            if gateway is not None:
                steps.callback(gateway.stop)
            if link is not None:
                steps.callback(link.client.close)


def _quietly(step: Callable[..., object], *args: object) -> None:
    """A clean-up step whose failure is no reason to stop the others (the next session removes what is left)."""
    with suppress(SSEBenchError):
        step(*args)
