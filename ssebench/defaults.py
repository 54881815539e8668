"""The run vocabulary the host shares: modes, egress, the default time limits.

Kept free of imports so the pytest plugin can declare its options without
loading the harness.
"""

from __future__ import annotations

MODES = ("sandbox",)
EGRESS = ("restricted", "open")
# The agent's time limit per run, and grading's after it (the runtime in the
# container gets both in its environment: SSE_* overrides its own defaults).
AGENT_TIMEOUT = 3600.0
GRADING_TIMEOUT = 7200.0
