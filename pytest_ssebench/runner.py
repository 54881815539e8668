"""Running one item's run: the same `ssebench.run.execute` as the CLI, plus retries and --resume.

Items call a `Runner`; it knows nothing of the plugin or of pytest. A run
executes here, or, with a `dispatch` (`ssebench.dispatch.RayDispatch`), on
whichever node of a Ray cluster takes it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ssebench.errors import SSEBenchError
from ssebench.logs import for_terminal
from ssebench.reaper import Session
from ssebench.run import ModelLink, RunConfig, RunRecord, execute, finished_run
from ssebench.settings import Settings


@dataclass
class Runner:
    settings: Settings
    session: Session
    results: Path
    # Attempts after the first when a run hits an infrastructure error (never after a grade).
    retries: int = 0
    # Report a run from its finished run in `results` instead of running it again.
    resume: bool = False
    backend: Callable[[], Any] = lambda: None
    models: Callable[[RunConfig], ModelLink | None] = lambda run: None
    # Runs elsewhere (--dispatch ray): its `run(config)` gives a record already under `results`.
    dispatch: Any = None

    def execute(self, config: RunConfig) -> RunRecord:
        """One attempt of the run, here or through the dispatch."""
        if self.dispatch is not None:
            return self.dispatch.run(config)  # type: ignore[no-any-return]
        return execute(config, self.settings, self.backend(), self.session, self.results, models=self.models(config))

    def run(self, config: RunConfig, on_attempt: Callable[[RunRecord], None] = lambda record: None) -> RunRecord:
        """The run's record; `on_attempt` sees every attempt's (a resumed run makes none)."""
        if self.resume:
            record = finished_run(config, self.results)
            if record is not None:
                return record
        attempts = 1 + self.retries
        attempt = 0
        while True:
            try:
                record = self.execute(config)
            except (SSEBenchError, OSError) as exc:
                # Before the run had a directory (a link in the results directory, a name too long): an error
                # all the same, recorded in the item's report (the results root stands for its directory).
                record = RunRecord(config=config, run_id="", run_dir=self.results, infra_error=str(exc),
                                   started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   session=self.session.id)
            on_attempt(record)
            attempt += 1
            if record.infra_error is None or attempt == attempts:
                return record
            # Shown in the item's captured stderr; not a warning, which the
            # project's warnings-as-errors setting would turn into an error.
            print(for_terminal(f"ssebench: attempt {attempt} of {attempts} hit an infrastructure error, retrying: "
                               f"{record.infra_error}"), file=sys.stderr)
