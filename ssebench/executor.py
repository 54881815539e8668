"""Where a session's runs execute, behind one interface: here (`LocalExecutor`) or on a Ray cluster
(`ssebench.dispatch.RayDispatch`).

`RunSession` asks an executor for one attempt of a run (`run`) and keeps
the retries and `--resume` itself; the plugin's Ray loop also submits every
run ahead (`submit`) and reports each as it finishes (`ready`). A local
executor runs nothing ahead: `submit` does nothing and `run` runs the
attempt in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ssebench.live import ModelLink
from ssebench.reaper import Session
from ssebench.record import RunRecord
from ssebench.run import execute
from ssebench.runspec import RunConfig
from ssebench.settings import Settings

if TYPE_CHECKING:
    from ssebench.backend import Backend


class Executor(Protocol):
    """Executes runs: one attempt each, with its record; ahead of time where it can."""

    def submit(self, config: RunConfig) -> None:
        """Start `config`'s run now if this executor runs ahead; `run(config)` gives its record."""

    def ready(self, timeout: float) -> list[RunConfig]:
        """Submitted runs whose record `run` gives without waiting, after waiting up to `timeout` seconds for
        one; [] when nothing was submitted."""

    def is_pending(self, config: RunConfig) -> bool:
        """Whether `config` was submitted and its record not yet asked for."""

    def run(self, config: RunConfig, *, build: bool = True) -> RunRecord:
        """One attempt of `config`'s run (submitted now unless it was ahead), once it is done and its
        directory is under the session's results; images are built first unless `build` is false (where
        the executor leaves that choice to the caller).

        Raises SSEBenchError or OSError when the attempt could not get as far as a run directory; every
        later failure is in the record (`infra_error`).
        """

    def close(self, *, reap: bool = True) -> None:
        """Give up what is still queued or running and disconnect; remove what the session left where it
        ran, unless `reap` is false (--keep-containers). Never raises."""


class LocalExecutor:
    """Runs in this process, on this machine's engine, one attempt at a time when asked."""

    def __init__(
        self,
        settings: Settings,
        session: Session,
        results: Path,
        backend: Callable[[], Backend],
        link: Callable[[RunConfig], ModelLink | None],
    ) -> None:
        self.settings, self.session, self.results = settings, session, results
        self._backend, self._link = backend, link

    def submit(self, config: RunConfig) -> None:
        pass  # nothing runs ahead: `run` runs it

    def ready(self, timeout: float) -> list[RunConfig]:
        return []

    def is_pending(self, config: RunConfig) -> bool:
        return False

    def run(self, config: RunConfig, *, build: bool = True) -> RunRecord:
        return execute(
            config,
            self.settings,
            self._backend(),
            self.session,
            self.results,
            build=build,
            models=self._link(config),
        )

    def close(self, *, reap: bool = True) -> None:
        pass  # the session's own clean-up removes what its runs left on this engine (`reaper.reap_session`)
