"""The Docker handle without an engine: Handle.execute's reading of the engine's multiplexed exec stream, cut
into chunks anywhere, and what a wait that the engine ends means."""

import random
import time
from typing import Any

import pytest
import requests

from ssebench.backend import RunTimeoutError
from ssebench.engine import DockerUnavailableError
from ssebench.engine._backend import DockerHandle, _Demuxed


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_the_payload_is_kept_whole_up_to_the_cap_wherever_the_stream_is_cut() -> None:
    rng = random.Random(7)
    payloads = [bytes([65 + i % 26]) * rng.randrange(1, 5000) for i in range(200)]
    raw = b"".join(_frame(1 + i % 2, p) for i, p in enumerate(payloads))
    whole = b"".join(payloads)
    for cap in (10, 1 << 16, len(whole), len(whole) + 100):
        for _ in range(20):
            demuxed, at = _Demuxed(cap), 0
            while at < len(raw):
                step = rng.choice((1, 3, 7, 8, 9, 4096, 70000))
                demuxed.feed(raw[at : at + step])
                at += step
            assert demuxed.text().encode() == whole[:cap]


def test_headers_are_never_taken_for_output() -> None:
    demuxed = _Demuxed(1 << 16)
    for _ in range(100):
        demuxed.feed(_frame(1, b"x" * 1000))
    assert demuxed.text() == "x" * (1 << 16)  # 100 frames of 1,000 bytes: 64 kB of x, no header bytes


class _Waiting:
    """A testcontainers container whose engine ends every wait with `error` after `after` seconds."""

    def __init__(self, error: BaseException, after: float) -> None:
        self.error, self.after = error, after

    def get_container_id(self) -> str:
        return "c" * 64

    def get_wrapped_container(self) -> Any:
        return self

    def wait(self, timeout: float) -> dict[str, int]:
        time.sleep(self.after)
        raise self.error


def test_a_wait_the_engine_ends_at_its_time_is_a_run_still_running() -> None:
    for error in (requests.exceptions.ReadTimeout("read timed out"), requests.exceptions.ConnectionError("aborted")):
        with pytest.raises(RunTimeoutError, match="still running after 0 s"):
            DockerHandle(_Waiting(error, 0.3)).wait(0.2)


def test_an_engine_lost_before_the_time_is_up_is_not_taken_for_a_run_still_running() -> None:
    with pytest.raises(DockerUnavailableError):
        DockerHandle(_Waiting(requests.exceptions.ConnectionError("refused"), 0.0)).wait(30)
