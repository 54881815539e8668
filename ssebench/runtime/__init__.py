"""What runs inside a task container: entrypoint, daemon, evaluator, MCP server.

This package runs in the container's own Python (the runtime venv) and
imports nothing from the host side of ssebench.
"""
