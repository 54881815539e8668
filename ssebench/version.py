"""The one version of SSEBench: harness, runtime, daemon and SDK are released together."""

__version__ = "0.1.0"
