"""Longest runs first under xdist: the duration history, and the scheduler on simulated workers."""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

from pytest_ssebench.schedule import HISTORY, HISTORY_CAP, make_scheduler, read_history, write_history


class Options:
    """The few options xdist's load scheduler reads (two workers, --dist load)."""

    def __init__(self, dist: str = "load", maxschedchunk: int | None = None) -> None:
        self.values = {"dist": dist, "maxschedchunk": maxschedchunk, "tx": ["2*popen"]}

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def getvalue(self, name: str) -> Any:
        return self.values[name]


class Gateway:
    def __init__(self, name: str) -> None:
        self.id = name


class Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = Gateway(name)
        self.queue: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


# The demo's six runs, in collection order, with roughly their lengths here (seconds).
DEMO = {
    "c-demo::reference": 2.5,
    "c-demo::dummy": 2.5,
    "go-demo::reference": 6.5,
    "go-demo::dummy": 6.5,
    "rust-demo::reference": 7.5,
    "rust-demo::dummy": 7.5,
}


def makespan(scheduler: Any, took: dict[str, float]) -> tuple[float, list[str]]:
    """Run the sweep on two simulated workers as xdist's controller drives them: a worker runs the first
    item of its queue once it knows the next one (or is told to shut down). The sweep's length, and the
    order items started in."""
    workers = [Worker("gw0"), Worker("gw1")]
    names = list(took)
    for worker in workers:
        scheduler.add_node(worker)
    for worker in workers:
        scheduler.add_node_collection(worker, names)
    scheduler.schedule()
    clock, started = 0.0, []
    running: list[tuple[float, int, str, int]] = []  # (ends at, tie, worker, index)
    busy: set[str] = set()

    def start_what_can() -> None:
        for w in workers:
            if w.name not in busy and w.queue and (len(w.queue) >= 2 or w.shutting_down):
                index = w.queue[0]
                started.append(names[index])
                busy.add(w.name)
                heapq.heappush(running, (clock + took[names[index]], len(started), w.name, index))

    start_what_can()
    while running:
        clock, _, name, index = heapq.heappop(running)
        worker = next(w for w in workers if w.name == name)
        worker.queue.remove(index)
        busy.discard(name)
        scheduler.mark_test_complete(worker, index, took[names[index]])
        start_what_can()
    assert sorted(started) == sorted(names)  # every item ran, once
    return clock, started


def test_with_a_history_the_longest_runs_go_first_and_the_sweep_is_shorter() -> None:
    ours = make_scheduler(Options(), None, DEMO)  # type: ignore[arg-type]
    assert ours is not None
    ours_took, order = makespan(ours, DEMO)
    xdists_took, _ = makespan(LoadScheduling(Options(), None), DEMO)
    assert order[:2] == ["rust-demo::reference", "go-demo::reference"]  # one to each worker, longest first
    assert order[-2:] == ["c-demo::reference", "c-demo::dummy"]
    assert ours_took == 17.5  # the best two workers can do: rust, rust, c against go, go, c
    assert xdists_took == 20.0  # collection order: c, c, rust, rust against go, go


def scheduled(history: dict[str, float], names: list[str]) -> tuple[Any, list[Worker]]:
    """Our scheduler with two workers that collected `names`, after its first distribution."""
    scheduler = make_scheduler(Options(), None, history)  # type: ignore[arg-type]
    workers = [Worker("gw0"), Worker("gw1")]
    for w in workers:
        scheduler.add_node(w)
    for w in workers:
        scheduler.add_node_collection(w, names)
    scheduler.schedule()
    return scheduler, workers


def first_sent(history: dict[str, float]) -> list[list[str]]:
    """What each of two workers is sent first."""
    _, workers = scheduled(history, list(DEMO))
    return [[list(DEMO)[i] for i in w.queue] for w in workers]


def test_items_never_timed_go_first_and_without_a_history_collection_order_holds() -> None:
    known = {name: seconds for name, seconds in DEMO.items() if not name.startswith("rust")}
    assert first_sent(known) == [["rust-demo::reference", "rust-demo::dummy"], ["go-demo::reference", "go-demo::dummy"]]
    assert first_sent({}) == [["c-demo::reference", "c-demo::dummy"], ["go-demo::reference", "go-demo::dummy"]]


def test_each_worker_holds_one_item_beyond_the_one_it_runs() -> None:
    many = {f"t{i}::dummy": float(i % 7 + 1) for i in range(40)}
    scheduler, workers = scheduled(many, list(many))
    assert [len(w.queue) for w in workers] == [2, 2]
    index = workers[0].queue.pop(0)
    scheduler.mark_test_complete(workers[0], index, 5.0)
    assert len(workers[0].queue) == 2  # refilled by one, not by a chunk


def test_another_dist_mode_or_a_chunk_the_user_chose_is_left_alone() -> None:
    assert make_scheduler(Options(dist="loadfile"), None, DEMO) is None  # type: ignore[arg-type]
    chosen = make_scheduler(Options(maxschedchunk=5), None, DEMO)  # type: ignore[arg-type]
    assert chosen.maxschedchunk == 5


def test_the_history_merges_keeps_the_newest_and_survives_a_bad_file(tmp_path: Path) -> None:
    assert read_history(tmp_path) == {}
    write_history(tmp_path, {"a": 1.0, "b": 2.0})
    write_history(tmp_path, {"a": 3.25})
    assert read_history(tmp_path) == {"b": 2.0, "a": 3.25}
    assert list(json.loads((tmp_path / HISTORY).read_text())) == ["b", "a"]  # the newest last
    (tmp_path / HISTORY).write_text("{not json")
    assert read_history(tmp_path) == {}
    (tmp_path / HISTORY).write_text('{"a": "slow", "b": true, "c": 4}')
    assert read_history(tmp_path) == {"c": 4.0}
    assert not list(tmp_path.glob(".durations-*"))  # no temporary file left


def test_the_history_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pytest_ssebench.schedule.HISTORY_CAP", 3)
    write_history(tmp_path, {f"n{i}": float(i) for i in range(5)})
    assert list(read_history(tmp_path)) == ["n2", "n3", "n4"]
    assert HISTORY_CAP >= 1000
