"""Error types for SSEBench SDK."""

from __future__ import annotations


class SDKError(Exception):
    """Raised when the SDK encounters an error from the daemon.

    This exception is raised for daemon communication failures, config
    errors, file not found, etc. - NOT for script execution failures
    (non-zero exit code). Script execution results (success or failure) are
    returned as ScriptResult; use result.is_success() to check.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
