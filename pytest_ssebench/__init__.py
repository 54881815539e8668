"""The SSEBench pytest plugin: every run is a test item."""
