"""What the gateway counts: one record per model call, and a run's totals.

Both sides read these: the gateway writes them (and appends each record to
`<state_dir>/usage/<run_id>.jsonl`), the harness reads them back from the
control API. Token counts come from the upstream's `usage`, never from
anything the agent says.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ssebench.gateway._models import Budget


class UsageRecord(BaseModel):
    """One model call as the gateway forwarded it (or refused it)."""

    model_config = ConfigDict(frozen=True)

    ts: float
    run: str
    model: str
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    error: str | None = None


class Usage(BaseModel):
    """A run's use of its model: its totals, and why it was stopped, if it was.

    `calls` were forwarded upstream (each one a record); `refused` calls were
    refused for the budget, `rejected` ones for themselves (a bad body, too
    many at once, after the run's finish). Refusals are records only up to a
    few per run: `unrecorded` counts the rest.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    model: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    refused: int = 0
    rejected: int = 0
    unrecorded: int = 0
    stopped: str | None = None
    budget: Budget | None = None
    records: list[UsageRecord] = []

    def summary(self) -> dict[str, object]:
        """The totals without the records, as a run's summary.json holds them."""
        return self.model_dump(exclude={"records"})
