"""Handle.execute's reading of the engine's multiplexed exec stream, cut into chunks anywhere."""

import random

from ssebench.engine._backend import _Demuxed


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
