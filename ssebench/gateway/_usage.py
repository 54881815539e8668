"""What the gateway counts: one record per model call, and a run's totals.

Both sides read these: the gateway writes them (and appends each record to
`<state_dir>/usage/<run_id>.jsonl`), the harness reads them back from the
control API. Token counts come from the upstream's `usage`, never from
anything the agent says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

    Of the calls forwarded, `answered` got a 200 from the upstream and
    `upstream_failed` did not reach a working model (the upstream did not
    answer or refused the provider key, did not know the model, or answered
    5xx), `upstream_failure` saying why for the last of them; the others
    were refused for themselves (a 400 or 429 of the upstream) or cut short
    by the run's finish. Usage written before these counts existed reads
    with them at 0.
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
    answered: int = 0
    upstream_failed: int = 0
    upstream_failure: str | None = None
    records: list[UsageRecord] = []

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> Usage:
        """The usage a run's summary.json holds (`summary()`); of any version: what it lacks is 0 or unknown."""
        return cls.model_validate({"run_id": "", "model": "", **summary})

    def upstream_broken(self) -> str | None:
        """Why the run measured its model's server rather than its agent: every call it made failed upstream;
        None when one was answered, one failed for itself, or none was made (the agent chose not to call)."""
        if not self.calls or self.answered or self.upstream_failed < self.calls:
            return None
        calls = f"{self.calls} call{'s' if self.calls != 1 else ''}"
        return f"model {self.model}: every call failed upstream ({calls}): {self.upstream_failure or 'no cause kept'}"

    def summary(self) -> dict[str, object]:
        """The totals without the records, as a run's summary.json holds them."""
        return self.model_dump(exclude={"records"})
