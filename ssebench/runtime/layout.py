"""Fixed paths and users inside a task container (docs/architecture.md, "Contracts between the two sides")."""

from __future__ import annotations

MODEL = "model"
RUNNER = "sse-runner"

TASK_DIR = "/ssebench"
STATE_DIR = "/var/lib/ssebench"
RESULTS = "/var/lib/ssebench/results"
# Where grading builds: a volume of the run's own in the container that grades.
RUNNER_DIR = "/var/lib/ssebench-runner"
# The tree as the case image made it, which grading applies the agent's patch to: root's copy, made in the
# runner's area when a run starts (ssebench.runtime.tree), which sse-runner may traverse but not enter.
REPO = "/var/lib/ssebench-runner/repo"
ADMIN_DIR = "/run/ssebench"
ADMIN_SOCKET = "/run/ssebench/admin.sock"
# What the entrypoint of the container that grades says once its daemon and MCP server serve (sidecar mode's
# host starts the agent's container only then).
SERVING = "daemon ready; MCP server listening"
# Sidecar mode: the task container learns the agent phase is over from the host, which writes its figures
# (one JSON line) into this fifo, root's alone, through `docker exec` (ssebench.runtime.phase).
AGENT_DONE = "/run/ssebench/agent-done"
# Sidecar mode: the one volume of sockets the agent container shares with the task container, holding the
# agent socket only (the admin socket never leaves the task container).
SIDECAR_SOCKETS = "/run/sse-agent"
AGENT_SOCKET = "/tmp/sse.sock"
ARCHIVE = "/tmp/sse-archive"
HTTP_PORT = 4263
MCP_PORT = 3000
# The listening sockets a runtime process inherits from the entrypoint, which bound them: `name=fd,...`
# (ssebench.runtime.listeners).
LISTEN_FDS = "SSE_LISTEN_FDS"
# The pipe on which it writes one byte once it serves.
READY_FD = "SSE_READY_FD"
RUNTIME_HOME = "/opt/ssebench"
# The runtime's interpreter; every runtime process is started with it, isolated (-I).
RUNTIME_PYTHON = f"{RUNTIME_HOME}/venv/bin/python"
REFERENCE_PATCH = "/reference/patch.diff"
CAPTURE_DIR = "/var/lib/ssebench-capture"
MCP_LOG_DIR = "/tmp/sse-test-patch"
