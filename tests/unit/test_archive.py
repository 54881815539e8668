"""Copying a run's files out of a tar stream: regular files and directories only, inside the destination, capped."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

from ssebench.archive import extract


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, link: str = ""
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    if data is not None:
        info.size = len(data)
    return info, data


def _chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


HOSTILE = [
    _member("sse-archive", tarfile.DIRTYPE),
    _member("sse-archive/kept.txt", data=b"keep\n"),
    _member("sse-archive/deep", tarfile.DIRTYPE),
    _member("sse-archive/deep/file.txt", data=b"y\n"),
    _member("sse-archive/passwd", tarfile.SYMTYPE, link="/etc/passwd"),
    _member("sse-archive/hard", tarfile.LNKTYPE, link="sse-archive/kept.txt"),
    _member("sse-archive/pipe", tarfile.FIFOTYPE),
    _member("sse-archive/dev", tarfile.CHRTYPE),
    _member("sse-archive/../escape.txt", data=b"out\n"),
    _member("/abs.txt", data=b"abs\n"),
    _member("sse-archive/big.bin", data=b"x" * 5000),
    _member("sse-archive/second.txt", data=b"z" * 1000),
]


def test_only_regular_files_and_directories_inside_the_destination(tmp_path: Path) -> None:
    dest = tmp_path / "run" / "archive"
    got = extract(_chunks(_tar(HOSTILE)), dest, file_cap=4096, total_cap=1000)
    assert (dest / "kept.txt").read_text() == "keep\n" and (dest / "deep" / "file.txt").read_text() == "y\n"
    kinds = {d["path"]: d["kind"] for d in got.dropped}
    assert kinds["passwd"] == "symlink" and kinds["hard"] == "hard link" and kinds["pipe"] == "fifo"
    assert kinds["dev"] == "device" and kinds["big.bin"] == "file" and kinds["second.txt"] == "file"
    assert "sse-archive/../escape.txt" in kinds and "/abs.txt" in kinds
    assert not (tmp_path / "run" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    for dirpath, dirnames, filenames in os.walk(tmp_path):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), name
    assert got.files == 2 and got.bytes == 7 and not got.truncated  # second.txt: over the total cap


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("the host's")
    got = extract(
        _chunks(_tar([_member("results/summary.json", data=b"the container's")])), tmp_path, file_cap=100, total_cap=100
    )
    assert (tmp_path / "summary.json").read_text() == "the host's"
    assert got.dropped and got.dropped[0]["path"] == "summary.json"


def test_an_endless_stream_is_read_no_further_than_a_few_caps(tmp_path: Path) -> None:
    read = 0

    def endless() -> Iterator[bytes]:
        nonlocal read
        header = _tar([_member("a/huge.bin", data=b"\0" * 10)])[:512]
        huge = tarfile.TarInfo("a/huge.bin")
        huge.size = 1 << 40
        read += 512
        yield huge.tobuf()
        while True:
            read += 1 << 16
            yield b"\0" * (1 << 16)
        yield header

    got = extract(endless(), tmp_path / "x", file_cap=10, total_cap=1 << 20)
    assert got.truncated and read < 100 << 20


def test_an_archive_of_too_many_entries_or_too_deep_comes_home_capped(tmp_path: Path) -> None:
    """120,000 files and a directory 1,100 levels deep, as an agent made them in seconds: the host writes its
    caps' worth and lists the rest (before, every file and every level, and a deep path raised RecursionError
    in Path.mkdir(parents=True))."""
    deep = "/".join(["d"] * 1100)
    members = [_member("sse-archive", tarfile.DIRTYPE), _member(f"sse-archive/{deep}/leaf", data=b"x")]
    members += [_member(f"sse-archive/many/f{i}", data=b"") for i in range(3000)]
    collected = extract(
        _chunks(_tar(members), 1 << 16),
        tmp_path / "out",
        file_cap=1 << 20,
        total_cap=1 << 20,
        max_entries=1000,
        max_depth=64,
    )
    assert collected.entries == 1000 and collected.files == 1000
    assert collected.dropped_count == 3001 - 1000 and len(collected.dropped) == 1000
    assert collected.dropped[0] == {"path": f"{deep}/leaf", "kind": "file", "reason": "deeper than 64 levels"}
    assert collected.describe()["dropped_count"] == 2001 and len(collected.describe()["dropped"]) == 200
    assert collected.dropped_under == {"d": 1, "many": 2000}
    written = sum(len(files) + len(dirs) for _, dirs, files in os.walk(tmp_path / "out"))
    assert written == 1001  # `many` and its first 1000 files
