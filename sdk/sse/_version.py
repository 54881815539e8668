"""The SDK's version; released together with the daemon, so the two must match."""

__version__ = "0.1.0"
