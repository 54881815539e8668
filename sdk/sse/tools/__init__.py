"""The daemon's tools: the bencher (build, PoCs, tests) and the bash shell."""

from sse.tools import bash, bencher

__all__ = ["bash", "bencher"]
